//! The Job controller's loop: informers for Jobs and Pods feed a work queue of Job keys; workers
//! decide each sync with [`super::sync`] and carry the plan out through the API, in the order the
//! module documentation of [`super`] gives. A second queue removes the tracking finalizer from
//! pods whose Job is gone or finished (upstream's orphan queue).
//!
//! Everything here talks to the API server over HTTP: the same loop runs against `kbatch up`
//! and against any Kubernetes cluster.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::join_all;
use kbatch_api::k8s_openapi::api::batch::v1::{Job, JobStatus};
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::keys;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::backoff::{BackoffConfig, BackoffRecord};
use super::indexed::Intervals;
use super::metrics as m;
use super::ownership::{Claim, claim_pod};
use super::{
    FailedPodActions, JobEvent, Plan, PodDeletion, SyncContext, indexed_completions, is_finished,
    managed_elsewhere, pods, slow_start_batches, sync_refs, tracking,
};
use crate::runtime::consistency::{ConsistencyStore, JOBS, PODS, STALE_SYNC_RECHECK};
use crate::runtime::events::{EventRecorder, object_reference};
use crate::runtime::expectations::{ControllerExpectations, UidTrackingExpectations};
use crate::runtime::informer::{Change, InformerFactory, Lister};
use crate::runtime::key::{KeyError, object_key, split_key};
use crate::runtime::queue::{ItemExponentialFailureRateLimiter, WorkQueue};
use crate::runtime::writes;

/// Upstream `DefaultJobApiBackOff` and `MaxJobApiBackOff`: the per-key retry delays.
pub const DEFAULT_JOB_API_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_JOB_API_BACKOFF: Duration = Duration::from_secs(60);
/// The event source component, as upstream.
pub const COMPONENT: &str = "job-controller";
/// How many finalizer patches one sync sends at once.
const PARALLEL_PATCHES: usize = 64;

#[derive(Clone, Debug)]
pub struct JobControllerConfig {
    /// `--concurrent-job-syncs`.
    pub workers: usize,
    pub backoff: BackoffConfig,
    /// How long pod events are batched before a Job is synced (upstream `syncJobBatchPeriod`).
    pub pod_update_batch_period: Duration,
}

