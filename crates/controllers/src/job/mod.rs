//! The Job controller's decisions, as pure functions: given a Job, the pods it owns, the
//! current time and what the controller remembers between syncs, [`sync`] returns a [`Plan`]
//! of pods to create and delete, finalizers to remove, status to write and events to emit.
//! The sync loop executes plans; nothing here does I/O or reads a clock.
//!
//! Behaviour is that of the newest upstream release with every Job feature on: failures go
//! through `FailureTarget` before `Failed`, successes through `SuccessCriteriaMet` before
//! `Complete`, and the terminal condition waits until no pod is terminating and nothing is
//! left in `uncountedTerminatedPods`.
//!
//! Executing a plan, in order:
//! 1. create [`Plan::pods_to_create`] (in slow-start batches) and delete
//!    [`Plan::pods_to_delete`] (removing the finalizer first where the deletion says so);
//! 2. write [`Plan::status`] if set;
//! 3. store [`Plan::backoff`] once that write succeeded (or right away when there is none);
//! 4. remove the finalizers of [`Plan::finalizers_to_remove`];
//! 5. write the status of [`Plan::status_after_finalizers`] for the removals that
//!    succeeded, then emit its events;
//! 6. emit [`Plan::events`] and requeue after [`Plan::requeue_after`].
//!
//! The plan assumes every create and delete succeeds. When some fail, the loop decides again
//! with the same inputs plus [`SyncContext::failed_pod_actions`], runs steps 2-6 of that
//! plan (its pod lists then hold only what went through), and requeues with rate limiting.
//! When a status write fails (a conflict, say), the loop stops there and requeues: the next
//! sync starts over from what the informers show, and the uncounted lists make that safe.

pub mod backoff;
pub mod conditions;
pub mod controller;
pub mod indexed;
pub mod metrics;
pub mod ownership;
pub mod pod_failure_policy;
pub mod pods;
pub mod success_policy;
pub mod tracking;

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests;
#[cfg(test)]
mod testutil;
#[cfg(test)]
mod tracking_tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::keys;

use self::backoff::{BackoffConfig, BackoffRecord};
use self::indexed::Intervals;
use self::pods::NewPodIdentity;
use self::tracking::{Tracking, TrackingInput, Uncounted};

/// The value of `spec.managedBy` that means this controller.
pub const MANAGED_BY_JOB_CONTROLLER: &str = "kubernetes.io/job-controller";
/// Upstream `MaxPodCreateDeletePerSync`: one sync's share of API calls for one Job.
pub const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;
/// Upstream `syncJobBatchPeriod`: the shortest delayed requeue.
pub const SYNC_JOB_BATCH_PERIOD: Duration = Duration::from_secs(1);

/// What the controller knows besides the Job and its pods.
#[derive(Clone, Debug)]
pub struct SyncContext {
    /// Whether the creations and deletions of earlier syncs have all been observed. When
    /// not, the informer cache may be stale and no pods are created or deleted to manage
    /// the Job (terminal decisions wait too).
    pub satisfied_expectations: bool,
    /// UIDs of pods whose finalizer removal was sent but not yet observed.
    pub expected_removed_finalizers: BTreeSet<String>,
    /// The Job's back-off record from earlier syncs.
    pub backoff: BackoffRecord,
    pub backoff_config: BackoffConfig,
    pub max_uncounted_pods: usize,
    pub max_pod_create_delete_per_sync: usize,
    /// Set when re-deciding a sync whose pod creations or deletions partly failed: the
    /// counts then reflect only what happened, and a finishing decision whose deletions
    /// did not all go through is put off (pods may still be running uncounted).
    pub failed_pod_actions: Option<FailedPodActions>,
}

/// The pod actions of a plan that did not go through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedPodActions {
    /// How many of the planned creations failed (or were skipped by slow start).
    pub creates: usize,
    /// UIDs of the planned deletions that failed.
    pub deletes: BTreeSet<String>,
}

impl Default for SyncContext {
    fn default() -> Self {
        SyncContext {
            satisfied_expectations: true,
            expected_removed_finalizers: BTreeSet::new(),
            backoff: BackoffRecord::default(),
            backoff_config: BackoffConfig::default(),
            max_uncounted_pods: tracking::MAX_UNCOUNTED_PODS,
            max_pod_create_delete_per_sync: MAX_POD_CREATE_DELETE_PER_SYNC,
            failed_pod_actions: None,
        }
    }
}

/// Why a Job was left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// `spec.managedBy` names another controller.
    ManagedElsewhere(String),
    /// The Job already has `Complete` or `Failed`.
    Finished,
    /// A completion mode this controller does not know (a Warning event is planned).
    UnknownCompletionMode,
    /// No spec, or Indexed without completions: nothing the API server would accept.
    InvalidSpec,
}

pub use crate::runtime::events::EventType;

