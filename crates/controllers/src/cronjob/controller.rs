//! The CronJob controller's loop (upstream's cronjob_controllerv2): CronJob and Job informers
//! feed a queue of CronJob keys; a worker fetches what the cache cannot be trusted with,
//! decides with [`super::sync_with`], carries the plan out in the order the module
//! documentation of [`super`] gives, and requeues the CronJob at its next scheduled time.
//! There is no polling: a CronJob is looked at when it or one of its Jobs changes, and when
//! it is due.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, Job};
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::k8s_openapi::jiff::tz::TimeZone;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tracing::{debug, info, warn};

use super::template::{controller_of, is_controlled_by};
use super::{
    CreateOutcome, CronJobEvent, CronJobPlan, DeletionFailure, DeletionReason, Lookups, Outcomes,
    active_missing_from_cache, jobs_to_be_reconciled, needs_fresh_cronjob, record_created,
    requeue_on_update, sync_with,
};
use crate::runtime::consistency::{CRONJOBS, ConsistencyStore, JOBS, STALE_SYNC_RECHECK};
use crate::runtime::events::{EventRecorder, object_reference};
use crate::runtime::informer::{Change, InformerFactory, Lister};
use crate::runtime::key::{object_key, split_key};
use crate::runtime::metrics::{HistogramVec, exponential_buckets};
use crate::runtime::queue::{ItemExponentialFailureRateLimiter, WorkQueue};
use crate::runtime::writes;

/// The event source component, as upstream.
pub const COMPONENT: &str = "cronjob-controller";

pub const JOB_CREATION_SKEW_DURATION_SECONDS: HistogramVec = HistogramVec {
    name: "cronjob_controller_job_creation_skew_duration_seconds",
    help: "Time between when a cronjob is scheduled to be run, and when the corresponding job is created",
    labels: &[],
    buckets: || exponential_buckets(1.0, 2.0, 10),
};

#[derive(Clone, Debug)]
pub struct CronJobControllerConfig {
    /// `--concurrent-cron-job-syncs`.
    pub workers: usize,
}

impl Default for CronJobControllerConfig {
    fn default() -> Self {
        CronJobControllerConfig { workers: 5 }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("the {0} informer stopped before its cache synced")]
    NotSynced(&'static str),
}

#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Plan(String),
}

struct Inner {
    client: Client,
    cronjobs: Lister<CronJob>,
    jobs: Lister<Job>,
    queue: WorkQueue<String>,
    recorder: EventRecorder,
    /// Schedules without spec.timeZone are in the controller's local zone, as upstream.
    zone: TimeZone,
    creations: CreationGate,
    /// Status writes left to tasks of their own run at most as many at a time as there are
    /// workers: released together at the end of a firing, ten thousand writes would open as
    /// many connections (and the server as many sockets) at once.
    deferred_writes: Semaphore,
    /// The Job creations and status writes each CronJob's next sync waits to see in the
    /// caches: a sync on a cache without its last status would create the Job again (409),
    /// list it again and write a status that conflicts.
    consistency: ConsistencyStore,
}

/// Job creations in flight, and the status writes that wait for them (and for the CronJobs
/// still queued) to end.
#[derive(Default)]
struct CreationGate {
    creating: AtomicUsize,
    settled: Notify,
}

/// One Job creation in flight; it ends when dropped.
struct Creating<'a>(&'a CreationGate);

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        if self.0.creating.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

impl CreationGate {
    fn begin(&self) -> Creating<'_> {
        self.creating.fetch_add(1, Ordering::AcqRel);
        Creating(self)
    }

    /// Whether a creation is in flight or `queued` says work is waiting.
    fn busy(&self, queued: bool) -> bool {
        queued || self.creating.load(Ordering::Acquire) > 0
    }

    /// Wakes the writers waiting in [`CreationGate::wait`] to look again.
    fn poke(&self) {
        self.settled.notify_waiters();
    }

    /// Waits until no creation is in flight and `queued()` is false, or until `deadline`.
    async fn wait(&self, queued: impl Fn() -> bool, deadline: tokio::time::Instant) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up between the two is not lost.
            notified.as_mut().enable();
            if !self.busy(queued()) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }
}

