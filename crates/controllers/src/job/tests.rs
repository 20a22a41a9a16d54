//! Scenario tables for [`super::sync`], ported from upstream's job controller tests (the
//! rows that describe the newest release, where every Job feature is on): the facts of each
//! row go in, the plan's counts, conditions, created indexes and status come out.

use std::collections::BTreeSet;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule, SuccessPolicy, SuccessPolicyRule,
    UncountedTerminatedPods,
};
use kbatch_api::k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kbatch_api::keys;

use super::backoff::BackoffRecord;
use super::indexed::Intervals;
use super::testutil::*;
use super::*;

// ---------------------------------------------------------------------------------------
// Pod shorthands.

fn n(phase: &str, count: usize) -> Vec<Pod> {
    (0..count).map(|_| new_pod_in_phase(phase)).collect()
}

fn running(count: usize) -> Vec<Pod> {
    n("Running", count)
}

fn pending(count: usize) -> Vec<Pod> {
    n("Pending", count)
}

fn succeeded(count: usize) -> Vec<Pod> {
    (0..count)
        .map(|_| pod_finished_at("Succeeded", long_ago()))
        .collect()
}

fn failed(count: usize) -> Vec<Pod> {
    (0..count)
        .map(|_| pod_finished_at("Failed", long_ago()))
        .collect()
}

fn ready(count: usize) -> Vec<Pod> {
    (0..count)
        .map(|_| {
            let mut p = new_pod_in_phase("Running");
            set_ready(&mut p, true, long_ago());
            p
        })
        .collect()
}

/// Running pods being deleted.
fn terminating(count: usize) -> Vec<Pod> {
    running(count).into_iter().map(deleted).collect()
}

/// One pod per "index:phase" entry, phase as a letter: P(ending), R(unning), S(ucceeded),
/// F(ailed). The index may be any string, valid or not.
fn indexed_pods(spec: &[(&str, char)]) -> Vec<Pod> {
    spec.iter()
        .map(|(ix, ph)| {
            let p = match ph {
                'P' => new_pod_in_phase("Pending"),
                'R' => new_pod_in_phase("Running"),
                'S' => pod_finished_at("Succeeded", long_ago()),
                _ => pod_finished_at("Failed", long_ago()),
            };
            with_index(p, ix)
        })
        .collect()
}

fn cat(parts: Vec<Vec<Pod>>) -> Vec<Pod> {
    parts.into_iter().flatten().collect()
}

fn with_spec(
    mut job: Job,
    f: impl FnOnce(&mut kbatch_api::k8s_openapi::api::batch::v1::JobSpec),
) -> Job {
    if let Some(s) = job.spec.as_mut() {
        f(s);
    }
    job
}

fn with_status(mut job: Job, f: impl FnOnce(&mut JobStatus)) -> Job {
    f(job.status.get_or_insert_with(Default::default));
    job
}

fn cond(type_: &str, status: &str, reason: &str, msg: &str) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(msg.into()),
        last_probe_time: Some(Time(long_ago())),
        last_transition_time: Some(Time(long_ago())),
    }
}

fn exit_rule(action: &str, values: &[i32]) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
            container_name: None,
            operator: "In".into(),
            values: values.to_vec(),
        }),
        on_pod_conditions: None,
    }
}

fn condition_rule(action: &str, type_: &str) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: None,
        on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
            type_: type_.into(),
            status: Some("True".into()),
        }]),
    }
}

/// A failed pod whose main container exited with `code`.
fn failed_with_exit(code: i32) -> Pod {
    let mut p = pod_finished_at("Failed", long_ago());
    if let Some(cs) = p
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
        .and_then(|c| c.first_mut())
        && let Some(t) = cs.state.as_mut().and_then(|s| s.terminated.as_mut())
    {
        t.exit_code = code;
    }
    p
}

fn named(mut p: Pod, name: &str) -> Pod {
    p.metadata.name = Some(name.into());
    p
}

// ---------------------------------------------------------------------------------------
// The row format.

#[derive(Default)]
struct Want {
    creates: usize,
    deletes: usize,
    created_indexes: Option<Vec<i32>>,
    active: i32,
    ready: i32,
    succeeded: i32,
    failed: i32,
    terminating: i32,
    completed_indexes: Option<&'static str>,
    failed_indexes: Option<&'static str>,
    /// (type, status, reason); an empty list means no conditions.
    conditions: Vec<(&'static str, &'static str, &'static str)>,
    /// Finalizer removals: by deletions that remove it first plus by accounting.
    patches: usize,
    requeue: Option<Duration>,
    /// Messages of the conditions, when checked.
    messages: Vec<&'static str>,
}

struct Row {
    name: &'static str,
    job: Job,
    pods: Vec<Pod>,
    ctx: SyncContext,
    want: Want,
}

fn row(name: &'static str, job: Job, pods: Vec<Pod>, want: Want) -> Row {
    Row {
        name,
        job,
        pods,
        ctx: SyncContext::default(),
        want,
    }
}

fn created_indexes(plan: &Plan) -> Vec<i32> {
    plan.pods_to_create
        .iter()
        .filter_map(indexed::completion_index)
        .collect()
}

fn run(r: Row) {
    let Row {
        name,
        job,
        pods,
        ctx,
        want,
    } = r;
    let plan = sync(&job, &pods, now(), &ctx);
    assert_eq!(plan.skip, None, "{name}: skipped");
    assert_eq!(plan.pods_to_create.len(), want.creates, "{name}: creates");
    assert_eq!(plan.pods_to_delete.len(), want.deletes, "{name}: deletes");
    if let Some(ix) = want.created_indexes.as_ref() {
        assert_eq!(&created_indexes(&plan), ix, "{name}: created indexes");
    }
    let by_name: std::collections::BTreeMap<&str, &Pod> =
        pods.iter().map(|p| (pods::uid(p), p)).collect();
    let deletion_patches = plan
        .pods_to_delete
        .iter()
        .filter(|d| {
            d.remove_finalizer_first()
                && by_name
                    .get(d.pod.uid.as_str())
                    .is_some_and(|p| pods::has_tracking_finalizer(p))
        })
        .count();
    assert_eq!(
        deletion_patches + plan.finalizers_to_remove.len(),
        want.patches,
        "{name}: finalizer patches"
    );
    let st = plan
        .final_status()
        .or_else(|| job.status.clone())
        .unwrap_or_default();
    assert_eq!(st.active.unwrap_or(0), want.active, "{name}: active");
    assert_eq!(st.ready.unwrap_or(0), want.ready, "{name}: ready");
    assert_eq!(
        st.succeeded.unwrap_or(0),
        want.succeeded,
        "{name}: succeeded"
    );
    assert_eq!(st.failed.unwrap_or(0), want.failed, "{name}: failed");
    assert_eq!(
        st.terminating.unwrap_or(0),
        want.terminating,
        "{name}: terminating"
    );
    if let Some(ci) = want.completed_indexes {
        assert_eq!(
            st.completed_indexes.as_deref().unwrap_or(""),
            ci,
            "{name}: completedIndexes"
        );
    }
    if let Some(fi) = want.failed_indexes {
        assert_eq!(
            st.failed_indexes.as_deref(),
            Some(fi),
            "{name}: failedIndexes"
        );
    }
    let got: Vec<(String, String, String)> = st
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
            )
        })
        .collect();
    let want_c: Vec<(String, String, String)> = want
        .conditions
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want_c, "{name}: conditions");
    if !want.messages.is_empty() {
        let msgs: Vec<&str> = st
            .conditions
            .iter()
            .flatten()
            .map(|c| c.message.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(msgs, want.messages, "{name}: condition messages");
    }
    let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    let finished = st
        .conditions
        .iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
    if !finished {
        assert_eq!(
            st.start_time.is_none(),
            suspended,
            "{name}: startTime set iff not suspended"
        );
    }
    if let Some(rq) = want.requeue {
        assert_eq!(plan.requeue_after, Some(rq), "{name}: requeue");
    }
    check_status_is_valid(name, &job, &plan);
    check_created_pods(name, &job, &plan);
}

/// The API server's Job status rules (section 3.3 of the validation notes) that a plan's
/// writes could break.
fn check_status_is_valid(name: &str, job: &Job, plan: &Plan) {
    let mut writes = Vec::new();
    writes.extend(plan.status.clone());
    writes.extend(plan.status_after_all_finalizers().map(|(s, _)| s));
    let mut prev = job.status.clone().unwrap_or_default();
    for st in writes {
        let conds = st.conditions.clone().unwrap_or_default();
        let t = |ty: &str| conditions::is_true(&conds, ty);
        let finished = t(keys::JOB_COMPLETE) || t(keys::JOB_FAILED);
        assert!(
            st.ready.unwrap_or(0) <= st.active.unwrap_or(0),
            "{name}: ready > active"
        );
        assert!(
            st.failed.unwrap_or(0) >= prev.failed.unwrap_or(0),
            "{name}: failed decreased"
        );
        assert!(
            !t(keys::JOB_FAILED) || t(keys::JOB_FAILURE_TARGET),
            "{name}: Failed without FailureTarget"
        );
        assert!(
            !t(keys::JOB_COMPLETE) || t(keys::JOB_SUCCESS_CRITERIA_MET),
            "{name}: Complete without SuccessCriteriaMet"
        );
        assert!(
            !(t(keys::JOB_SUCCESS_CRITERIA_MET) && t(keys::JOB_FAILURE_TARGET)),
            "{name}: SuccessCriteriaMet with FailureTarget"
        );
        assert_eq!(
            t(keys::JOB_COMPLETE),
            st.completion_time.is_some(),
            "{name}: completionTime iff Complete"
        );
        if let (Some(c), Some(s0)) = (st.completion_time.as_ref(), st.start_time.as_ref()) {
            assert!(c.0 >= s0.0, "{name}: completionTime before startTime");
        }
        let spec = job.spec.clone().unwrap_or_default();
        let elastic = indexed_completions(job).is_some() && spec.completions == spec.parallelism;
        assert!(
            elastic || st.succeeded.unwrap_or(0) >= prev.succeeded.unwrap_or(0),
            "{name}: succeeded decreased"
        );
        if let (Some(c), Some(fi)) = (indexed_completions(job), st.failed_indexes.as_deref()) {
            let done = Intervals::parse(st.completed_indexes.as_deref().unwrap_or(""), c);
            let failed = Intervals::parse(fi, c);
            assert!(
                failed.indexes().all(|i| !done.has(i)),
                "{name}: failed and completed indexes overlap"
            );
        }
        for ty in [
            keys::JOB_COMPLETE,
            keys::JOB_FAILED,
            keys::JOB_FAILURE_TARGET,
            keys::JOB_SUCCESS_CRITERIA_MET,
        ] {
            let before = prev.conditions.clone().unwrap_or_default();
            assert!(
                !conditions::is_true(&before, ty) || t(ty),
                "{name}: {ty}=True removed"
            );
        }
        if finished {
            assert_eq!(st.active.unwrap_or(0), 0, "{name}: finished with active");
            assert_eq!(
                st.terminating.unwrap_or(0),
                0,
                "{name}: finished with terminating"
            );
            let u = st.uncounted_terminated_pods.clone().unwrap_or_default();
            assert!(
                u.succeeded.unwrap_or_default().is_empty()
                    && u.failed.unwrap_or_default().is_empty(),
                "{name}: finished with uncounted pods"
            );
            let spec = job.spec.clone().unwrap_or_default();
            let exempt = spec.suspend == Some(true) && spec.completions == Some(0);
            assert!(
                exempt || st.start_time.is_some(),
                "{name}: finished without startTime"
            );
        }
        let u = st.uncounted_terminated_pods.clone().unwrap_or_default();
        let all: Vec<String> = u
            .succeeded
            .into_iter()
            .flatten()
            .chain(u.failed.into_iter().flatten())
            .collect();
        let set: BTreeSet<&String> = all.iter().collect();
        assert_eq!(set.len(), all.len(), "{name}: duplicate uncounted UIDs");
        prev = st;
    }
}