/// An event about the Job, worded as upstream words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

impl JobEvent {
    pub fn normal(reason: &str, message: &str) -> JobEvent {
        JobEvent {
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    pub fn warning(reason: &str, message: &str) -> JobEvent {
        JobEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// After a pod was created (its name is known only then).
    pub fn pod_created(pod_name: &str) -> JobEvent {
        JobEvent::normal("SuccessfulCreate", &format!("Created pod: {pod_name}"))
    }

    pub fn pod_create_failed(err: &str) -> JobEvent {
        JobEvent::warning("FailedCreate", &format!("Error creating: {err}"))
    }

    pub fn pod_deleted(pod_name: &str) -> JobEvent {
        JobEvent::normal("SuccessfulDelete", &format!("Deleted pod: {pod_name}"))
    }

    pub fn pod_delete_failed(err: &str) -> JobEvent {
        JobEvent::warning("FailedDelete", &format!("Error deleting: {err}"))
    }
}

/// A pod named by name and UID (the UID guards against acting on a namesake).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

impl PodRef {
    pub fn of(pod: &Pod) -> PodRef {
        PodRef {
            name: pods::name(pod).to_string(),
            uid: pods::uid(pod).to_string(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionReason {
    /// More active pods than wanted, or an invalid or repeated index. Counts toward
    /// deletion expectations; the finalizer goes first, so the pod is not counted failed.
    Excess,
    /// The Job is suspended. As for `Excess`.
    Suspended,
    /// The Job is finishing: the finalizer stays, so the pod is counted when it terminates.
    Finishing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDeletion {
    pub pod: PodRef,
    pub reason: DeletionReason,
}

impl PodDeletion {
    /// Whether to remove the tracking finalizer before deleting.
    pub fn remove_finalizer_first(&self) -> bool {
        self.reason != DeletionReason::Finishing
    }

    /// Whether the deletion is one the loop should expect to observe.
    pub fn expected(&self) -> bool {
        self.reason != DeletionReason::Finishing
    }
}

/// The outcome of one sync.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub skip: Option<Skip>,
    pub pods_to_create: Vec<Pod>,
    pub pods_to_delete: Vec<PodDeletion>,
    /// The status to write before removing finalizers (`None`: unchanged).
    pub status: Option<JobStatus>,
    pub finalizers_to_remove: Vec<PodRef>,
    /// Events to emit now (suspension, resumption, unknown completion mode).
    pub events: Vec<JobEvent>,
    pub requeue_after: Option<Duration>,
    /// The back-off record to keep for the next sync.
    pub backoff: BackoffRecord,
    /// The `action` label of `job_controller_job_syncs_total` for this sync, as upstream's
    /// `syncJob` decides it (`None` for a skipped sync, which upstream does not count).
    pub action: Option<&'static str>,
    /// The `reason` label of `job_controller_job_pods_creation_total` for the pods this sync
    /// creates (upstream's `recordJobPodsCreationTotal`, from this sync's counts).
    pub creation_reason: &'static str,
    /// The failed pods this sync accounts for, per the action of the pod failure policy rule
    /// each matched (`job_controller_pod_failures_handled_by_failure_policy_total`).
    pub failure_policy_actions: BTreeMap<&'static str, u32>,
    tracking: Option<Tracking>,
}

impl Plan {
    fn skipped(skip: Skip, ctx: &SyncContext) -> Plan {
        Plan {
            skip: Some(skip),
            pods_to_create: Vec::new(),
            pods_to_delete: Vec::new(),
            status: None,
            finalizers_to_remove: Vec::new(),
            events: Vec::new(),
            requeue_after: None,
            backoff: ctx.backoff.clone(),
            action: None,
            creation_reason: "new",
            failure_policy_actions: BTreeMap::new(),
            tracking: None,
        }
    }

    /// The status to write once the finalizers of the `removed` UIDs are gone, and the
    /// events (Completed, or the failure reason) to emit after that write; `None` when there
    /// is nothing more to write.
    pub fn status_after_finalizers(
        &self,
        removed: &BTreeSet<String>,
    ) -> Option<(JobStatus, Vec<JobEvent>)> {
        self.tracking.as_ref()?.after.resolve(removed)
    }

    /// How many pod creations the loop should expect to observe for this plan.
    pub fn expected_creations(&self) -> usize {
        self.pods_to_create.len()
    }

    /// How many pod deletions the loop should expect to observe for this plan (deletions of
    /// a finishing Job are not counted, as upstream does not wait for them).
    pub fn expected_deletions(&self) -> usize {
        self.pods_to_delete.iter().filter(|d| d.expected()).count()
    }

    /// As [`Plan::status_after_finalizers`] when every planned removal succeeds.
    pub fn status_after_all_finalizers(&self) -> Option<(JobStatus, Vec<JobEvent>)> {
        let all = self
            .finalizers_to_remove
            .iter()
            .map(|p| p.uid.clone())
            .collect();
        self.status_after_finalizers(&all)
    }

    /// The status the Job ends up with if every step succeeds (for callers and tests that
    /// only care about the outcome).
    pub fn final_status(&self) -> Option<JobStatus> {
        let after = self.status_after_all_finalizers().map(|(s, _)| s);
        after.or_else(|| self.status.clone())
    }
}

/// Upstream `SlowStartInitialBatchSize`.
pub const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;

/// The batch sizes in which to send `n` pod creations: 1, 2, 4, ... so that a failing
/// namespace (quota, admission) costs few calls. The loop stops at the first batch with an
/// error and reports the rest as not created.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut left = n;
    let mut size = SLOW_START_INITIAL_BATCH_SIZE.min(left);
    while left > 0 {
        out.push(size);
        left -= size;
        size = size.saturating_mul(2).min(left);
    }
    out
}

/// Whether a Job is Indexed; `Some(completions)` then.
pub fn indexed_completions(job: &Job) -> Option<i32> {
    let spec = job.spec.as_ref()?;
    if spec.completion_mode.as_deref() == Some("Indexed") {
        spec.completions
    } else {
        None
    }
}

fn is_indexed(spec: &JobSpec) -> bool {
    spec.completion_mode.as_deref() == Some("Indexed")
}

/// Whether a Job is finished (Complete or Failed is True).
pub fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            conditions::is_true(c, keys::JOB_COMPLETE) || conditions::is_true(c, keys::JOB_FAILED)
        })
}

/// Whether another controller manages the Job (`spec.managedBy` set to anything else).
pub fn managed_elsewhere(job: &Job) -> Option<&str> {
    job.spec
        .as_ref()
        .and_then(|s| s.managed_by.as_deref())
        .filter(|m| *m != MANAGED_BY_JOB_CONTROLLER)
}

/// Only failed pods are replaced (podReplacementPolicy Failed, which a pod failure policy
/// implies): a terminating pod is neither counted failed nor replaced until it is terminal.
pub fn only_replace_failed(spec: &JobSpec) -> bool {
    spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some()
}

/// A pod counts as failed when its phase is Failed or, unless only failed pods are
/// replaced, when it is being deleted before succeeding (it may never reach Failed).
pub fn is_pod_failed(pod: &Pod, only_replace_failed: bool) -> bool {
    if pods::phase(pod) == keys::POD_FAILED {
        return true;
    }
    !only_replace_failed && pods::is_deleted(pod) && !pods::is_succeeded(pod)
}

fn suspended(spec: &JobSpec) -> bool {
    spec.suspend == Some(true)
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// With restartPolicy OnFailure, failures show as container restarts of live pods: the Job
/// fails once they reach backoffLimit (any restart when backoffLimit is 0).
fn past_backoff_limit_on_failure(spec: &JobSpec, pods: &[&Pod], backoff_limit: i32) -> bool {
    if spec
        .template
        .spec
        .as_ref()
        .map(|s| s.restart_policy.as_deref())
        != Some(Some("OnFailure"))
    {
        return false;
    }
    let mut restarts: i64 = 0;
    for p in pods {
        if !matches!(pods::phase(p), keys::POD_RUNNING | keys::POD_PENDING) {
            continue;
        }
        if let Some(s) = p.status.as_ref() {
            for cs in s
                .init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
            {
                restarts += i64::from(cs.restart_count.max(0));
            }
        }
    }
    if backoff_limit == 0 {
        restarts > 0
    } else {
        restarts >= i64::from(backoff_limit)
    }
}

fn min_requeue(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// The per-sync state shared by the steps below.
struct State<'a> {
    job: &'a Job,
    spec: &'a JobSpec,
    pods: &'a [&'a Pod],
    now: Timestamp,
    ctx: &'a SyncContext,
    active_pods: Vec<&'a Pod>,
    active: i32,
    ready: i32,
    terminating: i32,
    succeeded: i32,
    only_replace_failed: bool,
    succeeded_indexes: Intervals,
    failed_indexes: Option<Intervals>,
    delayed: BTreeMap<i32, &'a Pod>,
    backoff: BackoffRecord,
    creates: Vec<Pod>,
    deletes: Vec<PodDeletion>,
    requeue_after: Option<Duration>,
}

/// Decides one sync of `job`, whose (already claimed) pods are `pods`.
pub fn sync(job: &Job, pods: &[Pod], now: Timestamp, ctx: &SyncContext) -> Plan {
    let pods: Vec<&Pod> = pods.iter().collect();
    sync_refs(job, &pods, now, ctx)
}

/// `sync` on pods borrowed from wherever they live (the controller's informer cache: as
/// upstream, a sync never copies the pods it reads).
pub fn sync_refs(job: &Job, pods: &[&Pod], now: Timestamp, ctx: &SyncContext) -> Plan {
    if let Some(other) = managed_elsewhere(job) {
        return Plan::skipped(Skip::ManagedElsewhere(other.to_string()), ctx);
    }
    if is_finished(job) {
        // Nothing more to back off from: the loop may drop the record.
        let mut plan = Plan::skipped(Skip::Finished, ctx);
        plan.backoff = BackoffRecord::default();
        return plan;
    }
    let Some(spec) = job.spec.as_ref() else {
        return Plan::skipped(Skip::InvalidSpec, ctx);
    };
    match spec.completion_mode.as_deref() {
        None | Some("NonIndexed") | Some("Indexed") => {}
        Some(_) => {
            let mut plan = Plan::skipped(Skip::UnknownCompletionMode, ctx);
            plan.events.push(JobEvent::warning(
                "UnknownCompletionMode",
                "Skipped Job sync because completion mode is unknown",
            ));
            return plan;
        }
    }
    let indexed = is_indexed(spec);
    if indexed && spec.completions.is_none() {
        return Plan::skipped(Skip::InvalidSpec, ctx);
    }
    let completions = spec.completions.unwrap_or(0);
    let has_blpi = indexed && spec.backoff_limit_per_index.is_some();
    let backoff_limit = spec
        .backoff_limit
        .unwrap_or(if spec.backoff_limit_per_index.is_some() {
            i32::MAX
        } else {
            6
        });
    let policy = spec.pod_failure_policy.as_ref();
    let only_replace_failed = only_replace_failed(spec);

    let mut status = job.status.clone().unwrap_or_default();
    if status.uncounted_terminated_pods.is_none() {
        status.uncounted_terminated_pods = Some(Default::default());
    }
    let uncounted = Uncounted::from_status(&status);
    let expected_removed = &ctx.expected_removed_finalizers;

    let active_pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| pods::is_active(p))
        .copied()
        .collect();
    let ready = to_i32(active_pods.iter().filter(|p| pods::is_ready(p)).count());
    let terminating = to_i32(pods.iter().filter(|p| pods::is_terminating(p)).count());
    let new_succeeded = tracking::unaccounted(
        job,
        pods,
        &uncounted.succeeded,
        expected_removed,
        pods::is_succeeded,
    );
    let new_failed = tracking::unaccounted(job, pods, &uncounted.failed, expected_removed, |p| {
        is_pod_failed(p, only_replace_failed)
    });
    let new_failed_counted = new_failed
        .iter()
        .filter(|p| pod_failure_policy::match_pod(policy, p).count_failed)
        .count();
    let mut succeeded = status
        .succeeded
        .unwrap_or(0)
        .saturating_add(to_i32(new_succeeded.len()))
        .saturating_add(to_i32(uncounted.succeeded.len()));
    let failed = status
        .failed
        .unwrap_or(0)
        .saturating_add(to_i32(new_failed_counted))
        .saturating_add(to_i32(uncounted.failed.len()));

    if status.start_time.is_none() && !suspended(spec) {
        status.start_time = Some(Time(now));
    }
    let new_backoff = ctx.backoff.observe(&new_succeeded, &new_failed);

    let mut requeue_after = None;
    let existing = status.conditions.clone().unwrap_or_default();
    let mut finished: Option<JobCondition> =
        conditions::find(&existing, keys::JOB_SUCCESS_CRITERIA_MET)
            .filter(|c| c.status == "True")
            .cloned();
    if finished.is_none() {
        if let Some(ft) =
            conditions::find(&existing, keys::JOB_FAILURE_TARGET).filter(|c| c.status == "True")
        {
            // A failure decided earlier stands even if the pod that caused it is gone.
            finished = Some(conditions::new(
                keys::JOB_FAILED,
                ft.reason.as_deref().unwrap_or(""),
                ft.message.as_deref().unwrap_or(""),
                now,
            ));
        } else if let Some(msg) = pod_failure_policy::fail_job_message(job, pods, |p| {
            is_pod_failed(p, only_replace_failed)
        }) {
            finished = Some(conditions::new(
                keys::JOB_FAILURE_TARGET,
                keys::JOB_REASON_POD_FAILURE_POLICY,
                &msg,
                now,
            ));
        }
    }
    if finished.is_none() {
        if failed > backoff_limit || past_backoff_limit_on_failure(spec, pods, backoff_limit) {
            finished = Some(conditions::new(
                keys::JOB_FAILURE_TARGET,
                keys::JOB_REASON_BACKOFF_LIMIT_EXCEEDED,
                "Job has reached the specified backoff limit",
                now,
            ));
        } else if let (Some(ads), Some(start), false) = (
            spec.active_deadline_seconds,
            status.start_time.as_ref(),
            suspended(spec),
        ) {
            // A Job being resumed starts its deadline afresh (its startTime is reset below);
            // measuring from the stale startTime would fail it the moment it resumes.
            let resuming = conditions::is_true(&existing, keys::JOB_SUSPENDED);
            let elapsed = if resuming {
                kbatch_api::k8s_openapi::jiff::SignedDuration::ZERO
            } else {
                now.duration_since(start.0)
            };
            let allowed = kbatch_api::k8s_openapi::jiff::SignedDuration::from_secs(ads);
            if elapsed >= allowed {
                finished = Some(conditions::new(
                    keys::JOB_FAILURE_TARGET,
                    keys::JOB_REASON_DEADLINE_EXCEEDED,
                    "Job was active longer than specified deadline",
                    now,
                ));
            } else {
                let left = allowed
                    .checked_sub(elapsed)
                    .and_then(|d| Duration::try_from(d).ok())
                    .unwrap_or(Duration::ZERO);
                requeue_after = min_requeue(requeue_after, left);
            }
        }
    }

    let mut prev_succeeded_indexes = Intervals::default();
    let mut succeeded_indexes = Intervals::default();
    let mut failed_indexes = None;
    let mut delayed: BTreeMap<i32, &Pod> = BTreeMap::new();
    if indexed {
        (prev_succeeded_indexes, succeeded_indexes) = indexed::succeeded_indexes(
            status.completed_indexes.as_deref().unwrap_or(""),
            pods,
            completions,
        );
        let mut fi = Intervals::default();
        if has_blpi {
            // An index is either succeeded or failed, whichever was recorded first: the API
            // server rejects a status where the two lists overlap.
            let prev_failed =
                Intervals::parse(status.failed_indexes.as_deref().unwrap_or(""), completions);
            succeeded_indexes =
                prev_succeeded_indexes.merge(&succeeded_indexes.without(&prev_failed));
            fi = failed_indexes_of(
                job,
                pods,
                &prev_failed,
                &succeeded_indexes,
                completions,
                only_replace_failed,
            );
        }
        succeeded = to_i32(usize::try_from(succeeded_indexes.total()).unwrap_or(usize::MAX));
        if has_blpi {
            if finished.is_none() {
                if spec
                    .max_failed_indexes
                    .is_some_and(|m| fi.total() > i64::from(m))
                {
                    finished = Some(conditions::new(
                        keys::JOB_FAILURE_TARGET,
                        keys::JOB_REASON_MAX_FAILED_INDEXES_EXCEEDED,
                        "Job has exceeded the specified maximal number of failed indexes",
                        now,
                    ));
                } else if fi.total() > 0
                    && fi.total() + succeeded_indexes.total() >= i64::from(completions)
                {
                    finished = Some(conditions::new(
                        keys::JOB_FAILURE_TARGET,
                        keys::JOB_REASON_FAILED_INDEXES,
                        "Job has failed indexes",
                        now,
                    ));
                }
            }
            delayed = delayed_deletions(
                job,
                pods,
                &active_pods,
                &succeeded_indexes,
                &fi,
                expected_removed,
                only_replace_failed,
            );
            failed_indexes = Some(fi);
        }
        if finished.is_none()
            && let Some(msg) = success_policy::match_success_policy(
                spec.success_policy.as_ref(),
                completions,
                &succeeded_indexes,
            )
        {
            finished = Some(conditions::new(
                keys::JOB_SUCCESS_CRITERIA_MET,
                keys::JOB_REASON_SUCCESS_POLICY,
                &msg,
                now,
            ));
        }
    }

    let mut st = State {
        job,
        spec,
        pods,
        now,
        ctx,
        active: to_i32(active_pods.len()),
        active_pods,
        ready,
        terminating,
        succeeded,
        only_replace_failed,
        succeeded_indexes: succeeded_indexes.clone(),
        failed_indexes: failed_indexes.clone(),
        delayed,
        backoff: new_backoff,
        creates: Vec::new(),
        deletes: Vec::new(),
        requeue_after,
    };

    let mut events = Vec::new();
    let mut suspend_changed = false;
    // The sync's metrics action: `reconciling` unless manageJob runs.
    let mut action = metrics::ACTION_RECONCILING;
    if finished.is_some() {
        // Delete what still runs; the finalizers stay so the pods are counted as they end.
        let n = st.active_pods.len();
        let ready_deleted = to_i32(st.active_pods.iter().filter(|p| pods::is_ready(p)).count());
        st.deletes = st
            .active_pods
            .iter()
            .map(|p| PodDeletion {
                pod: PodRef::of(p),
                reason: DeletionReason::Finishing,
            })
            .collect();
        st.active -= to_i32(n);
        st.terminating = st.terminating.saturating_add(to_i32(n));
        st.ready -= ready_deleted;
        let all_deleted = account_failed_actions(&mut st);
        if !ctx.satisfied_expectations || !all_deleted {
            // Pods may exist that the cache does not show yet, or still run: decide again
            // later rather than count them as failed now.
            finished = None;
        }
    } else {
        let mut managed = false;
        if ctx.satisfied_expectations && job.metadata.deletion_timestamp.is_none() {
            action = manage(&mut st);
            account_failed_actions(&mut st);
            managed = true;
        }
        let complete = match spec.completions {
            None => st.succeeded > 0 && st.active == 0,
            Some(c) => st.succeeded >= c && st.active == 0,
        };
        if complete {
            finished = Some(conditions::new(
                keys::JOB_SUCCESS_CRITERIA_MET,
                keys::JOB_REASON_COMPLETIONS_REACHED,
                "Reached expected number of succeeded pods",
                now,
            ));
        } else if managed {
            let conds = status.conditions.get_or_insert_with(Vec::new);
            if suspended(spec) {
                if conditions::ensure(
                    conds,
                    keys::JOB_SUSPENDED,
                    "True",
                    keys::JOB_REASON_SUSPENDED,
                    "Job suspended",
                    now,
                ) {
                    suspend_changed = true;
                    events.push(JobEvent::normal("Suspended", "Job suspended"));
                }
                // A suspended Job has not started (MutableSchedulingDirectivesForSuspendedJobs,
                // on by default since 1.36): its template may then change once its pods are
                // gone, and resuming starts it afresh.
                status.start_time = None;
            } else if conditions::ensure(
                conds,
                keys::JOB_SUSPENDED,
                "False",
                keys::JOB_REASON_RESUMED,
                "Job resumed",
                now,
            ) {
                suspend_changed = true;
                events.push(JobEvent::normal("Resumed", "Job resumed"));
                // activeDeadlineSeconds counts continuous activity: restart the clock.
                status.start_time = Some(Time(now));
            }
            if status.conditions.as_ref().is_some_and(Vec::is_empty) {
                status.conditions = None;
            }
        }
    }

    let old = job.status.clone().unwrap_or_default();
    let needs_flush = suspend_changed
        || st.active != old.active.unwrap_or(0)
        || Some(st.ready) != old.ready
        || Some(st.terminating) != old.terminating
        || status.start_time != old.start_time;
    status.active = Some(st.active);
    status.ready = Some(st.ready);
    status.terminating = Some(st.terminating);

    let delayed_uids: BTreeMap<i32, String> = st
        .delayed
        .iter()
        .map(|(k, p)| (*k, pods::uid(p).to_string()))
        .collect();
    let removed_by_deletion: BTreeSet<String> = st
        .deletes
        .iter()
        .filter(|d| d.remove_finalizer_first())
        .map(|d| d.pod.uid.clone())
        .collect();
    let tracking = tracking::track(TrackingInput {
        job,
        pods,
        status,
        uncounted: &uncounted,
        expected_removed,
        removed_by_deletion: &removed_by_deletion,
        finished,
        prev_succeeded_indexes,
        succeeded_indexes,
        failed_indexes,
        delayed: &delayed_uids,
        only_replace_failed,
        now,
        max_uncounted: ctx.max_uncounted_pods,
        needs_flush,
    });

    // As upstream counts them while tracking: failed pods not accounted for yet whose
    // finalizer comes off now (not those kept until their index is replaced).
    let mut failure_policy_actions = BTreeMap::new();
    for p in &new_failed {
        if delayed_uids.values().any(|u| u == pods::uid(p)) {
            continue;
        }
        if let Some(action) = pod_failure_policy::match_pod(policy, p).action {
            *failure_policy_actions.entry(action.as_str()).or_insert(0) += 1;
        }
    }
    Plan {
        skip: None,
        pods_to_create: st.creates,
        pods_to_delete: st.deletes,
        status: tracking.first_write.clone(),
        finalizers_to_remove: tracking.finalizers_to_remove.clone(),
        events,
        requeue_after: st.requeue_after,
        backoff: st.backoff,
        action: Some(action),
        creation_reason: creation_reason(spec, failed, terminating),
        failure_policy_actions,
        tracking: Some(tracking),
    }
}

/// The `job_pods_creation_total` reason, as upstream's `recordJobPodsCreationTotal`: from the
/// failures this sync knows of (counted before, uncounted and new) and the pods terminating
/// when it started.
fn creation_reason(spec: &JobSpec, failed: i32, terminating: i32) -> &'static str {
    if spec.pod_replacement_policy.as_deref() == Some("Failed") && failed > 0 {
        "recreate_failed"
    } else if failed > 0 || terminating > 0 {
        "recreate_terminating_or_failed"
    } else {
        "new"
    }
}

/// Puts back into the counts the planned creations and deletions that failed; the failed
/// ones are also dropped from the plan. Returns whether every planned deletion went through.
fn account_failed_actions(st: &mut State<'_>) -> bool {
    let Some(failed) = st.ctx.failed_pod_actions.as_ref() else {
        return true;
    };
    let not_created = failed.creates.min(st.creates.len());
    st.creates.truncate(st.creates.len() - not_created);
    st.active -= to_i32(not_created);
    let (failed_deletes, kept): (Vec<PodDeletion>, Vec<PodDeletion>) =
        std::mem::take(&mut st.deletes)
            .into_iter()
            .partition(|d| failed.deletes.contains(&d.pod.uid));
    st.deletes = kept;
    for d in &failed_deletes {
        st.active += 1;
        st.terminating -= 1;
        if st
            .pods
            .iter()
            .find(|p| pods::uid(p) == d.pod.uid)
            .is_some_and(|p| pods::is_ready(p))
        {
            st.ready += 1;
        }
    }
    failed_deletes.is_empty()
}

/// Creates or deletes pods to reach the wanted number of active pods (upstream manageJob).
/// At most one of the two happens per sync, deletion first.
/// Upstream's `manageJob`: the pods to create or delete. Returns its metrics action:
/// `pods_deleted` for a suspended Job or excess pods, `pods_created` when pods are due (even
/// when back-off holds them), `tracking` otherwise.
fn manage(st: &mut State<'_>) -> &'static str {
    let spec = st.spec;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let max_ops = st.ctx.max_pod_create_delete_per_sync;

    if suspended(spec) {
        let all = st.active_pods.len();
        let rm = pods_for_removal(st, all);
        record_deletions(st, rm, DeletionReason::Suspended);
        return metrics::ACTION_PODS_DELETED;
    }

    let want_active = match spec.completions {
        // Without completions, once any pod succeeded the rest may finish but none start.
        None if st.succeeded > 0 => st.active,
        None => parallelism,
        Some(c) => c.saturating_sub(st.succeeded).min(parallelism).max(0),
    };
    let rm_at_least = usize::try_from(st.active - want_active).unwrap_or(0);
    let mut rm = pods_for_removal(st, rm_at_least);
    rm.truncate(max_ops);
    if !rm.is_empty() {
        record_deletions(st, rm, DeletionReason::Excess);
        return metrics::ACTION_PODS_DELETED;
    }

    let terminating = if st.only_replace_failed {
        st.terminating
    } else {
        0
    };
    let diff = want_active - terminating - st.active;
    if diff <= 0 {
        return metrics::ACTION_TRACKING;
    }
    let indexed = is_indexed(spec);
    let has_blpi = indexed && spec.backoff_limit_per_index.is_some();
    if !has_blpi {
        let left = st.backoff.remaining(st.now, &st.ctx.backoff_config);
        if !left.is_zero() {
            st.requeue_after = min_requeue(st.requeue_after, left.max(SYNC_JOB_BATCH_PERIOD));
            return metrics::ACTION_PODS_CREATED;
        }
    }
    let mut diff = usize::try_from(diff).unwrap_or(0).min(max_ops);
    let mut identities: Vec<NewPodIdentity> = Vec::new();
    if indexed {
        let completions = spec.completions.unwrap_or(0);
        let mut non_pending = st
            .succeeded_indexes
            .with_indexes(indexed::indexes_of(st.active_pods.iter().copied()));
        if st.only_replace_failed {
            let terminating_ix =
                indexed::indexes_of(st.pods.iter().filter(|p| pods::is_terminating(p)).copied());
            non_pending = non_pending.with_indexes(terminating_ix);
        }
        if let Some(fi) = st.failed_indexes.as_ref() {
            non_pending = non_pending.merge(fi);
        }
        let mut to_add = indexed::first_pending_indexes(&non_pending, diff, completions);
        if has_blpi {
            let mut ready_now = Vec::new();
            let mut min_left: Option<Duration> = None;
            for ix in to_add {
                let left = backoff::remaining_for_index(
                    st.now,
                    &st.ctx.backoff_config,
                    st.delayed.get(&ix).copied(),
                );
                if left.is_zero() {
                    ready_now.push(ix);
                } else {
                    min_left = Some(min_left.map_or(left, |m| m.min(left)));
                }
            }
            if ready_now.is_empty() {
                if let Some(left) = min_left {
                    st.requeue_after =
                        min_requeue(st.requeue_after, left.max(SYNC_JOB_BATCH_PERIOD));
                }
                return metrics::ACTION_PODS_CREATED;
            }
            to_add = ready_now;
        }
        diff = to_add.len();
        for ix in to_add {
            let mut id = NewPodIdentity {
                index: Some(ix),
                ..Default::default()
            };
            if has_blpi {
                let (f, ig) = pod_failure_policy::new_index_failure_counts(
                    st.job,
                    st.delayed.get(&ix).copied(),
                );
                id.index_failure_count = Some(f);
                id.index_ignored_failure_count = Some(ig);
            }
            identities.push(id);
        }
    } else {
        identities = vec![NewPodIdentity::default(); diff];
    }
    st.creates = identities
        .iter()
        .map(|id| pods::new_pod(st.job, id))
        .collect();
    st.active = st.active.saturating_add(to_i32(diff));
    metrics::ACTION_PODS_CREATED
}

/// Active pods to delete: for Indexed Jobs every pod without a valid index and every
/// duplicate of an index first, then by deletion preference until `at_least` are chosen.
fn pods_for_removal<'a>(st: &State<'a>, at_least: usize) -> Vec<&'a Pod> {
    let (mut rm, mut left) = match indexed_completions(st.job) {
        Some(c) => indexed::split_invalid_and_duplicates(&st.active_pods, c),
        None => (Vec::new(), st.active_pods.clone()),
    };
    if rm.len() < at_least {
        left.sort_by(|a, b| pods::active_pods_cmp(a, b));
        let more = (at_least - rm.len()).min(left.len());
        rm.extend(left.into_iter().take(more));
    }
    rm
}

