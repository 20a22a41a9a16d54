//! The TTL-after-finished controller's decision: whether a finished Job's
//! `spec.ttlSecondsAfterFinished` has run out, as a pure function of the Job and `now`.
//!
//! The loop acts on [`TtlDecision::DeleteNow`] only after a live GET of the Job gives the
//! same answer (the cached TTL may be stale), then deletes with propagation
//! [`DELETE_PROPAGATION`] and a UID precondition; NotFound at any step means done. For
//! [`TtlDecision::ExpireAt`] it requeues after [`requeue_after`]. The controller emits no
//! events.

pub mod controller;
#[cfg(test)]
mod tests;

use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kbatch_api::keys;

/// Foreground, so the Job disappears only after its pods: a TTL is a promise that nothing of
/// the Job is left.
pub const DELETE_PROPAGATION: &str = "Foreground";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlDecision {
    /// Not Complete or Failed, or being deleted already: nothing to do (the Job's next
    /// update brings it back).
    NotFinished,
    /// Finished but without ttlSecondsAfterFinished.
    NoTtl,
    /// The TTL runs out at this time, later than `now`.
    ExpireAt(Timestamp),
    /// The TTL ran out (at or before `now`).
    DeleteNow,
}

/// A finished Job whose finish time cannot be told.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    /// Not finished, or no TTL (or one past the end of time).
    #[error("job {0} should not be cleaned up")]
    NotCleanable(String),
    #[error("unable to find the time when the Job {0} finished")]
    NoFinishTime(String),
    #[error("unable to find the status of the finished Job {0}")]
    NoFinishedCondition(String),
}

fn key(job: &Job) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or(""),
        job.metadata.name.as_deref().unwrap_or("")
    )
}

/// Whether the Job has a True Complete or Failed condition.
pub fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter().any(|c| {
                (c.type_ == keys::JOB_COMPLETE || c.type_ == keys::JOB_FAILED) && c.status == "True"
            })
        })
}

/// The queue handlers enqueue a Job only when this holds.
pub fn needs_cleanup(job: &Job) -> bool {
    job.metadata.deletion_timestamp.is_none()
        && job
            .spec
            .as_ref()
            .is_some_and(|s| s.ttl_seconds_after_finished.is_some())
        && is_finished(job)
}

/// When the Job finished: the lastTransitionTime of its first True Complete or Failed
/// condition.
pub fn job_finish_time(job: &Job) -> Result<Timestamp, TtlError> {
    let conds = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    for c in conds {
        if (c.type_ == keys::JOB_COMPLETE || c.type_ == keys::JOB_FAILED) && c.status == "True" {
            return c
                .last_transition_time
                .as_ref()
                .map(|t| t.0)
                .ok_or_else(|| TtlError::NoFinishTime(key(job)));
        }
    }
    Err(TtlError::NoFinishedCondition(key(job)))
}

/// When the Job's TTL runs out: finish time plus ttlSecondsAfterFinished. `Ok(None)` when
/// the Job is not finished or has no TTL. Past the end of time counts as never.
pub fn expire_at(job: &Job) -> Result<Option<Timestamp>, TtlError> {
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Ok(None);
    };
    if !is_finished(job) {
        return Ok(None);
    }
    let finish = job_finish_time(job)?;
    Ok(finish
        .checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .ok())
}

/// What to do with `job` at `now`.
///
/// A finish time in the future (clock skew between the API server and this controller)
/// just defers the deletion, as upstream does.
pub fn ttl_decision(job: &Job, now: Timestamp) -> Result<TtlDecision, TtlError> {
    if job.metadata.deletion_timestamp.is_some() || !is_finished(job) {
        return Ok(TtlDecision::NotFinished);
    }
    if job
        .spec
        .as_ref()
        .and_then(|s| s.ttl_seconds_after_finished)
        .is_none()
    {
        return Ok(TtlDecision::NoTtl);
    }
    match expire_at(job)? {
        // Overflowed the calendar: it never expires.
        None => Ok(TtlDecision::NoTtl),
        Some(at) if at <= now => Ok(TtlDecision::DeleteNow),
        Some(at) => Ok(TtlDecision::ExpireAt(at)),
    }
}

/// How long until the TTL of `decision` runs out; `None` when there is nothing to wait for.
pub fn requeue_after(decision: TtlDecision, now: Timestamp) -> Option<Duration> {
    match decision {
        TtlDecision::ExpireAt(at) => Duration::try_from(at.duration_since(now)).ok(),
        _ => None,
    }
}

/// Upstream's timeLeft: the remaining time (negative once expired) and the expiry, for a
/// finished Job with a TTL.
pub fn time_left(job: &Job, since: Timestamp) -> Result<(SignedDuration, Timestamp), TtlError> {
    match expire_at(job)? {
        Some(at) => Ok((at.duration_since(since), at)),
        None => Err(TtlError::NotCleanable(key(job))),
    }
}