fn check_created_pods(name: &str, job: &Job, plan: &Plan) {
    for p in &plan.pods_to_create {
        let owner = p
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("batch/v1", "Job", "foobar", JOB_UID),
            "{name}: owner"
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert!(pods::has_tracking_finalizer(p), "{name}: finalizer");
        let spec = p.spec.clone().unwrap_or_default();
        match indexed::completion_index(p) {
            Some(ix) => {
                assert!(
                    indexed_completions(job).is_some(),
                    "{name}: index on a NonIndexed pod"
                );
                assert_eq!(
                    spec.hostname,
                    Some(format!("foobar-{ix}")),
                    "{name}: hostname"
                );
                assert_eq!(
                    p.metadata.generate_name,
                    Some(format!("foobar-{ix}-")),
                    "{name}: generateName"
                );
                let label = p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(keys::JOB_COMPLETION_INDEX_ANNOTATION))
                    .cloned();
                assert_eq!(label, Some(ix.to_string()), "{name}: index label");
                let env = spec.containers[0].env.clone().unwrap_or_default();
                let e = env.iter().find(|e| e.name == "JOB_COMPLETION_INDEX");
                let path = e
                    .and_then(|e| e.value_from.as_ref())
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| f.field_path.clone());
                assert_eq!(
                    path.as_deref(),
                    Some("metadata.labels['batch.kubernetes.io/job-completion-index']"),
                    "{name}: env"
                );
            }
            None => {
                assert!(
                    indexed_completions(job).is_none(),
                    "{name}: Indexed pod without index"
                );
                assert_eq!(spec.hostname, None, "{name}: hostname");
                assert_eq!(
                    p.metadata.generate_name.as_deref(),
                    Some("foobar-"),
                    "{name}: generateName"
                );
            }
        }
    }
}

fn prp(job: Job, policy: &str) -> Job {
    let policy = policy.to_string();
    with_spec(job, |s| s.pod_replacement_policy = Some(policy))
}

fn suspend(job: Job) -> Job {
    with_spec(job, |s| s.suspend = Some(true))
}

fn deleting(mut job: Job) -> Job {
    job.metadata.deletion_timestamp = Some(Time(long_ago()));
    job
}

const SCM_COMPLETE: [(&str, &str, &str); 2] = [
    ("SuccessCriteriaMet", "True", "CompletionsReached"),
    ("Complete", "True", "CompletionsReached"),
];

// ---------------------------------------------------------------------------------------
// TestControllerSyncJob.