/// The longest a CronJob's status write waits for other CronJobs' Job creations: the bound
/// on how far `status.lastScheduleTime` can trail the Job it records.
const STATUS_DEFERRAL: Duration = Duration::from_secs(2);

/// What a sync leaves to do once its deletions and creation are done.
struct Finish {
    api: Api<CronJob>,
    name: String,
    /// The CronJob with the status to write, if one is due (boxed, as every large value a
    /// sync keeps across an await: a firing moves thousands of these futures around).
    status: Option<Box<CronJob>>,
    /// Whether this sync created a Job.
    created: bool,
    error: Option<String>,
    requeue_after: Option<Duration>,
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(
    client: Client,
    informers: &InformerFactory,
    config: CronJobControllerConfig,
    recorder: EventRecorder,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ControllerError> {
    let cj_informer = informers.informer::<CronJob>();
    let job_informer = informers.informer::<Job>();
    let (cj_changes, job_changes) = (cj_informer.subscribe(), job_informer.subscribe());
    // Upstream's default controller rate limiter, per item: 5 ms doubling to 1000 s.
    let inner = Arc::new(Inner {
        client,
        cronjobs: cj_informer.lister(),
        jobs: job_informer.lister(),
        queue: WorkQueue::new(
            "cronjob",
            ItemExponentialFailureRateLimiter::new(
                Duration::from_millis(5),
                Duration::from_secs(1000),
            ),
        ),
        recorder,
        zone: TimeZone::system(),
        creations: CreationGate::default(),
        deferred_writes: Semaphore::new(config.workers.max(1)),
        consistency: ConsistencyStore::new(vec![
            (CRONJOBS, Box::new(cj_informer.lister())),
            (JOBS, Box::new(job_informer.lister())),
        ]),
    });
    let dispatcher = tokio::spawn(Arc::clone(&inner).dispatch(cj_changes, job_changes));
    tokio::select! {
        r = async {
            cj_informer.wait_until_synced().await.map_err(|_| ControllerError::NotSynced("cronjob"))?;
            job_informer.wait_until_synced().await.map_err(|_| ControllerError::NotSynced("job"))
        } => r?,
        _ = shutdown.wait_for(|s| *s) => {
            dispatcher.abort();
            return Ok(());
        }
    }
    info!(workers = config.workers, "cronjob controller started");
    let mut workers = Vec::new();
    for _ in 0..config.workers.max(1) {
        let inner = Arc::clone(&inner);
        workers.push(tokio::spawn(async move {
            while let Some(key) = inner.queue.get().await {
                Arc::clone(&inner).process(key).await;
            }
        }));
    }
    let _ = shutdown.wait_for(|s| *s).await;
    inner.queue.shut_down();
    dispatcher.abort();
    for w in workers {
        let _ = w.await;
    }
    info!("cronjob controller stopped");
    Ok(())
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    status_code(e) == Some(404)
}

fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

impl Inner {
    async fn dispatch(
        self: Arc<Self>,
        mut cronjobs: mpsc::UnboundedReceiver<Change<CronJob>>,
        mut jobs: mpsc::UnboundedReceiver<Change<Job>>,
    ) {
        loop {
            tokio::select! {
                Some(c) = cronjobs.recv() => self.on_cronjob(c),
                Some(c) = jobs.recv() => self.on_job(c),
                else => return,
            }
        }
    }

    fn on_cronjob(&self, change: Change<CronJob>) {
        match change {
            Change::Added(cj) => self.queue.add(object_key(cj.as_ref())),
            Change::Updated { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                match requeue_on_update(&old, &new, Timestamp::now(), &self.zone) {
                    Ok(after) if after.is_zero() => self.queue.add(object_key(new.as_ref())),
                    Ok(after) => self.queue.add_after(object_key(new.as_ref()), after),
                    Err(event) => self.emit(&new, std::slice::from_ref(&event)),
                }
            }
            // Its Jobs go with it through garbage collection; nothing to do here.
            Change::Deleted(_) => {}
        }
    }

    /// The CronJob a Job's controller reference names, if cached with that UID.
    fn controller_cronjob(&self, job: &Job) -> Option<Arc<CronJob>> {
        let r = controller_of(job)?;
        if r.kind != "CronJob" {
            return None;
        }
        let cj = self.cronjobs.get(
            job.metadata.namespace.as_deref().unwrap_or_default(),
            &r.name,
        )?;
        is_controlled_by(job, &cj).then_some(cj)
    }

    fn on_job(&self, change: Change<Job>) {
        match change {
            Change::Added(job) | Change::Deleted(job) => {
                if let Some(cj) = self.controller_cronjob(&job) {
                    self.queue.add(object_key(cj.as_ref()));
                }
            }
            Change::Updated { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                if controller_of(&old) != controller_of(&new)
                    && let Some(cj) = self.controller_cronjob(&old)
                {
                    self.queue.add(object_key(cj.as_ref()));
                }
                if let Some(cj) = self.controller_cronjob(&new) {
                    self.queue.add(object_key(cj.as_ref()));
                }
            }
        }
    }

    fn emit(&self, cj: &CronJob, events: &[CronJobEvent]) {
        for e in events {
            self.recorder
                .record(object_reference(cj), e.type_, &e.reason, &e.message);
        }
    }

    /// Syncs `key` and marks it done. A status write that follows a Job creation while other
    /// CronJobs still wait for theirs (a firing of many at the same time) is left to a task
    /// of its own that waits for those creations first, and the worker goes on to the next
    /// CronJob: each of a firing's Jobs is then created before any of its status writes
    /// competes with them for the server. The key stays processing until its write is done,
    /// so the CronJob is never synced twice at once.
    async fn process(self: Arc<Self>, key: String) {
        if let Err(stale) = self.consistency.ensure_ready(&key) {
            debug!(cronjob = %key, reason = %stale, "cronjob sync deferred: the cache has not seen the last writes");
            self.queue.add_after(key.clone(), STALE_SYNC_RECHECK);
            self.queue.done(&key);
            return;
        }
        let result = match self.sync(&key).await {
            Ok(Some(f)) if f.created && f.status.is_some() && self.firing() => {
                tokio::spawn(async move {
                    self.after_creations().await;
                    // The semaphore is never closed: a permit always comes.
                    let permit = self.deferred_writes.acquire().await.ok();
                    // Boxed: the task waits small, and the write's future exists only
                    // while it is being made.
                    let result = Box::pin(self.finish(f)).await;
                    drop(permit);
                    self.settle(&key, result);
                });
                return;
            }
            Ok(Some(f)) => self.finish(f).await,
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        self.settle(&key, result);
    }

    /// Requeues `key` as the sync's result says, and marks it done.
    fn settle(&self, key: &String, result: Result<Option<Duration>, SyncError>) {
        match result {
            Ok(Some(after)) => {
                self.queue.forget(key);
                self.queue.add_after(key.clone(), after);
            }
            Ok(None) => self.queue.forget(key),
            Err(e) => {
                warn!(cronjob = %key, error = %e, "syncing cronjob failed");
                self.queue.add_rate_limited(key.clone());
            }
        }
        self.queue.done(key);
        if !self.firing() {
            self.creations.poke();
        }
    }

    /// Whether Job creations are under way or CronJobs wait to be synced.
    fn firing(&self) -> bool {
        self.creations.busy(!self.queue.is_empty())
    }

    /// Waits until no Job creation is under way and no CronJob waits, at most
    /// [`STATUS_DEFERRAL`].
    async fn after_creations(&self) {
        let deadline = tokio::time::Instant::now() + STATUS_DEFERRAL;
        self.creations
            .wait(|| !self.queue.is_empty(), deadline)
            .await;
    }

    /// The status write, then the sync's error or next look.
    async fn finish(&self, f: Finish) -> Result<Option<Duration>, SyncError> {
        if let Some(updated) = &f.status {
            let written =
                writes::replace_status_named(&f.api, &f.name, &PostParams::default(), updated)
                    .await?;
            self.consistency.wrote_for(
                &updated.metadata,
                CRONJOBS,
                written.resource_version.as_deref(),
            );
        }
        if let Some(err) = f.error {
            return Err(SyncError::Plan(err));
        }
        Ok(f.requeue_after)
    }

    /// One sync up to its status write; `None` when the CronJob is gone.
    async fn sync(&self, key: &str) -> Result<Option<Finish>, SyncError> {
        let Ok((ns, name)) = split_key(key) else {
            return Ok(None);
        };
        let Some(cached) = self.cronjobs.get(ns, name) else {
            debug!(cronjob = %key, "cronjob is gone");
            self.consistency.clear(key, None);
            return Ok(None);
        };
        // Upstream lists the namespace and keeps the Jobs whose controller has the CronJob's
        // name; the cache's index gives those directly.
        let all = self.jobs.list_controlled_by_name(ns, name);
        let children: Vec<&Job> = jobs_to_be_reconciled(&cached, &all);

        // 1. What the cache cannot be trusted with.
        let cj_api: Api<CronJob> = Api::namespaced(self.client.clone(), ns);
        let job_api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let fresh = if needs_fresh_cronjob(&cached, &children) {
            match cj_api.get(name).await {
                Ok(cj) => Some(Box::new(cj)),
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        let mut live = BTreeSet::new();
        for r in active_missing_from_cache(&cached, &children) {
            let job_name = r.name.clone().unwrap_or_default();
            match job_api.get(&job_name).await {
                Ok(j) if j.metadata.uid == r.uid => {
                    if let Some(uid) = j.metadata.uid {
                        live.insert(uid);
                    }
                }
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let lookups = Lookups {
            fresh_cronjob: fresh.as_deref(),
            live_active_jobs: live,
        };
        let now = Timestamp::now();
        let mut plan = Box::new(sync_with(
            &cached,
            &children,
            now,
            &self.zone,
            &lookups,
            &Outcomes::default(),
        ));

        // 2-4. Deletions, the creation, and a second decision when they did not all go as
        // planned (or to record the created Job's UID).
        let outcomes = Box::pin(self.execute(&cached, &job_api, &plan)).await;
        if let Some(outcomes) = &outcomes {
            // A creation that went through, with nothing else failed, only puts the server's
            // UID into the plan: no need to decide again.
            let recorded = outcomes.failed_deletions.is_empty()
                && matches!(&outcomes.create, CreateOutcome::CreatedAs(job) if record_created(&mut plan, job));
            if !recorded {
                *plan = sync_with(&cached, &children, now, &self.zone, &lookups, outcomes);
            }
        }

        // 5. Events, status, and the next look. Events first: upstream records them while
        // deciding, so a status write that fails (a conflict) does not lose them.
        self.emit(&cached, &plan.events);
        let status = plan.status.take().map(|status| {
            let mut updated = Box::new((*cached).clone());
            updated.status = Some(status);
            updated
        });
        Ok(Some(Finish {
            api: cj_api,
            name: name.to_string(),
            status,
            created: outcomes
                .as_ref()
                .is_some_and(|o| matches!(o.create, CreateOutcome::CreatedAs(_))),
            error: plan.error.take(),
            requeue_after: plan.requeue_after,
        }))
    }

    /// Deletes and creates what `plan` says. `Some(outcomes)` when the plan must be decided
    /// again with them (something failed, or a Job was created).
    async fn execute(&self, cj: &CronJob, api: &Api<Job>, plan: &CronJobPlan) -> Option<Outcomes> {
        let mut outcomes = Outcomes::default();
        let mut redo = false;
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let mut replace_failed = false;
        for d in &plan.jobs_to_delete {
            if d.reason == DeletionReason::Replace {
                // Upstream reads the Job before replacing it.
                match api.get(&d.name).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => continue,
                    Err(e) => {
                        outcomes
                            .failed_deletions
                            .insert(d.name.clone(), DeletionFailure::Get(error_text(&e)));
                        redo = true;
                        replace_failed = true;
                        break;
                    }
                }
            }
            match api.delete(&d.name, &dp).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    outcomes
                        .failed_deletions
                        .insert(d.name.clone(), DeletionFailure::Delete(error_text(&e)));
                    redo = true;
                    if d.reason == DeletionReason::Replace {
                        replace_failed = true;
                        break;
                    }
                }
            }
        }
        if replace_failed {
            return Some(outcomes);
        }
        if let (Some(job), Some(scheduled)) = (plan.job_to_create.as_ref(), plan.scheduled_time) {
            redo = true;
            let creating = self.creations.begin();
            // The plan needs only the created Job's metadata (its reference and event).
            let created = writes::create_metadata(api, &PostParams::default(), job)
                .await
                .map(|metadata| Job {
                    metadata,
                    ..Job::default()
                });
            drop(creating);
            if let Ok(job) = &created {
                self.consistency.wrote_for(
                    &cj.metadata,
                    JOBS,
                    job.metadata.resource_version.as_deref(),
                );
            }
            outcomes.create = match created {
                Ok(created) => {
                    if let Some(ct) = created.metadata.creation_timestamp.as_ref() {
                        let skew = ct.0.duration_since(scheduled).as_secs_f64().max(0.0);
                        JOB_CREATION_SKEW_DURATION_SECONDS.observe(&[], skew);
                    }
                    CreateOutcome::CreatedAs(Box::new(created))
                }
                Err(e) if status_code(&e) == Some(409) => {
                    let existing = api.get(&job.name_any()).await.ok().map(Box::new);
                    CreateOutcome::AlreadyExists(existing)
                }
                Err(e) if matches!(&e, kube::Error::Api(s) if s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))) => {
                    CreateOutcome::NamespaceTerminating
                }
                Err(e) => CreateOutcome::Failed(error_text(&e)),
            };
        }
        redo.then_some(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status write waits while a creation is in flight or CronJobs are queued, wakes when
    /// the last creation ends, and never waits past its deadline.
    #[tokio::test(start_paused = true)]
    async fn status_writes_wait_for_creations() {
        use std::sync::atomic::AtomicBool;
        use tokio::time::{Instant, sleep};

        let gate = Arc::new(CreationGate::default());
        let queued = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let far = start + Duration::from_secs(60);

        // Nothing in flight: no wait.
        gate.wait(|| queued.load(Ordering::Acquire), far).await;
        assert_eq!(start.elapsed(), Duration::ZERO);

        // Two creations; the writer goes when the second one ends, not the first.
        let (a, b) = (Arc::clone(&gate), Arc::clone(&gate));
        let ends = tokio::spawn(async move {
            let first = a.begin();
            let second = b.begin();
            sleep(Duration::from_millis(100)).await;
            drop(first);
            sleep(Duration::from_millis(100)).await;
            drop(second);
        });
        tokio::task::yield_now().await;
        let q = Arc::clone(&queued);
        gate.wait(move || q.load(Ordering::Acquire), far).await;
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        ends.await.unwrap();

        // Queued work holds the writer until a poke finds the queue empty.
        queued.store(true, Ordering::Release);
        let (g, q) = (Arc::clone(&gate), Arc::clone(&queued));
        let drains = tokio::spawn(async move {
            sleep(Duration::from_millis(50)).await;
            g.poke(); // still queued: the writer keeps waiting
            sleep(Duration::from_millis(50)).await;
            q.store(false, Ordering::Release);
            g.poke();
        });
        let q = Arc::clone(&queued);
        gate.wait(move || q.load(Ordering::Acquire), far).await;
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        drains.await.unwrap();

        // Work that never ends: the deadline lets the writer go.
        let _stuck = gate.begin();
        let deadline = Instant::now() + STATUS_DEFERRAL;
        gate.wait(|| false, deadline).await;
        assert_eq!(Instant::now(), deadline);
    }

    #[test]
    fn skew_buckets_match_upstream() {
        let b = (JOB_CREATION_SKEW_DURATION_SECONDS.buckets)();
        assert_eq!(b.len(), 10);
        assert_eq!(b[0], 1.0);
        assert_eq!(b[9], 512.0);
    }
}
