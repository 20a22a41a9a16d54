//! Decision tables for the CronJob controller, ported from upstream's
//! TestControllerV2SyncCronJob, TestMostRecentScheduleTime, TestNextScheduleTime,
//! TestNextScheduleTimeDuration, TestGetJobFromTemplate2, TestByJobStartTime,
//! TestControllerV2UpdateCronJob and the history-limit tests, plus time-zone and DST rows.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::{
    CronJob, CronJobSpec, CronJobStatus, Job, JobCondition, JobSpec, JobStatus, JobTemplateSpec,
};
use kbatch_api::k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kbatch_api::k8s_openapi::jiff::tz::TimeZone;
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kbatch_api::keys;
use kbatch_cron::Schedule;

use super::schedule::{Missed, NEXT_SCHEDULE_DELTA};
use super::template::{format_rfc3339, job_ref};
use super::*;

/// A CronJob without Jobs.
const NO_JOBS: &[Job] = &[];

const SHORT_DEAD: i64 = 10;
const MEDIUM_DEAD: i64 = 2 * 60 * 60;
const LONG_DEAD: i64 = 1_000_000;
const ERROR_SCHEDULE: &str = "obvious error schedule";
const ON_THE_HOUR: &str = "0 * * * ?";
const EVERY_HOUR: &str = "@every 1h";
const NEW_YORK: &str = "America/New_York";
const BAD_TZ: &str = "bad timezone";

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO))
        .unwrap_or(t)
}

fn sub(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_sub(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO))
        .unwrap_or(t)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}

const fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn top_of_the_hour() -> Timestamp {
    ts("2016-05-19T10:00:00Z")
}
fn just_after_the_prior_hour() -> Timestamp {
    ts("2016-05-19T09:01:00Z")
}
fn just_before_the_prior_hour() -> Timestamp {
    ts("2016-05-19T08:59:00Z")
}
fn just_after_the_hour() -> Timestamp {
    ts("2016-05-19T10:01:00Z")
}
fn just_before_the_hour() -> Timestamp {
    ts("2016-05-19T09:59:00Z")
}
fn just_before_the_next_hour() -> Timestamp {
    ts("2016-05-19T10:59:00Z")
}
fn week_after_the_hour() -> Timestamp {
    ts("2016-05-26T10:00:00Z")
}
fn just_a_second_before_the_hour() -> Timestamp {
    ts("2016-05-19T09:59:59Z")
}
/// 10:01 on the same day, on the wall clock of `zone`.
fn just_after_the_hour_in_zone(zone: &str) -> Timestamp {
    let tz = TimeZone::get(zone).unwrap_or(TimeZone::UTC);
    "2016-05-19T10:01:00"
        .parse::<kbatch_api::k8s_openapi::jiff::civil::DateTime>()
        .ok()
        .and_then(|dt| dt.to_zoned(tz).ok())
        .map(|z| z.timestamp())
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn job_spec() -> JobSpec {
    let mut labels = BTreeMap::new();
    labels.insert("foo".to_string(), "bar".to_string());
    JobSpec {
        parallelism: Some(1),
        completions: Some(1),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    image: Some("foo/bar".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        },
        ..Default::default()
    }
}

fn cron_job() -> CronJob {
    let labels = BTreeMap::from([("a".to_string(), "b".to_string())]);
    let annotations = BTreeMap::from([("x".to_string(), "y".to_string())]);
    CronJob {
        metadata: ObjectMeta {
            name: Some("mycronjob".into()),
            namespace: Some("snazzycats".into()),
            uid: Some("1a2b3c".into()),
            creation_timestamp: Some(Time(just_before_the_hour())),
            ..Default::default()
        },
        spec: CronJobSpec {
            schedule: "* * * * ?".into(),
            concurrency_policy: Some("Allow".into()),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(job_spec()),
            },
            ..Default::default()
        },
        status: None,
    }
}

fn utc() -> TimeZone {
    TimeZone::UTC
}

