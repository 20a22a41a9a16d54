//! Fixtures for the Job decision tests: a Job like upstream's `newJob` ("foobar" in
//! "default") and pods described by phase, index, readiness and deletion.

use std::sync::atomic::{AtomicUsize, Ordering};

use kbatch_api::k8s_openapi::api::batch::v1::{Job, JobSpec};
use kbatch_api::k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition,
    PodSpec, PodStatus, PodTemplateSpec,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::keys;

pub const JOB_UID: &str = "job-uid-1";

pub fn time(t: Timestamp) -> Time {
    Time(t)
}

/// The fixed "now" of the tests.
pub fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A time long before [`now`], so back-offs of pods that finished then are over.
pub fn long_ago() -> Timestamp {
    Timestamp::from_second(1).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub fn job_nonindexed(parallelism: i32, completions: Option<i32>, backoff_limit: i32) -> Job {
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("foo".to_string(), "bar".to_string());
    Job {
        metadata: ObjectMeta {
            name: Some("foobar".into()),
            namespace: Some("default".into()),
            uid: Some(JOB_UID.into()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            parallelism: Some(parallelism),
            completions,
            backoff_limit: Some(backoff_limit),
            completion_mode: Some("NonIndexed".into()),
            selector: Some(LabelSelector {
                match_labels: Some(labels.clone()),
                match_expressions: None,
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main-container".into(),
                        image: Some("foo/bar".into()),
                        ..Default::default()
                    }],
                    restart_policy: Some("Never".into()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

pub fn job_indexed(parallelism: i32, completions: i32, backoff_limit: i32) -> Job {
    let mut j = job_nonindexed(parallelism, Some(completions), backoff_limit);
    if let Some(s) = j.spec.as_mut() {
        s.completion_mode = Some("Indexed".into());
    }
    j
}

static NEXT_UID: AtomicUsize = AtomicUsize::new(0);

/// A pod of the Job with the tracking finalizer, in `phase`, created long ago.
pub fn new_pod_in_phase(phase: &str) -> Pod {
    let n = NEXT_UID.fetch_add(1, Ordering::Relaxed);
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{n}")),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{n}")),
            finalizers: Some(vec![keys::JOB_TRACKING_FINALIZER.into()]),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: "foobar".into(),
                uid: JOB_UID.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            creation_timestamp: Some(time(long_ago())),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
    }
}

/// A finished pod whose only container terminated at `t` (exit code 0 or 1 by phase).
pub fn pod_finished_at(phase: &str, t: Timestamp) -> Pod {
    let mut p = new_pod_in_phase(phase);
    let code = if phase == keys::POD_FAILED { 1 } else { 0 };
    if let Some(s) = p.status.as_mut() {
        s.container_statuses = Some(vec![ContainerStatus {
            name: "main-container".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    finished_at: Some(time(t)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
    }
    p
}

pub fn add_container_exit(p: &mut Pod, name: &str, code: i32, init: bool) {
    let cs = ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                finished_at: Some(time(long_ago())),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Some(s) = p.status.as_mut() {
        let list = if init {
            s.init_container_statuses.get_or_insert_with(Vec::new)
        } else {
            s.container_statuses.get_or_insert_with(Vec::new)
        };
        list.push(cs);
    }
}

pub fn with_condition(mut p: Pod, type_: &str, status: &str) -> Pod {
    if let Some(s) = p.status.as_mut() {
        s.conditions
            .get_or_insert_with(Vec::new)
            .push(PodCondition {
                type_: type_.into(),
                status: status.into(),
                ..Default::default()
            });
    }
    p
}

pub fn set_ready(p: &mut Pod, ready: bool, since: Timestamp) {
    if let Some(s) = p.status.as_mut() {
        let conds = s.conditions.get_or_insert_with(Vec::new);
        conds.retain(|c| c.type_ != "Ready");
        conds.push(PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            last_transition_time: Some(time(since)),
            ..Default::default()
        });
    }
}

pub fn annotate(p: &mut Pod, key: &str, value: &str) {
    p.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

pub fn with_index(mut p: Pod, ix: &str) -> Pod {
    annotate(&mut p, keys::JOB_COMPLETION_INDEX_ANNOTATION, ix);
    p
}

pub fn deleted(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some(time(long_ago()));
    p
}

pub fn without_finalizer(mut p: Pod) -> Pod {
    p.metadata.finalizers = None;
    p
}
