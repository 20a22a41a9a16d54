//! The accounting step alone, ported from upstream's TestTrackJobStatusAndRemoveFinalizers:
//! a Job status, its pods and the sync's finishing condition go in; the status writes (before
//! and after the finalizer removals) and the number of removals come out.

use std::collections::{BTreeMap, BTreeSet};

use kbatch_api::k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, UncountedTerminatedPods,
};
use kbatch_api::k8s_openapi::api::core::v1::{Pod, PodStatus};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kbatch_api::keys;

use super::indexed::Intervals;
use super::testutil::{job_indexed, job_nonindexed, long_ago, now};
use super::tracking::{self, TrackingInput, Uncounted};
use super::{conditions, pods};

/// A pod built like upstream's `buildPod()`: uid, phase, tracking finalizer, index,
/// deletion timestamp and index failure count.
#[derive(Clone, Default)]
struct B {
    uid: String,
    phase: &'static str,
    finalizer: bool,
    index: Option<String>,
    deleted: bool,
    failure_count: Option<&'static str>,
}

impl B {
    fn new(uid: &str, phase: &'static str) -> B {
        B {
            uid: uid.into(),
            phase,
            ..Default::default()
        }
    }
    fn fin(mut self) -> B {
        self.finalizer = true;
        self
    }
    fn ix(mut self, ix: &str) -> B {
        self.index = Some(ix.into());
        self
    }
    fn del(mut self) -> B {
        self.deleted = true;
        self
    }
    fn fc(mut self, n: &'static str) -> B {
        self.failure_count = Some(n);
        self
    }
    fn pod(self) -> Pod {
        let mut ann = BTreeMap::new();
        if let Some(ix) = self.index {
            ann.insert(keys::JOB_COMPLETION_INDEX_ANNOTATION.to_string(), ix);
        }
        if let Some(n) = self.failure_count {
            ann.insert(
                keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION.to_string(),
                n.to_string(),
            );
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{}", self.uid)),
                namespace: Some("default".into()),
                uid: Some(self.uid),
                finalizers: self
                    .finalizer
                    .then(|| vec![keys::JOB_TRACKING_FINALIZER.to_string()]),
                annotations: (!ann.is_empty()).then_some(ann),
                deletion_timestamp: self.deleted.then(|| Time(long_ago())),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(self.phase.into()),
                ..Default::default()
            }),
        }
    }
}

/// The parts of a status write the upstream table compares.
#[derive(Debug, Default, PartialEq)]
struct W {
    s: Vec<String>,
    f: Vec<String>,
    active: i32,
    succeeded: i32,
    failed: i32,
    completed: String,
    failed_indexes: Option<String>,
    conds: Vec<String>,
    completion_time: bool,
}

fn w_of(st: &JobStatus) -> W {
    let u = st.uncounted_terminated_pods.clone().unwrap_or_default();
    W {
        s: u.succeeded.unwrap_or_default(),
        f: u.failed.unwrap_or_default(),
        active: st.active.unwrap_or(0),
        succeeded: st.succeeded.unwrap_or(0),
        failed: st.failed.unwrap_or(0),
        completed: st.completed_indexes.clone().unwrap_or_default(),
        failed_indexes: st.failed_indexes.clone(),
        conds: st
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.clone())
            .collect(),
        completion_time: st.completion_time.is_some(),
    }
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn uncounted(s: &[&str], f: &[&str]) -> Option<UncountedTerminatedPods> {
    Some(UncountedTerminatedPods {
        succeeded: (!s.is_empty()).then(|| strs(s)),
        failed: (!f.is_empty()).then(|| strs(f)),
    })
}

fn cond(type_: &str) -> JobCondition {
    conditions::new(type_, "", "", long_ago())
}

struct Case {
    name: &'static str,
    job: Job,
    pods: Vec<Pod>,
    finished: Option<JobCondition>,
    expected_removed: &'static [&'static str],
    needs_flush: bool,
    /// UIDs whose removal fails (`None`: every removal succeeds).
    failing_removals: Option<&'static [&'static str]>,
    want_rm: usize,
    want: Vec<W>,
}

fn case(name: &'static str, job: Job, pods: Vec<Pod>, want_rm: usize, want: Vec<W>) -> Case {
    Case {
        name,
        job,
        pods,
        finished: None,
        expected_removed: &[],
        needs_flush: false,
        failing_removals: None,
        want_rm,
        want,
    }
}