impl Default for JobControllerConfig {
    fn default() -> Self {
        JobControllerConfig {
            workers: 5,
            backoff: BackoffConfig::default(),
            pod_update_batch_period: super::SYNC_JOB_BATCH_PERIOD,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("original Job {namespace}/{name} is gone: got uid {got}, wanted {wanted}")]
    JobGone {
        namespace: String,
        name: String,
        got: String,
        wanted: String,
    },
    #[error("{namespace}/{name} has just been deleted")]
    JobDeleted { namespace: String, name: String },
    #[error("{0}")]
    Partial(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("the {0} informer stopped before its cache synced")]
    NotSynced(&'static str),
}

/// The controller's state shared by its informer dispatcher and workers.
struct Inner {
    client: Client,
    config: JobControllerConfig,
    jobs: Lister<Job>,
    pods: Lister<Pod>,
    queue: WorkQueue<String>,
    orphan_queue: WorkQueue<String>,
    expectations: ControllerExpectations,
    finalizer_expectations: UidTrackingExpectations,
    /// The writes of each Job's last sync, which its next sync waits to see in the caches.
    consistency: ConsistencyStore,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    recorder: EventRecorder,
}

/// Runs the Job controller until `shutdown` turns true.
pub async fn run(
    client: Client,
    informers: &InformerFactory,
    config: JobControllerConfig,
    recorder: EventRecorder,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ControllerError> {
    let job_informer = informers.informer::<Job>();
    let pod_informer = informers.informer::<Pod>();
    let (job_changes, pod_changes) = (job_informer.subscribe(), pod_informer.subscribe());
    let rate_limiter =
        || ItemExponentialFailureRateLimiter::new(DEFAULT_JOB_API_BACKOFF, MAX_JOB_API_BACKOFF);
    let inner = Arc::new(Inner {
        client,
        config: config.clone(),
        jobs: job_informer.lister(),
        pods: pod_informer.lister(),
        queue: WorkQueue::new("job", rate_limiter()),
        orphan_queue: WorkQueue::new("job_orphan_pod", rate_limiter()),
        expectations: ControllerExpectations::new(),
        finalizer_expectations: UidTrackingExpectations::new(),
        consistency: ConsistencyStore::new(vec![
            (JOBS, Box::new(job_informer.lister())),
            (PODS, Box::new(pod_informer.lister())),
        ]),
        backoff: Mutex::new(HashMap::new()),
        recorder,
    });
    let dispatcher = tokio::spawn(Arc::clone(&inner).dispatch(job_changes, pod_changes));

    tokio::select! {
        r = async {
            job_informer.wait_until_synced().await.map_err(|_| ControllerError::NotSynced("job"))?;
            pod_informer.wait_until_synced().await.map_err(|_| ControllerError::NotSynced("pod"))
        } => r?,
        _ = shutdown.wait_for(|s| *s) => {
            dispatcher.abort();
            return Ok(());
        }
    }
    info!(workers = config.workers, "job controller started");

    let mut workers = Vec::new();
    for _ in 0..config.workers.max(1) {
        let inner = Arc::clone(&inner);
        workers.push(tokio::spawn(async move {
            while let Some(key) = inner.queue.get().await {
                inner.process(&key).await;
                inner.queue.done(&key);
            }
        }));
    }
    let orphan_inner = Arc::clone(&inner);
    workers.push(tokio::spawn(async move {
        let inner = &orphan_inner;
        inner
            .orphan_queue
            .run_worker(
                "removing the tracking finalizer of an orphan pod failed",
                |key| async move { inner.sync_orphan_pod(&key).await },
            )
            .await;
    }));

    let _ = shutdown.wait_for(|s| *s).await;
    inner.queue.shut_down();
    inner.orphan_queue.shut_down();
    dispatcher.abort();
    for w in workers {
        let _ = w.await;
    }
    drop(job_informer);
    drop(pod_informer);
    info!("job controller stopped");
    Ok(())
}

fn status_error(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    status_error(e).is_some_and(|s| s.code == 404)
}

fn is_namespace_terminating(e: &kube::Error) -> bool {
    status_error(e)
        .and_then(|s| s.details.as_ref())
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// The error text upstream puts into events: the Status message for API errors.
fn error_text(e: &kube::Error) -> String {
    match status_error(e) {
        Some(s) if !s.message.is_empty() => s.message.clone(),
        _ => e.to_string(),
    }
}

fn completion_mode(job: &Job) -> &'static str {
    if indexed_completions(job).is_some() {
        "Indexed"
    } else {
        "NonIndexed"
    }
}

fn terminal_condition(status: Option<&JobStatus>) -> Option<(String, String)> {
    let conds = status?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| {
            (c.type_ == keys::JOB_COMPLETE || c.type_ == keys::JOB_FAILED) && c.status == "True"
        })
        .map(|c| (c.type_.clone(), c.reason.clone().unwrap_or_default()))
}

impl Inner {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn jobs_api(&self, namespace: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn backoff_record(&self, key: &str) -> BackoffRecord {
        let map = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).cloned().unwrap_or_default()
    }

    fn set_backoff_record(&self, key: &str, record: BackoffRecord) {
        let mut map = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        if record == BackoffRecord::default() {
            map.remove(key);
        } else {
            map.insert(key.to_string(), record);
        }
    }

    // ----- informer event handlers (upstream addJob/updateJob/deleteJob, addPod/...) -----

    async fn dispatch(
        self: Arc<Self>,
        mut jobs: mpsc::UnboundedReceiver<Change<Job>>,
        mut pods: mpsc::UnboundedReceiver<Change<Pod>>,
    ) {
        loop {
            tokio::select! {
                Some(c) = jobs.recv() => self.on_job(c),
                Some(c) = pods.recv() => self.on_pod(c),
                else => return,
            }
        }
    }

    fn enqueue_now(&self, job: &Job) {
        self.queue.add(object_key(job));
    }

    fn enqueue_batched(&self, job: &Job) {
        self.queue
            .add_after(object_key(job), self.config.pod_update_batch_period);
    }

    fn on_job(&self, change: Change<Job>) {
        match change {
            Change::Added(job) => {
                if let Some(other) = managed_elsewhere(&job) {
                    m::JOBS_BY_EXTERNAL_CONTROLLER_TOTAL.inc(&[other]);
                }
                self.enqueue_now(&job);
            }
            Change::Updated { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                if old.metadata.generation == new.metadata.generation {
                    self.enqueue_batched(&new);
                } else {
                    self.enqueue_now(&new);
                }
                if is_finished(&new) {
                    self.enqueue_orphans_of(&new);
                }
                self.requeue_for_changed_deadline(&old, &new);
            }
            Change::Deleted(job) => {
                self.consistency
                    .clear(&object_key(&*job), job.metadata.uid.as_deref());
                self.enqueue_now(&job);
                self.enqueue_orphans_of(&job);
            }
        }
    }

    /// When activeDeadlineSeconds changes on a started Job, sync it again when the new
    /// deadline passes.
    fn requeue_for_changed_deadline(&self, old: &Job, new: &Job) {
        let ads = |j: &Job| j.spec.as_ref().and_then(|s| s.active_deadline_seconds);
        let (Some(new_ads), Some(start)) = (
            ads(new),
            new.status.as_ref().and_then(|s| s.start_time.as_ref()),
        ) else {
            return;
        };
        if ads(old) == Some(new_ads) {
            return;
        }
        let elapsed = self.now().duration_since(start.0).as_secs().max(0);
        let left = u64::try_from(new_ads.saturating_sub(elapsed)).unwrap_or(0);
        self.queue
            .add_after(object_key(new), Duration::from_secs(left));
    }

    /// Sends the controlled pods that still carry the tracking finalizer to the orphan queue.
    fn enqueue_orphans_of(&self, job: &Job) {
        let ns = job.namespace().unwrap_or_default();
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        for p in self.pods.list_controlled_by(&ns, uid) {
            if pods::has_tracking_finalizer(&p) && pods::is_controlled_by(&p, job) {
                self.orphan_queue.add(object_key(p.as_ref()));
            }
        }
    }

    /// The Job that `pod`'s controller reference names, if it is in the cache with that UID.
    fn controller_job(&self, pod: &Pod) -> Option<Arc<Job>> {
        let r = pods::controller_ref(pod)?;
        if r.kind != "Job" {
            return None;
        }
        let job = self.jobs.get(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            &r.name,
        )?;
        (job.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(job)
    }

    /// Jobs of the pod's namespace whose selector matches its labels.
    fn matching_jobs(&self, pod: &Pod) -> Vec<Arc<Job>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        self.jobs
            .list_namespace(ns)
            .into_iter()
            .filter(|j| {
                j.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| pods::selector_matches(sel, pod.metadata.labels.as_ref()))
            })
            .collect()
    }

    fn on_pod(&self, change: Change<Pod>) {
        match change {
            Change::Added(pod) => self.add_pod(&pod),
            Change::Updated { old, new } => self.update_pod(&old, &new),
            Change::Deleted(pod) => self.delete_pod(&pod, true),
        }
    }

    fn add_pod(&self, pod: &Pod) {
        if pods::is_terminal(pod) && pods::has_tracking_finalizer(pod) {
            m::TERMINATED_PODS_TRACKING_FINALIZER_TOTAL.inc(&["add"]);
        }
        if pod.metadata.deletion_timestamp.is_some() {
            // Restarted controllers see pods already being deleted as adds.
            self.delete_pod(pod, false);
            return;
        }
        if pods::controller_ref(pod).is_some() {
            match self.controller_job(pod) {
                Some(job) => {
                    self.expectations
                        .creation_observed(&object_key(job.as_ref()));
                    self.enqueue_batched(&job);
                }
                None => {
                    if pods::has_tracking_finalizer(pod) {
                        self.orphan_queue.add(object_key(pod));
                    }
                }
            }
            return;
        }
        if pods::has_tracking_finalizer(pod) {
            self.orphan_queue.add(object_key(pod));
        }
        for job in self.matching_jobs(pod) {
            self.enqueue_batched(&job);
        }
    }

    fn update_pod(&self, old: &Pod, cur: &Pod) {
        let old_done = pods::is_terminal(old) && pods::has_tracking_finalizer(old);
        let cur_done = pods::is_terminal(cur) && pods::has_tracking_finalizer(cur);
        if cur_done && !old_done {
            m::TERMINATED_PODS_TRACKING_FINALIZER_TOTAL.inc(&["add"]);
        } else if old_done && pods::is_terminal(cur) && !pods::has_tracking_finalizer(cur) {
            m::TERMINATED_PODS_TRACKING_FINALIZER_TOTAL.inc(&["delete"]);
        }
        if cur.metadata.resource_version == old.metadata.resource_version {
            return;
        }
        if cur.metadata.deletion_timestamp.is_some() {
            self.delete_pod(cur, false);
            return;
        }
        let uid = pods::uid(cur);
        // Not checking the old pod: during ownership changes the finalizer may come and go
        // within one collapsed event, and the latest state is what counts.
        let finalizer_removed = !pods::has_tracking_finalizer(cur);
        let cur_ref = pods::controller_ref(cur);
        let old_ref = pods::controller_ref(old);
        let ref_changed = cur_ref != old_ref;
        if ref_changed
            && old_ref.is_some()
            && let Some(job) = self.controller_job(old)
        {
            if finalizer_removed {
                self.finalizer_expectations
                    .finalizer_removal_observed(&object_key(job.as_ref()), uid);
            }
            self.enqueue_batched(&job);
        }
        if cur_ref.is_some() {
            let Some(job) = self.controller_job(cur) else {
                if pods::has_tracking_finalizer(cur) {
                    self.orphan_queue.add(object_key(cur));
                }
                return;
            };
            if finalizer_removed {
                self.finalizer_expectations
                    .finalizer_removal_observed(&object_key(job.as_ref()), uid);
            }
            self.enqueue_batched(&job);
            return;
        }
        // An orphan: if anything changed, the Jobs that might adopt it should look.
        if pods::has_tracking_finalizer(cur) {
            self.orphan_queue.add(object_key(cur));
        }
        if ref_changed || cur.metadata.labels != old.metadata.labels {
            for job in self.matching_jobs(cur) {
                self.enqueue_batched(&job);
            }
        }
    }

    /// A pod is gone (`final`), or is being deleted.
    fn delete_pod(&self, pod: &Pod, final_: bool) {
        if final_ && pods::is_terminal(pod) && pods::has_tracking_finalizer(pod) {
            m::TERMINATED_PODS_TRACKING_FINALIZER_TOTAL.inc(&["delete"]);
        }
        if pods::controller_ref(pod).is_none() {
            return;
        }
        let has_finalizer = pods::has_tracking_finalizer(pod);
        let job = self.controller_job(pod);
        let Some(job) = job.filter(|j| !is_finished(j)) else {
            // The Job will not remove this finalizer: the orphan queue does.
            if has_finalizer && !final_ {
                self.orphan_queue.add(object_key(pod));
            }
            return;
        };
        let key = object_key(job.as_ref());
        self.expectations.deletion_observed(&key);
        if final_ || !has_finalizer {
            self.finalizer_expectations
                .finalizer_removal_observed(&key, pods::uid(pod));
        }
        self.enqueue_batched(&job);
    }

    // ----- workers -----

    async fn process(&self, key: &str) {
        // Upstream's StaleControllerConsistencyJob: a cache that has not seen the last sync's
        // writes would make this sync decide on an old state.
        if let Err(stale) = self.consistency.ensure_ready(key) {
            debug!(job = %key, reason = %stale, "job sync deferred: the cache has not seen the last writes");
            m::STALE_SYNC_SKIPS_TOTAL.inc(&[stale.resource.group, stale.resource.resource]);
            self.queue.add_after(key.to_string(), STALE_SYNC_RECHECK);
            return;
        }
        let started = Instant::now();
        let job = split_key(key)
            .ok()
            .and_then(|(ns, name)| self.jobs.get(ns, name));
        let mode = job.as_deref().map(completion_mode).unwrap_or("NonIndexed");
        let (result, action) = match self.sync_job(key).await {
            Ok(action) => {
                self.queue.forget(&key.to_string());
                ("success", action)
            }
            Err((e, action)) => {
                warn!(job = %key, error = %e, "syncing job failed");
                self.queue.add_rate_limited(key.to_string());
                ("error", Some(action))
            }
        };
        // As upstream, syncs of a Job that is gone, finished, managed elsewhere or of an
        // unknown completion mode are not counted.
        if let Some(action) = action {
            m::JOB_SYNCS_TOTAL.inc(&[mode, result, action]);
            m::JOB_SYNC_DURATION_SECONDS
                .observe(&[mode, result, action], started.elapsed().as_secs_f64());
        }
    }

    /// One sync of the Job under `key`. Returns the metrics action label, `None` for a sync
    /// upstream does not count.
    async fn sync_job(&self, key: &str) -> Result<Option<&'static str>, (SyncError, &'static str)> {
        let action = m::ACTION_RECONCILING;
        let (ns, name) = split_key(key).map_err(|e| (e.into(), action))?;
        let Some(job) = self.jobs.get(ns, name) else {
            debug!(job = %key, "job is gone");
            self.consistency.clear(key, None);
            self.expectations.delete_expectations(key);
            self.finalizer_expectations.delete_expectations(key);
            self.set_backoff_record(key, BackoffRecord::default());
            return Ok(None);
        };
        if managed_elsewhere(&job).is_some() {
            return Ok(None);
        }
        if is_finished(&job) {
            self.set_backoff_record(key, BackoffRecord::default());
            return Ok(None);
        }
        // Read before listing pods: an observation arriving in between must not be missed.
        let satisfied = self.expectations.satisfied_expectations(key);
        let owned = self.pods_for_job(&job).await.map_err(|e| (e, action))?;
        let owned: Vec<&Pod> = owned.iter().map(|p| &**p).collect();
        let ctx = SyncContext {
            satisfied_expectations: satisfied,
            expected_removed_finalizers: self
                .finalizer_expectations
                .expected_uids(key)
                .map(|s| s.into_iter().collect())
                .unwrap_or_default(),
            backoff: self.backoff_record(key),
            backoff_config: self.config.backoff,
            ..SyncContext::default()
        };
        let now = self.now();
        let mut plan = sync_refs(&job, &owned, now, &ctx);
        if plan.skip.is_some() {
            self.emit(&job, &plan.events);
            return Ok(plan.action);
        }
        let action = plan.action.unwrap_or(action);
        let mut errors: Vec<String> = Vec::new();
        let phase = Instant::now();

        // 1. Pod creations and deletions.
        let failed = self
            .execute_pod_actions(key, &job, &plan, &mut errors)
            .await;
        let pods_done = phase.elapsed();
        if failed != FailedPodActions::default() {
            let ctx = SyncContext {
                failed_pod_actions: Some(failed),
                ..ctx
            };
            plan = sync_refs(&job, &owned, now, &ctx);
        }

        // 2-3. The status, then the back-off record.
        let mut current = Arc::clone(&job);
        if let Some(status) = plan.status.clone() {
            current = self
                .write_status(&current, status)
                .await
                .map_err(|e| (e, action))?;
        }
        self.set_backoff_record(key, plan.backoff.clone());
        let status_done = phase.elapsed();

        // 4-5. Finalizers, then the status that counts the pods they released.
        // (With nothing to remove this step still runs: it is where the terminal condition is
        // written once the last pod has been accounted for.)
        let removed = if plan.finalizers_to_remove.is_empty() {
            BTreeSet::new()
        } else {
            self.remove_finalizers(key, &job, &plan, &mut errors).await
        };
        let finalizers_done = phase.elapsed();
        if let Some((status, events)) = plan.status_after_finalizers(&removed) {
            self.write_status(&current, status)
                .await
                .map_err(|e| (e, action))?;
            self.emit(&job, &events);
        }
        // Recorded once the failed pods are accounted for, as upstream records them after
        // its flush.
        for (action, n) in &plan.failure_policy_actions {
            m::POD_FAILURES_HANDLED_BY_FAILURE_POLICY_TOTAL.add(&[action], f64::from(*n));
        }

        // Where a sync's time goes: each phase waits for its writes.
        debug!(
            job = %key,
            created = plan.pods_to_create.len(),
            finalizers_removed = removed.len(),
            pods_ms = pods_done.as_secs_f64() * 1e3,
            status_ms = (status_done - pods_done).as_secs_f64() * 1e3,
            finalizers_ms = (finalizers_done - status_done).as_secs_f64() * 1e3,
            final_status_ms = (phase.elapsed() - finalizers_done).as_secs_f64() * 1e3,
            "job sync phases"
        );

        // 6. Events and the next look.
        self.emit(&job, &plan.events);
        if let Some(after) = plan.requeue_after {
            self.queue.add_after(key.to_string(), after);
        }
        if errors.is_empty() {
            Ok(Some(action))
        } else {
            Err((SyncError::Partial(errors.join("; ")), action))
        }
    }

