//! The CronJob controller's decisions, as pure functions: given a CronJob, the Jobs it owns,
//! the current time and the controller's default time zone, [`sync`] returns a
//! [`CronJobPlan`] of Jobs to delete and create, the status to write, events to emit and
//! when to look again. Nothing here does I/O or reads a clock.
//!
//! Behaviour is that of the newest upstream controller (v2): one Job per scheduled time,
//! named `<cronjob>-<minutes since the epoch>` so a repeated create fails instead of
//! starting a second Job; only the most recent missed time is ever started; a spec.timeZone
//! is applied as a `TZ=` prefix to the schedule.
//!
//! Executing a plan, in order:
//! 1. before deciding, fetch what the informer cache cannot be trusted with (see
//!    [`Lookups`]): a fresh copy of the CronJob when [`needs_fresh_cronjob`] says so, and a
//!    live GET of every Job that [`active_missing_from_cache`] returns. A failed GET (other
//!    than NotFound) means: requeue with rate limiting and decide later;
//! 2. delete [`CronJobPlan::jobs_to_delete`] with background propagation, in order; Replace
//!    deletions GET the Job first and stop at the first failure;
//! 3. create [`CronJobPlan::job_to_create`] if set;
//! 4. if anything in 2-3 did not go as planned, decide again with [`sync_with`] and the
//!    same inputs plus the [`Outcomes`], and use that plan's status, events, requeue and
//!    error (its write lists are not executed again);
//! 5. emit [`CronJobPlan::events`], write [`CronJobPlan::status`] if set (after a creation
//!    while other CronJobs' creations are under way, once those are done: see
//!    [`controller`]), then requeue after [`CronJobPlan::requeue_after`], or with rate
//!    limiting when [`CronJobPlan::error`] is set.

pub mod controller;
pub mod schedule;
pub mod template;

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests;

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use kbatch_api::k8s_openapi::api::core::v1::ObjectReference;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::k8s_openapi::jiff::tz::TimeZone;
use kbatch_cron::Schedule;

pub use self::schedule::{
    MANY_MISSED_THRESHOLD, Missed, MostRecent, NEXT_SCHEDULE_DELTA, ScheduleError,
    most_recent_schedule_time, next_schedule_time, next_schedule_time_duration,
};
pub use self::template::{
    get_job_from_template, get_job_name, is_job_finished, is_job_succeeded, jobs_to_be_reconciled,
};
pub use crate::job::EventType;

/// The propagation policy of every deletion the controller makes: the Job goes at once and
/// the garbage collector removes its pods after.
pub const DELETE_PROPAGATION: &str = "Background";

const ALLOW: &str = "Allow";
const FORBID: &str = "Forbid";
const REPLACE: &str = "Replace";

/// An event about the CronJob, worded as upstream words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronJobEvent {
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

impl CronJobEvent {
    pub fn normal(reason: &str, message: String) -> CronJobEvent {
        CronJobEvent {
            type_: EventType::Normal,
            reason: reason.into(),
            message,
        }
    }

    pub fn warning(reason: &str, message: String) -> CronJobEvent {
        CronJobEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            message,
        }
    }

    /// For a schedule that does not parse when the CronJob is updated (the update handler
    /// emits it; the sync emits UnparseableSchedule).
    pub fn unparseable_on_update(schedule: &str) -> CronJobEvent {
        CronJobEvent::warning(
            "UnParseableCronJobSchedule",
            format!("unparseable schedule for cronjob: {schedule}"),
        )
    }
}

/// Why a sync stopped before looking at the schedule's due time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The CronJob has a deletionTimestamp: only the status is brought up to date.
    BeingDeleted,
    /// spec.timeZone does not load (Warning UnknownTimeZone).
    UnknownTimeZone,
    Suspended,
    /// The schedule does not parse (Warning UnparseableSchedule).
    UnparseableSchedule,
    /// The schedule parses but never fires properly (Warning InvalidSchedule).
    InvalidSchedule,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionReason {
    /// Beyond successfulJobsHistoryLimit or failedJobsHistoryLimit.
    HistoryLimit,
    /// Still active when the next Job starts under concurrencyPolicy Replace. The loop GETs
    /// the Job before deleting it, as upstream does.
    Replace,
}

/// A Job to delete, with [`DELETE_PROPAGATION`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDeletion {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reason: DeletionReason,
}

