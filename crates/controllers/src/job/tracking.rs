//! Finalizer-based accounting of finished pods, so each one is counted exactly once even
//! across restarts and conflicts. A finished pod goes through three steps:
//! 1. its UID is added to `status.uncountedTerminatedPods` (Indexed successes are recorded
//!    in `completedIndexes` instead) and the status is written;
//! 2. its tracking finalizer is removed;
//! 3. its UID leaves the uncounted list and the `succeeded`/`failed` counter grows.
//!
//! Step 3 also runs at the start of every sync for UIDs whose pods no longer carry the
//! finalizer (or are gone), which finishes the work of an interrupted sync. The terminal
//! condition is written only once nothing is uncounted and no pod is terminating.

use std::collections::{BTreeMap, BTreeSet};

use kbatch_api::k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, UncountedTerminatedPods,
};
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::keys;

use super::indexed::{self, Intervals};
use super::{JobEvent, PodRef, conditions, pod_failure_policy, pods};

/// Upstream `MaxUncountedPods`: keeps the UID lists in status under about 20 KB.
pub const MAX_UNCOUNTED_PODS: usize = 500;

/// The UIDs recorded in `status.uncountedTerminatedPods`.
#[derive(Clone, Debug, Default)]
pub struct Uncounted {
    pub succeeded: BTreeSet<String>,
    pub failed: BTreeSet<String>,
}

impl Uncounted {
    pub fn from_status(status: &JobStatus) -> Uncounted {
        let u = status.uncounted_terminated_pods.as_ref();
        let set =
            |l: Option<&Vec<String>>| l.map(|v| v.iter().cloned().collect()).unwrap_or_default();
        Uncounted {
            succeeded: set(u.and_then(|u| u.succeeded.as_ref())),
            failed: set(u.and_then(|u| u.failed.as_ref())),
        }
    }
}

/// Pods not yet accounted for: they carry the finalizer, are not already uncounted, and no
/// finalizer removal is pending for them. Indexed pods need an index below completions.
pub fn unaccounted<'a>(
    job: &Job,
    pods: &[&'a Pod],
    uncounted: &BTreeSet<String>,
    expected_removed: &BTreeSet<String>,
    filter: impl Fn(&Pod) -> bool,
) -> Vec<&'a Pod> {
    let indexed_completions = super::indexed_completions(job);
    pods.iter()
        .filter(|p| {
            let uid = pods::uid(p);
            pods::has_tracking_finalizer(p)
                && !uncounted.contains(uid)
                && !expected_removed.contains(uid)
                && indexed_completions.is_none_or(|c| indexed::valid_index(p, c).is_some())
                && filter(p)
        })
        .copied()
        .collect()
}

/// Moves uncounted UIDs whose pods no longer hold the finalizer into the counters. Returns
/// whether the status changed.
pub fn clean_uncounted(status: &mut JobStatus, with_finalizer: &BTreeSet<String>) -> bool {
    let u = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut changed = false;
    let mut moved_s = 0i32;
    let mut moved_f = 0i32;
    if let Some(list) = u.succeeded.as_mut() {
        let before = list.len();
        list.retain(|uid| with_finalizer.contains(uid));
        moved_s = i32::try_from(before - list.len()).unwrap_or(i32::MAX);
    }
    if let Some(list) = u.failed.as_mut() {
        let before = list.len();
        list.retain(|uid| with_finalizer.contains(uid));
        moved_f = i32::try_from(before - list.len()).unwrap_or(i32::MAX);
    }
    normalize_uncounted(u);
    if moved_s > 0 {
        status.succeeded = Some(status.succeeded.unwrap_or(0).saturating_add(moved_s));
        changed = true;
    }
    if moved_f > 0 {
        status.failed = Some(status.failed.unwrap_or(0).saturating_add(moved_f));
        changed = true;
    }
    changed
}

fn normalize_uncounted(u: &mut UncountedTerminatedPods) {
    if u.succeeded.as_ref().is_some_and(Vec::is_empty) {
        u.succeeded = None;
    }
    if u.failed.as_ref().is_some_and(Vec::is_empty) {
        u.failed = None;
    }
}

fn uncounted_len(status: &JobStatus) -> usize {
    status
        .uncounted_terminated_pods
        .as_ref()
        .map(|u| u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len))
        .unwrap_or(0)
}

/// What the sync decided, as the accounting needs it.
pub struct TrackingInput<'a> {
    pub job: &'a Job,
    pub pods: &'a [&'a Pod],
    /// The status with this sync's active/ready/terminating/startTime/condition changes.
    pub status: JobStatus,
    pub uncounted: &'a Uncounted,
    pub expected_removed: &'a BTreeSet<String>,
    /// UIDs of pods this sync deletes after removing their finalizer (no second removal).
    pub removed_by_deletion: &'a BTreeSet<String>,
    /// FailureTarget, SuccessCriteriaMet, or Failed (from an existing FailureTarget).
    pub finished: Option<JobCondition>,
    pub prev_succeeded_indexes: Intervals,
    pub succeeded_indexes: Intervals,
    pub failed_indexes: Option<Intervals>,
    /// Per index, the UID of the failed pod whose finalizer stays until it is replaced.
    pub delayed: &'a BTreeMap<i32, String>,
    pub only_replace_failed: bool,
    pub now: Timestamp,
    pub max_uncounted: usize,
    pub needs_flush: bool,
}