fn status(f: impl FnOnce(&mut JobStatus)) -> impl FnOnce(Job) -> Job {
    move |mut j: Job| {
        f(j.status.get_or_insert_with(Default::default));
        j
    }
}

fn nonindexed() -> Job {
    job_nonindexed(1, Some(1), 6)
}

fn indexed(c: i32) -> Job {
    job_indexed(1, c, 6)
}

fn blpi(c: i32, limit: i32) -> Job {
    let mut j = indexed(c);
    if let Some(s) = j.spec.as_mut() {
        s.backoff_limit_per_index = Some(limit);
    }
    j
}

fn run(c: Case) {
    let Case {
        name,
        job,
        pods,
        finished,
        expected_removed,
        needs_flush,
        failing_removals,
        want_rm,
        want,
    } = c;
    let pods: Vec<&Pod> = pods.iter().collect();
    let mut st = job.status.clone().unwrap_or_default();
    if st.uncounted_terminated_pods.is_none() {
        st.uncounted_terminated_pods = Some(Default::default());
    }
    let terminating = pods.iter().filter(|p| pods::is_terminating(p)).count();
    st.terminating = Some(i32::try_from(terminating).unwrap_or(0));
    let un = Uncounted::from_status(&st);
    let expected: BTreeSet<String> = expected_removed.iter().map(|s| s.to_string()).collect();
    let spec = job.spec.clone().unwrap_or_default();
    let completions = super::indexed_completions(&job);
    let succeeded_indexes = completions
        .map(|c| Intervals::parse(st.completed_indexes.as_deref().unwrap_or(""), c))
        .unwrap_or_default();
    let mut failed_indexes = None;
    let mut delayed = BTreeMap::new();
    if let (Some(c), Some(_)) = (completions, spec.backoff_limit_per_index) {
        let prev = Intervals::parse(st.failed_indexes.as_deref().unwrap_or(""), c);
        let fi = super::failed_indexes_of(&job, &pods, &prev, &succeeded_indexes, c, false);
        let active: Vec<&Pod> = pods
            .iter()
            .filter(|p| pods::is_active(p))
            .copied()
            .collect();
        delayed = super::delayed_deletions(
            &job,
            &pods,
            &active,
            &succeeded_indexes,
            &fi,
            &expected,
            false,
        )
        .into_iter()
        .map(|(k, p)| (k, pods::uid(p).to_string()))
        .collect();
        failed_indexes = Some(fi);
    }
    let t = tracking::track(TrackingInput {
        job: &job,
        pods: &pods,
        status: st,
        uncounted: &un,
        expected_removed: &expected,
        removed_by_deletion: &BTreeSet::new(),
        finished,
        // Upstream's table leaves the previous indexes empty.
        prev_succeeded_indexes: Intervals::default(),
        succeeded_indexes,
        failed_indexes,
        delayed: &delayed,
        only_replace_failed: super::only_replace_failed(&spec),
        now: now(),
        max_uncounted: tracking::MAX_UNCOUNTED_PODS,
        needs_flush,
    });
    assert_eq!(t.finalizers_to_remove.len(), want_rm, "{name}: removals");
    let failing: BTreeSet<&str> = failing_removals.unwrap_or(&[]).iter().copied().collect();
    let removed: BTreeSet<String> = t
        .finalizers_to_remove
        .iter()
        .filter(|p| !failing.contains(p.uid.as_str()))
        .map(|p| p.uid.clone())
        .collect();
    let mut got: Vec<W> = t.first_write.iter().map(w_of).collect();
    got.extend(t.after.resolve(&removed).map(|(s, _)| w_of(&s)));
    assert_eq!(got, want, "{name}: status writes");
}

