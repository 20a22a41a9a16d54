//! The pod garbage collector's part that a single-node control plane needs (upstream
//! `pkg/controller/podgc`, `gcUnscheduledTerminating`): a pod deleted before any node took it
//! has no kubelet to finish it, so it is marked `Failed` and force-deleted. Without this, a
//! pod held by the Job tracking finalizer would stay terminating forever and its Job would
//! never finish.
//!
//! Upstream scans every 20 seconds; here each pod change is looked at as it arrives. On a real
//! cluster its own pod GC does this job, so `kbatch controllers` does not run it by default.

use std::sync::Arc;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::keys;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::runtime::informer::{Change, InformerFactory, Lister};
use crate::runtime::key::{object_key, split_key};
use crate::runtime::metrics::CounterVec;
use crate::runtime::queue::{ItemExponentialFailureRateLimiter, WorkQueue};

pub const POD_GC_COLLECTED_TOTAL: CounterVec = CounterVec {
    name: "pod_gc_collector_force_delete_pods_total",
    help: "Number of pods that are being forcefully deleted since the Pod GC Controller started.",
    labels: &["namespace", "reason"],
};

/// What the collector does with a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcAction {
    /// Leave it.
    None,
    /// Deleted and never scheduled: set phase Failed (unless terminal), then delete with
    /// grace period 0.
    FailAndForceDelete,
}

/// The decision for one pod.
pub fn decide(pod: &Pod) -> GcAction {
    let unscheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty);
    if pod.metadata.deletion_timestamp.is_some() && unscheduled {
        GcAction::FailAndForceDelete
    } else {
        GcAction::None
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some(keys::POD_SUCCEEDED | keys::POD_FAILED)
    )
}

struct Inner {
    client: Client,
    pods: Lister<Pod>,
    queue: WorkQueue<String>,
}

/// Runs the collector until `shutdown` turns true.
pub async fn run(client: Client, informers: &InformerFactory, mut shutdown: watch::Receiver<bool>) {
    let queue: WorkQueue<String> = WorkQueue::new(
        "podgc",
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(100), Duration::from_secs(60)),
    );
    let q = queue.clone();
    let informer = informers.informer::<Pod>();
    informer.add_handler(move |change: Change<Pod>| {
        let pod = match &change {
            Change::Added(p) => p,
            Change::Updated { new, .. } => new,
            Change::Deleted(_) => return,
        };
        if decide(pod) != GcAction::None {
            q.add(object_key(pod.as_ref()));
        }
    });
    let inner = Arc::new(Inner {
        client,
        pods: informer.lister(),
        queue,
    });
    let worker = {
        let inner = Arc::clone(&inner);
        tokio::spawn(async move {
            let inner = &inner;
            inner
                .queue
                .run_worker("pod garbage collection failed", |key| async move {
                    inner.collect(&key).await
                })
                .await;
        })
    };
    info!("pod garbage collector started");
    let _ = shutdown.wait_for(|s| *s).await;
    inner.queue.shut_down();
    let _ = worker.await;
    drop(informer);
}

impl Inner {
    async fn collect(&self, key: &str) -> Result<(), kube::Error> {
        let Ok((ns, name)) = split_key(key) else {
            return Ok(());
        };
        let Some(pod) = self.pods.get(ns, name) else {
            return Ok(());
        };
        if decide(&pod) != GcAction::FailAndForceDelete {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if !is_terminal(&pod) {
            let status = json!({"status": {"phase": keys::POD_FAILED}});
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        POD_GC_COLLECTED_TOTAL.inc(&[ns, "deleting-unscheduled"]);
        debug!(pod = %key, "collected an unscheduled terminating pod");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_api::k8s_openapi::api::core::v1::PodSpec;
    use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kbatch_api::k8s_openapi::jiff::Timestamp;

    fn pod(node: Option<&str>, deleted: bool) -> Pod {
        let mut p = Pod {
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        if deleted {
            p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }
        p
    }

    // Scenarios of upstream's TestGCUnscheduledTerminating.
    #[test]
    fn only_deleted_unscheduled_pods_are_collected() {
        assert_eq!(decide(&pod(None, true)), GcAction::FailAndForceDelete);
        assert_eq!(decide(&pod(Some(""), true)), GcAction::FailAndForceDelete);
        assert_eq!(decide(&pod(Some("node"), true)), GcAction::None);
        assert_eq!(decide(&pod(None, false)), GcAction::None);
    }
}
