//! The TTL-after-finished loop: a Job informer queues finished Jobs that carry
//! `ttlSecondsAfterFinished`; a worker decides with [`super::ttl_decision`], requeues at the
//! expiry, and deletes an expired Job only after a live GET agrees (the cached TTL may be
//! stale), with a UID and resourceVersion precondition so that a Job changed meanwhile is
//! looked at again rather than deleted.

use std::sync::Arc;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::{debug, info};

use super::{TtlDecision, needs_cleanup, requeue_after, ttl_decision};
use crate::runtime::informer::{Change, InformerFactory, Lister};
use crate::runtime::key::{object_key, split_key};
use crate::runtime::metrics::{HistogramVec, exponential_buckets};
use crate::runtime::queue::{ItemExponentialFailureRateLimiter, WorkQueue};

pub const JOB_DELETION_DURATION_SECONDS: HistogramVec = HistogramVec {
    name: "ttl_after_finished_controller_job_deletion_duration_seconds",
    help: "The time it took to delete the job since it became eligible for deletion",
    labels: &[],
    buckets: || exponential_buckets(0.1, 2.0, 14),
};

struct Inner {
    client: Client,
    jobs: Lister<Job>,
    queue: WorkQueue<String>,
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(client: Client, informers: &InformerFactory, mut shutdown: watch::Receiver<bool>) {
    // Upstream's default controller rate limiter, per item: 5 ms doubling to 1000 s.
    let queue: WorkQueue<String> = WorkQueue::new(
        "ttl_jobs_to_delete",
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000)),
    );
    let q = queue.clone();
    let informer = informers.informer::<Job>();
    informer.add_handler(move |change: Change<Job>| {
        let job = match &change {
            Change::Added(j) => j,
            Change::Updated { new, .. } => new,
            Change::Deleted(_) => return,
        };
        if needs_cleanup(job) {
            q.add(object_key(job.as_ref()));
        }
    });
    let inner = Arc::new(Inner {
        client,
        jobs: informer.lister(),
        queue,
    });
    let worker = {
        let inner = Arc::clone(&inner);
        tokio::spawn(async move {
            let inner = &inner;
            inner
                .queue
                .run_worker("cleaning up a finished Job failed", |key| async move {
                    inner.process(&key).await
                })
                .await;
        })
    };
    info!("ttl-after-finished controller started");
    let _ = shutdown.wait_for(|s| *s).await;
    inner.queue.shut_down();
    let _ = worker.await;
    drop(informer);
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl Inner {
    /// Requeues at `decision`'s expiry, if it has one.
    fn requeue(&self, key: &str, decision: TtlDecision, now: Timestamp) {
        if let Some(after) = requeue_after(decision, now) {
            self.queue.add_after(key.to_string(), after);
        }
    }

    async fn process(&self, key: &str) -> Result<(), kube::Error> {
        let Ok((ns, name)) = split_key(key) else {
            return Ok(());
        };
        let Some(cached) = self.jobs.get(ns, name) else {
            return Ok(());
        };
        let now = Timestamp::now();
        // A Job whose finish time can't be told is left alone, as upstream does.
        let Ok(decision) = ttl_decision(&cached, now) else {
            return Ok(());
        };
        if decision != TtlDecision::DeleteNow {
            self.requeue(key, decision, now);
            return Ok(());
        }
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let fresh = match api.get(name).await {
            Ok(j) => j,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let now = Timestamp::now();
        let Ok(decision) = ttl_decision(&fresh, now) else {
            return Ok(());
        };
        if decision != TtlDecision::DeleteNow {
            self.requeue(key, decision, now);
            return Ok(());
        }
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: fresh.uid(),
                resource_version: fresh.resource_version(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        if let Ok(Some(expired)) = super::expire_at(&fresh) {
            let late = Timestamp::now()
                .duration_since(expired)
                .as_secs_f64()
                .max(0.0);
            JOB_DELETION_DURATION_SECONDS.observe(&[], late);
        }
        debug!(job = %key, "deleted a finished Job whose TTL ran out");
        Ok(())
    }
}