/// What happened to a deletion that did not go through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletionFailure {
    /// The GET before a Replace deletion failed.
    Get(String),
    Delete(String),
}

/// What happened to the planned create.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum CreateOutcome {
    /// Created; the API server's copy when known (its UID and resourceVersion go into
    /// status.active), else the planned Job stands in.
    #[default]
    Created,
    CreatedAs(Box<Job>),
    /// AlreadyExists, with the existing Job as a GET returned it (`None`: that GET failed).
    AlreadyExists(Option<Box<Job>>),
    /// The namespace is being terminated: nothing to do until it is gone.
    NamespaceTerminating,
    Failed(String),
}

/// How the writes of an earlier plan went; the default is "all succeeded".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcomes {
    /// By Job name.
    pub failed_deletions: BTreeMap<String, DeletionFailure>,
    pub create: CreateOutcome,
}

/// What the loop fetched live because the informer cache may lag.
#[derive(Clone, Debug, Default)]
pub struct Lookups<'a> {
    /// The CronJob as a GET just returned it; consulted for unfinished Jobs that are not in
    /// the cached status.active (the cached CronJob may predate the status write that
    /// added them).
    pub fresh_cronjob: Option<&'a CronJob>,
    /// UIDs of entries of status.active that are not in the Job cache but that a live GET
    /// still found. Entries not listed are taken as gone (NotFound).
    pub live_active_jobs: BTreeSet<String>,
}

/// The outcome of one sync.
#[derive(Clone, Debug, PartialEq)]
pub struct CronJobPlan {
    pub stop: Option<Stop>,
    /// History-limit deletions first, then Replace deletions.
    pub jobs_to_delete: Vec<JobDeletion>,
    pub job_to_create: Option<Job>,
    /// The scheduled time the sync found due, if any.
    pub scheduled_time: Option<Timestamp>,
    /// The status to write (`None`: unchanged).
    pub status: Option<CronJobStatus>,
    pub events: Vec<CronJobEvent>,
    pub requeue_after: Option<Duration>,
    /// Set when the sync failed; the loop requeues with rate limiting.
    pub error: Option<String>,
}

/// Whether some unfinished Job is missing from the cached status.active, so that the
/// decision needs [`Lookups::fresh_cronjob`].
pub fn needs_fresh_cronjob<J: Borrow<Job>>(cj: &CronJob, jobs: &[J]) -> bool {
    jobs.iter()
        .map(Borrow::borrow)
        .any(|j| !in_active(cj, uid_of(j)) && !is_job_finished(j))
}

/// The entries of status.active whose Job is not in `jobs`; the loop GETs each one and
/// reports those found in [`Lookups::live_active_jobs`].
pub fn active_missing_from_cache<J: Borrow<Job>>(cj: &CronJob, jobs: &[J]) -> Vec<ObjectReference> {
    let uids: BTreeSet<&str> = jobs.iter().map(|j| uid_of(j.borrow())).collect();
    active(cj)
        .iter()
        .filter(|r| !uids.contains(r.uid.as_deref().unwrap_or("")))
        .cloned()
        .collect()
}

/// [`sync_with`] when every fetch found what the cache shows and every write succeeds.
pub fn sync<J: Borrow<Job>>(
    cj: &CronJob,
    jobs: &[J],
    now: Timestamp,
    default_zone: &TimeZone,
) -> CronJobPlan {
    sync_with(
        cj,
        jobs,
        now,
        default_zone,
        &Lookups::default(),
        &Outcomes::default(),
    )
}

fn uid_of(job: &Job) -> &str {
    job.metadata.uid.as_deref().unwrap_or("")
}

fn active(cj: &CronJob) -> &[ObjectReference] {
    cj.status
        .as_ref()
        .and_then(|s| s.active.as_deref())
        .unwrap_or(&[])
}

fn in_active(cj: &CronJob, uid: &str) -> bool {
    active(cj)
        .iter()
        .any(|r| r.uid.as_deref().unwrap_or("") == uid)
}

fn in_active_by_name(cj: &CronJob, name: &str) -> bool {
    let ns = cj.metadata.namespace.as_deref().unwrap_or("");
    active(cj).iter().any(|r| {
        r.name.as_deref().unwrap_or("") == name && r.namespace.as_deref().unwrap_or("") == ns
    })
}