fn record_deletions(st: &mut State<'_>, rm: Vec<&Pod>, reason: DeletionReason) {
    let n = to_i32(rm.len());
    let ready = to_i32(rm.iter().filter(|p| pods::is_ready(p)).count());
    st.deletes = rm
        .into_iter()
        .map(|p| PodDeletion {
            pod: PodRef::of(p),
            reason,
        })
        .collect();
    st.active -= n;
    st.terminating = st.terminating.saturating_add(n);
    st.ready -= ready;
}

/// Whether a failed pod fails its index: a FailIndex rule matched, or a counted failure
/// happened with the index's failure count already at backoffLimitPerIndex.
fn index_failed_by(job: &Job, pod: &Pod, only_replace_failed: bool) -> bool {
    let Some(spec) = job.spec.as_ref() else {
        return false;
    };
    if !is_pod_failed(pod, only_replace_failed) {
        return false;
    }
    let m = pod_failure_policy::match_pod(spec.pod_failure_policy.as_ref(), pod);
    if m.action == Some(pod_failure_policy::Action::FailIndex) {
        return true;
    }
    m.count_failed
        && pod_failure_policy::index_failure_count(pod)
            >= spec.backoff_limit_per_index.unwrap_or(i32::MAX)
}

/// The failed indexes: those recorded before plus those a pod not yet accounted for fails,
/// except indexes that already succeeded.
fn failed_indexes_of(
    job: &Job,
    pods: &[&Pod],
    prev: &Intervals,
    succeeded: &Intervals,
    completions: i32,
    only_replace_failed: bool,
) -> Intervals {
    let new = pods
        .iter()
        .filter(|p| pods::has_tracking_finalizer(p))
        .filter_map(|p| {
            let ix = indexed::valid_index(p, completions)?;
            (index_failed_by(job, p, only_replace_failed) && !succeeded.has(ix)).then_some(ix)
        });
    prev.with_indexes(new)
}

