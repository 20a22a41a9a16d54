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
            if row.job_in_cj_active {
                if let Some(s) = cj.status.as_mut() {
                    s.active = Some(vec![r.clone()]);
                }
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
    if row.get_job_error {
        if let Some(j) = &job {
            outcomes.failed_deletions.insert(
                j.metadata.name.clone().unwrap_or_default(),
                DeletionFailure::Get("request is invalid".into()),
            );
        }
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