fn remove_from_active(cj: &mut CronJob, uid: &str) {
    let status = cj.status.get_or_insert_with(Default::default);
    let list = status.active.get_or_insert_with(Vec::new);
    list.retain(|r| r.uid.as_deref().unwrap_or("") != uid);
}

/// Go's `%q` for the strings that appear in event messages.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The working state of one decision.
struct Decision {
    cj: CronJob,
    update: bool,
    plan: CronJobPlan,
}

impl Decision {
    fn event(&mut self, e: CronJobEvent) {
        self.plan.events.push(e);
    }

    fn finish(mut self) -> CronJobPlan {
        if self.update {
            self.plan.status = Some(self.cj.status.clone().unwrap_or_default());
        }
        self.plan
    }
}

/// Decides one sync of `cj`, whose Jobs (as [`jobs_to_be_reconciled`] selects them) are
/// `jobs`, at `now`. `default_zone` is the zone of schedules without spec.timeZone (the
/// controller's local zone upstream).
///
/// `jobs` may be the cache's shared Jobs (`&[&Job]`): nothing of them is copied.
pub fn sync_with<J: Borrow<Job>>(
    cj: &CronJob,
    jobs: &[J],
    now: Timestamp,
    default_zone: &TimeZone,
    lookups: &Lookups<'_>,
    outcomes: &Outcomes,
) -> CronJobPlan {
    let mut d = Decision {
        cj: cj.clone(),
        update: false,
        plan: CronJobPlan {
            stop: None,
            jobs_to_delete: Vec::new(),
            job_to_create: None,
            scheduled_time: None,
            status: None,
            events: Vec::new(),
            requeue_after: None,
            error: None,
        },
    };
    cleanup_finished_jobs(&mut d, jobs, outcomes);
    reconcile_jobs(&mut d, jobs, lookups);
    schedule_next(&mut d, now, default_zone, outcomes);
    d.finish()
}

/// Deletes the oldest finished Jobs beyond the history limits (when either is set).
fn cleanup_finished_jobs<J: Borrow<Job>>(d: &mut Decision, jobs: &[J], outcomes: &Outcomes) {
    let spec = &d.cj.spec;
    let (ok_limit, failed_limit) = (
        spec.successful_jobs_history_limit,
        spec.failed_jobs_history_limit,
    );
    if ok_limit.is_none() && failed_limit.is_none() {
        return;
    }
    let mut succeeded = Vec::new();
    let mut failed = Vec::new();
    for j in jobs.iter().map(Borrow::borrow) {
        match template::finished_condition(j) {
            Some(kbatch_api::keys::JOB_COMPLETE) => succeeded.push(j),
            Some(kbatch_api::keys::JOB_FAILED) => failed.push(j),
            _ => {}
        }
    }
    for (list, limit) in [(succeeded, ok_limit), (failed, failed_limit)] {
        let Some(limit) = limit else { continue };
        let keep = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        if list.len() <= keep {
            continue;
        }
        let mut list = list;
        list.sort_by(|a, b| by_start_time(a, b));
        let n = list.len() - keep;
        for j in list.into_iter().take(n) {
            delete_job(d, j_deletion(j, DeletionReason::HistoryLimit), outcomes);
        }
    }
}

/// Oldest start first; Jobs that never started last; names break ties.
fn by_start_time(a: &Job, b: &Job) -> std::cmp::Ordering {
    let start = |j: &Job| {
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
    };
    match (start(a), start(b)) {
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (x, y) if x == y => a.metadata.name.cmp(&b.metadata.name),
        (x, y) => x.cmp(&y),
    }
}

fn j_deletion(j: &Job, reason: DeletionReason) -> JobDeletion {
    JobDeletion {
        namespace: j.metadata.namespace.clone().unwrap_or_default(),
        name: j.metadata.name.clone().unwrap_or_default(),
        uid: uid_of(j).to_string(),
        reason,
    }
}

/// Plans a deletion and applies its outcome; false when it failed.
fn delete_job(d: &mut Decision, del: JobDeletion, outcomes: &Outcomes) -> bool {
    let failure = outcomes.failed_deletions.get(&del.name).cloned();
    let (name, uid) = (del.name.clone(), del.uid.clone());
    d.plan.jobs_to_delete.push(del);
    match failure {
        None => {
            remove_from_active(&mut d.cj, &uid);
            d.event(CronJobEvent::normal(
                "SuccessfulDelete",
                format!("Deleted job {name}"),
            ));
            d.update = true;
            true
        }
        Some(DeletionFailure::Delete(err)) => {
            d.event(CronJobEvent::warning(
                "FailedDelete",
                format!("Deleted job: {err}"),
            ));
            false
        }
        Some(DeletionFailure::Get(err)) => {
            d.event(CronJobEvent::warning(
                "FailedGet",
                format!("Get job: {err}"),
            ));
            d.plan.error = Some(err);
            false
        }
    }
}

