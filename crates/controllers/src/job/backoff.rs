//! Pod-failure back-off: how long to wait before replacing failed pods. The delay doubles with
//! each failure since the last success (per index for backoffLimitPerIndex), from `base` up to
//! `max`, counted from when the last failed pod finished.

use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::pods;

/// Upstream `DefaultJobPodFailureBackOff`.
pub const DEFAULT_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream `MaxJobPodFailureBackOff`.
pub const MAX_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    pub base: Duration,
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            base: DEFAULT_POD_FAILURE_BACKOFF,
            max: MAX_POD_FAILURE_BACKOFF,
        }
    }
}

/// What the controller remembers of a Job's failures between syncs (kept outside the Job, as
/// upstream's backoff store is; lost on restart, which only shortens one delay).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackoffRecord {
    pub failures_after_last_success: i32,
    pub last_failure_time: Option<Timestamp>,
}

impl BackoffRecord {
    /// The record after observing newly finished pods: a success resets the count, and only
    /// failures that finished after the latest success count again.
    pub fn observe(&self, new_succeeded: &[&Pod], new_failed: &[&Pod]) -> BackoffRecord {
        let mut failed: Vec<Timestamp> = new_failed.iter().map(|p| finish_time(p)).collect();
        failed.sort();
        let last_success = new_succeeded.iter().map(|p| finish_time(p)).max();
        match last_success {
            None => {
                let Some(&last) = failed.last() else {
                    return self.clone();
                };
                BackoffRecord {
                    failures_after_last_success: self
                        .failures_after_last_success
                        .saturating_add(i32::try_from(failed.len()).unwrap_or(i32::MAX)),
                    last_failure_time: Some(last),
                }
            }
            Some(success) => {
                let after: Vec<Timestamp> = failed.into_iter().filter(|t| *t > success).collect();
                BackoffRecord {
                    failures_after_last_success: i32::try_from(after.len()).unwrap_or(i32::MAX),
                    last_failure_time: after.last().copied(),
                }
            }
        }
    }

    /// Time left before pods may be created again; zero when there is no pending back-off.
    pub fn remaining(&self, now: Timestamp, cfg: &BackoffConfig) -> Duration {
        remaining_for_failures(
            now,
            cfg,
            self.failures_after_last_success,
            self.last_failure_time,
        )
    }
}

/// The back-off owed after `failures` failures, the last at `last_failure`.
pub fn remaining_for_failures(
    now: Timestamp,
    cfg: &BackoffConfig,
    failures: i32,
    last_failure: Option<Timestamp>,
) -> Duration {
    let Some(last) = last_failure else {
        return Duration::ZERO;
    };
    if failures <= 0 {
        return Duration::ZERO;
    }
    let mut delay = cfg.base;
    if delay.is_zero() {
        // No back-off configured (tests shorten it to nothing).
        return Duration::ZERO;
    }
    for _ in 1..failures {
        delay = delay.saturating_mul(2);
        if delay >= cfg.max {
            delay = cfg.max;
            break;
        }
    }
    let elapsed = now.duration_since(last);
    // A finish time in the future (clock skew) counts as just now.
    let elapsed = Duration::try_from(elapsed.max(SignedDuration::ZERO)).unwrap_or(Duration::ZERO);
    delay.saturating_sub(elapsed)
}

/// The back-off owed for an index whose last failed pod is `last_failed` (per-index limits):
/// the exponent is the index's failures so far, counted ones and ignored ones alike.
pub fn remaining_for_index(
    now: Timestamp,
    cfg: &BackoffConfig,
    last_failed: Option<&Pod>,
) -> Duration {
    let Some(p) = last_failed else {
        return Duration::ZERO;
    };
    let failures = super::pod_failure_policy::index_failure_count(p)
        .saturating_add(super::pod_failure_policy::index_ignored_failure_count(p))
        .saturating_add(1);
    remaining_for_failures(now, cfg, failures, Some(finish_time(p)))
}

