//! Schedule arithmetic of the CronJob controller: which scheduled time is due, how many were
//! missed, and when to look again.
//!
//! The controller never lists every missed time. It estimates how many there were from the
//! gap between the first two upcoming times and walks only the last stretch, so a CronJob
//! whose clock is decades off costs as much as one that is on time.

use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::CronJob;
use kbatch_api::k8s_openapi::jiff::tz::TimeZone;
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kbatch_cron::Schedule;

/// Added to every requeue so that the wake-up lands after the scheduled time (upstream's
/// `nextScheduleDelta`, which is 100 ms there). kbatch fires exactly: the work queue's timer
/// never fires early on the monotonic clock, and a wake-up that still comes before the
/// scheduled time on the wall clock (NTP slewing the two apart, up to 0.5 ms per second
/// waited) finds nothing due and requeues itself for the remainder. A millisecond (the
/// timer's resolution) replaces the 100 ms that every Job of upstream's waits.
pub const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(1);

/// Above this many missed times the controller warns (TooManyMissedTimes); it still runs the
/// most recent one.
pub const MANY_MISSED_THRESHOLD: i64 = 100;

/// How many scheduled times went by unstarted since the last one (or since creation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missed {
    None,
    Few,
    /// More than [`MANY_MISSED_THRESHOLD`].
    Many,
}

/// A schedule the parser accepts but that cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Two consecutive times less than a second apart, or none at all: a date that never
    /// comes, such as "59 23 31 2 *".
    #[error("time difference between two schedules is less than 1 second")]
    TooClose,
}

/// What [`most_recent_schedule_time`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MostRecent {
    /// The time the search started from: lastScheduleTime, else creationTimestamp, raised
    /// to `now - startingDeadlineSeconds` when asked to.
    pub earliest: Timestamp,
    /// The latest scheduled time after `earliest` and not after `now`.
    pub most_recent: Option<Timestamp>,
    pub missed: Missed,
}

/// Go's zero time, which is what a CronJob without a creationTimestamp starts from.
fn go_zero_time() -> Timestamp {
    "0001-01-01T00:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// lastScheduleTime, else creationTimestamp.
pub fn last_schedule_or_creation(cj: &CronJob) -> Timestamp {
    cj.status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0)
        .or_else(|| cj.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or_else(go_zero_time)
}

fn starting_deadline_seconds(cj: &CronJob) -> Option<i64> {
    cj.spec.starting_deadline_seconds
}

fn secs(d: SignedDuration) -> i64 {
    d.as_secs()
}

/// Seconds of `d` rounded half away from zero, as Go's `Duration.Round(time.Second)`.
fn round_secs(d: SignedDuration) -> i64 {
    let s = d.as_secs();
    let sub = d.subsec_nanos();
    if sub >= 500_000_000 {
        s.saturating_add(1)
    } else if sub <= -500_000_000 {
        s.saturating_sub(1)
    } else {
        s
    }
}

/// The most recent scheduled time that is due at `now`, with how many were missed.
///
/// With `include_starting_deadline`, times older than `now - startingDeadlineSeconds` are
/// not looked at: they could not be started anyway, and skipping them keeps the count of
/// missed times (and the warning) about the window that matters.
pub fn most_recent_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
    zone: &TimeZone,
    include_starting_deadline: bool,
) -> Result<MostRecent, ScheduleError> {
    let mut earliest = last_schedule_or_creation(cj);
    if include_starting_deadline
        && let Some(sds) = starting_deadline_seconds(cj)
        && let Some(deadline) = SignedDuration::from_secs(sds)
            .checked_neg()
            .and_then(|d| now.checked_add(d).ok())
        && deadline > earliest
    {
        earliest = deadline;
    }
    let mut out = MostRecent {
        earliest,
        most_recent: None,
        missed: Missed::None,
    };

    let Some(t1) = schedule.next(earliest, zone) else {
        return Err(ScheduleError::TooClose);
    };
    if now < t1 {
        return Ok(out);
    }
    let t2 = schedule.next(t1, zone);
    let Some(t2) = t2 else {
        return Err(ScheduleError::TooClose);
    };
    if now < t2 {
        out.most_recent = Some(t1);
        return Ok(out);
    }

    let between = round_secs(t2.duration_since(t1));
    if between < 1 {
        return Err(ScheduleError::TooClose);
    }
    // An estimate: irregular schedules ("30 6-16/4 * * 1-5") have uneven gaps, so the walk
    // below starts one interval earlier than the estimate and lets the schedule decide.
    let elapsed = secs(now.duration_since(t1));
    let missed = elapsed / between + 1;
    let start = missed
        .checked_sub(2)
        .and_then(|n| n.checked_mul(between))
        .and_then(|s| t1.checked_add(SignedDuration::from_secs(s)).ok())
        .unwrap_or(t1);
    let mut t = schedule.next(start, zone);
    while let Some(cur) = t {
        if cur > now {
            break;
        }
        out.most_recent = Some(cur);
        t = schedule.next(cur, zone);
    }
    out.missed = if missed > MANY_MISSED_THRESHOLD {
        Missed::Many
    } else if missed > 0 {
        Missed::Few
    } else {
        Missed::None
    };
    Ok(out)
}

/// The scheduled time to start a Job for now, if any (startingDeadlineSeconds bounds the
/// search), and whether so many were missed that the TooManyMissedTimes warning is due.
pub fn next_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
    zone: &TimeZone,
) -> Result<(Option<Timestamp>, bool), ScheduleError> {
    let found = most_recent_schedule_time(cj, now, schedule, zone, true)?;
    match found.most_recent {
        Some(t) if t <= now => Ok((Some(t), found.missed == Missed::Many)),
        _ => Ok((None, false)),
    }
}

/// How long to wait before looking at the CronJob again: until the scheduled time after the
/// most recent one, plus [`NEXT_SCHEDULE_DELTA`]. `None` when the schedule has no further
/// time.
///
/// The deadline is left out here on purpose: the wake-up is for the next time the schedule
/// fires, whether or not a missed one could still start.
pub fn next_schedule_time_duration(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
    zone: &TimeZone,
) -> Option<Duration> {
    let base = match most_recent_schedule_time(cj, now, schedule, zone, false) {
        Err(_) => now,
        Ok(MostRecent {
            most_recent: Some(t),
            ..
        }) => t,
        Ok(MostRecent {
            most_recent: None,
            missed: Missed::None,
            earliest,
        }) => earliest,
        // Missed times but nothing found by the walk: aim for the next time from now.
        Ok(MostRecent {
            most_recent: None, ..
        }) => now,
    };
    let next = schedule.next(base, zone)?;
    Some(duration_until(now, next) + NEXT_SCHEDULE_DELTA)
}

/// `to - from`, or zero when `to` is not later.
pub fn duration_until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}