/// Brings status.active and lastSuccessfulTime in line with the Jobs that exist.
fn reconcile_jobs<J: Borrow<Job>>(d: &mut Decision, jobs: &[J], lookups: &Lookups<'_>) {
    let children: BTreeSet<&str> = jobs.iter().map(|j| uid_of(j.borrow())).collect();
    for j in jobs.iter().map(Borrow::borrow) {
        let uid = uid_of(j);
        let name = j.metadata.name.as_deref().unwrap_or("");
        let found = in_active(&d.cj, uid);
        let finished = template::finished_condition(j);
        match finished {
            None if !found => {
                // The cached CronJob may predate the status write that listed this Job.
                if let Some(fresh) = lookups.fresh_cronjob
                    && in_active(fresh, uid)
                {
                    d.cj = fresh.clone();
                    continue;
                }
                d.event(CronJobEvent::warning(
                    "UnexpectedJob",
                    format!("Saw a job that the controller did not create or forgot: {name}"),
                ));
            }
            None => {}
            Some(condition) => {
                if found {
                    remove_from_active(&mut d.cj, uid);
                    d.event(CronJobEvent::normal(
                        "SawCompletedJob",
                        format!("Saw completed job: {name}, condition: {condition}"),
                    ));
                    d.update = true;
                }
                if is_job_succeeded(j) {
                    let done = j
                        .status
                        .as_ref()
                        .and_then(|s| s.completion_time.as_ref())
                        .map(|t| t.0);
                    let status = d.cj.status.get_or_insert_with(Default::default);
                    let last = status.last_successful_time.as_ref().map(|t| t.0);
                    // Only ever moves forward, so an old Job seen late cannot roll it back.
                    if let Some(done) = done
                        && last.is_none_or(|last| done > last)
                    {
                        status.last_successful_time = Some(Time(done));
                        d.update = true;
                    }
                }
            }
        }
    }

    let refs: Vec<ObjectReference> = active(&d.cj).to_vec();
    for r in refs {
        let uid = r.uid.as_deref().unwrap_or("");
        if children.contains(uid) || lookups.live_active_jobs.contains(uid) {
            continue;
        }
        d.event(CronJobEvent::normal(
            "MissingJob",
            format!(
                "Active job went missing: {}",
                r.name.as_deref().unwrap_or("")
            ),
        ));
        remove_from_active(&mut d.cj, uid);
        d.update = true;
    }
}

/// The schedule string handed to the parser, and whether it carries its own zone.
fn format_schedule(cj: &CronJob) -> (String, bool) {
    let spec = &cj.spec;
    if spec.schedule.contains("TZ") {
        return (spec.schedule.clone(), true);
    }
    match spec.time_zone.as_deref() {
        Some(tz) if kbatch_cron::load_location(tz).is_ok() => {
            (format!("TZ={tz} {}", spec.schedule), false)
        }
        _ => (spec.schedule.clone(), false),
    }
}

/// Parses the CronJob's schedule as the controller does (spec.timeZone as a `TZ=` prefix,
/// a `TZ` in the schedule itself taken as is).
pub fn parse_schedule(cj: &CronJob) -> Result<Schedule, kbatch_cron::ParseError> {
    Schedule::parse(&format_schedule(cj).0)
}

/// When to requeue after the schedule or time zone of a CronJob changed; `Err` with the
/// UnParseableCronJobSchedule event when the new schedule does not parse. Other changes
/// requeue at once.
pub fn requeue_after_schedule_change(
    cj: &CronJob,
    now: Timestamp,
    default_zone: &TimeZone,
) -> Result<Option<Duration>, CronJobEvent> {
    match parse_schedule(cj) {
        Ok(s) => Ok(next_schedule_time_duration(cj, now, &s, default_zone)),
        Err(_) => Err(CronJobEvent::unparseable_on_update(&cj.spec.schedule)),
    }
}