/// When a pod finished: the latest container finish time when every container terminated,
/// else when it became not ready, else its deletion time minus the grace period, else its
/// creation time.
pub fn finish_time(p: &Pod) -> Timestamp {
    finish_from_containers(p)
        .or_else(|| {
            pods::condition(p, "Ready")
                .filter(|c| c.status == "False")
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0)
        })
        .or_else(|| {
            let del = p.metadata.deletion_timestamp.as_ref()?.0;
            let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
            del.checked_sub(SignedDuration::from_secs(grace)).ok()
        })
        .or_else(|| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn finish_from_containers(p: &Pod) -> Option<Timestamp> {
    let status = p.status.as_ref()?;
    let mut latest = latest_finish(
        None,
        status.container_statuses.as_deref().unwrap_or(&[]),
        |_| true,
    )?;
    // Sidecars (restartable init containers) stop after the main containers.
    let sidecars: Vec<&str> = p
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|ics| {
            ics.iter()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| c.name.as_str())
                .collect()
        })
        .unwrap_or_default();
    if !sidecars.is_empty() {
        latest = latest_finish(
            Some(latest),
            status.init_container_statuses.as_deref().unwrap_or(&[]),
            |c| sidecars.contains(&c.name.as_str()),
        )?;
    }
    Some(latest)
}

/// The latest finish time among the selected containers; none if one has not terminated.
fn latest_finish(
    prev: Option<Timestamp>,
    statuses: &[ContainerStatus],
    select: impl Fn(&ContainerStatus) -> bool,
) -> Option<Timestamp> {
    let mut latest = prev;
    for cs in statuses.iter().filter(|c| select(c)) {
        let t = cs
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
            .map(|t| t.0)?;
        if latest.is_none_or(|l| l < t) {
            latest = Some(t);
        }
    }
    latest
}