#[test]
fn controller_sync_job_nonindexed() {
    let rows = vec![
        row(
            "job start",
            job_nonindexed(2, Some(5), 6),
            vec![],
            Want {
                creates: 2,
                active: 2,
                ..Default::default()
            },
        ),
        row(
            "WQ job start",
            job_nonindexed(2, None, 6),
            vec![],
            Want {
                creates: 2,
                active: 2,
                ..Default::default()
            },
        ),
        row(
            "pending pods",
            job_nonindexed(2, Some(5), 6),
            pending(2),
            Want {
                active: 2,
                ..Default::default()
            },
        ),
        row(
            "correct # of pods",
            job_nonindexed(3, Some(5), 6),
            cat(vec![running(1), ready(2)]),
            Want {
                active: 3,
                ready: 2,
                ..Default::default()
            },
        ),
        row(
            "WQ job: correct # of pods",
            job_nonindexed(2, None, 6),
            running(2),
            Want {
                active: 2,
                ..Default::default()
            },
        ),
        row(
            "too few active pods",
            job_nonindexed(2, Some(5), 6),
            cat(vec![running(1), succeeded(1)]),
            Want {
                creates: 1,
                active: 2,
                succeeded: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "WQ job: recreate pods when failed",
            prp(job_nonindexed(1, None, 6), "Failed"),
            cat(vec![running(1), failed(1), terminating(1)]),
            Want {
                active: 1,
                failed: 1,
                terminating: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "WQ job: turn on PodReplacementPolicy but not set PodReplacementPolicy",
            job_nonindexed(1, Some(1), 6),
            cat(vec![running(1), failed(1), terminating(1)]),
            Want {
                active: 1,
                failed: 2,
                terminating: 1,
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "WQ job: recreate pods when terminating or failed",
            prp(job_nonindexed(1, None, 6), "TerminatingOrFailed"),
            cat(vec![running(1), failed(1), terminating(1)]),
            Want {
                active: 1,
                failed: 2,
                terminating: 1,
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "more terminating pods than parallelism",
            prp(job_nonindexed(1, Some(1), 6), "Failed"),
            cat(vec![running(2), terminating(4)]),
            Want {
                deletes: 1,
                active: 1,
                terminating: 5,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "more terminating pods than parallelism; PodFailurePolicy used",
            with_spec(job_nonindexed(1, Some(1), 6), |s| {
                s.pod_failure_policy = Some(PodFailurePolicy { rules: vec![] })
            }),
            cat(vec![running(2), terminating(4)]),
            Want {
                deletes: 1,
                active: 1,
                terminating: 5,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "too few active pods with a dynamic job",
            job_nonindexed(2, None, 6),
            running(1),
            Want {
                creates: 1,
                active: 2,
                ..Default::default()
            },
        ),
        row(
            "too many active pods",
            job_nonindexed(2, Some(5), 6),
            running(3),
            Want {
                deletes: 1,
                active: 2,
                terminating: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "count ready pods when too many active pods",
            job_nonindexed(2, Some(5), 6),
            ready(3),
            Want {
                deletes: 1,
                active: 2,
                ready: 2,
                terminating: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "failed + succeed pods: reset backoff delay",
            job_nonindexed(2, Some(5), 6),
            cat(vec![running(1), succeeded(1), failed(1)]),
            Want {
                creates: 1,
                active: 2,
                succeeded: 1,
                failed: 1,
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "new failed pod",
            job_nonindexed(2, Some(5), 6),
            cat(vec![running(1), failed(1)]),
            Want {
                creates: 1,
                active: 2,
                failed: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "no new pod; possible finalizer update of failed pod",
            with_status(job_nonindexed(1, Some(1), 6), |s| {
                s.active = Some(1);
                s.failed = Some(1);
            }),
            running(1),
            Want {
                active: 1,
                failed: 1,
                ..Default::default()
            },
        ),
        row(
            "job finish",
            job_nonindexed(2, Some(5), 6),
            succeeded(5),
            Want {
                succeeded: 5,
                conditions: SCM_COMPLETE.to_vec(),
                patches: 5,
                ..Default::default()
            },
        ),
        row(
            "WQ job finishing",
            job_nonindexed(2, None, 6),
            cat(vec![running(1), succeeded(1)]),
            Want {
                active: 1,
                succeeded: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "WQ job all finished",
            job_nonindexed(2, None, 6),
            succeeded(2),
            Want {
                succeeded: 2,
                conditions: SCM_COMPLETE.to_vec(),
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "WQ job all finished despite one failure",
            job_nonindexed(2, None, 6),
            cat(vec![succeeded(1), failed(1)]),
            Want {
                succeeded: 1,
                failed: 1,
                conditions: SCM_COMPLETE.to_vec(),
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "more active pods than parallelism",
            job_nonindexed(2, Some(5), 6),
            running(10),
            Want {
                deletes: 8,
                active: 2,
                terminating: 8,
                patches: 8,
                ..Default::default()
            },
        ),
        row(
            "more active pods than remaining completions",
            job_nonindexed(3, Some(4), 6),
            cat(vec![running(3), succeeded(2)]),
            Want {
                deletes: 1,
                active: 2,
                succeeded: 2,
                terminating: 1,
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "status change",
            job_nonindexed(2, Some(5), 6),
            cat(vec![running(2), succeeded(2)]),
            Want {
                active: 2,
                succeeded: 2,
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "deleting job",
            deleting(job_nonindexed(2, Some(5), 6)),
            cat(vec![pending(1), running(1), succeeded(1)]),
            Want {
                active: 2,
                succeeded: 1,
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "too many job failures",
            deleting(job_nonindexed(2, Some(5), 0)),
            failed(1),
            Want {
                failed: 1,
                conditions: vec![
                    ("FailureTarget", "True", "BackoffLimitExceeded"),
                    ("Failed", "True", "BackoffLimitExceeded"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "count ready pods when job fails",
            job_nonindexed(2, Some(3), 0),
            cat(vec![ready(2), failed(1)]),
            Want {
                deletes: 2,
                failed: 3,
                terminating: 2,
                conditions: vec![("FailureTarget", "True", "BackoffLimitExceeded")],
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "suspending a job with satisfied expectations",
            suspend(job_nonindexed(2, Some(4), 6)),
            running(2),
            Want {
                deletes: 2,
                terminating: 2,
                conditions: vec![("Suspended", "True", "JobSuspended")],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "count ready pods when suspending a job with satisfied expectations",
            suspend(job_nonindexed(2, Some(4), 6)),
            ready(2),
            Want {
                deletes: 2,
                terminating: 2,
                conditions: vec![("Suspended", "True", "JobSuspended")],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "resuming a suspended job",
            with_status(job_nonindexed(2, Some(4), 6), |s| {
                s.conditions = Some(vec![cond(
                    "Suspended",
                    "True",
                    "JobSuspended",
                    "Job suspended",
                )]);
            }),
            vec![],
            Want {
                creates: 2,
                active: 2,
                conditions: vec![("Suspended", "False", "JobResumed")],
                ..Default::default()
            },
        ),
        row(
            "suspending a deleted job",
            deleting(suspend(job_nonindexed(2, Some(4), 6))),
            running(2),
            Want {
                active: 2,
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "FailureTarget=False condition added manually is ignored",
            with_status(job_nonindexed(1, Some(1), 6), |s| {
                s.conditions = Some(vec![cond(
                    "FailureTarget",
                    "False",
                    "ConditionAddedManually",
                    "",
                )]);
            }),
            ready(1),
            Want {
                active: 1,
                ready: 1,
                conditions: vec![("FailureTarget", "False", "ConditionAddedManually")],
                ..Default::default()
            },
        ),
        row(
            "SuccessCriteriaMet=False condition added manually is ignored",
            with_status(job_nonindexed(1, Some(1), 6), |s| {
                s.conditions = Some(vec![cond(
                    "SuccessCriteriaMet",
                    "False",
                    "ConditionAddedManually",
                    "",
                )]);
            }),
            ready(1),
            Want {
                active: 1,
                ready: 1,
                conditions: vec![("SuccessCriteriaMet", "False", "ConditionAddedManually")],
                ..Default::default()
            },
        ),
    ];
    for r in rows {
        run(r);
    }
}

#[test]
fn controller_sync_job_expectations_and_backoff() {
    // "too few active pods and active back-off": a failure just now holds creation back.
    let mut r = row(
        "too few active pods and active back-off",
        job_nonindexed(1, Some(1), 6),
        vec![],
        Want {
            requeue: Some(Duration::from_secs(10)),
            ..Default::default()
        },
    );
    r.ctx.backoff = BackoffRecord {
        failures_after_last_success: 1,
        last_failure_time: Some(now()),
    };
    run(r);

    let mut r = row(
        "too few active pods and no back-offs",
        job_nonindexed(1, Some(1), 6),
        vec![],
        Want {
            creates: 1,
            active: 1,
            ..Default::default()
        },
    );
    r.ctx.backoff = BackoffRecord {
        failures_after_last_success: 0,
        last_failure_time: Some(now()),
    };
    run(r);

    let mut r = row(
        "job failures, unsatisfied expectations",
        deleting(job_nonindexed(2, Some(5), 0)),
        failed(1),
        Want {
            failed: 1,
            patches: 1,
            ..Default::default()
        },
    );
    r.ctx.satisfied_expectations = false;
    run(r);

    let mut r = row(
        "suspending a job with unsatisfied expectations",
        suspend(job_nonindexed(2, Some(4), 6)),
        running(3),
        Want {
            active: 3,
            ..Default::default()
        },
    );
    r.ctx.satisfied_expectations = false;
    run(r);

    // "limited pods": creation is capped per sync (upstream caps with the fake pod control).
    let mut r = row(
        "limited pods",
        job_nonindexed(100, Some(200), 6),
        vec![],
        Want {
            creates: 10,
            active: 10,
            ..Default::default()
        },
    );
    r.ctx.max_pod_create_delete_per_sync = 10;
    run(r);
    run(row(
        "large job is capped at 500 creations",
        job_nonindexed(600, Some(1000), 6),
        vec![],
        Want {
            creates: 500,
            active: 500,
            ..Default::default()
        },
    ));
}

#[test]
fn controller_sync_job_indexed() {
    let rows = vec![
        row(
            "indexed job start",
            job_indexed(2, 5, 6),
            vec![],
            Want {
                creates: 2,
                created_indexes: Some(vec![0, 1]),
                active: 2,
                completed_indexes: Some(""),
                ..Default::default()
            },
        ),
        row(
            "indexed job with some pods deleted, podReplacementPolicy Failed",
            prp(job_indexed(2, 5, 6), "Failed"),
            terminating(1),
            Want {
                creates: 1,
                created_indexes: Some(vec![0]),
                active: 1,
                terminating: 1,
                ..Default::default()
            },
        ),
        row(
            "indexed job with some pods deleted, podReplacementPolicy TerminatingOrFailed",
            prp(job_indexed(2, 5, 6), "TerminatingOrFailed"),
            terminating(1),
            Want {
                creates: 2,
                created_indexes: Some(vec![0, 1]),
                active: 2,
                terminating: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "indexed job completed",
            job_indexed(2, 3, 6),
            indexed_pods(&[("0", 'S'), ("1", 'F'), ("1", 'S'), ("2", 'S')]),
            Want {
                succeeded: 3,
                failed: 1,
                completed_indexes: Some("0-2"),
                conditions: SCM_COMPLETE.to_vec(),
                patches: 4,
                ..Default::default()
            },
        ),
        row(
            "indexed job failed",
            job_indexed(2, 3, 0),
            indexed_pods(&[("0", 'S'), ("1", 'F'), ("2", 'R')]),
            Want {
                deletes: 1,
                succeeded: 1,
                failed: 2,
                terminating: 1,
                completed_indexes: Some("0"),
                conditions: vec![("FailureTarget", "True", "BackoffLimitExceeded")],
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "indexed job repeated completed index",
            job_indexed(2, 3, 6),
            indexed_pods(&[("0", 'S'), ("1", 'S'), ("1", 'S')]),
            Want {
                creates: 1,
                created_indexes: Some(vec![2]),
                active: 1,
                succeeded: 2,
                completed_indexes: Some("0,1"),
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "indexed job some running and completed pods",
            job_indexed(8, 20, 6),
            indexed_pods(&[
                ("0", 'R'),
                ("2", 'S'),
                ("3", 'P'),
                ("4", 'S'),
                ("5", 'S'),
                ("7", 'S'),
                ("8", 'S'),
                ("9", 'S'),
            ]),
            Want {
                creates: 6,
                created_indexes: Some(vec![1, 6, 10, 11, 12, 13]),
                active: 8,
                succeeded: 6,
                completed_indexes: Some("2,4,5,7-9"),
                patches: 6,
                ..Default::default()
            },
        ),
        row(
            "indexed job some failed pods",
            job_indexed(3, 4, 6),
            indexed_pods(&[("0", 'F'), ("1", 'P'), ("2", 'F')]),
            Want {
                creates: 2,
                created_indexes: Some(vec![0, 2]),
                active: 3,
                failed: 2,
                completed_indexes: Some(""),
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "indexed job some pods without index",
            job_indexed(2, 5, 6),
            cat(vec![
                running(1),
                succeeded(1),
                failed(1),
                indexed_pods(&[
                    ("invalid", 'R'),
                    ("invalid", 'S'),
                    ("invalid", 'F'),
                    ("invalid", 'P'),
                    ("0", 'S'),
                    ("1", 'R'),
                    ("2", 'R'),
                ]),
            ]),
            Want {
                deletes: 3,
                active: 2,
                succeeded: 1,
                terminating: 3,
                completed_indexes: Some("0"),
                patches: 8,
                ..Default::default()
            },
        ),
        row(
            "indexed job repeated indexes",
            job_indexed(5, 5, 6),
            cat(vec![
                succeeded(1),
                failed(1),
                indexed_pods(&[
                    ("invalid", 'R'),
                    ("0", 'S'),
                    ("1", 'R'),
                    ("2", 'R'),
                    ("2", 'P'),
                ]),
            ]),
            Want {
                deletes: 2,
                active: 2,
                succeeded: 1,
                terminating: 2,
                completed_indexes: Some("0"),
                patches: 5,
                ..Default::default()
            },
        ),
        row(
            "indexed job with indexes outside of range",
            job_indexed(2, 5, 6),
            indexed_pods(&[("0", 'S'), ("5", 'R'), ("6", 'S'), ("7", 'P'), ("8", 'F')]),
            Want {
                deletes: 2,
                succeeded: 1,
                terminating: 2,
                completed_indexes: Some("0"),
                patches: 5,
                ..Default::default()
            },
        ),
        row(
            "backoff limit exceeded; JobManagedBy enabled",
            with_spec(job_indexed(2, 3, 0), |s| {
                s.managed_by = Some(MANAGED_BY_JOB_CONTROLLER.into())
            }),
            indexed_pods(&[("0", 'S'), ("1", 'F'), ("2", 'R')]),
            Want {
                deletes: 1,
                succeeded: 1,
                failed: 2,
                terminating: 1,
                completed_indexes: Some("0"),
                conditions: vec![("FailureTarget", "True", "BackoffLimitExceeded")],
                patches: 3,
                ..Default::default()
            },
        ),
    ];
    for r in rows {
        run(r);
    }
}

// ---------------------------------------------------------------------------------------
// TestSyncJobPastDeadline.

fn with_deadline(job: Job, ads: i64, started_secs_ago: i64) -> Job {
    let start = now()
        .checked_sub(SignedDuration::from_secs(started_secs_ago))
        .unwrap_or(now());
    let job = with_spec(job, |s| s.active_deadline_seconds = Some(ads));
    with_status(job, |s| s.start_time = Some(Time(start)))
}

#[test]
fn sync_job_past_deadline() {
    let rows = vec![
        row(
            "activeDeadlineSeconds less than single pod execution",
            with_deadline(job_nonindexed(1, Some(1), 6), 10, 15),
            running(1),
            Want {
                deletes: 1,
                failed: 1,
                terminating: 1,
                conditions: vec![("FailureTarget", "True", "DeadlineExceeded")],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "activeDeadlineSeconds bigger than single pod execution",
            with_deadline(job_nonindexed(1, Some(2), 6), 10, 15),
            cat(vec![running(1), succeeded(1)]),
            Want {
                deletes: 1,
                succeeded: 1,
                failed: 1,
                terminating: 1,
                conditions: vec![("FailureTarget", "True", "DeadlineExceeded")],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "activeDeadlineSeconds times-out before any pod starts",
            with_deadline(job_nonindexed(1, Some(1), 6), 10, 10),
            vec![],
            Want {
                conditions: vec![
                    ("FailureTarget", "True", "DeadlineExceeded"),
                    ("Failed", "True", "DeadlineExceeded"),
                ],
                ..Default::default()
            },
        ),
        row(
            "activeDeadlineSeconds with backofflimit reach",
            with_deadline(job_nonindexed(1, Some(1), 0), 1, 10),
            failed(1),
            Want {
                failed: 1,
                conditions: vec![
                    ("FailureTarget", "True", "BackoffLimitExceeded"),
                    ("Failed", "True", "BackoffLimitExceeded"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "activeDeadlineSeconds is not triggered when Job is suspended",
            with_status(
                suspend(with_deadline(job_nonindexed(1, Some(2), 6), 10, 15)),
                |s| s.start_time = None,
            ),
            vec![],
            Want {
                conditions: vec![("Suspended", "True", "JobSuspended")],
                ..Default::default()
            },
        ),
        row(
            "activeDeadlineSeconds not yet reached requeues at the deadline",
            with_deadline(job_nonindexed(1, Some(1), 6), 10, 4),
            running(1),
            Want {
                active: 1,
                requeue: Some(Duration::from_secs(6)),
                ..Default::default()
            },
        ),
    ];
    for r in rows {
        run(r);
    }
}

// ---------------------------------------------------------------------------------------
// TestSyncJobWithJobPodFailurePolicy.

fn pfp(job: Job, rules: Vec<PodFailurePolicyRule>) -> Job {
    with_spec(job, |s| {
        s.pod_failure_policy = Some(PodFailurePolicy { rules });
        // The API server defaults this when a pod failure policy is set.
        s.pod_replacement_policy = Some("Failed".into());
    })
}

#[test]
fn sync_job_with_pod_failure_policy() {
    let rules = || {
        vec![
            condition_rule("Ignore", "DisruptionTarget"),
            exit_rule("FailJob", &[5, 6, 7]),
        ]
    };
    let rows = vec![
        row(
            "job marked failed as FailJob action matched on exit code",
            pfp(job_nonindexed(1, Some(1), 6), rules()),
            vec![named(failed_with_exit(5), "mypod-0")],
            Want {
                failed: 1,
                conditions: vec![
                    ("FailureTarget", "True", "PodFailurePolicy"),
                    ("Failed", "True", "PodFailurePolicy"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "running pod should not result in job fail based on OnExitCodes",
            pfp(job_nonindexed(1, Some(1), 6), rules()),
            {
                let mut p = new_pod_in_phase("Running");
                add_container_exit(&mut p, "main-container", 5, false);
                vec![p]
            },
            Want {
                active: 1,
                ..Default::default()
            },
        ),
        row(
            "job marked failed as FailJob action matched; other pods still running",
            pfp(job_nonindexed(2, Some(2), 6), rules()),
            cat(vec![
                vec![named(failed_with_exit(5), "mypod-0")],
                running(1),
            ]),
            Want {
                deletes: 1,
                failed: 2,
                terminating: 1,
                conditions: vec![("FailureTarget", "True", "PodFailurePolicy")],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "job marked failed when the FailureTarget was set in an earlier sync",
            with_status(pfp(job_nonindexed(1, Some(1), 6), rules()), |s| {
                s.start_time = Some(Time(long_ago()));
                s.failed = Some(1);
                s.conditions = Some(vec![cond(
                    "FailureTarget",
                    "True",
                    "PodFailurePolicy",
                    "Container main-container for pod default/already-deleted-pod failed with exit code 5 matching FailJob rule at index 1",
                )]);
            }),
            vec![],
            Want {
                failed: 1,
                conditions: vec![
                    ("FailureTarget", "True", "PodFailurePolicy"),
                    ("Failed", "True", "PodFailurePolicy"),
                ],
                ..Default::default()
            },
        ),
        row(
            "job marked failed for indexed job",
            pfp(job_indexed(2, 2, 6), rules()),
            cat(vec![
                vec![with_index(named(failed_with_exit(5), "mypod-0"), "0")],
                indexed_pods(&[("1", 'R')]),
            ]),
            Want {
                deletes: 1,
                failed: 2,
                terminating: 1,
                completed_indexes: Some(""),
                conditions: vec![("FailureTarget", "True", "PodFailurePolicy")],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "default handling for a failed pod not matching any rule",
            pfp(job_nonindexed(1, Some(1), 6), rules()),
            failed_with_exit(1).into_iter_one(),
            Want {
                creates: 1,
                active: 1,
                failed: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "default handling exceeds the backoff limit",
            pfp(job_nonindexed(1, Some(1), 0), rules()),
            failed_with_exit(1).into_iter_one(),
            Want {
                failed: 1,
                conditions: vec![
                    ("FailureTarget", "True", "BackoffLimitExceeded"),
                    ("Failed", "True", "BackoffLimitExceeded"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "pod failure ignored by the Ignore rule on a pod condition",
            pfp(job_nonindexed(1, Some(1), 0), rules()),
            vec![with_condition(
                failed_with_exit(137),
                "DisruptionTarget",
                "True",
            )],
            Want {
                creates: 1,
                active: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "Ignore on exit codes",
            pfp(
                job_nonindexed(1, Some(1), 0),
                vec![exit_rule("Ignore", &[1, 2, 3])],
            ),
            failed_with_exit(2).into_iter_one(),
            Want {
                creates: 1,
                active: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "Count on pod conditions",
            pfp(
                job_nonindexed(1, Some(1), 6),
                vec![condition_rule("Count", "DisruptionTarget")],
            ),
            vec![with_condition(
                failed_with_exit(137),
                "DisruptionTarget",
                "True",
            )],
            Want {
                creates: 1,
                active: 1,
                failed: 1,
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "ignored failure of a deleted pod delays its replacement",
            pfp(job_nonindexed(1, Some(1), 0), rules()),
            vec![deleted(with_condition(
                new_pod_in_phase("Running"),
                "DisruptionTarget",
                "True",
            ))],
            Want {
                terminating: 1,
                ..Default::default()
            },
        ),
        row(
            "FailJob on pod conditions",
            pfp(
                job_nonindexed(1, Some(1), 6),
                vec![condition_rule("FailJob", "DisruptionTarget")],
            ),
            vec![named(
                with_condition(failed_with_exit(137), "DisruptionTarget", "True"),
                "mypod-0",
            )],
            Want {
                failed: 1,
                conditions: vec![
                    ("FailureTarget", "True", "PodFailurePolicy"),
                    ("Failed", "True", "PodFailurePolicy"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "terminating pod is not considered failed when a pod failure policy is used",
            pfp(
                job_nonindexed(1, Some(1), 6),
                vec![exit_rule("FailJob", &[5])],
            ),
            {
                let mut p = new_pod_in_phase("Running");
                add_container_exit(&mut p, "main-container", 5, false);
                vec![deleted(p)]
            },
            Want {
                terminating: 1,
                ..Default::default()
            },
        ),
    ];
    for r in rows {
        run(r);
    }
}

#[test]
fn pod_failure_policy_messages() {
    let job = pfp(
        job_nonindexed(1, Some(1), 6),
        vec![
            condition_rule("Ignore", "DisruptionTarget"),
            exit_rule("FailJob", &[5, 6, 7]),
        ],
    );
    let plan = sync(
        &job,
        &[named(failed_with_exit(5), "mypod-0")],
        now(),
        &SyncContext::default(),
    );
    let st = plan.final_status().unwrap_or_default();
    let msgs: Vec<String> = st
        .conditions
        .iter()
        .flatten()
        .filter_map(|c| c.message.clone())
        .collect();
    let want = "Container main-container for pod default/mypod-0 failed with exit code 5 matching FailJob rule at index 1";
    assert_eq!(msgs, vec![want.to_string(), want.to_string()]);
    let (_, events) = plan.status_after_all_finalizers().unwrap_or_default();
    assert_eq!(events, vec![JobEvent::warning("PodFailurePolicy", want)]);

    // The message of an earlier FailureTarget is kept, even though its pod is gone.
    let earlier = "Container main-container for pod default/already-deleted-pod failed with exit code 5 matching FailJob rule at index 1";
    let job = with_status(job, |s| {
        s.start_time = Some(Time(long_ago()));
        s.conditions = Some(vec![cond(
            "FailureTarget",
            "True",
            "PodFailurePolicy",
            earlier,
        )]);
    });
    let plan = sync(&job, &[], now(), &SyncContext::default());
    let st = plan.final_status().unwrap_or_default();
    let failed = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(failed.message.as_deref(), Some(earlier));
}

trait OnePod {
    fn into_iter_one(self) -> Vec<Pod>;
}

impl OnePod for Pod {
    fn into_iter_one(self) -> Vec<Pod> {
        vec![self]
    }
}

// ---------------------------------------------------------------------------------------
// TestSyncJobWithJobBackoffLimitPerIndex.

fn blpi(job: Job, limit: i32) -> Job {
    with_spec(job, |s| {
        s.backoff_limit_per_index = Some(limit);
        s.backoff_limit = Some(i32::MAX);
    })
}

fn with_failure_count(mut p: Pod, n: i32) -> Pod {
    annotate(
        &mut p,
        keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION,
        &n.to_string(),
    );
    p
}

fn ix_pod(ix: i32, phase: char, failure_count: i32) -> Pod {
    let p = indexed_pods(&[(ix.to_string().as_str(), phase)]).remove(0);
    with_failure_count(p, failure_count)
}

#[test]
fn sync_job_with_backoff_limit_per_index() {
    // Upstream's pods are named mypod-<position>.
    let named_all = |pods: Vec<Pod>| -> Vec<Pod> {
        pods.into_iter()
            .enumerate()
            .map(|(i, p)| named(p, &format!("mypod-{i}")))
            .collect()
    };
    let exit3 = |name: &str| {
        let mut p = failed_with_exit(3);
        if let Some(cs) = p
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c.first_mut())
        {
            cs.name = name.into();
        }
        with_index(with_failure_count(p, 0), "0")
    };
    let fail_job_msg = "Container x for pod default/mypod-0 failed with exit code 3 matching FailJob rule at index 0";
    let rows = vec![
        row(
            "successful job after a single failure within index",
            blpi(job_indexed(2, 2, 6), 1),
            vec![ix_pod(0, 'F', 0), ix_pod(0, 'S', 1), ix_pod(1, 'S', 0)],
            Want {
                succeeded: 2,
                failed: 1,
                completed_indexes: Some("0,1"),
                failed_indexes: Some(""),
                conditions: SCM_COMPLETE.to_vec(),
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "single failed pod, not counted as the replacement pod creation is delayed",
            blpi(job_indexed(2, 2, 6), 1),
            vec![ix_pod(0, 'F', 0)],
            Want {
                creates: 2,
                created_indexes: Some(vec![0, 1]),
                active: 2,
                failed_indexes: Some(""),
                ..Default::default()
            },
        ),
        row(
            "single failed pod replaced already",
            blpi(job_indexed(2, 2, 6), 1),
            vec![ix_pod(0, 'F', 0), ix_pod(0, 'P', 1)],
            Want {
                creates: 1,
                created_indexes: Some(vec![1]),
                active: 2,
                failed: 1,
                failed_indexes: Some(""),
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "single failed index due to exceeding the backoff limit per index, the job continues",
            blpi(job_indexed(2, 2, 6), 1),
            vec![ix_pod(0, 'F', 1)],
            Want {
                creates: 1,
                created_indexes: Some(vec![1]),
                active: 1,
                failed: 1,
                failed_indexes: Some("0"),
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "single failed index due to FailIndex action, the job continues",
            pfp(
                blpi(job_indexed(2, 2, 6), 1),
                vec![exit_rule("FailIndex", &[3])],
            ),
            vec![exit3("main-container")],
            Want {
                creates: 1,
                created_indexes: Some(vec![1]),
                active: 1,
                failed: 1,
                failed_indexes: Some("0"),
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "job failed index due to FailJob action",
            pfp(
                with_spec(blpi(job_indexed(2, 2, 6), 1), |s| s.backoff_limit = Some(6)),
                vec![exit_rule("FailJob", &[3])],
            ),
            named_all(vec![exit3("x")]),
            Want {
                failed: 1,
                failed_indexes: Some(""),
                conditions: vec![
                    ("FailureTarget", "True", "PodFailurePolicy"),
                    ("Failed", "True", "PodFailurePolicy"),
                ],
                messages: vec![fail_job_msg, fail_job_msg],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "job pod failure ignored due to matching Ignore action",
            pfp(
                with_spec(blpi(job_indexed(2, 2, 6), 1), |s| s.backoff_limit = Some(6)),
                vec![exit_rule("Ignore", &[3])],
            ),
            vec![exit3("x")],
            Want {
                creates: 2,
                created_indexes: Some(vec![0, 1]),
                active: 2,
                failed_indexes: Some(""),
                ..Default::default()
            },
        ),
        row(
            "job failed due to exceeding backoffLimit before backoffLimitPerIndex",
            with_spec(blpi(job_indexed(2, 2, 6), 1), |s| s.backoff_limit = Some(1)),
            vec![ix_pod(0, 'F', 0), ix_pod(1, 'F', 0)],
            Want {
                failed: 2,
                failed_indexes: Some(""),
                conditions: vec![
                    ("FailureTarget", "True", "BackoffLimitExceeded"),
                    ("Failed", "True", "BackoffLimitExceeded"),
                ],
                messages: vec![
                    "Job has reached the specified backoff limit",
                    "Job has reached the specified backoff limit",
                ],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "job failed due to failed indexes",
            blpi(job_indexed(2, 2, 6), 1),
            vec![ix_pod(0, 'F', 1), ix_pod(1, 'S', 0)],
            Want {
                succeeded: 1,
                failed: 1,
                completed_indexes: Some("1"),
                failed_indexes: Some("0"),
                conditions: vec![
                    ("FailureTarget", "True", "FailedIndexes"),
                    ("Failed", "True", "FailedIndexes"),
                ],
                messages: vec!["Job has failed indexes", "Job has failed indexes"],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "job failed due to exceeding max failed indexes",
            with_spec(blpi(job_indexed(4, 4, 6), 1), |s| {
                s.max_failed_indexes = Some(1)
            }),
            vec![
                ix_pod(0, 'F', 1),
                ix_pod(1, 'S', 0),
                ix_pod(2, 'F', 1),
                ix_pod(3, 'R', 0),
            ],
            Want {
                deletes: 1,
                succeeded: 1,
                failed: 3,
                terminating: 1,
                completed_indexes: Some("1"),
                failed_indexes: Some("0,2"),
                conditions: vec![("FailureTarget", "True", "MaxFailedIndexesExceeded")],
                messages: vec!["Job has exceeded the specified maximal number of failed indexes"],
                patches: 4,
                ..Default::default()
            },
        ),
    ];
    for r in rows {
        run(r);
    }
}

#[test]
fn backoff_limit_per_index_delays_and_annotates() {
    // A failure that just happened: its finalizer stays until the replacement exists, and
    // the replacement waits for the per-index back-off.
    let job = blpi(job_indexed(2, 2, 6), 1);
    let fresh = with_index(with_failure_count(pod_finished_at("Failed", now()), 0), "0");
    let plan = sync(
        &job,
        &[fresh.clone(), ix_pod(1, 'R', 0)],
        now(),
        &SyncContext::default(),
    );
    assert!(plan.pods_to_create.is_empty());
    assert!(plan.finalizers_to_remove.is_empty());
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(10)));
    let st = plan.final_status().unwrap_or_default();
    assert_eq!((st.failed, st.active), (None, Some(1)));

    // Once the back-off passed, the replacement carries the index's failure count.
    let later = now()
        .checked_add(SignedDuration::from_secs(11))
        .unwrap_or(now());
    let plan = sync(
        &job,
        &[fresh, ix_pod(1, 'R', 0)],
        later,
        &SyncContext::default(),
    );
    assert_eq!(created_indexes(&plan), vec![0]);
    let ann = plan.pods_to_create[0]
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert_eq!(
        ann.get(keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        ann.get(keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION),
        None
    );
    // The failed pod's finalizer still waits for the replacement to show up.
    assert!(plan.finalizers_to_remove.is_empty());

    // An ignored failure bumps the ignored count instead.
    let job = pfp(
        blpi(job_indexed(1, 1, 6), 1),
        vec![exit_rule("Ignore", &[3])],
    );
    let plan = sync(
        &job,
        &[with_index(failed_with_exit(3), "0")],
        now(),
        &SyncContext::default(),
    );
    let ann = plan.pods_to_create[0]
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert_eq!(
        ann.get(keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION)
            .map(String::as_str),
        Some("0")
    );
    assert_eq!(
        ann.get(keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );
}

// ---------------------------------------------------------------------------------------
// TestSyncJobWithJobSuccessPolicy.

fn success(job: Job, rules: Vec<SuccessPolicyRule>) -> Job {
    with_spec(job, |s| s.success_policy = Some(SuccessPolicy { rules }))
}

fn rule_indexes(s: &str) -> SuccessPolicyRule {
    SuccessPolicyRule {
        succeeded_indexes: Some(s.into()),
        succeeded_count: None,
    }
}

#[test]
fn sync_job_with_success_policy() {
    let rows = vec![
        row(
            "succeededIndexes rule matched; lingering pods are terminated first",
            success(job_indexed(3, 3, 6), vec![rule_indexes("0")]),
            indexed_pods(&[("0", 'S'), ("1", 'R'), ("2", 'R')]),
            Want {
                deletes: 2,
                succeeded: 1,
                terminating: 2,
                completed_indexes: Some("0"),
                conditions: vec![("SuccessCriteriaMet", "True", "SuccessPolicy")],
                patches: 3,
                ..Default::default()
            },
        ),
        row(
            "succeededCount rule matched with nothing running",
            success(
                job_indexed(2, 3, 6),
                vec![SuccessPolicyRule {
                    succeeded_indexes: None,
                    succeeded_count: Some(1),
                }],
            ),
            indexed_pods(&[("1", 'S')]),
            Want {
                succeeded: 1,
                completed_indexes: Some("1"),
                conditions: vec![
                    ("SuccessCriteriaMet", "True", "SuccessPolicy"),
                    ("Complete", "True", "SuccessPolicy"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "rule not matched yet",
            success(job_indexed(2, 3, 6), vec![rule_indexes("0,1")]),
            indexed_pods(&[("0", 'S'), ("1", 'R')]),
            Want {
                creates: 1,
                created_indexes: Some(vec![2]),
                active: 2,
                succeeded: 1,
                completed_indexes: Some("0"),
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "FailureTarget wins when both the failure and the success policies match",
            pfp(
                success(job_indexed(2, 2, 6), vec![rule_indexes("0")]),
                vec![exit_rule("FailJob", &[5])],
            ),
            cat(vec![
                indexed_pods(&[("0", 'S')]),
                vec![with_index(failed_with_exit(5), "1")],
            ]),
            Want {
                succeeded: 1,
                failed: 1,
                completed_indexes: Some("0"),
                conditions: vec![
                    ("FailureTarget", "True", "PodFailurePolicy"),
                    ("Failed", "True", "PodFailurePolicy"),
                ],
                patches: 2,
                ..Default::default()
            },
        ),
        row(
            "once SuccessCriteriaMet, a later failure does not fail the job",
            with_status(
                pfp(
                    success(job_indexed(2, 2, 6), vec![rule_indexes("0")]),
                    vec![exit_rule("FailJob", &[5])],
                ),
                |s| {
                    s.start_time = Some(Time(long_ago()));
                    s.completed_indexes = Some("0".into());
                    s.succeeded = Some(1);
                    s.conditions = Some(vec![cond(
                        "SuccessCriteriaMet",
                        "True",
                        "SuccessPolicy",
                        "Matched rules at index 0",
                    )]);
                },
            ),
            vec![with_index(failed_with_exit(5), "1")],
            Want {
                succeeded: 1,
                failed: 1,
                completed_indexes: Some("0"),
                conditions: vec![
                    ("SuccessCriteriaMet", "True", "SuccessPolicy"),
                    ("Complete", "True", "SuccessPolicy"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "once FailureTarget, a later success does not succeed the job",
            with_status(
                success(job_indexed(2, 2, 6), vec![rule_indexes("0")]),
                |s| {
                    s.start_time = Some(Time(long_ago()));
                    s.failed = Some(1);
                    s.conditions = Some(vec![cond(
                        "FailureTarget",
                        "True",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit",
                    )]);
                },
            ),
            indexed_pods(&[("0", 'S')]),
            Want {
                succeeded: 1,
                failed: 1,
                completed_indexes: Some("0"),
                conditions: vec![
                    ("FailureTarget", "True", "BackoffLimitExceeded"),
                    ("Failed", "True", "BackoffLimitExceeded"),
                ],
                patches: 1,
                ..Default::default()
            },
        ),
        row(
            "failed indexes win over the success policy",
            success(blpi(job_indexed(2, 2, 6), 0), vec![rule_indexes("1")]),
            vec![ix_pod(0, 'F', 0), ix_pod(1, 'S', 0)],
            Want {
                succeeded: 1,
                failed: 1,
                completed_indexes: Some("1"),
                failed_indexes: Some("0"),
                conditions: vec![
                    ("FailureTarget", "True", "FailedIndexes"),
                    ("Failed", "True", "FailedIndexes"),
                ],
                patches: 2,
                ..Default::default()
            },
        ),
    ];
    for r in rows {
        run(r);
    }
    let job = success(job_indexed(1, 1, 6), vec![rule_indexes("0")]);
    let plan = sync(
        &job,
        &indexed_pods(&[("0", 'S')]),
        now(),
        &SyncContext::default(),
    );
    let st = plan.final_status().unwrap_or_default();
    let scm = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "SuccessCriteriaMet")
        .cloned()
        .unwrap_or_default();
    assert_eq!(scm.message.as_deref(), Some("Matched rules at index 0"));
    assert_eq!(st.completion_time, Some(Time(now())));
}

// ---------------------------------------------------------------------------------------
// Elastic Indexed Jobs, OnFailure restarts, managedBy and other upstream test functions.

#[test]
fn elastic_indexed_job_scale_down() {
    // completions and parallelism lowered from 3 to 1: the out-of-range success is dropped,
    // the out-of-range pod deleted, and the Job completes.
    let job = with_status(job_indexed(1, 1, 6), |s| {
        s.start_time = Some(Time(long_ago()));
        s.succeeded = Some(2);
        s.completed_indexes = Some("0,2".into());
        s.active = Some(1);
    });
    run(row(
        "scale down",
        job,
        indexed_pods(&[("1", 'R')]),
        Want {
            deletes: 1,
            succeeded: 1,
            terminating: 1,
            completed_indexes: Some("0"),
            conditions: vec![("SuccessCriteriaMet", "True", "CompletionsReached")],
            patches: 1,
            ..Default::default()
        },
    ));
    let job = with_status(job_indexed(0, 0, 6), |s| {
        s.start_time = Some(Time(long_ago()));
    });
    run(row(
        "scale to zero completes",
        job,
        vec![],
        Want {
            completed_indexes: Some(""),
            conditions: SCM_COMPLETE.to_vec(),
            ..Default::default()
        },
    ));
}

fn on_failure(job: Job) -> Job {
    with_spec(job, |s| {
        if let Some(ps) = s.template.spec.as_mut() {
            ps.restart_policy = Some("OnFailure".into());
        }
    })
}

fn restarted(mut p: Pod, restarts: i32) -> Pod {
    if let Some(s) = p.status.as_mut() {
        s.container_statuses = Some(vec![ContainerStatus {
            name: "main-container".into(),
            restart_count: restarts,
            ..Default::default()
        }]);
    }
    p
}

#[test]
fn job_backoff_for_on_failure() {
    // (name, parallelism, completions, backoffLimit, restart counts of running pods, fails)
    let cases: &[(&str, i32, i32, i32, &[i32], bool)] = &[
        (
            "backoffLimit 0 should have 1 pod active",
            1,
            1,
            0,
            &[0],
            false,
        ),
        ("backoffLimit 1 with restartCount 0", 1, 1, 1, &[0], false),
        ("backoffLimit 1 with restartCount 1", 1, 1, 1, &[1], true),
        ("backoffLimit 1 with parallelism 2", 2, 2, 1, &[1, 0], true),
        ("backoffLimit 0 with any restart", 1, 1, 0, &[1], true),
        ("too many restarts summed over pods", 2, 5, 2, &[1, 1], true),
        ("not enough restarts", 2, 5, 3, &[1, 1], false),
    ];
    for (name, p, c, bl, restarts, fails) in cases {
        let job = on_failure(job_nonindexed(*p, Some(*c), *bl));
        let pods: Vec<Pod> = restarts
            .iter()
            .map(|r| restarted(new_pod_in_phase("Running"), *r))
            .collect();
        let plan = sync(&job, &pods, now(), &SyncContext::default());
        let st = plan.final_status().unwrap_or_default();
        let ft = st.conditions.iter().flatten().any(|c| {
            c.type_ == "FailureTarget" && c.reason.as_deref() == Some("BackoffLimitExceeded")
        });
        assert_eq!(ft, *fails, "{name}");
    }
    // restartPolicy Never: failed > backoffLimit.
    let cases: &[(i32, usize, bool)] = &[
        (0, 0, false),
        (0, 1, true),
        (1, 1, false),
        (1, 2, true),
        (6, 6, false),
        (6, 7, true),
    ];
    for (bl, nfailed, fails) in cases {
        let plan = sync(
            &job_nonindexed(1, Some(1), *bl),
            &failed(*nfailed),
            now(),
            &SyncContext::default(),
        );
        let st = plan.final_status().unwrap_or_default();
        assert_eq!(
            conditions::is_true(st.conditions.as_deref().unwrap_or(&[]), "Failed"),
            *fails,
            "BL{bl} failed{nfailed}"
        );
    }
}

#[test]
fn managed_by_and_finished_jobs_are_skipped() {
    let job = with_spec(job_nonindexed(2, Some(2), 6), |s| {
        s.managed_by = Some("example.com/custom-job-controller".into())
    });
    let plan = sync(&job, &[], now(), &SyncContext::default());
    assert_eq!(
        plan.skip,
        Some(Skip::ManagedElsewhere(
            "example.com/custom-job-controller".into()
        ))
    );
    assert!(plan.status.is_none() && plan.pods_to_create.is_empty());

    let job = with_status(job_nonindexed(2, Some(2), 6), |s| {
        s.conditions = Some(vec![cond("Complete", "True", "CompletionsReached", "")]);
    });
    assert_eq!(
        sync(&job, &running(1), now(), &SyncContext::default()).skip,
        Some(Skip::Finished)
    );

    let job = with_spec(job_nonindexed(2, Some(2), 6), |s| {
        s.completion_mode = Some("Weird".into())
    });
    let plan = sync(&job, &[], now(), &SyncContext::default());
    assert_eq!(plan.skip, Some(Skip::UnknownCompletionMode));
    assert_eq!(
        plan.events,
        vec![JobEvent::warning(
            "UnknownCompletionMode",
            "Skipped Job sync because completion mode is unknown"
        )]
    );

    // The reserved value is this controller.
    let job = with_spec(job_nonindexed(2, Some(2), 6), |s| {
        s.managed_by = Some(MANAGED_BY_JOB_CONTROLLER.into())
    });
    let plan = sync(&job, &[], now(), &SyncContext::default());
    assert_eq!(plan.skip, None);
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(
        (st.active, st.ready, st.terminating),
        (Some(2), Some(0), Some(0))
    );
}

#[test]
fn suspend_and_resume_events_and_start_time() {
    let started = now()
        .checked_sub(SignedDuration::from_secs(100))
        .unwrap_or(now());
    let job = with_status(suspend(job_nonindexed(2, Some(4), 6)), |s| {
        s.start_time = Some(Time(started));
        s.active = Some(2);
    });
    let plan = sync(&job, &running(2), now(), &SyncContext::default());
    assert_eq!(
        plan.events,
        vec![JobEvent::normal("Suspended", "Job suspended")]
    );
    // Suspending clears startTime (MutableSchedulingDirectivesForSuspendedJobs): the
    // template may change once the pods are gone.
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(st.start_time, None);
    assert!(
        plan.pods_to_delete
            .iter()
            .all(|d| d.reason == DeletionReason::Suspended && d.remove_finalizer_first())
    );

    let job = with_status(job_nonindexed(2, Some(4), 6), |s| {
        s.start_time = Some(Time(started));
        s.conditions = Some(vec![cond(
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
        )]);
    });
    let plan = sync(&job, &[], now(), &SyncContext::default());
    assert_eq!(
        plan.events,
        vec![JobEvent::normal("Resumed", "Job resumed")]
    );
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(
        st.start_time,
        Some(Time(now())),
        "resuming restarts the deadline clock"
    );
}

#[test]
fn completed_event_and_too_many_succeeded() {
    let plan = sync(
        &job_nonindexed(2, Some(2), 6),
        &succeeded(3),
        now(),
        &SyncContext::default(),
    );
    let (st, events) = plan.status_after_all_finalizers().unwrap_or_default();
    assert_eq!(st.succeeded, Some(3));
    assert_eq!(
        events,
        vec![
            JobEvent::warning(
                "TooManySucceededPods",
                "Too many succeeded pods running after completion count reached"
            ),
            JobEvent::normal("Completed", "Job completed"),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// TestTrackJobStatusAndRemoveFinalizers / TestGetNewFinshedPods.

fn uncounted(s: &[&str], f: &[&str]) -> Option<UncountedTerminatedPods> {
    let v = |l: &[&str]| (!l.is_empty()).then(|| l.iter().map(|x| x.to_string()).collect());
    Some(UncountedTerminatedPods {
        succeeded: v(s),
        failed: v(f),
    })
}

#[test]
fn three_step_accounting() {
    let job = job_nonindexed(2, Some(2), 6);
    let s = pod_finished_at("Succeeded", long_ago());
    let f = pod_finished_at("Failed", long_ago());
    let (su, fu) = (pods::uid(&s).to_string(), pods::uid(&f).to_string());
    let plan = sync(
        &job,
        &[s.clone(), f.clone()],
        now(),
        &SyncContext::default(),
    );
    // Step 1: UIDs into uncounted, counters untouched.
    let first = plan.status.clone().unwrap_or_default();
    assert_eq!(first.uncounted_terminated_pods, uncounted(&[&su], &[&fu]));
    assert_eq!((first.succeeded, first.failed), (None, None));
    // Step 2: both finalizers.
    let uids: Vec<&str> = plan
        .finalizers_to_remove
        .iter()
        .map(|p| p.uid.as_str())
        .collect();
    assert_eq!(uids, vec![su.as_str(), fu.as_str()]);
    // Step 3 with one removal failed: only the removed pod is counted.
    let only_s: BTreeSet<String> = [su.clone()].into();
    let (st, events) = plan.status_after_finalizers(&only_s).unwrap_or_default();
    assert_eq!((st.succeeded, st.failed), (Some(1), None));
    assert_eq!(st.uncounted_terminated_pods, uncounted(&[], &[&fu]));
    assert!(events.is_empty());

    // The next sync, with the failed pod still holding its finalizer and already
    // uncounted, does not count it twice and retries the removal.
    let job2 = with_status(job.clone(), |x| *x = st.clone());
    let plan = sync(
        &job2,
        &[without_finalizer(s.clone()), f.clone()],
        now(),
        &SyncContext::default(),
    );
    assert_eq!(plan.finalizers_to_remove.len(), 1);
    let fin = plan.final_status().unwrap_or_default();
    assert_eq!((fin.succeeded, fin.failed), (Some(1), Some(1)));
    assert_eq!(fin.uncounted_terminated_pods, uncounted(&[], &[]));

    // A pod that vanished while uncounted (deleted after its finalizer went) is counted.
    let job3 = with_status(job.clone(), |x| {
        x.start_time = Some(Time(long_ago()));
        x.uncounted_terminated_pods = uncounted(&["gone-s"], &["gone-f"]);
    });
    let plan = sync(&job3, &running(2), now(), &SyncContext::default());
    let st = plan.status.clone().unwrap_or_default();
    assert_eq!((st.succeeded, st.failed), (Some(1), Some(1)));
    assert_eq!(st.uncounted_terminated_pods, uncounted(&[], &[]));

    // Pods whose finalizer removal is already expected are left alone.
    let mut ctx = SyncContext::default();
    ctx.expected_removed_finalizers.insert(su.clone());
    let plan = sync(&job, &[s, f], now(), &ctx);
    let uids: Vec<&str> = plan
        .finalizers_to_remove
        .iter()
        .map(|p| p.uid.as_str())
        .collect();
    assert_eq!(uids, vec![fu.as_str()]);
}

#[test]
fn accounting_is_capped_per_sync() {
    let job = job_nonindexed(10, Some(10), 20);
    let pods = cat(vec![succeeded(3), failed(2)]);
    let ctx = SyncContext {
        max_uncounted_pods: 3,
        ..Default::default()
    };
    let plan = sync(&job, &pods, now(), &ctx);
    assert_eq!(plan.finalizers_to_remove.len(), 3);
    let (st, _) = plan.status_after_all_finalizers().unwrap_or_default();
    assert_eq!(st.succeeded, Some(3));

    // Indexed successes are capped by count of new indexes too, and no Complete is written
    // while the cap was hit.
    let job = job_indexed(5, 5, 6);
    let pods = indexed_pods(&[("0", 'S'), ("1", 'S'), ("2", 'S'), ("3", 'S'), ("4", 'S')]);
    let plan = sync(&job, &pods, now(), &ctx);
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(
        st.completed_indexes.as_deref(),
        Some("0-4"),
        "all succeeded indexes are known"
    );
    assert_eq!(plan.finalizers_to_remove.len(), 3);
    assert!(!conditions::is_true(
        st.conditions.as_deref().unwrap_or(&[]),
        "Complete"
    ));
}

#[test]
fn terminal_condition_waits_for_terminating_pods() {
    // FailureTarget now; Failed once the pods are gone.
    let job = job_nonindexed(2, Some(2), 0);
    let plan = sync(
        &job,
        &cat(vec![failed(1), running(1)]),
        now(),
        &SyncContext::default(),
    );
    let st = plan.final_status().unwrap_or_default();
    let types: Vec<&str> = st
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, vec!["FailureTarget"]);
    assert_eq!(st.terminating, Some(1));

    let job2 = with_status(job.clone(), |x| *x = st.clone());
    let still = cat(vec![vec![deleted(without_finalizer(new_pod_in_phase(
        "Running",
    )))]]);
    let plan = sync(&job2, &still, now(), &SyncContext::default());
    let st2 = plan.final_status().unwrap_or_else(|| st.clone());
    assert!(!conditions::is_true(
        st2.conditions.as_deref().unwrap_or(&[]),
        "Failed"
    ));

    let plan = sync(&job2, &[], now(), &SyncContext::default());
    let st3 = plan.final_status().unwrap_or_default();
    let types: Vec<&str> = st3
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, vec!["FailureTarget", "Failed"]);
    assert_eq!(
        (st3.active, st3.terminating, st3.failed),
        (Some(0), Some(0), Some(2))
    );
    assert_eq!(st3.completion_time, None);
}

#[test]
fn new_finished_pods_counting() {
    // TestGetNewFinshedPods: counts of new succeeded/failed from pods with the finalizer.
    let job = job_nonindexed(10, Some(20), 100);
    let pods = cat(vec![
        succeeded(2),
        failed(1),
        succeeded(1).into_iter().map(without_finalizer).collect(),
        failed(1).into_iter().map(without_finalizer).collect(),
        running(1).into_iter().map(deleted).collect(),
        pending(1).into_iter().map(deleted).collect(),
    ]);
    let plan = sync(&job, &pods, now(), &SyncContext::default());
    let st = plan.status.clone().unwrap_or_default();
    let u = st.uncounted_terminated_pods.unwrap_or_default();
    assert_eq!(u.succeeded.map_or(0, |v| v.len()), 2);
    assert_eq!(
        u.failed.map_or(0, |v| v.len()),
        3,
        "deleted unfinished pods count as failed"
    );
}

// ---------------------------------------------------------------------------------------
// Deletion preference and pod construction.

#[test]
fn deletion_preference_order() {
    let mut unscheduled = new_pod_in_phase("Pending");
    unscheduled.metadata.name = Some("unscheduled".into());
    let scheduled = |name: &str, phase: &str| {
        let mut p = new_pod_in_phase(phase);
        p.metadata.name = Some(name.into());
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some("node".into());
        }
        p
    };
    let pending_p = scheduled("pending", "Pending");
    let running_p = scheduled("running", "Running");
    let mut ready_new = scheduled("ready-new", "Running");
    set_ready(&mut ready_new, true, now());
    let mut ready_old = scheduled("ready-old", "Running");
    set_ready(&mut ready_old, true, long_ago());
    let mut many_restarts = scheduled("restarts", "Running");
    set_ready(&mut many_restarts, true, long_ago());
    if let Some(s) = many_restarts.status.as_mut() {
        s.container_statuses = Some(vec![ContainerStatus {
            name: "c".into(),
            restart_count: 5,
            ..Default::default()
        }]);
    }
    let mut all = [
        ready_old,
        many_restarts,
        ready_new,
        running_p,
        pending_p,
        unscheduled,
    ];
    all.sort_by(pods::active_pods_cmp);
    let names: Vec<&str> = all.iter().map(pods::name).collect();
    assert_eq!(
        names,
        vec![
            "unscheduled",
            "pending",
            "running",
            "ready-new",
            "restarts",
            "ready-old"
        ]
    );
}

#[test]
fn indexed_pod_construction_keeps_existing_env_and_adds_to_init_containers() {
    let job = with_spec(job_indexed(1, 1, 6), |s| {
        if let Some(ps) = s.template.spec.as_mut() {
            ps.init_containers = Some(vec![kbatch_api::k8s_openapi::api::core::v1::Container {
                name: "init".into(),
                env: Some(vec![kbatch_api::k8s_openapi::api::core::v1::EnvVar {
                    name: "JOB_COMPLETION_INDEX".into(),
                    value: Some("custom".into()),
                    value_from: None,
                }]),
                ..Default::default()
            }]);
        }
    });
    let p = pods::new_pod(
        &job,
        &pods::NewPodIdentity {
            index: Some(0),
            ..Default::default()
        },
    );
    let spec = p.spec.unwrap_or_default();
    let init_env = spec.init_containers.unwrap_or_default()[0]
        .env
        .clone()
        .unwrap_or_default();
    assert_eq!(init_env.len(), 1);
    assert_eq!(init_env[0].value.as_deref(), Some("custom"));
    assert_eq!(spec.subdomain, None);
    let ann = p.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ann.get(keys::JOB_COMPLETION_INDEX_ANNOTATION)
            .map(String::as_str),
        Some("0")
    );
    let labels = p.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("foo").map(String::as_str), Some("bar"));
    assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
}

#[test]
fn no_panic_on_odd_input() {
    // A Job without a spec, pods without metadata or status, and absurd numbers.
    let mut job = job_nonindexed(i32::MAX, Some(i32::MAX), i32::MAX);
    job.status = Some(JobStatus {
        succeeded: Some(i32::MAX),
        failed: Some(i32::MAX),
        completed_indexes: Some("-,x-y,9-1,,".into()),
        ..Default::default()
    });
    let _ = sync(&job, &[Pod::default()], now(), &SyncContext::default());
    let job = with_spec(job_indexed(-5, -3, -1), |s| {
        s.backoff_limit_per_index = Some(-1)
    });
    let _ = sync(
        &job,
        &[with_index(Pod::default(), "99999999999")],
        now(),
        &SyncContext::default(),
    );
    let mut no_spec = job_nonindexed(1, Some(1), 1);
    no_spec.spec = None;
    assert_eq!(
        sync(&no_spec, &[], now(), &SyncContext::default()).skip,
        Some(Skip::InvalidSpec)
    );
    // A start time in the future with the largest deadline, and a zero back-off base.
    let future = with_status(
        with_spec(job_nonindexed(1, Some(1), 6), |s| {
            s.active_deadline_seconds = Some(i64::MAX)
        }),
        |s| s.start_time = Some(Time(Timestamp::MAX)),
    );
    let ctx = SyncContext {
        backoff: BackoffRecord {
            failures_after_last_success: i32::MAX,
            last_failure_time: Some(now()),
        },
        backoff_config: backoff::BackoffConfig {
            base: Duration::ZERO,
            max: Duration::MAX,
        },
        ..Default::default()
    };
    let _ = sync(&future, &[], Timestamp::MIN, &ctx);
    let far_past = Timestamp::MIN;
    let _ = sync(
        &with_deadline(job_nonindexed(1, Some(1), 6), i64::MAX, 5),
        &[pod_finished_at("Failed", far_past)],
        Timestamp::MAX,
        &SyncContext::default(),
    );
}

#[test]
fn failed_pod_actions_are_accounted_for() {
    // Two creations planned, one failed: active counts only the one created.
    let job = job_nonindexed(2, Some(5), 6);
    let ctx = SyncContext {
        failed_pod_actions: Some(FailedPodActions {
            creates: 1,
            deletes: BTreeSet::new(),
        }),
        ..Default::default()
    };
    let plan = sync(&job, &[], now(), &ctx);
    assert_eq!(plan.pods_to_create.len(), 1);
    assert_eq!(plan.final_status().unwrap_or_default().active, Some(1));

    // "too many active pods, with controller error": the deletion failed, nothing changes.
    let pods = ready(3);
    let plan = sync(
        &job_nonindexed(2, Some(5), 6),
        &pods,
        now(),
        &SyncContext::default(),
    );
    let failed_uids: BTreeSet<String> = plan
        .pods_to_delete
        .iter()
        .map(|d| d.pod.uid.clone())
        .collect();
    let ctx = SyncContext {
        failed_pod_actions: Some(FailedPodActions {
            creates: 0,
            deletes: failed_uids,
        }),
        ..Default::default()
    };
    let plan = sync(&job_nonindexed(2, Some(5), 6), &pods, now(), &ctx);
    assert!(plan.pods_to_delete.is_empty());
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(
        (st.active, st.ready, st.terminating),
        (Some(3), Some(3), Some(0))
    );

    // A finishing deletion that failed puts the failure decision off: the running pod is
    // neither counted as failed nor stripped of its finalizer.
    let job = job_nonindexed(2, Some(3), 0);
    let pods = cat(vec![running(1), failed(1)]);
    let plan = sync(&job, &pods, now(), &SyncContext::default());
    let failed_uids: BTreeSet<String> = plan
        .pods_to_delete
        .iter()
        .map(|d| d.pod.uid.clone())
        .collect();
    assert_eq!(failed_uids.len(), 1);
    let ctx = SyncContext {
        failed_pod_actions: Some(FailedPodActions {
            creates: 0,
            deletes: failed_uids,
        }),
        ..Default::default()
    };
    let plan = sync(&job, &pods, now(), &ctx);
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(
        (st.active, st.failed, st.terminating),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(st.conditions, None);
    assert_eq!(plan.finalizers_to_remove.len(), 1);
}

#[test]
fn resuming_restarts_the_deadline() {
    // Suspended long ago with a deadline long past: resuming starts the clock afresh.
    let job = with_status(
        with_deadline(job_nonindexed(1, Some(1), 6), 10, 1000),
        |s| {
            s.conditions = Some(vec![cond(
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
            )]);
        },
    );
    let plan = sync(&job, &[], now(), &SyncContext::default());
    assert_eq!(plan.pods_to_create.len(), 1);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(10)));
    let st = plan.final_status().unwrap_or_default();
    assert_eq!(st.start_time, Some(Time(now())));
    let types: Vec<&str> = st
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, vec!["Suspended"]);

    // A finished Job is left alone and its back-off record dropped.
    let job = with_status(job_nonindexed(1, Some(1), 6), |s| {
        s.conditions = Some(vec![cond("Failed", "True", "BackoffLimitExceeded", "")]);
    });
    let ctx = SyncContext {
        backoff: BackoffRecord {
            failures_after_last_success: 3,
            last_failure_time: Some(now()),
        },
        ..Default::default()
    };
    let plan = sync(&job, &[], now(), &ctx);
    assert_eq!(plan.skip, Some(Skip::Finished));
    assert_eq!(plan.backoff, BackoffRecord::default());
}

#[test]
fn orphan_pod_finalizers() {
    use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let running_job = job_nonindexed(1, Some(1), 6);
    let finished_job = with_status(running_job.clone(), |s| {
        s.conditions = Some(vec![cond("Complete", "True", "CompletionsReached", "")]);
    });
    let managed = with_spec(finished_job.clone(), |s| {
        s.managed_by = Some("example.com/other".into())
    });
    let with_owner = |kind: &str, api: &str, controller: bool| {
        let mut p = new_pod_in_phase("Running");
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: api.into(),
            kind: kind.into(),
            name: "foobar".into(),
            uid: JOB_UID.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }]);
        p
    };
    // TestSyncOrphanPod: (name, pod, controller job, want removal)
    let cases: Vec<(&str, Pod, Option<&Job>, bool)> = vec![
        (
            "controlled by a running job",
            new_pod_in_phase("Running"),
            Some(&running_job),
            false,
        ),
        (
            "controlled by a finished job",
            new_pod_in_phase("Running"),
            Some(&finished_job),
            true,
        ),
        (
            "controlled by a non-existing job",
            new_pod_in_phase("Running"),
            None,
            true,
        ),
        (
            "controlled by a cronjob",
            with_owner("CronJob", "batch/v1", true),
            None,
            false,
        ),
        (
            "not controlled",
            {
                let mut p = new_pod_in_phase("Running");
                p.metadata.owner_references = None;
                p
            },
            None,
            true,
        ),
        (
            "controller is a custom Job kind",
            with_owner("Job", "example/v1", true),
            None,
            false,
        ),
        (
            "non-controller owner refs",
            with_owner("Job", "batch/v1", false),
            None,
            true,
        ),
        (
            "job managed by another controller",
            new_pod_in_phase("Running"),
            Some(&managed),
            false,
        ),
        (
            "no finalizer, nothing to do",
            without_finalizer(new_pod_in_phase("Running")),
            None,
            false,
        ),
    ];
    for (name, pod, job, want) in cases {
        assert_eq!(
            tracking::orphan_needs_finalizer_removal(&pod, job),
            want,
            "{name}"
        );
    }
    // A namesake Job with another UID does not own the pod.
    let mut namesake = running_job.clone();
    namesake.metadata.uid = Some("other-uid".into());
    assert!(tracking::orphan_needs_finalizer_removal(
        &new_pod_in_phase("Running"),
        Some(&namesake)
    ));
}

#[test]
fn slow_start_batch_sizes() {
    assert_eq!(slow_start_batches(0), Vec::<usize>::new());
    assert_eq!(slow_start_batches(1), vec![1]);
    assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
    assert_eq!(slow_start_batches(500).iter().sum::<usize>(), 500);
}

#[test]
fn controller_errors() {
    // "too few active pods, with controller error" and "only new failed pod with controller
    // error": the creation and the finalizer removal fail, so nothing is counted yet.
    for (name, pods, want_uncounted) in [
        (
            "too few active pods, with controller error",
            cat(vec![running(1), succeeded(1)]),
            (1, 0),
        ),
        (
            "only new failed pod with controller error",
            cat(vec![running(1), failed(1)]),
            (0, 1),
        ),
    ] {
        let job = job_nonindexed(2, Some(5), 6);
        let plan = sync(&job, &pods, now(), &SyncContext::default());
        assert_eq!(plan.pods_to_create.len(), 1, "{name}");
        assert_eq!(plan.finalizers_to_remove.len(), 1, "{name}: patch attempts");
        let ctx = SyncContext {
            failed_pod_actions: Some(FailedPodActions {
                creates: 1,
                deletes: BTreeSet::new(),
            }),
            ..Default::default()
        };
        let plan = sync(&job, &pods, now(), &ctx);
        // No removal succeeded: the second write, if any, counts nothing.
        let st = plan
            .status_after_finalizers(&BTreeSet::new())
            .map(|(s, _)| s)
            .or_else(|| plan.status.clone())
            .unwrap_or_default();
        assert_eq!(st.active, Some(1), "{name}: active");
        assert_eq!(
            (st.succeeded.unwrap_or(0), st.failed.unwrap_or(0)),
            (0, 0),
            "{name}: counters"
        );
        let u = st.uncounted_terminated_pods.unwrap_or_default();
        assert_eq!(
            (
                u.succeeded.map_or(0, |v| v.len()),
                u.failed.map_or(0, |v| v.len())
            ),
            want_uncounted,
            "{name}: uncounted"
        );
    }
}

#[test]
fn more_upstream_rows() {
    let mut r = row(
        "count ready pods when suspending a job with unsatisfied expectations",
        suspend(job_nonindexed(2, Some(4), 6)),
        ready(3),
        Want {
            active: 3,
            ready: 3,
            ..Default::default()
        },
    );
    r.ctx.satisfied_expectations = false;
    run(r);

    let msg = "Container main-container for pod default/mypod-0 failed with exit code 5 matching FailJob rule at index 1";
    run(row(
        "job marked already as failure target with failed pod",
        with_status(
            pfp(
                job_nonindexed(1, Some(1), 6),
                vec![
                    exit_rule("Ignore", &[1, 2, 3]),
                    exit_rule("FailJob", &[5, 6, 7]),
                ],
            ),
            |s| s.conditions = Some(vec![cond("FailureTarget", "True", "PodFailurePolicy", msg)]),
        ),
        vec![named(failed_with_exit(5), "mypod-0")],
        Want {
            failed: 1,
            conditions: vec![
                ("FailureTarget", "True", "PodFailurePolicy"),
                ("Failed", "True", "PodFailurePolicy"),
            ],
            messages: vec![msg, msg],
            patches: 1,
            ..Default::default()
        },
    ));
    run(row(
        "default handling for pod failure if the container matching the exit codes does not match the containerName restriction",
        pfp(
            job_nonindexed(1, Some(1), 6),
            vec![
                PodFailurePolicyRule {
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some("main-container".into()),
                        operator: "In".into(),
                        values: vec![1, 2, 3],
                    }),
                    ..exit_rule("Ignore", &[])
                },
                PodFailurePolicyRule {
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some("main-container".into()),
                        operator: "In".into(),
                        values: vec![5, 6, 7],
                    }),
                    ..exit_rule("FailJob", &[])
                },
            ],
        ),
        vec![{
            let mut p = failed_with_exit(42);
            add_container_exit(&mut p, "monitoring-container", 5, false);
            p
        }],
        Want {
            creates: 1,
            active: 1,
            failed: 1,
            patches: 1,
            ..Default::default()
        },
    ));
    run(row(
        "fail job with multiple pods",
        pfp(
            job_nonindexed(2, Some(2), 6),
            vec![
                exit_rule("Ignore", &[1, 2, 3]),
                exit_rule("FailJob", &[5, 6, 7]),
            ],
        ),
        vec![
            named(running(1).remove(0), "mypod-0"),
            named(failed_with_exit(5), "mypod-1"),
        ],
        Want {
            deletes: 1,
            failed: 2,
            terminating: 1,
            conditions: vec![("FailureTarget", "True", "PodFailurePolicy")],
            messages: vec![
                "Container main-container for pod default/mypod-1 failed with exit code 5 matching FailJob rule at index 1",
            ],
            patches: 2,
            ..Default::default()
        },
    ));
}

/// A small deterministic generator, so the randomized test below is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn random_job(r: &mut Rng) -> Job {
    let indexed = r.chance(50);
    let parallelism = r.below(5) as i32;
    let completions = if indexed || r.chance(70) {
        Some(r.below(6) as i32)
    } else {
        None
    };
    let mut job = if indexed {
        job_indexed(parallelism, completions.unwrap_or(0), r.below(4) as i32)
    } else {
        job_nonindexed(parallelism, completions, r.below(4) as i32)
    };
    job = with_spec(job, |s| {
        s.suspend = Some(r.chance(15));
        if r.chance(30) {
            s.pod_failure_policy = Some(PodFailurePolicy {
                rules: vec![
                    condition_rule("Ignore", "DisruptionTarget"),
                    exit_rule("FailJob", &[5]),
                    exit_rule(
                        if indexed && r.chance(50) {
                            "FailIndex"
                        } else {
                            "Count"
                        },
                        &[3],
                    ),
                ],
            });
            s.pod_replacement_policy = Some("Failed".into());
        } else if r.chance(30) {
            s.pod_replacement_policy = Some("Failed".into());
        }
        if indexed && r.chance(40) {
            s.backoff_limit_per_index = Some(r.below(3) as i32);
            s.backoff_limit = Some(if r.chance(50) {
                i32::MAX
            } else {
                r.below(4) as i32
            });
            if r.chance(50) {
                s.max_failed_indexes = Some(r.below(3) as i32);
            }
        }
        if indexed && r.chance(30) {
            s.success_policy = Some(SuccessPolicy {
                rules: vec![SuccessPolicyRule {
                    succeeded_indexes: r.chance(50).then(|| "0,2".to_string()),
                    succeeded_count: Some(1 + r.below(2) as i32),
                }],
            });
        }
        if r.chance(20) {
            s.active_deadline_seconds = Some(r.below(20) as i64);
        }
    });
    if r.chance(60) {
        let started = now()
            .checked_sub(SignedDuration::from_secs(r.below(30) as i64))
            .unwrap_or(now());
        job = with_status(job, |s| s.start_time = Some(Time(started)));
    }
    if r.chance(20) {
        job = with_status(job, |s| {
            s.conditions = Some(vec![if r.chance(50) {
                cond(
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            } else {
                cond("Suspended", "True", "JobSuspended", "Job suspended")
            }]);
        });
    }
    job
}

fn random_pods(r: &mut Rng) -> Vec<Pod> {
    (0..r.below(9))
        .map(|_| {
            let mut p = match r.below(4) {
                0 => new_pod_in_phase("Pending"),
                1 => new_pod_in_phase("Running"),
                2 => pod_finished_at("Succeeded", long_ago()),
                _ => failed_with_exit([1, 3, 5][r.below(3) as usize]),
            };
            if r.chance(70) {
                p = with_index(p, &r.below(7).to_string());
            }
            if r.chance(15) {
                p = deleted(p);
            }
            if r.chance(15) {
                p = without_finalizer(p);
            }
            if r.chance(30) {
                set_ready(&mut p, true, long_ago());
            }
            if r.chance(10) {
                p = with_condition(p, "DisruptionTarget", "True");
            }
            if r.chance(30) {
                annotate(
                    &mut p,
                    keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION,
                    &r.below(3).to_string(),
                );
            }
            p
        })
        .collect()
}

#[test]
fn random_plans_never_write_an_invalid_status() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..10000 {
        let mut job = random_job(&mut r);
        let pods = random_pods(&mut r);
        if r.chance(20) {
            // Some finished pods were already recorded as uncounted by an earlier sync.
            let (mut s_uids, mut f_uids) = (Vec::new(), Vec::new());
            for p in pods.iter().filter(|p| pods::is_terminal(p) && r.chance(50)) {
                if pods::is_succeeded(p) && indexed_completions(&job).is_none() {
                    s_uids.push(pods::uid(p).to_string());
                } else if pods::phase(p) == "Failed" {
                    f_uids.push(pods::uid(p).to_string());
                }
            }
            job = with_status(job, |s| {
                s.uncounted_terminated_pods = Some(UncountedTerminatedPods {
                    succeeded: (!s_uids.is_empty()).then_some(s_uids),
                    failed: (!f_uids.is_empty()).then_some(f_uids),
                });
            });
        }
        if r.chance(10)
            && job
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none_or(Vec::is_empty)
        {
            job = with_status(job, |s| {
                s.start_time.get_or_insert(Time(long_ago()));
                s.conditions = Some(vec![cond(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )]);
            });
        }
        let ctx = SyncContext {
            satisfied_expectations: r.chance(85),
            ..Default::default()
        };
        let name = format!("random case {i}");
        let plan = sync(&job, &pods, now(), &ctx);
        check_status_is_valid(&name, &job, &plan);
        // A second sync on the outcome, with the finalizers gone, must stay valid too.
        if let Some(st) = plan.final_status() {
            let removed: BTreeSet<String> = plan
                .finalizers_to_remove
                .iter()
                .map(|p| p.uid.clone())
                .collect();
            let next_pods: Vec<Pod> = pods
                .iter()
                .filter(|p| {
                    !plan
                        .pods_to_delete
                        .iter()
                        .any(|d| d.pod.uid == pods::uid(p))
                })
                .map(|p| {
                    if removed.contains(pods::uid(p)) {
                        without_finalizer(p.clone())
                    } else {
                        p.clone()
                    }
                })
                .collect();
            let mut next = job.clone();
            next.status = Some(st);
            let plan2 = sync(&next, &next_pods, now(), &SyncContext::default());
            check_status_is_valid(&format!("{name}, second sync"), &next, &plan2);
        }
    }
}

/// The `action` label of `job_controller_job_syncs_total`, as upstream's `syncJob` and
/// `manageJob` decide it; skipped syncs (finished, managed elsewhere) are not counted.
#[test]
fn sync_metrics_action() {
    let ctx = SyncContext::default();
    let action = |job: &Job, pods: &[Pod], ctx: &SyncContext| sync(job, pods, now(), ctx).action;
    let job = job_nonindexed(2, Some(4), 6);
    assert_eq!(action(&job, &[], &ctx), Some("pods_created"));
    assert_eq!(action(&job, &running(2), &ctx), Some("tracking"));
    assert_eq!(action(&job, &running(3), &ctx), Some("pods_deleted"));
    assert_eq!(
        action(&suspend(job.clone()), &running(2), &ctx),
        Some("pods_deleted")
    );
    // Pods are due but back-off holds them: still pods_created, as upstream.
    let held = SyncContext {
        backoff: BackoffRecord {
            failures_after_last_success: 1,
            last_failure_time: Some(now()),
        },
        ..SyncContext::default()
    };
    let plan = sync(&job, &[], now(), &held);
    assert!(plan.pods_to_create.is_empty());
    assert_eq!(plan.action, Some("pods_created"));
    // manageJob does not run: unsatisfied expectations, or a finishing Job.
    let waiting = SyncContext {
        satisfied_expectations: false,
        ..SyncContext::default()
    };
    assert_eq!(action(&job, &[], &waiting), Some("reconciling"));
    let one = job_nonindexed(1, Some(1), 6);
    // Completion is decided after manageJob, which ran (nothing to do).
    assert_eq!(action(&one, &succeeded(1), &ctx), Some("tracking"));
    // A failing Job's active pods are deleted without manageJob.
    let mut pods = failed(1);
    pods.extend(running(1));
    let plan = sync(&job_nonindexed(2, Some(4), 0), &pods, now(), &ctx);
    assert_eq!(plan.pods_to_delete.len(), 1);
    assert_eq!(plan.action, Some("reconciling"));
    // A finished Job's syncs are not counted.
    let done = with_status(one, |s| {
        s.conditions = Some(vec![cond(
            "Complete",
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )]);
    });
    assert_eq!(action(&done, &[], &ctx), None);
}

/// The `reason` of `job_pods_creation_total`, from this sync's counts: a failure first seen
/// in the same sync, or a pod terminating, makes the replacements `recreate_*`.
#[test]
fn creation_reason_counts_this_syncs_failures() {
    let ctx = SyncContext::default();
    let job = job_nonindexed(2, Some(4), 6);
    let plan = sync(&job, &running(1), now(), &ctx);
    assert_eq!(
        (plan.pods_to_create.len(), plan.creation_reason),
        (1, "new")
    );
    // A failure seen first in this sync (the status has none yet); no back-off here.
    let mut pods = failed(1);
    pods.extend(running(1));
    let plan = sync(&job, &pods, now(), &ctx);
    assert_eq!(plan.creation_reason, "recreate_terminating_or_failed");
    // A failure counted before.
    let counted = with_status(job.clone(), |s| s.failed = Some(1));
    let plan = sync(&counted, &running(1), now(), &ctx);
    assert_eq!(plan.creation_reason, "recreate_terminating_or_failed");
    // A terminating pod, with the default replacement policy.
    let mut pods = terminating(1);
    pods.extend(running(1));
    let plan = sync(&job, &pods, now(), &ctx);
    assert_eq!(plan.creation_reason, "recreate_terminating_or_failed");
    // podReplacementPolicy Failed: failures make it recreate_failed.
    let mut only_failed = counted;
    if let Some(spec) = only_failed.spec.as_mut() {
        spec.pod_replacement_policy = Some("Failed".into());
    }
    let plan = sync(&only_failed, &running(1), now(), &ctx);
    assert_eq!(plan.creation_reason, "recreate_failed");
}

/// With several failed pods of one index still holding their finalizer, the replacement
/// follows the one upstream's getPodsWithDelayedDeletionPerIndex keeps: the highest absolute
/// failure count (counted plus ignored), the latest to finish among equals.
#[test]
fn delayed_deletion_keeps_the_highest_absolute_failure_count() {
    let job = blpi(job_indexed(1, 1, 6), 5);
    let recently = now()
        .checked_sub(SignedDuration::from_secs(60))
        .unwrap_or(now());
    let earlier = with_failure_count(with_index(pod_finished_at("Failed", long_ago()), "0"), 1);
    let mut later = with_failure_count(with_index(pod_finished_at("Failed", recently), "0"), 0);
    annotate(
        &mut later,
        keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION,
        "2",
    );
    let plan = sync(&job, &[earlier, later], now(), &SyncContext::default());
    assert_eq!(created_indexes(&plan), vec![0]);
    let ann = plan.pods_to_create[0]
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    let get = |k: &str| ann.get(k).map(String::as_str);
    // The later pod (absolute count 2) is the one replaced: its counts plus this failure.
    assert_eq!(get(keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION), Some("1"));
    assert_eq!(
        get(keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION),
        Some("2")
    );
}