/// When to sync a CronJob after an update: at once, unless the schedule or time zone
/// changed, in which case at its next scheduled time (an earlier wake-up already queued
/// still happens and finds nothing due). `Err` carries the event for a schedule that no
/// longer parses; the CronJob is then not queued.
pub fn requeue_on_update(
    old: &CronJob,
    new: &CronJob,
    now: Timestamp,
    default_zone: &TimeZone,
) -> Result<Duration, CronJobEvent> {
    if old.spec.schedule == new.spec.schedule && old.spec.time_zone == new.spec.time_zone {
        return Ok(Duration::ZERO);
    }
    requeue_after_schedule_change(new, now, default_zone).map(|d| d.unwrap_or(Duration::ZERO))
}

/// The fields of a CronJob's spec that scheduling reads, copied out so that the decision can
/// change the CronJob meanwhile without copying its Job template.
struct ScheduleSpec {
    time_zone: Option<String>,
    suspend: Option<bool>,
    schedule: String,
    starting_deadline_seconds: Option<i64>,
    concurrency_policy: Option<String>,
}

impl ScheduleSpec {
    fn of(cj: &CronJob) -> ScheduleSpec {
        let s = &cj.spec;
        ScheduleSpec {
            time_zone: s.time_zone.clone(),
            suspend: s.suspend,
            schedule: s.schedule.clone(),
            starting_deadline_seconds: s.starting_deadline_seconds,
            concurrency_policy: s.concurrency_policy.clone(),
        }
    }
}