/// The accounting part of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Tracking {
    /// Step 1: the status to write before any finalizer is removed.
    pub first_write: Option<JobStatus>,
    /// Step 2: pods whose tracking finalizer to remove.
    pub finalizers_to_remove: Vec<PodRef>,
    /// Step 3: what to write once the removals are done.
    pub after: AfterRemoval,
}

/// The state needed to finish the accounting once the finalizer removals are known.
#[derive(Clone, Debug, PartialEq)]
pub struct AfterRemoval {
    status: JobStatus,
    with_finalizer: BTreeSet<String>,
    terminal: Option<JobCondition>,
    capped: bool,
    completions: Option<i32>,
    now: Timestamp,
}

impl AfterRemoval {
    /// The status to write after the finalizers of `removed` (UIDs) are gone, with the
    /// events to emit once that write succeeds; `None` when nothing changed. Removals that
    /// failed keep their UIDs uncounted, to be retried by a later sync.
    pub fn resolve(&self, removed: &BTreeSet<String>) -> Option<(JobStatus, Vec<JobEvent>)> {
        let mut status = self.status.clone();
        let still: BTreeSet<String> = self.with_finalizer.difference(removed).cloned().collect();
        let mut changed = clean_uncounted(&mut status, &still);
        let mut events = Vec::new();
        if let Some(term) = self.terminal.as_ref().filter(|_| !self.capped)
            && uncounted_len(&status) == 0
            && status.terminating.unwrap_or(0) == 0
        {
            let conds = status.conditions.get_or_insert_with(Vec::new);
            conditions::ensure(
                conds,
                &term.type_,
                "True",
                term.reason.as_deref().unwrap_or(""),
                term.message.as_deref().unwrap_or(""),
                self.now,
            );
            if status.start_time.is_none() {
                // A Job that finishes while suspended may never have started; the API server
                // requires a startTime on every finished Job.
                status.start_time = Some(Time(self.now));
            }
            if term.type_ == keys::JOB_COMPLETE {
                status.completion_time = Some(Time(self.now));
                if self
                    .completions
                    .is_some_and(|c| status.succeeded.unwrap_or(0) > c)
                {
                    events.push(JobEvent::warning(
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached",
                    ));
                }
                events.push(JobEvent::normal("Completed", "Job completed"));
            } else {
                events.push(JobEvent::warning(
                    term.reason.as_deref().unwrap_or(""),
                    term.message.as_deref().unwrap_or(""),
                ));
            }
            changed = true;
        }
        changed.then_some((status, events))
    }

    /// The status as it stands after step 1 (or unchanged when there was no step 1).
    pub fn status(&self) -> &JobStatus {
        &self.status
    }
}

/// Whether an orphan-queue pod's tracking finalizer should be removed. `controller_job` is
/// the Job its controller reference names, as the loop found it (`None` if there is none).
/// Pods controlled by something other than a batch/v1 Job, by a Job another controller
/// manages, or by a Job still running are left alone; pods of a finished or missing Job, and
/// pods without a controller, lose the finalizer.
pub fn orphan_needs_finalizer_removal(pod: &Pod, controller_job: Option<&Job>) -> bool {
    if !pods::has_tracking_finalizer(pod) {
        return false;
    }
    let Some(r) = pods::controller_ref(pod) else {
        return true;
    };
    if r.kind != "Job" || r.api_version != "batch/v1" {
        return false;
    }
    // A Job of the same name but another UID is a different Job: the owner is gone.
    let Some(job) = controller_job.filter(|j| j.metadata.uid.as_deref() == Some(r.uid.as_str()))
    else {
        return true;
    };
    if super::managed_elsewhere(job).is_some() {
        return false;
    }
    super::is_finished(job)
}

/// Whether the pod's finalizer may go now.
fn can_remove_finalizer(input: &TrackingInput<'_>, pod: &Pod, failed: bool) -> bool {
    if input.job.metadata.deletion_timestamp.is_some()
        || input.finished.is_some()
        || pods::is_succeeded(pod)
    {
        return true;
    }
    if !failed {
        return false;
    }
    // The last failed pod of an index keeps its finalizer until its replacement exists, so
    // that the replacement can inherit the index's failure count.
    if let Some(ix) = indexed::completion_index(pod)
        && input
            .delayed
            .get(&ix)
            .is_some_and(|uid| uid == pods::uid(pod))
    {
        return false;
    }
    true
}