    fn emit(&self, job: &Job, events: &[JobEvent]) {
        for e in events {
            self.recorder
                .record(object_reference(job), e.type_, &e.reason, &e.message);
        }
    }

    fn event(&self, job: &Job, e: JobEvent) {
        self.emit(job, std::slice::from_ref(&e));
    }

    /// PUTs `status` onto the Job through the status subresource (optimistic concurrency on
    /// the resourceVersion `job` carries) and records the metrics of what it finished.
    async fn write_status(&self, job: &Arc<Job>, status: JobStatus) -> Result<Arc<Job>, SyncError> {
        let mut updated = (**job).clone();
        let old = updated.status.replace(status);
        let name = job.name_any();
        let ns = job.namespace().unwrap_or_default();
        let pp = PostParams::default();
        let written =
            writes::replace_status_lean(&self.jobs_api(&ns), &name, &pp, &updated).await?;
        self.consistency.wrote_for(
            &job.metadata,
            JOBS,
            written.metadata.resource_version.as_deref(),
        );
        record_finish_metrics(job, old.as_ref(), written.status.as_ref());
        Ok(Arc::new(written))
    }

    /// Creates and deletes the plan's pods. Returns what did not go through.
    async fn execute_pod_actions(
        &self,
        key: &str,
        job: &Arc<Job>,
        plan: &Plan,
        errors: &mut Vec<String>,
    ) -> FailedPodActions {
        let mut failed = FailedPodActions::default();
        let ns = job.namespace().unwrap_or_default();
        let api = self.pods_api(&ns);

        let expected_del = plan.expected_deletions();
        if !plan.pods_to_delete.is_empty() {
            if expected_del > 0 {
                self.expectations
                    .expect_deletions(key, i64::try_from(expected_del).unwrap_or(i64::MAX));
            }
            let results = join_all(
                plan.pods_to_delete
                    .iter()
                    .map(|d| self.delete_pod_for(&api, d)),
            )
            .await;
            for (d, r) in plan.pods_to_delete.iter().zip(results) {
                match r {
                    Ok(Deleted::Done(patched_rv)) => {
                        self.consistency
                            .wrote_for(&job.metadata, PODS, patched_rv.as_deref());
                        self.event(job, JobEvent::pod_deleted(&d.pod.name));
                    }
                    // Gone already: its deletion may have been seen before it was expected,
                    // so it is taken as seen, with no event (upstream's failDelete for
                    // NotFound, and DeletePod records none).
                    Ok(Deleted::Gone) => {
                        if d.expected() {
                            self.expectations.deletion_observed(key);
                        }
                    }
                    Err(e) => {
                        if d.expected() {
                            self.expectations.deletion_observed(key);
                        }
                        let err = match &e {
                            // The finalizer patch failed: upstream's PatchPod records no event.
                            DeleteError::Patch(e) => {
                                format!("removing completion finalizer: {}", error_text(e))
                            }
                            DeleteError::Delete(e) => {
                                self.event(job, JobEvent::pod_delete_failed(&error_text(e)));
                                error_text(e)
                            }
                        };
                        errors.push(format!("deleting pod {}: {err}", d.pod.name));
                        failed.deletes.insert(d.pod.uid.clone());
                    }
                }
            }
        }

        let n = plan.pods_to_create.len();
        if n > 0 {
            self.expectations
                .expect_creations(key, i64::try_from(n).unwrap_or(i64::MAX));
            let reason = plan.creation_reason;
            let mut next = 0;
            let mut stop = false;
            for batch in slow_start_batches(n) {
                if stop {
                    // Never attempted: will never be observed.
                    self.expectations
                        .lower_expectations(key, i64::try_from(batch).unwrap_or(0), 0);
                    failed.creates += batch;
                    continue;
                }
                let chunk = &plan.pods_to_create[next..next + batch];
                next += batch;
                let pp = PostParams::default();
                let results =
                    join_all(chunk.iter().map(|p| writes::create_named(&api, &pp, p))).await;
                for r in results {
                    match r {
                        Ok(created) => {
                            m::JOB_PODS_CREATION_TOTAL.inc(&[reason, "succeeded"]);
                            self.consistency.wrote_for(
                                &job.metadata,
                                PODS,
                                created.resource_version.as_deref(),
                            );
                            let name = created.name.unwrap_or_default();
                            self.event(job, JobEvent::pod_created(&name));
                        }
                        Err(e) if is_namespace_terminating(&e) => {
                            // Every later create fails the same way; nothing to retry.
                            self.expectations.creation_observed(key);
                            failed.creates += 1;
                        }
                        Err(e) => {
                            m::JOB_PODS_CREATION_TOTAL.inc(&[reason, "failed"]);
                            self.expectations.creation_observed(key);
                            self.event(job, JobEvent::pod_create_failed(&error_text(&e)));
                            errors.push(format!("creating pod: {}", error_text(&e)));
                            failed.creates += 1;
                            stop = true;
                        }
                    }
                }
            }
        }
        failed
    }