#[test]
fn track_job_status_and_remove_finalizers() {
    let (s, f, r, p) = ("Succeeded", "Failed", "Running", "Pending");
    let many: Vec<Pod> = (0..500)
        .map(|i| B::new(&i.to_string(), s).fin().pod())
        .chain([B::new("b", f).fin().pod()])
        .collect();
    let many_indexed: Vec<Pod> = (0..501)
        .map(|i| B::new(&i.to_string(), s).ix(&i.to_string()).fin().pod())
        .collect();
    let first_499: Vec<String> = (0..499).map(|i| i.to_string()).collect();
    let cases = vec![
        case("no updates", nonindexed(), vec![], 0, vec![]),
        Case {
            needs_flush: true,
            ..case(
                "new active",
                status(|s| s.active = Some(1))(nonindexed()),
                vec![],
                0,
                vec![W {
                    active: 1,
                    ..Default::default()
                }],
            )
        },
        case(
            "track finished pods",
            nonindexed(),
            vec![
                B::new("a", s).fin().pod(),
                B::new("b", f).fin().pod(),
                B::new("c", s).fin().del().pod(),
                B::new("d", f).fin().del().pod(),
                B::new("e", p).fin().del().pod(),
                B::new("x", p).fin().pod(),
                B::new("y", r).fin().pod(),
            ],
            5,
            vec![
                W {
                    s: strs(&["a", "c"]),
                    f: strs(&["b", "d", "e"]),
                    ..Default::default()
                },
                W {
                    succeeded: 2,
                    failed: 3,
                    ..Default::default()
                },
            ],
        ),
        case(
            "past and new finished pods",
            status(|st| {
                st.active = Some(1);
                st.succeeded = Some(2);
                st.failed = Some(3);
                st.uncounted_terminated_pods = uncounted(&["a", "e"], &["b", "f"]);
            })(nonindexed()),
            vec![
                B::new("e", s).pod(),
                B::new("x", f).pod(),
                B::new("y", p).pod(),
                B::new("a", s).fin().pod(),
                B::new("b", f).fin().pod(),
                B::new("c", s).fin().pod(),
                B::new("d", f).fin().pod(),
            ],
            4,
            vec![
                W {
                    s: strs(&["a", "c"]),
                    f: strs(&["b", "d"]),
                    active: 1,
                    succeeded: 3,
                    failed: 4,
                    ..Default::default()
                },
                W {
                    active: 1,
                    succeeded: 5,
                    failed: 6,
                    ..Default::default()
                },
            ],
        ),
        Case {
            expected_removed: &["c", "d", "g", "h"],
            ..case(
                "expecting removed finalizers",
                status(|st| {
                    st.succeeded = Some(2);
                    st.failed = Some(3);
                    st.uncounted_terminated_pods = uncounted(&["a", "g"], &["b", "h"]);
                })(nonindexed()),
                ["a", "c", "e", "g"]
                    .iter()
                    .map(|u| B::new(u, s).fin().pod())
                    .chain(
                        ["b", "d", "f", "h"]
                            .iter()
                            .map(|u| B::new(u, f).fin().pod()),
                    )
                    .collect(),
                4,
                vec![
                    W {
                        s: strs(&["a", "e"]),
                        f: strs(&["b", "f"]),
                        succeeded: 3,
                        failed: 4,
                        ..Default::default()
                    },
                    W {
                        succeeded: 5,
                        failed: 6,
                        ..Default::default()
                    },
                ],
            )
        },
        Case {
            finished: Some(cond(keys::JOB_SUCCESS_CRITERIA_MET)),
            ..case(
                "succeeding job by JobSuccessPolicy",
                nonindexed(),
                vec![
                    B::new("a", s).fin().pod(),
                    B::new("b", f).fin().pod(),
                    B::new("c", p).fin().pod(),
                ],
                3,
                vec![
                    W {
                        s: strs(&["a"]),
                        f: strs(&["b"]),
                        conds: strs(&["SuccessCriteriaMet"]),
                        ..Default::default()
                    },
                    W {
                        succeeded: 1,
                        failed: 1,
                        conds: strs(&["SuccessCriteriaMet", "Complete"]),
                        completion_time: true,
                        ..Default::default()
                    },
                ],
            )
        },
        Case {
            finished: Some(cond(keys::JOB_COMPLETE)),
            ..case(
                "completing job",
                nonindexed(),
                vec![B::new("a", s).fin().pod(), B::new("b", f).fin().pod()],
                2,
                vec![
                    W {
                        s: strs(&["a"]),
                        f: strs(&["b"]),
                        ..Default::default()
                    },
                    W {
                        succeeded: 1,
                        failed: 1,
                        conds: strs(&["Complete"]),
                        completion_time: true,
                        ..Default::default()
                    },
                ],
            )
        },
        Case {
            finished: Some(cond(keys::JOB_FAILED)),
            ..case(
                "failing job: the running pod counts as failed",
                nonindexed(),
                vec![
                    B::new("a", s).fin().pod(),
                    B::new("b", f).fin().pod(),
                    B::new("c", r).fin().pod(),
                ],
                3,
                vec![
                    W {
                        s: strs(&["a"]),
                        f: strs(&["b", "c"]),
                        ..Default::default()
                    },
                    W {
                        succeeded: 1,
                        failed: 2,
                        conds: strs(&["Failed"]),
                        ..Default::default()
                    },
                ],
            )
        },
        case(
            "deleted job: the running pod's finalizer goes but it is not counted",
            {
                let mut j = status(|st| st.active = Some(1))(nonindexed());
                j.metadata.deletion_timestamp = Some(Time(long_ago()));
                j
            },
            vec![
                B::new("a", s).fin().pod(),
                B::new("b", f).fin().pod(),
                B::new("x", r).fin().pod(),
            ],
            3,
            vec![
                W {
                    s: strs(&["a"]),
                    f: strs(&["b"]),
                    active: 1,
                    ..Default::default()
                },
                W {
                    active: 1,
                    succeeded: 1,
                    failed: 1,
                    ..Default::default()
                },
            ],
        ),
        Case {
            failing_removals: Some(&["a", "b"]),
            ..case(
                "pod patch errors",
                nonindexed(),
                vec![B::new("a", s).fin().pod(), B::new("b", f).fin().pod()],
                2,
                vec![W {
                    s: strs(&["a"]),
                    f: strs(&["b"]),
                    ..Default::default()
                }],
            )
        },
        Case {
            failing_removals: Some(&["c", "d"]),
            ..case(
                "pod patch errors with partial success",
                status(|st| st.uncounted_terminated_pods = uncounted(&["a"], &["b"]))(nonindexed()),
                vec![
                    B::new("a", s).pod(),
                    B::new("c", s).fin().pod(),
                    B::new("d", f).fin().pod(),
                ],
                2,
                vec![W {
                    s: strs(&["c"]),
                    f: strs(&["d"]),
                    succeeded: 1,
                    failed: 1,
                    ..Default::default()
                }],
            )
        },
        case(
            "indexed job new successful pods",
            status(|st| st.active = Some(1))(indexed(6)),
            vec![
                B::new("a", s).fin().ix("1").pod(),
                B::new("b", s).fin().ix("3").pod(),
                B::new("c", s).fin().ix("3").pod(),
                B::new("d", r).fin().ix("5").pod(),
                B::new("e", s).fin().pod(),
            ],
            4,
            vec![W {
                active: 1,
                succeeded: 2,
                completed: "1,3".into(),
                ..Default::default()
            }],
        ),
        case(
            "indexed job prev successful pods outside current completions index range with no new succeeded pods",
            status(|st| {
                st.active = Some(2);
                st.succeeded = Some(1);
                st.completed_indexes = Some("3".into());
            })(indexed(2)),
            vec![
                B::new("a", r).fin().ix("0").pod(),
                B::new("b", r).fin().ix("1").pod(),
            ],
            0,
            vec![W {
                active: 2,
                ..Default::default()
            }],
        ),
        case(
            "indexed job prev successful pods outside current completions index range with new succeeded pods in range",
            status(|st| {
                st.active = Some(2);
                st.succeeded = Some(1);
                st.completed_indexes = Some("3".into());
            })(indexed(2)),
            vec![
                B::new("a", r).fin().ix("0").pod(),
                B::new("b", s).fin().ix("1").pod(),
            ],
            1,
            vec![W {
                active: 2,
                succeeded: 1,
                completed: "1".into(),
                ..Default::default()
            }],
        ),
        case(
            "indexed job new failed pods",
            status(|st| st.active = Some(1))(indexed(6)),
            vec![
                B::new("a", f).fin().ix("1").pod(),
                B::new("b", f).fin().ix("3").pod(),
                B::new("c", f).fin().ix("3").pod(),
                B::new("d", r).fin().ix("5").pod(),
                B::new("e", f).fin().pod(),
            ],
            4,
            vec![
                W {
                    active: 1,
                    f: strs(&["a", "b", "c"]),
                    ..Default::default()
                },
                W {
                    active: 1,
                    failed: 3,
                    ..Default::default()
                },
            ],
        ),
        case(
            "indexed job past and new pods",
            status(|st| {
                st.failed = Some(2);
                st.succeeded = Some(5);
                st.completed_indexes = Some("0-2,4,6,7".into());
            })(indexed(7)),
            vec![
                B::new("x", s).ix("0").pod(),
                B::new("y", f).ix("1").pod(),
                B::new("z", s).fin().ix("1").pod(),
                B::new("w", s).fin().ix("3").pod(),
                B::new("a", f).fin().ix("2").pod(),
                B::new("b", f).fin().ix("5").pod(),
            ],
            4,
            vec![
                W {
                    succeeded: 6,
                    failed: 2,
                    completed: "0-4,6".into(),
                    f: strs(&["a", "b"]),
                    ..Default::default()
                },
                W {
                    succeeded: 6,
                    failed: 4,
                    completed: "0-4,6".into(),
                    ..Default::default()
                },
            ],
        ),
        case(
            "too many finished",
            status(|st| st.uncounted_terminated_pods = uncounted(&[], &["a", "b"]))(nonindexed()),
            many,
            499,
            vec![
                W {
                    s: first_499.clone(),
                    f: strs(&["b"]),
                    failed: 1,
                    ..Default::default()
                },
                W {
                    f: strs(&["b"]),
                    succeeded: 499,
                    failed: 1,
                    ..Default::default()
                },
            ],
        ),
        case(
            "too many indexed finished",
            indexed(501),
            many_indexed,
            500,
            vec![W {
                completed: "0-499".into(),
                succeeded: 500,
                ..Default::default()
            }],
        ),
        Case {
            finished: Some(cond(keys::JOB_FAILED)),
            ..case(
                "pod flips from failed to succeeded",
                status(|st| st.uncounted_terminated_pods = uncounted(&[], &["a", "b"]))(
                    job_nonindexed(2, Some(2), 6),
                ),
                vec![B::new("a", f).fin().pod(), B::new("b", s).fin().pod()],
                2,
                vec![W {
                    failed: 2,
                    conds: strs(&["Failed"]),
                    ..Default::default()
                }],
            )
        },
        Case {
            finished: Some(cond(keys::JOB_FAILED)),
            ..case(
                "pod is terminal; JobFailed condition is set",
                status(|st| st.uncounted_terminated_pods = uncounted(&[], &["a"]))(nonindexed()),
                vec![B::new("a", f).fin().pod()],
                1,
                vec![W {
                    failed: 1,
                    conds: strs(&["Failed"]),
                    ..Default::default()
                }],
            )
        },
        Case {
            finished: Some(cond(keys::JOB_FAILED)),
            ..case(
                "pod is terminating; counted as failed, but the JobFailed condition is delayed",
                status(|st| {
                    st.uncounted_terminated_pods = uncounted(&[], &["a"]);
                    st.conditions = Some(vec![cond(keys::JOB_FAILURE_TARGET)]);
                })(nonindexed()),
                vec![B::new("a", r).del().pod()],
                0,
                vec![W {
                    failed: 1,
                    conds: strs(&["FailureTarget"]),
                    ..Default::default()
                }],
            )
        },
        Case {
            finished: Some(cond(keys::JOB_COMPLETE)),
            ..case(
                "pod is terminating; JobSuccessCriteriaMet, but JobComplete condition is delayed",
                status(|st| {
                    st.uncounted_terminated_pods = uncounted(&["b"], &["a"]);
                    st.conditions = Some(vec![cond(keys::JOB_SUCCESS_CRITERIA_MET)]);
                })(nonindexed()),
                vec![B::new("a", r).del().pod()],
                0,
                vec![W {
                    succeeded: 1,
                    failed: 1,
                    conds: strs(&["SuccessCriteriaMet"]),
                    ..Default::default()
                }],
            )
        },
        case(
            "indexed job with a failed pod with delayed finalizer removal; the pod is not counted",
            blpi(6, 1),
            vec![B::new("a", f).fc("0").fin().ix("1").pod()],
            0,
            vec![W {
                failed_indexes: Some(String::new()),
                ..Default::default()
            }],
        ),
        case(
            "indexed job with a failed pod which is recreated by a running pod; the pod is counted",
            status(|st| st.active = Some(1))(blpi(6, 1)),
            vec![
                B::new("a1", f).fc("0").fin().ix("1").pod(),
                B::new("a2", r).fc("1").fin().ix("1").pod(),
            ],
            1,
            vec![
                W {
                    active: 1,
                    f: strs(&["a1"]),
                    failed_indexes: Some(String::new()),
                    ..Default::default()
                },
                W {
                    active: 1,
                    failed: 1,
                    failed_indexes: Some(String::new()),
                    ..Default::default()
                },
            ],
        ),
        case(
            "indexed job with a failed pod for a failed index; the pod is counted",
            blpi(6, 1),
            vec![B::new("a", f).fc("1").fin().ix("1").pod()],
            1,
            vec![
                W {
                    f: strs(&["a"]),
                    failed_indexes: Some("1".into()),
                    ..Default::default()
                },
                W {
                    failed: 1,
                    failed_indexes: Some("1".into()),
                    ..Default::default()
                },
            ],
        ),
    ];
    for c in cases {
        run(c);
    }
}