/// The status the API server ends up with: the one written, else the one it has (`server`).
fn status_of(server: &CronJob, plan: &CronJobPlan) -> CronJobStatus {
    plan.status
        .clone()
        .or_else(|| server.status.clone())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// TestControllerV2SyncCronJob
// ---------------------------------------------------------------------------------------

#[derive(Clone)]
struct Row {
    name: &'static str,
    policy: &'static str,
    suspend: bool,
    schedule: &'static str,
    time_zone: Option<&'static str>,
    deadline: Option<i64>,
    ran_previously: bool,
    still_active: bool,
    cronjob_creation: Option<Timestamp>,
    job_creation: Timestamp,
    last_schedule: Option<Timestamp>,
    now: Timestamp,
    create: CreateOutcome,
    get_job_error: bool,
    expect_create: bool,
    expect_delete: bool,
    expect_active: usize,
    expect_warnings: usize,
    expect_err: bool,
    /// `None`: no requeue.
    expect_requeue: Option<Duration>,
    expect_update: bool,
    job_not_in_lister: bool,
    job_in_cj_active: bool,
}

fn base() -> Row {
    Row {
        name: "",
        policy: "Allow",
        suspend: false,
        schedule: ON_THE_HOUR,
        time_zone: None,
        deadline: None,
        ran_previously: false,
        still_active: false,
        cronjob_creation: None,
        job_creation: just_after_the_prior_hour(),
        last_schedule: None,
        now: just_before_the_hour(),
        create: CreateOutcome::Created,
        get_job_error: false,
        expect_create: false,
        expect_delete: false,
        expect_active: 0,
        expect_warnings: 0,
        expect_err: false,
        expect_requeue: None,
        expect_update: false,
        job_not_in_lister: false,
        job_in_cj_active: true,
    }
}

const A: &str = "Allow";
const F: &str = "Forbid";
const R: &str = "Replace";

fn d(delta: Duration) -> Option<Duration> {
    Some(delta + NEXT_SCHEDULE_DELTA)
}

fn sync_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for p in [A, F, R] {
        rows.push(Row {
            name: "never ran, not valid schedule",
            policy: p,
            schedule: ERROR_SCHEDULE,
            expect_warnings: 1,
            ..base()
        });
    }
    rows.push(Row {
        name: "never ran, not valid time zone",
        time_zone: Some(BAD_TZ),
        expect_warnings: 1,
        ..base()
    });
    for p in [A, F, R] {
        rows.push(Row {
            name: "never ran, not time",
            policy: p,
            expect_requeue: d(mins(1)),
            ..base()
        });
    }
    rows.push(Row {
        name: "never ran, not time in zone",
        time_zone: Some(NEW_YORK),
        expect_requeue: d(mins(1)),
        ..base()
    });
    let is_time = Row {
        now: just_after_the_hour(),
        expect_create: true,
        expect_active: 1,
        expect_requeue: d(hours(1) - mins(1)),
        expect_update: true,
        ..base()
    };
    for p in [A, F, R] {
        rows.push(Row {
            name: "never ran, is time",
            policy: p,
            ..is_time.clone()
        });
    }
    rows.push(Row {
        name: "never ran, is time in zone",
        time_zone: Some(NEW_YORK),
        now: just_after_the_hour_in_zone(NEW_YORK),
        ..is_time.clone()
    });
    rows.push(Row {
        name: "never ran, is time in zone, but TZ is also set in schedule",
        schedule: "TZ=UTC 0 * * * ?",
        time_zone: Some(NEW_YORK),
        now: just_after_the_hour_in_zone(NEW_YORK),
        expect_warnings: 1,
        ..is_time.clone()
    });
    rows.push(Row {
        name: "never ran, is time, suspended",
        suspend: true,
        now: just_after_the_hour(),
        ..base()
    });
    rows.push(Row {
        name: "never ran, is time, past deadline",
        deadline: Some(SHORT_DEAD),
        now: add(just_after_the_hour(), mins(SHORT_DEAD as u64 + 1)),
        expect_requeue: d(hours(1) - mins(1) - mins(SHORT_DEAD as u64 + 1)),
        ..base()
    });
    rows.push(Row {
        name: "never ran, is time, not past deadline",
        deadline: Some(LONG_DEAD),
        ..is_time.clone()
    });

    // The Job of 09:01 completed (10s after it started).
    for p in [A, F, R] {
        rows.push(Row {
            name: "prev ran but done, not time",
            policy: p,
            ran_previously: true,
            expect_requeue: d(mins(1)),
            expect_update: true,
            ..base()
        });
    }
    let prev_is_time = Row {
        ran_previously: true,
        ..is_time.clone()
    };
    for p in [A, F, R] {
        rows.push(Row {
            name: "prev ran but done, is time",
            policy: p,
            ..prev_is_time.clone()
        });
    }
    rows.push(Row {
        name: "prev ran but done, is time, create job failed",
        create: CreateOutcome::AlreadyExists(None),
        expect_create: false,
        ..prev_is_time.clone()
    });
    rows.push(Row {
        name: "prev ran but done, is time, job not present in CJ active status, create job failed",
        create: CreateOutcome::AlreadyExists(None),
        job_in_cj_active: false,
        expect_create: false,
        ..prev_is_time.clone()
    });
    rows.push(Row {
        name: "prev ran but done, is time, suspended",
        suspend: true,
        expect_create: false,
        expect_active: 0,
        expect_requeue: None,
        ..prev_is_time.clone()
    });
    rows.push(Row {
        name: "prev ran but done, is time, past deadline",
        deadline: Some(SHORT_DEAD),
        expect_create: false,
        expect_active: 0,
        ..prev_is_time.clone()
    });
    rows.push(Row {
        name: "prev ran but done, is time, not past deadline",
        deadline: Some(LONG_DEAD),
        ..prev_is_time.clone()
    });

    let still_active = Row {
        ran_previously: true,
        still_active: true,
        expect_active: 1,
        ..base()
    };
    for p in [A, F, R] {
        rows.push(Row {
            name: "still active, not time",
            policy: p,
            expect_requeue: d(mins(1)),
            ..still_active.clone()
        });
    }
    let still_is_time = Row {
        now: just_after_the_hour(),
        expect_requeue: d(hours(1) - mins(1)),
        ..still_active.clone()
    };
    rows.push(Row {
        name: "still active, is time",
        policy: A,
        expect_create: true,
        expect_active: 2,
        expect_update: true,
        ..still_is_time.clone()
    });
    rows.push(Row {
        name: "still active, is time",
        policy: F,
        ..still_is_time.clone()
    });
    rows.push(Row {
        name: "still active, is time",
        policy: R,
        expect_create: true,
        expect_delete: true,
        expect_active: 1,
        expect_update: true,
        ..still_is_time.clone()
    });
    rows.push(Row {
        name: "still active, is time, get job failed",
        policy: R,
        get_job_error: true,
        expect_delete: true,
        expect_warnings: 1,
        expect_err: true,
        expect_requeue: None,
        ..still_is_time.clone()
    });
    rows.push(Row {
        name: "still active, is time, suspended",
        suspend: true,
        expect_requeue: None,
        ..still_is_time.clone()
    });
    rows.push(Row {
        name: "still active, is time, past deadline",
        deadline: Some(SHORT_DEAD),
        ..still_is_time.clone()
    });
    rows.push(Row {
        name: "still active, is time, not past deadline",
        deadline: Some(LONG_DEAD),
        expect_create: true,
        expect_active: 2,
        expect_update: true,
        ..still_is_time.clone()
    });

    // Many missed times: the most recent one still runs, with a warning unless the
    // deadline keeps the search short.
    let overdue = Row {
        ran_previously: true,
        now: week_after_the_hour(),
        expect_create: true,
        expect_active: 1,
        expect_requeue: d(hours(1)),
        expect_update: true,
        ..base()
    };
    for p in [A, R, F] {
        rows.push(Row {
            name: "prev ran but done, long overdue, not past deadline",
            policy: p,
            deadline: Some(LONG_DEAD),
            expect_warnings: 1,
            ..overdue.clone()
        });
        rows.push(Row {
            name: "prev ran but done, long overdue, no deadline",
            policy: p,
            expect_warnings: 1,
            ..overdue.clone()
        });
        rows.push(Row {
            name: "prev ran but done, long overdue, past medium deadline",
            policy: p,
            deadline: Some(MEDIUM_DEAD),
            ..overdue.clone()
        });
        rows.push(Row {
            name: "prev ran but done, long overdue, past short deadline",
            policy: p,
            deadline: Some(SHORT_DEAD),
            ..overdue.clone()
        });
    }

    rows.push(Row {
        name: "this ran but done, time drifted back",
        policy: F,
        ran_previously: true,
        job_creation: just_after_the_hour(),
        create: CreateOutcome::AlreadyExists(None),
        expect_requeue: d(mins(1)),
        expect_update: true,
        ..base()
    });

    let slow = Row {
        deadline: Some(LONG_DEAD),
        ran_previously: true,
        still_active: true,
        job_creation: add(top_of_the_hour(), ms(100)),
        now: add(just_after_the_hour(), ms(100)),
        expect_active: 1,
        expect_requeue: d(hours(1) - mins(1) - ms(100)),
        ..base()
    };
    for p in [A, F, R] {
        rows.push(Row {
            name: "this started but went missing, not past deadline",
            policy: p,
            job_not_in_lister: true,
            ..slow.clone()
        });
        rows.push(Row {
            name: "this started but is not present in cronjob active list, not past deadline",
            policy: p,
            job_in_cj_active: false,
            ..slow.clone()
        });
    }

    let every = Row {
        schedule: EVERY_HOUR,
        ..base()
    };
    rows.push(Row {
        name: "with @every schedule, never ran, not time",
        cronjob_creation: Some(just_before_the_hour()),
        job_creation: just_before_the_hour(),
        now: top_of_the_hour(),
        expect_requeue: d(hours(1) - mins(1)),
        ..every.clone()
    });
    rows.push(Row {
        name: "with @every schedule, never ran, is time",
        cronjob_creation: Some(just_before_the_prior_hour()),
        job_creation: just_before_the_prior_hour(),
        now: just_before_the_hour(),
        expect_requeue: d(hours(1)),
        expect_create: true,
        expect_active: 1,
        expect_update: true,
        ..every.clone()
    });
    rows.push(Row {
        name: "with @every schedule, never ran, is time, past deadline",
        deadline: Some(SHORT_DEAD),
        cronjob_creation: Some(just_before_the_prior_hour()),
        job_creation: just_before_the_prior_hour(),
        now: add(just_before_the_hour(), secs(SHORT_DEAD as u64 + 1)),
        expect_requeue: d(hours(1) - secs(SHORT_DEAD as u64 + 1)),
        ..every.clone()
    });
    rows.push(Row {
        name: "with @every schedule, never ran, is time, not past deadline",
        deadline: Some(LONG_DEAD),
        cronjob_creation: Some(just_before_the_prior_hour()),
        job_creation: just_before_the_prior_hour(),
        now: add(just_before_the_hour(), secs(SHORT_DEAD as u64 - 1)),
        expect_create: true,
        expect_active: 1,
        expect_requeue: d(hours(1) - secs(SHORT_DEAD as u64 - 1)),
        expect_update: true,
        ..every.clone()
    });
    let every_prev = Row {
        ran_previously: true,
        cronjob_creation: Some(just_before_the_prior_hour()),
        job_creation: just_before_the_prior_hour(),
        last_schedule: Some(just_before_the_hour()),
        expect_update: true,
        ..every.clone()
    };
    rows.push(Row {
        name: "with @every schedule, prev ran but done, not time",
        now: top_of_the_hour(),
        expect_requeue: d(hours(1) - mins(1)),
        ..every_prev.clone()
    });
    rows.push(Row {
        name: "with @every schedule, prev ran but done, is time",
        now: add(top_of_the_hour(), hours(1)),
        expect_create: true,
        expect_active: 1,
        expect_requeue: d(hours(1) - mins(1)),
        ..every_prev.clone()
    });
    rows.push(Row {
        name: "with @every schedule, prev ran but done, is time, past deadline",
        deadline: Some(SHORT_DEAD),
        now: add(just_before_the_next_hour(), secs(SHORT_DEAD as u64 + 1)),
        expect_requeue: d(hours(1) - secs(SHORT_DEAD as u64 + 1)),
        ..every_prev.clone()
    });
    let every_active = Row {
        ran_previously: true,
        still_active: true,
        cronjob_creation: Some(just_before_the_prior_hour()),
        job_creation: just_before_the_hour(),
        last_schedule: Some(just_before_the_hour()),
        expect_active: 1,
        ..every.clone()
    };
    rows.push(Row {
        name: "with @every schedule, still active, not time",
        now: top_of_the_hour(),
        expect_requeue: d(hours(1) - mins(1)),
        ..every_active.clone()
    });
    rows.push(Row {
        name: "with @every schedule, still active, is time",
        job_creation: just_before_the_prior_hour(),
        last_schedule: Some(just_before_the_prior_hour()),
        now: just_after_the_hour(),
        expect_create: true,
        expect_active: 2,
        expect_requeue: d(hours(1) - mins(2)),
        expect_update: true,
        ..every_active.clone()
    });
    rows.push(Row {
        name: "with @every schedule, still active, is time, past deadline",
        deadline: Some(SHORT_DEAD),
        now: add(just_before_the_next_hour(), secs(SHORT_DEAD as u64 + 1)),
        expect_requeue: d(hours(1) - secs(SHORT_DEAD as u64 + 1)),
        ..every_active.clone()
    });
    rows.push(Row {
        name: "with @every schedule, still active, is time, not past deadline",
        deadline: Some(LONG_DEAD),
        now: add(just_before_the_next_hour(), secs(SHORT_DEAD as u64 - 1)),
        expect_create: true,
        expect_active: 2,
        expect_requeue: d(hours(1) - secs(SHORT_DEAD as u64 - 1)),
        expect_update: true,
        ..every_active.clone()
    });
    rows.push(Row {
        name: "with @every schedule, prev ran but done, long overdue, no deadline",
        ran_previously: true,
        cronjob_creation: Some(just_after_the_prior_hour()),
        last_schedule: Some(just_after_the_hour()),
        job_creation: just_after_the_prior_hour(),
        now: week_after_the_hour(),
        expect_create: true,
        expect_active: 1,
        expect_warnings: 1,
        expect_requeue: d(mins(1)),
        expect_update: true,
        ..every.clone()
    });
    rows.push(Row {
        name: "with @every schedule, prev ran but done, long overdue, past deadline",
        deadline: Some(SHORT_DEAD),
        ran_previously: true,
        cronjob_creation: Some(just_after_the_prior_hour()),
        last_schedule: Some(just_after_the_hour()),
        job_creation: just_after_the_prior_hour(),
        now: add(
            add(week_after_the_hour(), mins(1)),
            secs(SHORT_DEAD as u64 + 1),
        ),
        expect_requeue: d(hours(1) - secs(SHORT_DEAD as u64 + 1)),
        expect_update: true,
        ..every.clone()
    });
    // Upstream expects no active Job here, but checks it only against a status write that
    // never happens; the API server's copy lists the Job and nothing removes it.
    rows.push(Row {
        name: "do nothing if the namespace is terminating",
        ran_previously: true,
        still_active: true,
        job_in_cj_active: false,
        now: just_after_the_hour(),
        create: CreateOutcome::NamespaceTerminating,
        expect_active: 1,
        expect_err: true,
        ..base()
    });
    rows
}