    /// Deletes a pod of the plan, first removing its tracking finalizer when the plan says so;
    /// returns the resourceVersion that patch wrote.
    async fn delete_pod_for(
        &self,
        api: &Api<Pod>,
        d: &PodDeletion,
    ) -> Result<Deleted, DeleteError> {
        let mut patched_rv = None;
        if d.remove_finalizer_first() {
            match writes::patch_named(
                api,
                &d.pod.name,
                &PatchParams::default(),
                &remove_finalizer_patch(),
            )
            .await
            {
                Ok(w) => patched_rv = w.resource_version,
                Err(e) if is_not_found(&e) => return Ok(Deleted::Gone),
                Err(e) => return Err(DeleteError::Patch(e)),
            }
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(d.pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&d.pod.name, &dp).await {
            Ok(_) => Ok(Deleted::Done(patched_rv)),
            Err(e) if is_not_found(&e) => Ok(Deleted::Gone),
            Err(e) => Err(DeleteError::Delete(e)),
        }
    }

    /// Removes the tracking finalizer of the plan's pods; returns the UIDs now without it.
    async fn remove_finalizers(
        &self,
        key: &str,
        job: &Job,
        plan: &Plan,
        errors: &mut Vec<String>,
    ) -> BTreeSet<String> {
        let uids: Vec<String> = plan
            .finalizers_to_remove
            .iter()
            .map(|p| p.uid.clone())
            .collect();
        self.finalizer_expectations
            .expect_finalizers_removed(key, uids);
        let ns = split_key(key).map(|(ns, _)| ns).unwrap_or_default();
        let api = self.pods_api(ns);
        let patch = remove_finalizer_patch();
        let pp = PatchParams::default();
        // Collected first: a lazily mapped iterator of borrowing futures trips the compiler's
        // higher-ranked lifetime check on spawn.
        let patches: Vec<_> = plan
            .finalizers_to_remove
            .iter()
            .map(|p| {
                let (api, patch, pp) = (&api, &patch, &pp);
                async move {
                    let r = match writes::patch_named(api, &p.name, pp, patch).await {
                        Ok(w) => Ok(w.resource_version),
                        Err(e) if is_not_found(&e) => Ok(None),
                        Err(e) => Err(e),
                    };
                    (p.uid.clone(), r)
                }
            })
            .collect();
        let results: Vec<(String, Result<Option<String>, kube::Error>)> =
            futures::stream::iter(patches)
                .buffer_unordered(PARALLEL_PATCHES)
                .collect()
                .await;
        let mut removed = BTreeSet::new();
        for (uid, r) in results {
            match r {
                Ok(rv) => {
                    self.consistency
                        .wrote_for(&job.metadata, PODS, rv.as_deref());
                    removed.insert(uid);
                }
                Err(e) => {
                    // Never to be observed: stop waiting for it.
                    self.finalizer_expectations
                        .finalizer_removal_observed(key, &uid);
                    errors.push(format!("removing tracking finalizer: {}", error_text(&e)));
                }
            }
        }
        removed
    }

    /// The Job's pods: those it controls and that match its selector, plus matching orphans
    /// it adopts now; controlled pods that no longer match are released (upstream
    /// `getPodsForJob` with the controller-ref manager).
    /// The pods are the cache's own (shared, never copied), as upstream's.
    async fn pods_for_job(&self, job: &Arc<Job>) -> Result<Vec<Arc<Pod>>, SyncError> {
        let ns = job.namespace().unwrap_or_default();
        let mut owned = Vec::new();
        let mut adoption_checked = false;
        // Pods controlled by another owner are never claimed: only this Job's own pods and
        // the namespace's orphans need looking at.
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        for p in self.pods.list_controlled_or_orphaned(&ns, uid) {
            match claim_pod(job, &p) {
                Claim::Owned => owned.push(p),
                Claim::Ignore => {}
                Claim::Adopt => {
                    if !adoption_checked {
                        self.recheck_for_adoption(job).await?;
                        adoption_checked = true;
                    }
                    match self
                        .pods_api(&ns)
                        .patch(
                            &p.name_any(),
                            &PatchParams::default(),
                            &adopt_patch(job, &p),
                        )
                        .await
                    {
                        Ok(adopted) => {
                            self.consistency.wrote_for(
                                &job.metadata,
                                PODS,
                                adopted.metadata.resource_version.as_deref(),
                            );
                            owned.push(Arc::new(adopted));
                        }
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Claim::Release => {
                    match self
                        .pods_api(&ns)
                        .patch(
                            &p.name_any(),
                            &PatchParams::default(),
                            &release_patch(job, &p),
                        )
                        .await
                    {
                        Ok(released) => self.consistency.wrote_for(
                            &job.metadata,
                            PODS,
                            released.metadata.resource_version.as_deref(),
                        ),
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(owned)
    }

    /// Before adopting, make sure the cached Job is still the live one (upstream
    /// `RecheckDeletionTimestamp`).
    async fn recheck_for_adoption(&self, job: &Job) -> Result<(), SyncError> {
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let fresh = self.jobs_api(&ns).get(&name).await?;
        let wanted = job.metadata.uid.clone().unwrap_or_default();
        let got = fresh.metadata.uid.clone().unwrap_or_default();
        if got != wanted {
            return Err(SyncError::JobGone {
                namespace: ns,
                name,
                got,
                wanted,
            });
        }
        if fresh.metadata.deletion_timestamp.is_some() {
            return Err(SyncError::JobDeleted {
                namespace: ns,
                name,
            });
        }
        Ok(())
    }

    async fn sync_orphan_pod(&self, key: &str) -> Result<(), SyncError> {
        let (ns, name) = split_key(key)?;
        let Some(pod) = self.pods.get(ns, name) else {
            return Ok(());
        };
        let job = pods::controller_ref(&pod)
            .filter(|r| r.kind == "Job")
            .and_then(|r| self.jobs.get(ns, &r.name));
        if !tracking::orphan_needs_finalizer_removal(&pod, job.as_deref()) {
            return Ok(());
        }
        // The Job's last sync removed it (the patch succeeded; the pod cache has not shown it
        // yet, as a finished Job's update can arrive before its pods'): patching again would
        // change nothing. A removal that failed is no longer expected.
        if let Some(job) = job.as_deref()
            && self
                .finalizer_expectations
                .is_expected(&object_key(job), pods::uid(&pod))
        {
            return Ok(());
        }
        let api = self.pods_api(ns);
        match writes::patch_named(
            &api,
            name,
            &PatchParams::default(),
            &remove_finalizer_patch(),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The metrics of what a status write finished, as upstream's `recordJobPodFinished` and
/// `recordJobFinished`: an Indexed Job's succeeded pods are its newly completed indexes
/// (within `completions`, which may have been scaled down), also counted as finished
/// indexes, as are newly failed indexes under backoffLimitPerIndex.
fn record_finish_metrics(job: &Job, old: Option<&JobStatus>, new: Option<&JobStatus>) {
    let mode = completion_mode(job);
    let count = |s: Option<&JobStatus>, f: fn(&JobStatus) -> Option<i32>| {
        f64::from(s.and_then(f).unwrap_or(0).max(0))
    };
    let ds = match indexed_completions(job) {
        Some(completions) => {
            let per_index = job
                .spec
                .as_ref()
                .is_some_and(|s| s.backoff_limit_per_index.is_some());
            let label = if per_index { "perIndex" } else { "global" };
            let indexes = |s: Option<&JobStatus>, f: fn(&JobStatus) -> Option<&str>| {
                let list = s.and_then(f).unwrap_or("");
                Intervals::parse(list, completions).total() as f64
            };
            fn completed(s: &JobStatus) -> Option<&str> {
                s.completed_indexes.as_deref()
            }
            fn failed(s: &JobStatus) -> Option<&str> {
                s.failed_indexes.as_deref()
            }
            let ds = indexes(new, completed) - indexes(old, completed);
            if ds > 0.0 {
                m::JOB_FINISHED_INDEXES_TOTAL.add(&["succeeded", label], ds);
            }
            let df = indexes(new, failed) - indexes(old, failed);
            if per_index && df > 0.0 {
                m::JOB_FINISHED_INDEXES_TOTAL.add(&["failed", label], df);
            }
            ds
        }
        None => count(new, |s| s.succeeded) - count(old, |s| s.succeeded),
    };
    let df = count(new, |s| s.failed) - count(old, |s| s.failed);
    if ds > 0.0 {
        m::JOB_PODS_FINISHED_TOTAL.add(&[mode, "succeeded"], ds);
    }
    if df > 0.0 {
        m::JOB_PODS_FINISHED_TOTAL.add(&[mode, "failed"], df);
    }
    if terminal_condition(old).is_none()
        && let Some((type_, reason)) = terminal_condition(new)
    {
        if type_ == keys::JOB_COMPLETE {
            m::JOBS_FINISHED_TOTAL.inc(&[mode, "succeeded", ""]);
        } else {
            m::JOBS_FINISHED_TOTAL.inc(&[mode, "failed", &reason]);
        }
    }
}

/// Strategic merge patch removing the tracking finalizer (as upstream sends it).
fn remove_finalizer_patch() -> Patch<serde_json::Value> {
    Patch::Strategic(json!({
        "metadata": {
            "$deleteFromPrimitiveList/finalizers": [keys::JOB_TRACKING_FINALIZER]
        }
    }))
}

/// Adoption: the controller reference and, for a running Job, the tracking finalizer; the
/// pod's UID guards against patching a namesake.
fn adopt_patch(job: &Job, pod: &Pod) -> Patch<serde_json::Value> {
    let mut meta = json!({
        "ownerReferences": [{
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job.name_any(),
            "uid": job.metadata.uid.clone().unwrap_or_default(),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
        "uid": pods::uid(pod),
    });
    if !is_finished(job) {
        meta["finalizers"] = json!([keys::JOB_TRACKING_FINALIZER]);
    }
    Patch::Strategic(json!({ "metadata": meta }))
}

/// A planned pod deletion that went through.
enum Deleted {
    /// Deleted (the resourceVersion of the finalizer patch before it, if any).
    Done(Option<String>),
    /// The pod was gone already.
    Gone,
}

/// Which write of a pod deletion failed.
enum DeleteError {
    /// The tracking finalizer's removal before the delete.
    Patch(kube::Error),
    /// The delete itself.
    Delete(kube::Error),
}

/// Release: drop this Job's owner reference and, in the same patch, the tracking finalizer
/// (upstream's `ReleasePod` with the Job's finalizer, `GenerateDeleteOwnerRefStrategicMergeBytes`).
fn release_patch(job: &Job, pod: &Pod) -> Patch<serde_json::Value> {
    Patch::Strategic(json!({
        "metadata": {
            "ownerReferences": [{
                "$patch": "delete",
                "uid": job.metadata.uid.clone().unwrap_or_default(),
            }],
            "uid": pods::uid(pod),
            "$deleteFromPrimitiveList/finalizers": [keys::JOB_TRACKING_FINALIZER],
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::testutil::*;

    #[test]
    fn patches_are_upstream_shaped() {
        let job = job_nonindexed(1, Some(1), 6);
        let pod = new_pod_in_phase("Running");
        let Patch::Strategic(v) = adopt_patch(&job, &pod) else {
            panic!("strategic merge patch expected")
        };
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(v["metadata"]["finalizers"][0], keys::JOB_TRACKING_FINALIZER);
        assert_eq!(v["metadata"]["uid"], pods::uid(&pod));
        let Patch::Strategic(v) = release_patch(&job, &pod) else {
            panic!("strategic merge patch expected")
        };
        assert_eq!(v["metadata"]["ownerReferences"][0]["$patch"], "delete");
        assert_eq!(
            v["metadata"]["$deleteFromPrimitiveList/finalizers"][0],
            keys::JOB_TRACKING_FINALIZER
        );
        let Patch::Strategic(v) = remove_finalizer_patch() else {
            panic!("strategic merge patch expected")
        };
        assert_eq!(
            v["metadata"]["$deleteFromPrimitiveList/finalizers"][0],
            keys::JOB_TRACKING_FINALIZER
        );
    }
}