fn schedule_next(d: &mut Decision, now: Timestamp, zone: &TimeZone, outcomes: &Outcomes) {
    if d.cj.metadata.deletion_timestamp.is_some() {
        d.plan.stop = Some(Stop::BeingDeleted);
        return;
    }
    let spec = ScheduleSpec::of(&d.cj);
    if let Some(tz) = spec.time_zone.as_deref()
        && let Err(e) = kbatch_cron::load_location(tz)
    {
        d.event(CronJobEvent::warning(
            "UnknownTimeZone",
            format!("invalid timeZone: {}: {e}", quote(tz)),
        ));
        d.plan.stop = Some(Stop::UnknownTimeZone);
        return;
    }
    if spec.suspend == Some(true) {
        d.plan.stop = Some(Stop::Suspended);
        return;
    }

    let (formatted, own_zone) = format_schedule(&d.cj);
    if own_zone {
        d.event(CronJobEvent::warning(
            "UnsupportedSchedule",
            format!(
                "CRON_TZ or TZ used in schedule {} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
                quote(&spec.schedule)
            ),
        ));
    }
    let sched = match Schedule::parse(&formatted) {
        Ok(s) => s,
        Err(e) => {
            d.event(CronJobEvent::warning(
                "UnparseableSchedule",
                format!("unparseable schedule: {} : {e}", quote(&spec.schedule)),
            ));
            d.plan.stop = Some(Stop::UnparseableSchedule);
            return;
        }
    };

    let scheduled = match next_schedule_time(&d.cj, now, &sched, zone) {
        Err(e) => {
            d.event(CronJobEvent::warning(
                "InvalidSchedule",
                format!("invalid schedule: {} : {e}", spec.schedule),
            ));
            d.plan.stop = Some(Stop::InvalidSchedule);
            return;
        }
        Ok((scheduled, many_missed)) => {
            if many_missed {
                d.event(CronJobEvent::warning(
                    "TooManyMissedTimes",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into(),
                ));
            }
            scheduled
        }
    };
    let requeue = |cj: &CronJob| next_schedule_time_duration(cj, now, &sched, zone);
    let Some(scheduled) = scheduled else {
        // Nothing due: normally only after a restart, as wake-ups land on scheduled times.
        d.plan.requeue_after = requeue(&d.cj);
        return;
    };
    d.plan.scheduled_time = Some(scheduled);

    let too_late = spec.starting_deadline_seconds.is_some_and(|sds| {
        scheduled
            .checked_add(kbatch_api::k8s_openapi::jiff::SignedDuration::from_secs(
                sds,
            ))
            .is_ok_and(|deadline| deadline < now)
    });
    if too_late {
        // lastScheduleTime stays: the miss is noticed (and reported) again until the next
        // scheduled time, as upstream does.
        d.event(CronJobEvent::warning(
            "MissSchedule",
            format!(
                "Missed scheduled time to start a job: {}",
                template::format_rfc1123z_utc(scheduled)
            ),
        ));
        d.plan.requeue_after = requeue(&d.cj);
        return;
    }

    let job_name = get_job_name(&d.cj, scheduled);
    let last_schedule =
        d.cj.status
            .as_ref()
            .and_then(|s| s.last_schedule_time.as_ref())
            .map(|t| t.0);
    if in_active_by_name(&d.cj, &job_name) || last_schedule == Some(scheduled) {
        d.plan.requeue_after = requeue(&d.cj);
        return;
    }

    let policy = spec.concurrency_policy.as_deref().unwrap_or(ALLOW);
    if policy == FORBID && !active(&d.cj).is_empty() {
        d.event(CronJobEvent::normal(
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid"
                .into(),
        ));
        d.plan.requeue_after = requeue(&d.cj);
        return;
    }
    if policy == REPLACE {
        let refs: Vec<ObjectReference> = active(&d.cj).to_vec();
        for r in refs {
            let del = JobDeletion {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
                reason: DeletionReason::Replace,
            };
            let (ns, name) = (del.namespace.clone(), del.name.clone());
            if !delete_job(d, del, outcomes) {
                if d.plan.error.is_none() {
                    d.plan.error = Some(format!("could not replace job {ns}/{name}"));
                }
                return;
            }
        }
    }

    let job = match get_job_from_template(&d.cj, scheduled) {
        Ok(j) => j,
        Err(e) => {
            d.plan.error = Some(e.to_string());
            return;
        }
    };
    // Planned before the outcome is known: the same plan serves to make the creation and to
    // decide again after it.
    let planned_ref = template::job_ref(&job);
    let planned_event = created_event(&job);
    d.plan.job_to_create = Some(job);
    let created = match &outcomes.create {
        CreateOutcome::Created => {
            d.event(planned_event);
            planned_ref
        }
        CreateOutcome::CreatedAs(j) => {
            d.event(created_event(j));
            template::job_ref(j)
        }
        CreateOutcome::NamespaceTerminating => {
            d.plan.error = Some("namespace is being terminated".into());
            return;
        }
        CreateOutcome::AlreadyExists(None) => {
            d.plan.error = Some(format!(
                "job {job_name} already exists and could not be read"
            ));
            return;
        }
        CreateOutcome::AlreadyExists(Some(existing)) => {
            // Created by someone else: assume they keep the status. Created by this
            // controller and listed: nothing left to do. Created by this controller but the
            // status write was lost: list it now.
            if !template::is_controlled_by(existing, &d.cj) || in_active(&d.cj, uid_of(existing)) {
                return;
            }
            template::job_ref(existing)
        }
        CreateOutcome::Failed(err) => {
            d.event(CronJobEvent::warning(
                "FailedCreate",
                format!("Error creating job: {err}"),
            ));
            d.plan.error = Some(err.clone());
            return;
        }
    };
    let status = d.cj.status.get_or_insert_with(Default::default);
    status.active.get_or_insert_with(Vec::new).push(created);
    status.last_schedule_time = Some(Time(scheduled));
    d.update = true;
    d.plan.requeue_after = requeue(&d.cj);
}

/// Records that the plan's Job was created as `created` (the server's copy, whose UID and
/// resourceVersion go into status.active): the plan [`sync_with`] decides with
/// [`CreateOutcome::CreatedAs`] when every other write went as planned, without deciding
/// again. `false`, and `plan` unchanged, when the plan created no Job.
pub fn record_created(plan: &mut CronJobPlan, created: &Job) -> bool {
    let Some(planned) = plan.job_to_create.as_ref() else {
        return false;
    };
    let (planned_ref, planned_event) = (template::job_ref(planned), created_event(planned));
    let Some(event) = plan.events.iter().position(|e| *e == planned_event) else {
        return false;
    };
    let Some(slot) = plan
        .status
        .as_mut()
        .and_then(|s| s.active.as_mut())
        .and_then(|a| a.iter_mut().rev().find(|r| **r == planned_ref))
    else {
        return false;
    };
    *slot = template::job_ref(created);
    plan.events[event] = created_event(created);
    true
}

fn created_event(job: &Job) -> CronJobEvent {
    CronJobEvent::normal(
        "SuccessfulCreate",
        format!(
            "Created job {}",
            job.metadata.name.as_deref().unwrap_or_default()
        ),
    )
}