/// The three-step accounting of this sync.
pub fn track(input: TrackingInput<'_>) -> Tracking {
    let job = input.job;
    let completions = job.spec.as_ref().and_then(|s| s.completions);
    let indexed_completions = super::indexed_completions(job);
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref());
    let mut status = input.status.clone();
    let mut needs_flush = input.needs_flush;

    let mut ordered: Vec<&Pod> = input.pods.to_vec();
    if indexed_completions.is_some() {
        // Completed indexes are introduced in order.
        ordered.sort_by_cached_key(|p| indexed::completion_index(p).map_or(-1, i64::from));
    }
    let with_finalizer: BTreeSet<String> = input
        .pods
        .iter()
        .filter(|p| {
            pods::has_tracking_finalizer(p) && !input.expected_removed.contains(pods::uid(p))
        })
        .map(|p| pods::uid(p).to_string())
        .collect();
    if clean_uncounted(&mut status, &with_finalizer) {
        needs_flush = true;
    }

    let mut to_remove = Vec::new();
    let mut new_succeeded_indexes = Vec::new();
    let mut capped = false;
    let finishing_as_failure = input
        .finished
        .as_ref()
        .is_some_and(|c| c.type_ != keys::JOB_SUCCESS_CRITERIA_MET);
    {
        let u = status
            .uncounted_terminated_pods
            .get_or_insert_with(Default::default);
        for pod in ordered {
            let uid = pods::uid(pod);
            if !pods::has_tracking_finalizer(pod)
                || input.expected_removed.contains(uid)
                || input.removed_by_deletion.contains(uid)
            {
                // Already handled by an earlier sync, or by this sync's deletion.
                continue;
            }
            let failed = super::is_pod_failed(pod, input.only_replace_failed);
            if !can_remove_finalizer(&input, pod, failed) {
                continue;
            }
            to_remove.push(PodRef::of(pod));
            if pods::is_succeeded(pod) && !input.uncounted.failed.contains(uid) {
                if let Some(c) = indexed_completions {
                    if let Some(ix) = indexed::valid_index(pod, c)
                        && !input.prev_succeeded_indexes.has(ix)
                        && input.failed_indexes.as_ref().is_none_or(|f| !f.has(ix))
                    {
                        new_succeeded_indexes.push(ix);
                        needs_flush = true;
                    }
                } else if !input.uncounted.succeeded.contains(uid) {
                    u.succeeded
                        .get_or_insert_with(Vec::new)
                        .push(uid.to_string());
                    needs_flush = true;
                }
            } else if failed || finishing_as_failure {
                // Once the Job is failing, every unfinished pod counts as failed.
                let index_ok =
                    indexed_completions.is_none_or(|c| indexed::valid_index(pod, c).is_some());
                if !input.uncounted.failed.contains(uid)
                    && index_ok
                    && pod_failure_policy::match_pod(policy, pod).count_failed
                {
                    u.failed.get_or_insert_with(Vec::new).push(uid.to_string());
                    needs_flush = true;
                }
            }
            let recorded = new_succeeded_indexes.len()
                + u.succeeded.as_ref().map_or(0, Vec::len)
                + u.failed.as_ref().map_or(0, Vec::len);
            if recorded >= input.max_uncounted {
                // Later pods wait for the next sync, which the writes of this one trigger.
                capped = true;
                break;
            }
        }
        normalize_uncounted(u);
    }

    if let Some(c) = indexed_completions {
        let succeeded = input
            .succeeded_indexes
            .with_indexes(new_succeeded_indexes.iter().copied());
        let s = succeeded.to_string();
        if status.completed_indexes.as_deref().unwrap_or("") != s {
            needs_flush = true;
        }
        status.succeeded = Some(i32::try_from(succeeded.total()).unwrap_or(i32::MAX));
        status.completed_indexes = Some(s);
        let failed_str = input.failed_indexes.as_ref().map(ToString::to_string);
        if status.failed_indexes != failed_str {
            status.failed_indexes = failed_str;
            needs_flush = true;
        }
        let _ = c;
    }

    let mut terminal = None;
    if let Some(fin) = input.finished.as_ref() {
        let conds = status.conditions.get_or_insert_with(Vec::new);
        if fin.type_ == keys::JOB_FAILURE_TARGET {
            conds.push(fin.clone());
            needs_flush = true;
            terminal = Some(conditions::new(
                keys::JOB_FAILED,
                fin.reason.as_deref().unwrap_or(""),
                fin.message.as_deref().unwrap_or(""),
                input.now,
            ));
        } else if fin.type_ == keys::JOB_SUCCESS_CRITERIA_MET {
            if !conditions::is_true(conds, keys::JOB_SUCCESS_CRITERIA_MET) {
                conds.push(fin.clone());
                needs_flush = true;
            }
            terminal = Some(conditions::new(
                keys::JOB_COMPLETE,
                fin.reason.as_deref().unwrap_or(""),
                fin.message.as_deref().unwrap_or(""),
                input.now,
            ));
        } else {
            terminal = Some(fin.clone());
        }
    }

    Tracking {
        first_write: needs_flush.then(|| status.clone()),
        finalizers_to_remove: to_remove,
        after: AfterRemoval {
            status,
            with_finalizer,
            terminal,
            capped,
            completions,
            now: input.now,
        },
    }
}