/// Per index that still needs a pod, the failed pod (highest failure count) whose finalizer
/// stays until its replacement is created, so the replacement can inherit the count.
fn delayed_deletions<'a>(
    job: &Job,
    pods: &'a [&'a Pod],
    active: &[&Pod],
    succeeded: &Intervals,
    failed: &Intervals,
    expected_removed: &BTreeSet<String>,
    only_replace_failed: bool,
) -> BTreeMap<i32, &'a Pod> {
    let completions = indexed_completions(job).unwrap_or(0);
    let active_ix = indexed::indexes_of(active.iter().copied());
    let mut out: BTreeMap<i32, &'a Pod> = BTreeMap::new();
    let candidates = tracking::unaccounted(job, pods, &BTreeSet::new(), expected_removed, |p| {
        is_pod_failed(p, only_replace_failed)
    });
    for p in candidates {
        let Some(ix) = indexed::valid_index(p, completions) else {
            continue;
        };
        if succeeded.has(ix) || failed.has(ix) || active_ix.contains(&ix) {
            continue;
        }
        // As upstream's getPodsWithDelayedDeletionPerIndex: the pod with the highest absolute
        // failure count (counted and ignored), the latest to finish among equals.
        let absolute = |p: &Pod| {
            pod_failure_policy::index_failure_count(p)
                .saturating_add(pod_failure_policy::index_ignored_failure_count(p))
        };
        let replace = match out.get(&ix) {
            None => true,
            Some(prev) => {
                absolute(prev) <= absolute(p)
                    && backoff::finish_time(p) >= backoff::finish_time(prev)
            }
        };
        if replace {
            out.insert(ix, p);
        }
    }
    out
}
