//! Ported from upstream's TestTimeLeft, plus the decision and requeue for each case.

use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kbatch_api::keys;

use super::*;

fn now() -> Timestamp {
    "2024-05-01T12:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn ago(s: i64) -> Timestamp {
    now()
        .checked_sub(SignedDuration::from_secs(s))
        .unwrap_or(now())
}

fn later(s: i64) -> Timestamp {
    now()
        .checked_add(SignedDuration::from_secs(s))
        .unwrap_or(now())
}

fn cond(type_: &str, at: Option<Timestamp>) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: at.map(Time),
        ..Default::default()
    }
}

fn new_job(completed: Option<Timestamp>, failed: Option<Timestamp>, ttl: Option<i32>) -> Job {
    let mut conditions = Vec::new();
    if let Some(t) = completed {
        conditions.push(cond(keys::JOB_COMPLETE, Some(t)));
    }
    if let Some(t) = failed {
        conditions.push(cond(keys::JOB_FAILED, Some(t)));
    }
    Job {
        metadata: ObjectMeta {
            name: Some("foobar".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            ttl_seconds_after_finished: ttl,
            ..Default::default()
        }),
        status: Some(JobStatus {
            conditions: Some(conditions),
            ..Default::default()
        }),
    }
}

struct Row {
    name: &'static str,
    completed: Option<Timestamp>,
    failed: Option<Timestamp>,
    ttl: Option<i32>,
    /// `Err(substring)` or `Ok((seconds left, expiry))`.
    want: Result<(i64, Timestamp), &'static str>,
    decision: TtlDecision,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "Error case: Job unfinished",
            completed: None,
            failed: None,
            ttl: Some(100),
            want: Err("should not be cleaned up"),
            decision: TtlDecision::NotFinished,
        },
        Row {
            name: "Error case: Job completed now, no TTL",
            completed: Some(now()),
            failed: None,
            ttl: None,
            want: Err("should not be cleaned up"),
            decision: TtlDecision::NoTtl,
        },
        Row {
            name: "Job completed now, 0s TTL",
            completed: Some(now()),
            failed: None,
            ttl: Some(0),
            want: Ok((0, now())),
            decision: TtlDecision::DeleteNow,
        },
        Row {
            name: "Job completed now, 10s TTL",
            completed: Some(now()),
            failed: None,
            ttl: Some(10),
            want: Ok((10, later(10))),
            decision: TtlDecision::ExpireAt(later(10)),
        },
        Row {
            name: "Job completed 10s ago, 15s TTL",
            completed: Some(ago(10)),
            failed: None,
            ttl: Some(15),
            want: Ok((5, later(5))),
            decision: TtlDecision::ExpireAt(later(5)),
        },
        Row {
            name: "Error case: Job failed now, no TTL",
            completed: None,
            failed: Some(now()),
            ttl: None,
            want: Err("should not be cleaned up"),
            decision: TtlDecision::NoTtl,
        },
        Row {
            name: "Job failed now, 0s TTL",
            completed: None,
            failed: Some(now()),
            ttl: Some(0),
            want: Ok((0, now())),
            decision: TtlDecision::DeleteNow,
        },
        Row {
            name: "Job failed now, 10s TTL",
            completed: None,
            failed: Some(now()),
            ttl: Some(10),
            want: Ok((10, later(10))),
            decision: TtlDecision::ExpireAt(later(10)),
        },
        Row {
            name: "Job failed 10s ago, 15s TTL",
            completed: None,
            failed: Some(ago(10)),
            ttl: Some(15),
            want: Ok((5, later(5))),
            decision: TtlDecision::ExpireAt(later(5)),
        },
        Row {
            name: "Job failed 20s ago, 15s TTL",
            completed: None,
            failed: Some(ago(20)),
            ttl: Some(15),
            want: Ok((-5, ago(5))),
            decision: TtlDecision::DeleteNow,
        },
        Row {
            name: "Job finished in the future (clock skew) waits",
            completed: Some(later(30)),
            failed: None,
            ttl: Some(0),
            want: Ok((30, later(30))),
            decision: TtlDecision::ExpireAt(later(30)),
        },
    ]
}

#[test]
fn time_left_table() {
    for row in rows() {
        let job = new_job(row.completed, row.failed, row.ttl);
        match (time_left(&job, now()), row.want) {
            (Ok((left, at)), Ok((want_left, want_at))) => {
                assert_eq!(left, SignedDuration::from_secs(want_left), "{}", row.name);
                assert_eq!(at, want_at, "{}", row.name);
            }
            (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{}: {e}", row.name),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", row.name),
        }
        assert_eq!(ttl_decision(&job, now()), Ok(row.decision), "{}", row.name);
        let want_requeue = match row.decision {
            TtlDecision::ExpireAt(at) => Duration::try_from(at.duration_since(now())).ok(),
            _ => None,
        };
        assert_eq!(
            requeue_after(row.decision, now()),
            want_requeue,
            "{}",
            row.name
        );
        assert_eq!(
            needs_cleanup(&job),
            row.ttl.is_some() && (row.completed.is_some() || row.failed.is_some()),
            "{}",
            row.name
        );
    }
}

#[test]
fn requeue_is_the_time_left() {
    let job = new_job(Some(ago(10)), None, Some(15));
    let d = ttl_decision(&job, now()).unwrap_or(TtlDecision::NoTtl);
    assert_eq!(requeue_after(d, now()), Some(Duration::from_secs(5)));
}

#[test]
fn being_deleted_is_left_alone() {
    let mut job = new_job(Some(ago(100)), None, Some(1));
    job.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(ttl_decision(&job, now()), Ok(TtlDecision::NotFinished));
    assert!(!needs_cleanup(&job));
}

#[test]
fn finish_time_comes_from_the_first_terminal_condition() {
    let mut job = new_job(Some(ago(50)), None, Some(10));
    if let Some(c) = job.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c.insert(
            0,
            JobCondition {
                type_: keys::JOB_COMPLETE.into(),
                status: "False".into(),
                last_transition_time: Some(Time(ago(1000))),
                ..Default::default()
            },
        );
        c.push(cond(keys::JOB_FAILED, Some(ago(5))));
    }
    assert_eq!(job_finish_time(&job), Ok(ago(50)));
    assert_eq!(ttl_decision(&job, now()), Ok(TtlDecision::DeleteNow));
}

#[test]
fn missing_transition_time_is_an_error() {
    let mut job = new_job(None, None, Some(10));
    if let Some(s) = job.status.as_mut() {
        s.conditions = Some(vec![cond(keys::JOB_COMPLETE, None)]);
    }
    let err = ttl_decision(&job, now());
    assert_eq!(
        err.map_err(|e| e.to_string()),
        Err("unable to find the time when the Job default/foobar finished".to_string())
    );
}

#[test]
fn huge_ttl_near_the_end_of_time_does_not_panic() {
    let job = new_job(Some(Timestamp::MAX), None, Some(i32::MAX));
    assert_eq!(ttl_decision(&job, now()), Ok(TtlDecision::NoTtl));
    let job = new_job(Some(Timestamp::MIN), None, Some(0));
    assert_eq!(ttl_decision(&job, now()), Ok(TtlDecision::DeleteNow));
    let job = Job::default();
    assert_eq!(ttl_decision(&job, now()), Ok(TtlDecision::NotFinished));
}