#[cfg(test)]
// Scenario tables read best as tuples.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::job::testutil::*;

    fn secs(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn observe_table() {
        // (initial record, succeeded finish offsets, failed finish offsets, want failures, want last)
        let cases: &[(&str, (i32, Option<i64>), &[i64], &[i64], i32, Option<i64>)] = &[
            ("empty", (0, None), &[], &[], 0, None),
            (
                "keeps record without new pods",
                (2, Some(5)),
                &[],
                &[],
                2,
                Some(5),
            ),
            ("one failure", (0, None), &[], &[10], 1, Some(10)),
            ("failures add up", (2, Some(5)), &[], &[10, 20], 4, Some(20)),
            ("success resets", (3, Some(5)), &[30], &[], 0, None),
            (
                "failures after success",
                (3, Some(5)),
                &[30],
                &[10, 40, 50],
                2,
                Some(50),
            ),
            (
                "failures before success",
                (3, Some(5)),
                &[60],
                &[10, 40],
                0,
                None,
            ),
            (
                "unsorted input",
                (0, None),
                &[25],
                &[50, 10, 40],
                2,
                Some(50),
            ),
        ];
        for (name, (f0, t0), succ, fail, want_f, want_t) in cases {
            let rec = BackoffRecord {
                failures_after_last_success: *f0,
                last_failure_time: t0.map(secs),
            };
            let s: Vec<Pod> = succ
                .iter()
                .map(|o| pod_finished_at("Succeeded", secs(*o)))
                .collect();
            let f: Vec<Pod> = fail
                .iter()
                .map(|o| pod_finished_at("Failed", secs(*o)))
                .collect();
            let got = rec.observe(&s.iter().collect::<Vec<_>>(), &f.iter().collect::<Vec<_>>());
            assert_eq!(got.failures_after_last_success, *want_f, "{name}");
            assert_eq!(got.last_failure_time, want_t.map(secs), "{name}");
        }
    }

    #[test]
    fn remaining_table() {
        let cfg = BackoffConfig {
            base: Duration::from_secs(5),
            max: Duration::from_secs(15),
        };
        // (failures, last failure offset, now offset, want seconds)
        let cases: &[(i32, Option<i64>, i64, u64)] = &[
            (0, None, 0, 0),
            (0, Some(0), 0, 0),
            (1, Some(0), 0, 5),
            (1, Some(0), 3, 2),
            (1, Some(0), 5, 0),
            (1, Some(0), 6, 0),
            (2, Some(0), 1, 9),
            (3, Some(0), 0, 15),
            (10, Some(0), 14, 1),
            (1, Some(10), 0, 5),
        ];
        for (f, last, now, want) in cases {
            let rec = BackoffRecord {
                failures_after_last_success: *f,
                last_failure_time: last.map(secs),
            };
            assert_eq!(
                rec.remaining(secs(*now), &cfg),
                Duration::from_secs(*want),
                "{f} {last:?} {now}"
            );
        }
    }

    /// 2009-11-10T23:00:00Z plus `ms` milliseconds, the reference time of upstream's tables.
    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_257_894_000_000 + ms).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn pod_at(phase: &str, finished: &[Option<i64>]) -> Pod {
        let mut p = new_pod_in_phase(phase);
        p.metadata.creation_timestamp = None;
        if let Some(s) = p.status.as_mut() {
            s.container_statuses = Some(
                finished
                    .iter()
                    .map(|f| ContainerStatus {
                        name: "c".into(),
                        state: Some(kbatch_api::k8s_openapi::api::core::v1::ContainerState {
                            terminated: f.map(|ms| {
                                kbatch_api::k8s_openapi::api::core::v1::ContainerStateTerminated {
                                    finished_at: Some(time(t(ms))),
                                    ..Default::default()
                                }
                            }),
                            running: f.is_none().then(Default::default),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            );
        }
        p
    }

    #[test]
    fn new_backoff_record_table() {
        // TestNewBackoffRecord: (name, stored failures, succeeded ms, failed ms, want count,
        // want last failure ms)
        let cases: &[(&str, i32, &[i64], &[i64], i32, Option<i64>)] = &[
            ("empty store and one new failure", 0, &[], &[0], 1, Some(0)),
            (
                "empty store and two new failures",
                0,
                &[],
                &[0, -1],
                2,
                Some(0),
            ),
            (
                "empty store, two failures followed by success",
                0,
                &[0],
                &[-2, -1],
                0,
                None,
            ),
            (
                "empty store, two failures, one success and two more failures",
                0,
                &[-2],
                &[0, -4, -3, -1],
                2,
                Some(0),
            ),
            (
                "store having failure count 2 and one new failure",
                2,
                &[],
                &[0],
                3,
                Some(0),
            ),
            (
                "success and failure at the same timestamp",
                0,
                &[0],
                &[0],
                0,
                None,
            ),
            ("no success or failure", 0, &[], &[], 0, None),
            ("one success", 0, &[0], &[], 0, None),
        ];
        for (name, stored, succ, fail, want_n, want_t) in cases {
            let rec = BackoffRecord {
                failures_after_last_success: *stored,
                last_failure_time: None,
            };
            let s: Vec<Pod> = succ
                .iter()
                .map(|ms| pod_at("Succeeded", &[Some(*ms)]))
                .collect();
            let f: Vec<Pod> = fail
                .iter()
                .map(|ms| pod_at("Failed", &[Some(*ms)]))
                .collect();
            let got = rec.observe(&s.iter().collect::<Vec<_>>(), &f.iter().collect::<Vec<_>>());
            assert_eq!(got.failures_after_last_success, *want_n, "{name}");
            assert_eq!(got.last_failure_time, want_t.map(t), "{name}");
        }
    }

    #[test]
    fn get_finished_time_table() {
        let sec = 1000;
        let mut cases: Vec<(&str, Pod, Timestamp)> = Vec::new();
        cases.push((
            "multiple containers, all terminated",
            pod_at("Failed", &[Some(-sec), Some(0), Some(-2 * sec)]),
            t(0),
        ));
        let mut p = pod_at("Failed", &[Some(-sec), None, Some(-2 * sec)]);
        p.metadata.deletion_timestamp = Some(time(t(0)));
        cases.push(("one container still running: deletion timestamp", p, t(0)));
        let mut p = pod_at("Failed", &[None]);
        p.metadata.deletion_timestamp = Some(time(t(0)));
        p.metadata.deletion_grace_period_seconds = Some(30);
        cases.push(("deletion timestamp minus the grace period", p, t(-30 * sec)));
        let mut p = new_pod_in_phase("Failed");
        p.metadata.creation_timestamp = None;
        set_ready(&mut p, false, t(0));
        cases.push(("Ready=False transition time", p, t(0)));
        let mut p = new_pod_in_phase("Failed");
        set_ready(&mut p, true, t(-30 * sec));
        p.metadata.deletion_timestamp = Some(time(t(0)));
        cases.push(("Ready=True is skipped", p, t(0)));
        let mut p = new_pod_in_phase("Failed");
        p.metadata.creation_timestamp = Some(time(t(0)));
        cases.push(("creation timestamp", p, t(0)));
        let mut p = pod_at("Failed", &[Some(-sec)]);
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(vec![kbatch_api::k8s_openapi::api::core::v1::Container {
                name: "sidecar".into(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            }]);
        }
        if let Some(s) = p.status.as_mut() {
            let mut sidecar = pod_at("Failed", &[Some(0)])
                .status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default();
            if let Some(c) = sidecar.first_mut() {
                c.name = "sidecar".into();
            }
            s.init_container_statuses = Some(sidecar);
        }
        cases.push(("sidecar finishes after the main containers", p, t(0)));
        for (name, pod, want) in cases {
            assert_eq!(finish_time(&pod), want, "{name}");
        }
    }

    #[test]
    fn get_remaining_backoff_time_table() {
        let cfg = BackoffConfig {
            base: Duration::from_secs(5),
            max: Duration::from_secs(700),
        };
        // (name, failures, last failure set, now offset s, want s)
        let cases: &[(&str, i32, bool, i64, u64)] = &[
            ("no failures", 0, false, 0, 0),
            ("one failure; same time", 1, true, 0, 5),
            ("one failure; 1s later", 1, true, 1, 4),
            ("one failure; at the expected back-off", 1, true, 5, 0),
            ("one failure; past the expected back-off", 1, true, 6, 0),
            ("three failures", 3, true, 0, 20),
            ("eight failures, below the max", 8, true, 0, 640),
            ("nine failures, capped at the max", 9, true, 0, 700),
        ];
        for (name, n, has_last, now_s, want) in cases {
            let rec = BackoffRecord {
                failures_after_last_success: *n,
                last_failure_time: has_last.then(|| t(0)),
            };
            assert_eq!(
                rec.remaining(t(now_s * 1000), &cfg),
                Duration::from_secs(*want),
                "{name}"
            );
        }
    }

    #[test]
    fn get_remaining_backoff_time_per_index_table() {
        let cfg = BackoffConfig {
            base: Duration::from_secs(5),
            max: Duration::from_secs(700),
        };
        let failed_at = |count: &str, ignored: Option<&str>| {
            let mut p = new_pod_in_phase("Failed");
            p.metadata.deletion_timestamp = Some(time(t(0)));
            annotate(
                &mut p,
                kbatch_api::keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION,
                count,
            );
            if let Some(i) = ignored {
                annotate(
                    &mut p,
                    kbatch_api::keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION,
                    i,
                );
            }
            p
        };
        assert_eq!(
            remaining_for_index(t(0), &cfg, None),
            Duration::ZERO,
            "no failures"
        );
        let p = failed_at("2", None);
        assert_eq!(
            remaining_for_index(t(0), &cfg, Some(&p)),
            Duration::from_secs(20),
            "two prev failures"
        );
        let p = failed_at("1", Some("1"));
        assert_eq!(
            remaining_for_index(t(0), &cfg, Some(&p)),
            Duration::from_secs(20),
            "one prev failure counted and one ignored"
        );
    }

    #[test]
    fn finish_time_sources() {
        let p = pod_finished_at("Failed", secs(7));
        assert_eq!(finish_time(&p), secs(7));
        let mut p = new_pod_in_phase("Failed");
        p.metadata.creation_timestamp = Some(time(secs(1)));
        assert_eq!(finish_time(&p), secs(1));
        p.metadata.deletion_timestamp = Some(time(secs(40)));
        p.metadata.deletion_grace_period_seconds = Some(30);
        assert_eq!(finish_time(&p), secs(10));
        set_ready(&mut p, false, secs(20));
        assert_eq!(finish_time(&p), secs(20));
    }

    #[test]
    fn per_index_remaining_uses_annotations() {
        let cfg = BackoffConfig::default();
        let mut p = pod_finished_at("Failed", secs(0));
        assert_eq!(
            remaining_for_index(secs(0), &cfg, Some(&p)),
            Duration::from_secs(10)
        );
        annotate(
            &mut p,
            kbatch_api::keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION,
            "1",
        );
        assert_eq!(
            remaining_for_index(secs(0), &cfg, Some(&p)),
            Duration::from_secs(20)
        );
        annotate(
            &mut p,
            kbatch_api::keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION,
            "1",
        );
        assert_eq!(
            remaining_for_index(secs(15), &cfg, Some(&p)),
            Duration::from_secs(25)
        );
        assert_eq!(remaining_for_index(secs(0), &cfg, None), Duration::ZERO);
    }
}