/// The CronJob, its Jobs, the fresh copy a GET would return and the outcomes of the writes,
/// built as upstream's table test builds them.
fn setup(row: &Row) -> (CronJob, Vec<Job>, CronJob, Outcomes, Option<Job>) {
    let mut cj = cron_job();
    cj.spec.concurrency_policy = Some(row.policy.into());
    cj.spec.suspend = Some(row.suspend);
    cj.spec.schedule = row.schedule.into();
    cj.spec.time_zone = row.time_zone.map(String::from);
    cj.spec.starting_deadline_seconds = row.deadline;
    let mut fresh = cj.clone();
    let mut jobs = Vec::new();
    let mut job = None;
    if row.ran_previously {
        cj.metadata.creation_timestamp = Some(Time(
            row.cronjob_creation
                .unwrap_or_else(just_before_the_prior_hour),
        ));
        cj.status = Some(CronJobStatus {
            last_schedule_time: Some(Time(
                row.last_schedule.unwrap_or_else(just_after_the_prior_hour),
            )),
            ..Default::default()
        });
        let mut j = match get_job_from_template(&cj, row.job_creation) {
            Ok(j) => j,
            Err(e) => panic!("{}: template: {e}", row.name),
        };
        j.metadata.uid = Some("1234".into());
        j.metadata.creation_timestamp = Some(Time(row.job_creation));
        if row.still_active {
            let r = job_ref(&j);
            if row.job_in_cj_active
                && let Some(s) = cj.status.as_mut()
            {
                s.active = Some(vec![r.clone()]);
            }
            fresh.status = Some(CronJobStatus {
                active: Some(vec![r]),
                ..Default::default()
            });
        } else {
            j.status = Some(JobStatus {
                completion_time: Some(Time(add(row.job_creation, secs(10)))),
                conditions: Some(vec![JobCondition {
                    type_: keys::JOB_COMPLETE.into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        if !row.job_not_in_lister {
            jobs.push(j.clone());
        }
        job = Some(j);
    } else {
        cj.metadata.creation_timestamp = Some(Time(
            row.cronjob_creation.unwrap_or_else(just_before_the_hour),
        ));
    }
    let mut outcomes = Outcomes {
        create: row.create.clone(),
        ..Default::default()
    };
    // The fake job control answers a GET with the Job of the fixture.
    if let (CreateOutcome::AlreadyExists(None), Some(j)) = (&row.create, &job) {
        outcomes.create = CreateOutcome::AlreadyExists(Some(Box::new(j.clone())));
    }
    if row.get_job_error
        && let Some(j) = &job
    {
        outcomes.failed_deletions.insert(
            j.metadata.name.clone().unwrap_or_default(),
            DeletionFailure::Get("request is invalid".into()),
        );
    }
    (cj, jobs, fresh, outcomes, job)
}

#[test]
fn sync_cronjob_table() {
    let rows = sync_rows();
    let mut failures = Vec::new();
    for row in &rows {
        let name = format!("{}, {}", row.name, row.policy);
        let (cj, jobs, fresh, outcomes, job) = setup(row);
        let mut lookups = Lookups {
            fresh_cronjob: Some(&fresh),
            live_active_jobs: BTreeSet::new(),
        };
        if job.is_some() {
            lookups.live_active_jobs.insert("1234".into());
        }
        let plan = sync_with(&cj, &jobs, row.now, &utc(), &lookups, &outcomes);

        let created =
            plan.job_to_create.is_some() && matches!(outcomes.create, CreateOutcome::Created);
        let mut check = |what: &str, ok: bool, detail: String| {
            if !ok {
                failures.push(format!("{name}: {what}: {detail}"));
            }
        };
        check(
            "create",
            created == row.expect_create,
            format!(
                "{:?}",
                plan.job_to_create.as_ref().map(|j| &j.metadata.name)
            ),
        );
        check(
            "delete",
            plan.jobs_to_delete.len() == usize::from(row.expect_delete),
            format!("{:?}", plan.jobs_to_delete),
        );
        let warnings = plan
            .events
            .iter()
            .filter(|e| e.type_ == EventType::Warning)
            .count();
        check(
            "warnings",
            warnings == row.expect_warnings,
            format!("{:?}", plan.events),
        );
        let mut expected_events = row.expect_warnings;
        if created {
            expected_events += 1;
        }
        if row.expect_delete && !row.get_job_error {
            expected_events += 1;
        }
        if row.name == "still active, is time" && row.policy == F {
            expected_events += 1;
        }
        check(
            "events",
            plan.events.len() == expected_events,
            format!("{:?}", plan.events),
        );
        check(
            "error",
            plan.error.is_some() == row.expect_err,
            format!("{:?}", plan.error),
        );
        check(
            "requeue",
            plan.requeue_after == row.expect_requeue,
            format!("{:?} want {:?}", plan.requeue_after, row.expect_requeue),
        );
        check(
            "update",
            plan.status.is_some() == row.expect_update,
            format!("{:?}", plan.status),
        );
        let status = status_of(&fresh, &plan);
        let active = status.active.as_ref().map_or(0, Vec::len);
        check(
            "active",
            active == row.expect_active,
            format!("{active}: {:?}", status.active),
        );
        if row.ran_previously && !row.still_active {
            let want = add(row.job_creation, secs(10));
            check(
                "lastSuccessfulTime",
                status.last_successful_time.as_ref().map(|t| t.0) == Some(want),
                format!("{:?}", status.last_successful_time),
            );
        }
        if let Some(j) = plan.job_to_create.as_ref() {
            let r = j
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.first())
                .cloned()
                .unwrap_or_default();
            check(
                "controllerRef",
                r.api_version == "batch/v1"
                    && r.kind == "CronJob"
                    && r.name == "mycronjob"
                    && r.uid == "1a2b3c"
                    && r.controller == Some(true)
                    && r.block_owner_deletion == Some(true),
                format!("{r:?}"),
            );
        }
    }
    assert_eq!(rows.len(), 70, "{} rows", rows.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// TestMostRecentScheduleTime (plus time-zone and DST rows)
// ---------------------------------------------------------------------------------------

fn after_top(d: Duration) -> Timestamp {
    add(top_of_the_hour(), d)
}

struct RecentRow {
    name: &'static str,
    schedule: &'static str,
    time_zone: Option<&'static str>,
    default_zone: &'static str,
    creation: Timestamp,
    last_schedule: Option<Timestamp>,
    deadline: Option<i64>,
    include_sds: bool,
    now: Timestamp,
    want_earliest: Timestamp,
    want_recent: Option<Timestamp>,
    want_missed: Missed,
    want_err: bool,
}

fn recent_base() -> RecentRow {
    RecentRow {
        name: "",
        schedule: "0 * * * *",
        time_zone: None,
        default_zone: "UTC",
        creation: top_of_the_hour(),
        last_schedule: None,
        deadline: None,
        include_sds: false,
        now: top_of_the_hour(),
        want_earliest: top_of_the_hour(),
        want_recent: None,
        want_missed: Missed::None,
        want_err: false,
    }
}

fn recent_rows() -> Vec<RecentRow> {
    let half_past = after_top(mins(30));
    vec![
        RecentRow {
            name: "now before next schedule",
            now: after_top(secs(30)),
            ..recent_base()
        },
        RecentRow {
            name: "now just after next schedule",
            now: after_top(mins(61)),
            want_recent: Some(after_top(mins(60))),
            ..recent_base()
        },
        RecentRow {
            name: "missed 5 schedules",
            creation: after_top(secs(10)),
            now: after_top(mins(301)),
            want_recent: Some(after_top(mins(300))),
            want_earliest: after_top(secs(10)),
            want_missed: Missed::Few,
            ..recent_base()
        },
        RecentRow {
            name: "complex schedule",
            schedule: "30 6-16/4 * * 1-5",
            last_schedule: Some(half_past),
            now: after_top(hours(24) + mins(31)),
            want_recent: Some(after_top(hours(24) + mins(30))),
            want_earliest: half_past,
            want_missed: Missed::Few,
            ..recent_base()
        },
        RecentRow {
            name: "another complex schedule",
            schedule: "30 10,11,12 * * 1-5",
            last_schedule: Some(half_past),
            now: after_top(hours(30) + mins(30)),
            want_recent: None,
            want_earliest: half_past,
            want_missed: Missed::Few,
            ..recent_base()
        },
        RecentRow {
            name: "complex schedule with longer diff between executions",
            schedule: "30 6-16/4 * * 1-5",
            last_schedule: Some(half_past),
            now: after_top(hours(96) + mins(31)),
            want_recent: Some(after_top(hours(96) + mins(30))),
            want_earliest: half_past,
            want_missed: Missed::Few,
            ..recent_base()
        },
        RecentRow {
            name: "complex schedule with shorter diff between executions",
            schedule: "30 6-16/4 * * 1-5",
            now: after_top(hours(24) + mins(31)),
            want_recent: Some(after_top(hours(24) + mins(30))),
            want_missed: Missed::Few,
            ..recent_base()
        },
        RecentRow {
            name: "@every schedule",
            schedule: "@every 1h",
            creation: sub(top_of_the_hour(), mins(59)),
            deadline: Some(10),
            last_schedule: Some(after_top(mins(1))),
            now: after_top(hours(7 * 24)),
            want_recent: Some(after_top(hours(6 * 24 + 23) + mins(1))),
            want_earliest: after_top(mins(1)),
            want_missed: Missed::Many,
            ..recent_base()
        },
        RecentRow {
            name: "rogue cronjob",
            schedule: "59 23 31 2 *",
            creation: after_top(secs(10)),
            now: after_top(hours(1)),
            want_err: true,
            ..recent_base()
        },
        RecentRow {
            name: "earliestTime being CreationTimestamp and LastScheduleTime",
            last_schedule: Some(top_of_the_hour()),
            now: after_top(secs(30)),
            ..recent_base()
        },
        RecentRow {
            name: "earliestTime being LastScheduleTime",
            schedule: "*/5 * * * *",
            last_schedule: Some(half_past),
            now: after_top(mins(31)),
            want_earliest: half_past,
            ..recent_base()
        },
        RecentRow {
            name: "earliestTime being LastScheduleTime (within StartingDeadlineSeconds)",
            schedule: "*/5 * * * *",
            deadline: Some(60),
            last_schedule: Some(half_past),
            now: after_top(mins(31)),
            want_earliest: half_past,
            ..recent_base()
        },
        RecentRow {
            name: "earliestTime being LastScheduleTime (outside StartingDeadlineSeconds)",
            schedule: "*/5 * * * *",
            deadline: Some(60),
            include_sds: true,
            last_schedule: Some(half_past),
            now: after_top(mins(32)),
            want_earliest: after_top(mins(31)),
            ..recent_base()
        },
        // Time zones and DST.
        RecentRow {
            name: "spec.timeZone moves the wall clock",
            schedule: "0 9 * * *",
            time_zone: Some("Europe/Rome"),
            creation: ts("2016-05-19T06:00:00Z"),
            now: ts("2016-05-19T07:00:30Z"),
            want_earliest: ts("2016-05-19T06:00:00Z"),
            want_recent: Some(ts("2016-05-19T07:00:00Z")),
            ..recent_base()
        },
        RecentRow {
            name: "no spec.timeZone: the controller's zone",
            schedule: "0 9 * * *",
            default_zone: "Asia/Tokyo",
            creation: ts("2016-05-18T23:00:00Z"),
            now: ts("2016-05-19T00:00:30Z"),
            want_earliest: ts("2016-05-18T23:00:00Z"),
            want_recent: Some(ts("2016-05-19T00:00:00Z")),
            ..recent_base()
        },
        RecentRow {
            name: "spring forward skips the 02:30 run",
            schedule: "30 2 * * *",
            time_zone: Some(NEW_YORK),
            creation: ts("2024-03-01T00:00:00Z"),
            last_schedule: Some(ts("2024-03-09T07:30:00Z")),
            now: ts("2024-03-10T12:00:00Z"),
            want_earliest: ts("2024-03-09T07:30:00Z"),
            ..recent_base()
        },
        RecentRow {
            name: "after spring forward the next 02:30 is due",
            schedule: "30 2 * * *",
            time_zone: Some(NEW_YORK),
            creation: ts("2024-03-01T00:00:00Z"),
            last_schedule: Some(ts("2024-03-09T07:30:00Z")),
            now: ts("2024-03-11T06:31:00Z"),
            want_earliest: ts("2024-03-09T07:30:00Z"),
            want_recent: Some(ts("2024-03-11T06:30:00Z")),
            ..recent_base()
        },
        RecentRow {
            name: "fall back runs 01:30 a second time",
            schedule: "30 1 * * *",
            time_zone: Some(NEW_YORK),
            creation: ts("2024-11-01T00:00:00Z"),
            last_schedule: Some(ts("2024-11-03T05:30:00Z")),
            now: ts("2024-11-03T06:31:00Z"),
            want_earliest: ts("2024-11-03T05:30:00Z"),
            want_recent: Some(ts("2024-11-03T06:30:00Z")),
            ..recent_base()
        },
        RecentRow {
            name: "hourly across fall back counts the repeated hour",
            schedule: "0 * * * *",
            time_zone: Some(NEW_YORK),
            creation: ts("2024-11-03T04:00:00Z"),
            last_schedule: Some(ts("2024-11-03T04:00:00Z")),
            now: ts("2024-11-03T07:00:30Z"),
            want_earliest: ts("2024-11-03T04:00:00Z"),
            want_recent: Some(ts("2024-11-03T07:00:00Z")),
            want_missed: Missed::Few,
            ..recent_base()
        },
    ]
}

fn cronjob_for(
    schedule: &str,
    time_zone: Option<&str>,
    creation: Timestamp,
    last: Option<Timestamp>,
) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = schedule.into();
    cj.spec.time_zone = time_zone.map(String::from);
    cj.metadata.creation_timestamp = Some(Time(creation));
    cj.status = last.map(|t| CronJobStatus {
        last_schedule_time: Some(Time(t)),
        ..Default::default()
    });
    cj
}

#[test]
fn most_recent_schedule_time_table() {
    let mut failures = Vec::new();
    for row in recent_rows() {
        let mut cj = cronjob_for(row.schedule, row.time_zone, row.creation, row.last_schedule);
        cj.spec.starting_deadline_seconds = row.deadline;
        let sched = match parse_schedule(&cj) {
            Ok(s) => s,
            Err(e) => panic!("{}: {e}", row.name),
        };
        let zone = TimeZone::get(row.default_zone).unwrap_or(TimeZone::UTC);
        let got = most_recent_schedule_time(&cj, row.now, &sched, &zone, row.include_sds);
        match got {
            Err(_) if row.want_err => {}
            Err(e) => failures.push(format!("{}: unexpected error {e}", row.name)),
            Ok(_) if row.want_err => failures.push(format!("{}: no error", row.name)),
            Ok(got) => {
                let want = MostRecent {
                    earliest: row.want_earliest,
                    most_recent: row.want_recent,
                    missed: row.want_missed,
                };
                if got != want {
                    failures.push(format!("{}: got {got:?}, want {want:?}", row.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// TestNextScheduleTime
// ---------------------------------------------------------------------------------------

#[test]
fn next_schedule_time_cases() {
    let t1 = top_of_the_hour();
    let t2 = after_top(hours(1));
    let parse = |s: &str| Schedule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    let hourly = parse("0 * * * ?");
    let z = utc();
    let at = |creation: Timestamp, last: Option<Timestamp>| {
        cronjob_for("0 * * * ?", None, creation, last)
    };

    // 1: nothing known, nothing due yet.
    let cj = at(sub(t1, mins(10)), None);
    assert_eq!(
        next_schedule_time(&cj, sub(t1, mins(7)), &hourly, &z),
        Ok((None, false))
    );
    // 2: nothing known, one due.
    assert_eq!(
        next_schedule_time(&cj, add(t1, secs(2)), &hourly, &z),
        Ok((Some(t1), false))
    );
    // 3: T1 ran, nothing due.
    let cj = at(sub(t1, mins(10)), Some(t1));
    assert_eq!(
        next_schedule_time(&cj, add(t1, mins(2)), &hourly, &z),
        Ok((None, false))
    );
    // 4: T1 ran, T2 due.
    assert_eq!(
        next_schedule_time(&cj, add(t2, mins(5)), &hourly, &z),
        Ok((Some(t2), false))
    );
    // 5: two due: the most recent is T2.
    let cj = at(sub(t1, hours(2)), Some(sub(t1, hours(1))));
    assert_eq!(
        next_schedule_time(&cj, add(t2, mins(5)), &hourly, &z),
        Ok((Some(t2), false))
    );
    // 6: far ahead, no deadline: the most recent runs (with the many-missed warning).
    let far = add(t2, hours(10 * 24));
    let got = next_schedule_time(&cj, far, &hourly, &z);
    assert!(matches!(got, Ok((Some(_), true))), "{got:?}");
    // 7: far ahead with a short deadline: runs, and the deadline keeps the count small.
    let mut cj7 = cj.clone();
    cj7.spec.starting_deadline_seconds = Some(2 * 60 * 60);
    let got = next_schedule_time(&cj7, far, &hourly, &z);
    assert!(matches!(got, Ok((Some(_), false))), "{got:?}");
    // 8: a schedule that never fires is an error.
    let cj = at(add(t1, secs(10)), None);
    let rogue = parse("59 23 31 2 *");
    assert_eq!(
        next_schedule_time(&cj, t2, &rogue, &z),
        Err(ScheduleError::TooClose)
    );
}

// ---------------------------------------------------------------------------------------
// TestNextScheduleTimeDuration
// ---------------------------------------------------------------------------------------

#[test]
fn next_schedule_time_duration_table() {
    let half_past = after_top(mins(30));
    let rows: [(&str, &str, Option<Timestamp>, Timestamp, Duration); 4] = [
        (
            "complex schedule skipping weekend",
            "30 6-16/4 * * 1-5",
            Some(half_past),
            after_top(hours(24) + mins(31)),
            hours(3) + mins(59),
        ),
        (
            "another complex schedule skipping weekend",
            "30 10,11,12 * * 1-5",
            Some(half_past),
            after_top(hours(30) + mins(30)),
            hours(66),
        ),
        (
            "once a week cronjob, missed two runs",
            "0 12 * * 4",
            Some(after_top(hours(2))),
            after_top(hours(19 * 24 + 1) + mins(30)),
            hours(48) + mins(30),
        ),
        (
            "no previous run of a cronjob",
            "0 12 * * 5",
            None,
            after_top(hours(6)),
            hours(20),
        ),
    ];
    for (name, schedule, last, now, want) in rows {
        let cj = cronjob_for(schedule, None, top_of_the_hour(), last);
        let sched = Schedule::parse(schedule).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            next_schedule_time_duration(&cj, now, &sched, &utc()),
            Some(want + NEXT_SCHEDULE_DELTA),
            "{name}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// TestGetJobFromTemplate2
// ---------------------------------------------------------------------------------------

#[test]
fn job_from_template_table() {
    let scheduled = top_of_the_hour();
    let rows: [(&str, Option<&str>, &[(&str, &str)], &str); 3] = [
        (
            "UTC timezone and one annotation",
            Some("UTC"),
            &[("x", "y")],
            "2016-05-19T10:00:00Z",
        ),
        (
            "nil timezone and one annotation",
            None,
            &[("x", "y")],
            "2016-05-19T10:00:00Z",
        ),
        (
            "correct timezone and multiple annotation",
            Some("Europe/Rome"),
            &[("x", "y"), ("z", "x")],
            "2016-05-19T12:00:00+02:00",
        ),
    ];
    for (name, tz, annotations, want_stamp) in rows {
        let mut cj = cron_job();
        cj.spec.time_zone = tz.map(String::from);
        if let Some(m) = cj.spec.job_template.metadata.as_mut() {
            m.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        let job = get_job_from_template(&cj, scheduled).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("mycronjob-24394200"),
            "{name}"
        );
        assert_eq!(
            job.metadata.namespace.as_deref(),
            Some("snazzycats"),
            "{name}"
        );
        assert_eq!(
            job.metadata.labels.as_ref().map(BTreeMap::len),
            Some(1),
            "{name}"
        );
        let got = job.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(got.len(), annotations.len() + 1, "{name}");
        assert_eq!(
            got.get(keys::CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION)
                .map(String::as_str),
            Some(want_stamp),
            "{name}"
        );
        assert_eq!(job.spec, cj.spec.job_template.spec, "{name}");
    }
}

#[test]
fn job_name_is_minutes_since_epoch() {
    let cj = cron_job();
    assert_eq!(get_job_name(&cj, ts("1970-01-01T00:00:59Z")), "mycronjob-0");
    assert_eq!(get_job_name(&cj, ts("1970-01-01T00:01:00Z")), "mycronjob-1");
    // Seconds within the minute do not change the name: that is what makes it a lock.
    assert_eq!(
        get_job_name(&cj, add(top_of_the_hour(), ms(100))),
        get_job_name(&cj, top_of_the_hour())
    );
}

#[test]
fn rfc3339_formats_like_go() {
    let t = ts("2016-05-19T10:00:00.5Z");
    assert_eq!(format_rfc3339(t, &utc()), "2016-05-19T10:00:00Z");
    let ny = TimeZone::get(NEW_YORK).unwrap_or(TimeZone::UTC);
    assert_eq!(format_rfc3339(t, &ny), "2016-05-19T06:00:00-04:00");
    let kolkata = TimeZone::get("Asia/Kolkata").unwrap_or(TimeZone::UTC);
    assert_eq!(format_rfc3339(t, &kolkata), "2016-05-19T15:30:00+05:30");
    assert_eq!(
        super::template::format_rfc1123z_utc(t),
        "Thu, 19 May 2016 10:00:00 +0000"
    );
}

// ---------------------------------------------------------------------------------------
// TestByJobStartTime and history limits
// ---------------------------------------------------------------------------------------

fn finished_job(name: &str, cond: &str, start: Option<Timestamp>) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("snazzycats".into()),
            uid: Some(format!("uid-{name}")),
            owner_references: Some(vec![super::template::controller_ref(&cron_job())]),
            ..Default::default()
        },
        spec: Some(job_spec()),
        status: Some(JobStatus {
            start_time: start.map(Time),
            completion_time: start.map(|s| Time(add(s, secs(10)))),
            conditions: Some(vec![JobCondition {
                type_: cond.into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

#[test]
fn by_job_start_time_table() {
    let now = ts("2018-01-01T02:03:04.000000005Z");
    let later = ts("2019-01-01T02:03:04.000000005Z");
    let j = |name: &str, start: Option<Timestamp>| finished_job(name, "Complete", start);
    let rows: [(&str, Vec<Job>, [&str; 2], [Option<Timestamp>; 2]); 5] = [
        (
            "both have nil start times",
            vec![j("b", None), j("a", None)],
            ["a", "b"],
            [None, None],
        ),
        (
            "only the first has a nil start time",
            vec![j("a", None), j("b", Some(now))],
            ["b", "a"],
            [Some(now), None],
        ),
        (
            "only the second has a nil start time",
            vec![j("a", Some(now)), j("b", None)],
            ["a", "b"],
            [Some(now), None],
        ),
        (
            "both have non-nil, equal start time",
            vec![j("b", Some(now)), j("a", Some(now))],
            ["a", "b"],
            [Some(now), Some(now)],
        ),
        (
            "both have non-nil, different start time",
            vec![j("a", Some(later)), j("b", Some(now))],
            ["b", "a"],
            [Some(now), Some(later)],
        ),
    ];
    for (name, mut jobs, want_names, want_starts) in rows {
        jobs.sort_by(super::by_start_time);
        let names: Vec<_> = jobs
            .iter()
            .filter_map(|j| j.metadata.name.as_deref())
            .collect();
        let starts: Vec<_> = jobs
            .iter()
            .map(|j| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0)
            })
            .collect();
        assert_eq!(names, want_names, "{name}");
        assert_eq!(starts, want_starts, "{name}");
    }
}

fn history_cronjob(ok: Option<i32>, failed: Option<i32>) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = ON_THE_HOUR.into();
    cj.spec.successful_jobs_history_limit = ok;
    cj.spec.failed_jobs_history_limit = failed;
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(top_of_the_hour())),
        ..Default::default()
    });
    cj
}

fn history_jobs() -> Vec<Job> {
    let h = |n: u64| Some(add(ts("2016-05-19T00:00:00Z"), hours(n)));
    vec![
        finished_job("ok-3", "Complete", h(3)),
        finished_job("ok-1", "Complete", h(1)),
        finished_job("ok-nil", "Complete", None),
        finished_job("ok-2", "Complete", h(2)),
        finished_job("failed-1", "Failed", h(1)),
        finished_job("failed-2", "Failed", h(2)),
    ]
}

fn deleted(plan: &CronJobPlan) -> Vec<&str> {
    plan.jobs_to_delete
        .iter()
        .map(|d| d.name.as_str())
        .collect()
}

#[test]
fn history_limits_delete_the_oldest() {
    let now = add(top_of_the_hour(), mins(5));
    let cj = history_cronjob(Some(2), Some(1));
    let plan = sync(&cj, &history_jobs(), now, &utc());
    // Oldest first; a Job that never started sorts last, so it is kept longest.
    assert_eq!(deleted(&plan), ["ok-1", "ok-2", "failed-1"]);
    assert!(
        plan.jobs_to_delete
            .iter()
            .all(|d| d.reason == DeletionReason::HistoryLimit)
    );
    let msgs: Vec<_> = plan
        .events
        .iter()
        .map(|e| (e.reason.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        msgs,
        [
            ("SuccessfulDelete", "Deleted job ok-1"),
            ("SuccessfulDelete", "Deleted job ok-2"),
            ("SuccessfulDelete", "Deleted job failed-1"),
        ]
    );
    assert!(plan.status.is_some());

    // Under the limits, or no limits at all: nothing goes.
    let plan = sync(
        &history_cronjob(Some(10), Some(10)),
        &history_jobs(),
        now,
        &utc(),
    );
    assert!(plan.jobs_to_delete.is_empty());
    let plan = sync(&history_cronjob(None, None), &history_jobs(), now, &utc());
    assert!(plan.jobs_to_delete.is_empty());
    // Zero keeps none; a negative limit (rejected by validation) acts as zero.
    let plan = sync(
        &history_cronjob(Some(0), Some(-1)),
        &history_jobs(),
        now,
        &utc(),
    );
    assert_eq!(plan.jobs_to_delete.len(), 6);
}

#[test]
fn history_cleanup_happens_even_when_the_create_fails() {
    let cj = history_cronjob(Some(1), Some(1));
    let outcomes = Outcomes {
        create: CreateOutcome::Failed("exceeded quota".into()),
        ..Default::default()
    };
    let now = add(top_of_the_hour(), hours(1) + mins(1));
    let plan = sync_with(
        &cj,
        &history_jobs(),
        now,
        &utc(),
        &Lookups::default(),
        &outcomes,
    );
    assert_eq!(deleted(&plan), ["ok-1", "ok-2", "ok-3", "failed-1"]);
    assert!(plan.job_to_create.is_some());
    assert_eq!(plan.error.as_deref(), Some("exceeded quota"));
    let last = plan
        .events
        .last()
        .map(|e| (e.reason.as_str(), e.message.as_str()));
    assert_eq!(
        last,
        Some(("FailedCreate", "Error creating job: exceeded quota"))
    );
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn failed_history_deletion_is_reported() {
    let cj = history_cronjob(Some(3), None);
    let mut outcomes = Outcomes::default();
    outcomes
        .failed_deletions
        .insert("ok-1".into(), DeletionFailure::Delete("boom".into()));
    let now = add(top_of_the_hour(), mins(5));
    let plan = sync_with(
        &cj,
        &history_jobs(),
        now,
        &utc(),
        &Lookups::default(),
        &outcomes,
    );
    assert_eq!(deleted(&plan), ["ok-1"]);
    assert_eq!(
        plan.events
            .first()
            .map(|e| (e.type_, e.reason.as_str(), e.message.as_str())),
        Some((EventType::Warning, "FailedDelete", "Deleted job: boom"))
    );
}

// ---------------------------------------------------------------------------------------
// Reconciling status.active
// ---------------------------------------------------------------------------------------

fn reasons(plan: &CronJobPlan) -> Vec<(&str, &str)> {
    plan.events
        .iter()
        .map(|e| (e.reason.as_str(), e.message.as_str()))
        .collect()
}

#[test]
fn completed_job_leaves_active_and_sets_last_successful_time() {
    let mut cj = history_cronjob(None, None);
    let job = finished_job("mycronjob-1", "Complete", Some(top_of_the_hour()));
    cj.status = Some(CronJobStatus {
        active: Some(vec![job_ref(&job)]),
        last_schedule_time: Some(Time(top_of_the_hour())),
        last_successful_time: Some(Time(sub(top_of_the_hour(), hours(5)))),
    });
    let plan = sync(
        &cj,
        std::slice::from_ref(&job),
        add(top_of_the_hour(), mins(1)),
        &utc(),
    );
    assert_eq!(
        reasons(&plan),
        [(
            "SawCompletedJob",
            "Saw completed job: mycronjob-1, condition: Complete"
        )]
    );
    let status = plan.status.unwrap_or_default();
    assert_eq!(status.active, Some(vec![]));
    assert_eq!(
        status.last_successful_time.map(|t| t.0),
        Some(add(top_of_the_hour(), secs(10)))
    );

    // An older success never moves lastSuccessfulTime back.
    let mut cj2 = cj.clone();
    if let Some(s) = cj2.status.as_mut() {
        s.active = None;
        s.last_successful_time = Some(Time(add(top_of_the_hour(), hours(1))));
    }
    let plan = sync(&cj2, &[job], add(top_of_the_hour(), mins(1)), &utc());
    assert_eq!(plan.status, None);
}

#[test]
fn a_wake_up_before_the_scheduled_time_requeues_for_the_rest() {
    // The timer woke 5 ms early on the wall clock: nothing is due yet.
    let mut cj = cron_job();
    cj.spec.schedule = "0 * * * *".into();
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(sub(top_of_the_hour(), hours(1)))),
        ..Default::default()
    });
    let early = sub(top_of_the_hour(), ms(5));
    let plan = sync(&cj, &[] as &[Job], early, &utc());
    assert_eq!(plan.job_to_create, None);
    assert_eq!(plan.scheduled_time, None);
    assert_eq!(plan.requeue_after, Some(ms(5) + NEXT_SCHEDULE_DELTA));
    // The requeue lands just after it, and the Job is created for the hour.
    let plan = sync(
        &cj,
        &[] as &[Job],
        add(early, ms(5) + NEXT_SCHEDULE_DELTA),
        &utc(),
    );
    assert_eq!(plan.scheduled_time, Some(top_of_the_hour()));
    assert!(plan.job_to_create.is_some());
    assert_eq!(plan.requeue_after, d(hours(1) - NEXT_SCHEDULE_DELTA));
}

#[test]
fn failed_job_is_reported_with_its_condition() {
    let mut cj = history_cronjob(None, None);
    let job = finished_job("mycronjob-1", "Failed", Some(top_of_the_hour()));
    if let Some(s) = cj.status.as_mut() {
        s.active = Some(vec![job_ref(&job)]);
    }
    let plan = sync(&cj, &[job], add(top_of_the_hour(), mins(1)), &utc());
    assert_eq!(
        reasons(&plan),
        [(
            "SawCompletedJob",
            "Saw completed job: mycronjob-1, condition: Failed"
        )]
    );
    let status = plan.status.unwrap_or_default();
    assert_eq!(status.last_successful_time, None);
}

#[test]
fn missing_and_unexpected_jobs() {
    let mut cj = history_cronjob(None, None);
    let mut gone = finished_job("mycronjob-gone", "Complete", None);
    gone.status = None;
    let mut stray = finished_job("stray", "Complete", None);
    stray.status = None;
    if let Some(s) = cj.status.as_mut() {
        s.active = Some(vec![job_ref(&gone)]);
    }
    let now = add(top_of_the_hour(), mins(1));
    let plan = sync(&cj, std::slice::from_ref(&stray), now, &utc());
    assert_eq!(
        reasons(&plan),
        [
            (
                "UnexpectedJob",
                "Saw a job that the controller did not create or forgot: stray"
            ),
            ("MissingJob", "Active job went missing: mycronjob-gone"),
        ]
    );
    assert_eq!(plan.status.and_then(|s| s.active), Some(vec![]));
    assert!(needs_fresh_cronjob(&cj, std::slice::from_ref(&stray)));
    assert_eq!(active_missing_from_cache(&cj, &[stray]).len(), 1);

    // A live GET that still finds the Job keeps it listed.
    let lookups = Lookups {
        fresh_cronjob: None,
        live_active_jobs: BTreeSet::from(["uid-mycronjob-gone".to_string()]),
    };
    let plan = sync_with(&cj, NO_JOBS, now, &utc(), &lookups, &Outcomes::default());
    assert!(plan.events.is_empty());
    assert_eq!(plan.status, None);
}

#[test]
fn already_exists_not_controlled_is_left_alone() {
    let cj = history_cronjob(None, None);
    let now = add(top_of_the_hour(), hours(1) + mins(1));
    let mut other = finished_job("mycronjob-24394260", "Complete", None);
    other.status = None;
    other.metadata.owner_references = None;
    let outcomes = Outcomes {
        create: CreateOutcome::AlreadyExists(Some(Box::new(other))),
        ..Default::default()
    };
    let plan = sync_with(&cj, NO_JOBS, now, &utc(), &Lookups::default(), &outcomes);
    assert!(plan.job_to_create.is_some());
    assert_eq!(plan.status, None);
    assert_eq!(plan.requeue_after, None);
    assert_eq!(plan.error, None);
    assert!(plan.events.is_empty());
}

/// Recording a creation in the first plan gives what deciding again with the server's copy
/// gives, for every row of the sync table that creates a Job and for the history cases.
#[test]
fn recording_a_creation_equals_deciding_again() {
    let mut cases: Vec<(String, CronJob, Vec<Job>, CronJob, Timestamp)> = sync_rows()
        .iter()
        .map(|row| {
            let (cj, jobs, fresh, _, _) = setup(row);
            (
                format!("{}, {}", row.name, row.policy),
                cj,
                jobs,
                fresh,
                row.now,
            )
        })
        .collect();
    let later = add(top_of_the_hour(), hours(1) + mins(1));
    for (ok, failed) in [(Some(1), Some(1)), (Some(0), None), (None, None)] {
        let cj = history_cronjob(ok, failed);
        cases.push((
            format!("history {ok:?} {failed:?}"),
            cj.clone(),
            history_jobs(),
            cj,
            later,
        ));
    }
    let mut exercised = 0;
    for (name, cj, jobs, fresh, now) in &cases {
        let lookups = Lookups {
            fresh_cronjob: Some(fresh),
            live_active_jobs: BTreeSet::new(),
        };
        let first = sync_with(cj, jobs, *now, &utc(), &lookups, &Outcomes::default());
        let Some(planned) = first.job_to_create.as_ref() else {
            let mut unchanged = first.clone();
            assert!(!record_created(&mut unchanged, &Job::default()), "{name}");
            assert_eq!(unchanged, first, "{name}");
            continue;
        };
        // What the controller keeps of the server's answer: its metadata.
        let mut metadata = planned.metadata.clone();
        metadata.uid = Some("server-uid".into());
        metadata.resource_version = Some("77".into());
        let server = Job {
            metadata,
            ..Job::default()
        };
        let outcomes = Outcomes {
            create: CreateOutcome::CreatedAs(Box::new(server.clone())),
            ..Default::default()
        };
        let again = sync_with(cj, jobs, *now, &utc(), &lookups, &outcomes);
        let mut recorded = first.clone();
        assert!(record_created(&mut recorded, &server), "{name}");
        assert_eq!(recorded, again, "{name}");
        exercised += 1;
    }
    assert!(exercised >= 10, "only {exercised} cases create a Job");
}

#[test]
fn created_job_is_listed_with_the_servers_uid() {
    let cj = history_cronjob(None, None);
    let now = add(top_of_the_hour(), hours(1) + mins(1));
    let first = sync(&cj, NO_JOBS, now, &utc());
    let mut created = first.job_to_create.clone().unwrap_or_default();
    created.metadata.uid = Some("server-uid".into());
    created.metadata.resource_version = Some("42".into());
    let outcomes = Outcomes {
        create: CreateOutcome::CreatedAs(Box::new(created)),
        ..Default::default()
    };
    let plan = sync_with(&cj, NO_JOBS, now, &utc(), &Lookups::default(), &outcomes);
    let status = plan.status.clone().unwrap_or_default();
    let r = status
        .active
        .and_then(|a| a.into_iter().next())
        .unwrap_or_default();
    assert_eq!(r.uid.as_deref(), Some("server-uid"));
    assert_eq!(r.resource_version.as_deref(), Some("42"));
    assert_eq!(r.kind.as_deref(), Some("Job"));
    assert_eq!(r.api_version.as_deref(), Some("batch/v1"));
    assert_eq!(r.name.as_deref(), Some("mycronjob-24394260"));
    assert_eq!(r.namespace.as_deref(), Some("snazzycats"));
    assert_eq!(
        status.last_schedule_time.map(|t| t.0),
        Some(add(top_of_the_hour(), hours(1)))
    );
    assert_eq!(
        reasons(&plan),
        [("SuccessfulCreate", "Created job mycronjob-24394260")]
    );
}

#[test]
fn replace_deletes_every_active_job_then_creates() {
    let mut cj = history_cronjob(None, None);
    cj.spec.concurrency_policy = Some("Replace".into());
    let mk = |n: &str| {
        let mut j = finished_job(n, "Complete", None);
        j.status = None;
        j
    };
    let (a, b) = (mk("mycronjob-a"), mk("mycronjob-b"));
    if let Some(s) = cj.status.as_mut() {
        s.active = Some(vec![job_ref(&a), job_ref(&b)]);
    }
    let now = add(top_of_the_hour(), hours(1) + mins(1));
    let jobs = [a, b];
    let plan = sync(&cj, &jobs, now, &utc());
    assert_eq!(deleted(&plan), ["mycronjob-a", "mycronjob-b"]);
    assert!(
        plan.jobs_to_delete
            .iter()
            .all(|d| d.reason == DeletionReason::Replace)
    );
    assert!(plan.job_to_create.is_some());
    assert_eq!(plan.status.and_then(|s| s.active).map(|a| a.len()), Some(1));

    // A failed deletion stops the replacement: no create, an error, the Job stays listed.
    let mut outcomes = Outcomes::default();
    outcomes
        .failed_deletions
        .insert("mycronjob-a".into(), DeletionFailure::Delete("nope".into()));
    let plan = sync_with(&cj, &jobs, now, &utc(), &Lookups::default(), &outcomes);
    assert_eq!(deleted(&plan), ["mycronjob-a"]);
    assert_eq!(plan.job_to_create, None);
    assert_eq!(
        plan.error.as_deref(),
        Some("could not replace job snazzycats/mycronjob-a")
    );
    assert_eq!(plan.status, None);
}

#[test]
fn being_deleted_only_updates_status() {
    let mut cj = history_cronjob(None, None);
    cj.metadata.deletion_timestamp = Some(Time(top_of_the_hour()));
    let plan = sync(
        &cj,
        NO_JOBS,
        add(top_of_the_hour(), hours(1) + mins(1)),
        &utc(),
    );
    assert_eq!(plan.stop, Some(Stop::BeingDeleted));
    assert_eq!(plan.job_to_create, None);
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn schedule_warnings_are_worded_as_upstream() {
    let now = add(top_of_the_hour(), mins(1));
    let mut cj = history_cronjob(None, None);
    cj.spec.time_zone = Some("Mars/Olympus".into());
    assert_eq!(
        reasons(&sync(&cj, NO_JOBS, now, &utc())),
        [(
            "UnknownTimeZone",
            "invalid timeZone: \"Mars/Olympus\": unknown time zone Mars/Olympus"
        )]
    );
    let mut cj = history_cronjob(None, None);
    cj.spec.schedule = "* * * *".into();
    let plan = sync(&cj, NO_JOBS, now, &utc());
    assert_eq!(plan.stop, Some(Stop::UnparseableSchedule));
    assert_eq!(
        reasons(&plan),
        [(
            "UnparseableSchedule",
            "unparseable schedule: \"* * * *\" : expected exactly 5 fields, found 4: [* * * *]"
        )]
    );
    let mut cj = history_cronjob(None, None);
    cj.spec.schedule = "59 23 31 2 *".into();
    let plan = sync(&cj, NO_JOBS, now, &utc());
    assert_eq!(plan.stop, Some(Stop::InvalidSchedule));
    assert_eq!(
        reasons(&plan),
        [(
            "InvalidSchedule",
            "invalid schedule: 59 23 31 2 * : time difference between two schedules is less than 1 second"
        )]
    );
    let mut cj = history_cronjob(None, None);
    cj.spec.schedule = "CRON_TZ=UTC 0 * * * *".into();
    let plan = sync(
        &cj,
        NO_JOBS,
        add(top_of_the_hour(), hours(1) + mins(1)),
        &utc(),
    );
    assert_eq!(
        plan.events
            .first()
            .map(|e| (e.reason.as_str(), e.message.as_str())),
        Some((
            "UnsupportedSchedule",
            "CRON_TZ or TZ used in schedule \"CRON_TZ=UTC 0 * * * *\" is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"
        ))
    );
    let mut cj = history_cronjob(None, None);
    cj.status = None;
    cj.metadata.creation_timestamp = Some(Time(sub(top_of_the_hour(), hours(24 * 30))));
    let plan = sync(&cj, NO_JOBS, now, &utc());
    assert_eq!(
        plan.events
            .first()
            .map(|e| (e.reason.as_str(), e.message.as_str())),
        Some((
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
        ))
    );
    let mut cj = history_cronjob(None, None);
    cj.spec.concurrency_policy = Some("Forbid".into());
    let mut running = finished_job("mycronjob-1", "Complete", None);
    running.status = None;
    if let Some(s) = cj.status.as_mut() {
        s.active = Some(vec![job_ref(&running)]);
    }
    let plan = sync(
        &cj,
        &[running],
        add(top_of_the_hour(), hours(1) + mins(1)),
        &utc(),
    );
    assert_eq!(
        reasons(&plan),
        [(
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid"
        )]
    );
}

// ---------------------------------------------------------------------------------------
// TestControllerV2UpdateCronJob
// ---------------------------------------------------------------------------------------

#[test]
fn requeue_on_update_table() {
    let now = just_a_second_before_the_hour();
    let with = |schedule: &str, tz: Option<&str>, label: &str| {
        let mut cj = cronjob_for(
            schedule,
            tz,
            ts("0001-01-01T00:00:00Z"),
            Some(just_before_the_hour()),
        );
        if let Some(m) = cj.spec.job_template.metadata.as_mut() {
            m.labels = Some(BTreeMap::from([("a".to_string(), label.to_string())]));
        }
        cj
    };
    let z = utc();
    // spec.template changed: sync now.
    assert_eq!(
        requeue_on_update(&with("", None, "b"), &with("", None, "foo"), now, &z),
        Ok(Duration::ZERO)
    );
    assert_eq!(
        requeue_on_update(
            &with("30 * * * *", None, "b"),
            &with("*/1 * * * *", None, "foo"),
            now,
            &z
        ),
        Ok(secs(1) + NEXT_SCHEDULE_DELTA)
    );
    assert_eq!(
        requeue_on_update(
            &with("@every 1m", None, "b"),
            &with("@every 3m", None, "foo"),
            now,
            &z
        ),
        Ok(mins(2) + secs(1) + NEXT_SCHEDULE_DELTA)
    );
    assert_eq!(
        requeue_on_update(
            &with("@every 3m", None, "b"),
            &with("@every 1m", None, "foo"),
            now,
            &z
        ),
        Ok(secs(1) + NEXT_SCHEDULE_DELTA)
    );
    assert_eq!(
        requeue_on_update(
            &with("", Some(NEW_YORK), "b"),
            &with("", Some(NEW_YORK), "foo"),
            now,
            &z
        ),
        Ok(Duration::ZERO)
    );
    // The time zone changed but the (empty) schedule does not parse: an event, no requeue.
    assert_eq!(
        requeue_on_update(
            &with("", Some(NEW_YORK), "b"),
            &with("", None, "foo"),
            now,
            &z
        ),
        Err(CronJobEvent::unparseable_on_update(""))
    );
}

// ---------------------------------------------------------------------------------------
// No input makes the decision panic
// ---------------------------------------------------------------------------------------

#[test]
fn odd_inputs_do_not_panic() {
    let schedules = [
        "",
        "TZ=",
        "TZ=Nowhere 0 * * * *",
        "@every 1s",
        "@every 0s",
        "* * * * *",
        "TZ=Local 0 * * * *",
        "0 0 29 2 *",
        "59 23 31 2 *",
        "@yearly",
        "CRON_TZ=Asia/Kolkata */7 * * * *",
    ];
    let times = [
        ts("0001-01-01T00:00:00Z"),
        Timestamp::MIN,
        Timestamp::MAX,
        top_of_the_hour(),
        Timestamp::UNIX_EPOCH,
    ];
    let deadlines = [None, Some(0), Some(-5), Some(i64::MAX), Some(i64::MIN)];
    for schedule in schedules {
        for &created in &times {
            for &now in &times {
                for deadline in deadlines {
                    let mut cj = history_cronjob(Some(-3), Some(i32::MAX));
                    cj.spec.schedule = schedule.into();
                    cj.spec.starting_deadline_seconds = deadline;
                    cj.metadata.creation_timestamp = Some(Time(created));
                    cj.status = None;
                    let plan = sync(&cj, &history_jobs(), now, &utc());
                    let _ = plan.requeue_after;
                    cj.metadata.creation_timestamp = None;
                    cj.spec.time_zone = Some("Local".into());
                    let _ = sync(&cj, NO_JOBS, now, &utc());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// TestControllerV2GetJobsToBeReconciled
// ---------------------------------------------------------------------------------------

#[test]
fn jobs_to_be_reconciled_match_the_controller_name_only() {
    let cj = cron_job();
    let mk = |name: &str, ns: &str, owner: Option<(&str, &str, bool)>| {
        let mut j = finished_job(name, "Complete", None);
        j.metadata.namespace = Some(ns.into());
        j.metadata.labels = Some(BTreeMap::from([(
            "unrelated".to_string(),
            name.to_string(),
        )]));
        j.metadata.owner_references = owner.map(|(kind, owner_name, controller)| {
            let mut r = super::template::controller_ref(&cj);
            r.kind = kind.into();
            r.name = owner_name.into();
            r.uid = "another-uid".into();
            r.controller = Some(controller);
            vec![r]
        });
        j
    };
    let jobs = [
        mk(
            "owned-by-name",
            "snazzycats",
            Some(("CronJob", "mycronjob", true)),
        ),
        // Upstream compares the name alone, so another kind with the same name counts.
        mk(
            "other-kind",
            "snazzycats",
            Some(("Deployment", "mycronjob", true)),
        ),
        mk("other-name", "snazzycats", Some(("CronJob", "other", true))),
        mk(
            "not-controller",
            "snazzycats",
            Some(("CronJob", "mycronjob", false)),
        ),
        mk("orphan", "snazzycats", None),
        mk(
            "other-namespace",
            "elsewhere",
            Some(("CronJob", "mycronjob", true)),
        ),
    ];
    let got: Vec<_> = jobs_to_be_reconciled(&cj, &jobs)
        .into_iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    assert_eq!(got, ["owned-by-name", "other-kind"]);
}
