//! Valid inputs, update rules and status update rules (TestValidateJob success cases,
//! TestValidateJobUpdate, TestValidateJobUpdateStatus, TestValidateCronJob*, pod updates).

use crate::common;

use common::*;
use kbatch_api::field::aggregate_message;
use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::{strategy, validation};
use serde_json::{Value, json};

#[test]
fn valid_jobs_have_no_errors() {
    let cases = [
        json!({}),
        json!({"metadata": {"generateName": "pi-", "labels": {"team": "a"}, "annotations": {"Example.com/Key": "v"}, "finalizers": ["example.com/f", "orphan"]}}),
        json!({"spec": {"parallelism": 0, "completions": 0, "activeDeadlineSeconds": 0, "backoffLimit": 0, "ttlSecondsAfterFinished": 0}}),
        json!({"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}),
        json!({"spec": {"completionMode": "Indexed", "completions": 10, "parallelism": 3, "backoffLimitPerIndex": 1, "maxFailedIndexes": 5}}),
        json!({"spec": {"completionMode": "Indexed", "completions": 10, "successPolicy": {"rules": [{"succeededIndexes": "0-2,5", "succeededCount": 3}, {"succeededCount": 10}]}}}),
        json!({"spec": {"completionMode": "Indexed", "completions": 200000, "parallelism": 10000, "backoffLimitPerIndex": 0, "maxFailedIndexes": 10000}}),
        json!({"spec": {"podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [1, 2, 3]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}
        ]}}}),
        json!({"spec": {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1, "podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}
        ]}}}),
        json!({"spec": {"manualSelector": true, "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]}, "template": {"metadata": {"labels": {"app": "x"}}}}}),
        json!({"spec": {"managedBy": "example.com/custom-controller", "suspend": true}}),
        json!({"spec": {"template": {"spec": {
            "initContainers": [{"name": "init", "image": "busybox"}, {"name": "sidecar", "image": "busybox", "restartPolicy": "Always", "readinessProbe": {"exec": {"command": ["true"]}}}],
            "containers": [{"name": "c", "image": "busybox", "env": [
                {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "some.key"}}},
                {"name": "my-var.1", "value": "x"}
            ], "ports": [{"name": "http", "containerPort": 8080}],
               "resources": {"limits": {"cpu": "1", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
               "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"operator": "Exists"}, {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30}],
            "activeDeadlineSeconds": 60, "hostname": "h", "subdomain": "s", "serviceAccountName": "sa"
        }}}}),
    ];
    for patch in cases {
        let errs = create_job(patch.clone());
        assert!(errs.is_empty(), "{patch}: {}", aggregate_message(&errs));
    }
}

#[test]
fn valid_cronjobs_and_pods_have_no_errors() {
    for patch in [
        json!({}),
        json!({"spec": {"schedule": "@hourly"}}),
        json!({"spec": {"schedule": "* * * * ?"}}),
        json!({"spec": {"schedule": "0 9 * * MON-FRI", "timeZone": "Europe/Berlin", "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 0}}),
        json!({"spec": {"timeZone": "UTC", "successfulJobsHistoryLimit": 0, "failedJobsHistoryLimit": 0}}),
        json!({"metadata": {"name": "c".repeat(52)}}),
        json!({"spec": {"jobTemplate": {"spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3}}}}),
    ] {
        let errs = create_cronjob(patch.clone());
        assert!(errs.is_empty(), "{patch}: {}", aggregate_message(&errs));
    }
    for patch in [
        json!({}),
        json!({"spec": {"restartPolicy": "Never", "nodeName": "kbatch-node"}}),
        json!({"metadata": {"name": "p.with.dots"}}),
        json!({"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"example.com/gpu": "1"}}}]}}),
    ] {
        let errs = create_pod(patch.clone());
        assert!(errs.is_empty(), "{patch}: {}", aggregate_message(&errs));
    }
}

/// Runs the update pipeline: defaults on the new object, system fields from old, strategy,
/// then validation.
fn update_job(old: &Job, mutate: impl FnOnce(&mut Job)) -> Vec<String> {
    let mut new = old.clone();
    mutate(&mut new);
    kbatch_api::defaults::job(&mut new);
    new.metadata.generation = old.metadata.generation;
    strategy::job_prepare_for_update(&mut new, old);
    validation::job_update(&new, old)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn spec_mut(job: &mut Job) -> &mut kbatch_api::k8s_openapi::api::batch::v1::JobSpec {
    job.spec.get_or_insert_with(Default::default)
}

#[test]
fn job_update_rules() {
    let old = prepared_job(json!({}));
    assert!(update_job(&old, |_| {}).is_empty());
    assert!(update_job(&old, |j| spec_mut(j).parallelism = Some(5)).is_empty());
    assert!(update_job(&old, |j| spec_mut(j).suspend = Some(true)).is_empty());
    assert!(update_job(&old, |j| spec_mut(j).active_deadline_seconds = Some(10)).is_empty());
    assert!(update_job(&old, |j| spec_mut(j).backoff_limit = Some(1)).is_empty());

    let errs = update_job(&old, |j| spec_mut(j).completions = Some(3));
    assert!(
        errs.contains(&"spec.completions: Invalid value: 3: field is immutable".to_string()),
        "{errs:?}"
    );
    assert_eq!(errs.len(), 1, "{errs:?}");

    let errs = update_job(&old, |j| {
        spec_mut(j)
            .template
            .spec
            .as_mut()
            .expect("pod spec")
            .containers[0]
            .image = Some("busybox:2".to_string())
    });
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec.template: Invalid value: {"),
        "{errs:?}"
    );
    assert!(errs[0].ends_with(": field is immutable"), "{errs:?}");

    let errs = update_job(&old, |j| {
        spec_mut(j).completion_mode = Some("Indexed".into())
    });
    assert!(
        errs.contains(
            &"spec.completionMode: Invalid value: \"Indexed\": field is immutable".to_string()
        ),
        "{errs:?}"
    );
    let errs = update_job(&old, |j| {
        spec_mut(j).managed_by = Some("example.com/x".into())
    });
    assert_eq!(
        errs,
        vec!["spec.managedBy: Invalid value: \"example.com/x\": field is immutable"]
    );
    let errs = update_job(&old, |j| {
        spec_mut(j).selector = Some(decode(
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": UID, "job-name": "pi"}}),
        ))
    });
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec.selector: Invalid value: {"),
        "{errs:?}"
    );
    assert!(errs[0].ends_with("field is immutable"), "{errs:?}");
    // Immutable name.
    let errs = update_job(&old, |j| j.metadata.name = Some("other".into()));
    assert!(
        errs.contains(&"metadata.name: Invalid value: \"other\": field is immutable".to_string()),
        "{errs:?}"
    );
}

#[test]
fn indexed_job_completions_scale_with_parallelism() {
    let old = prepared_job(
        json!({"spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2}}),
    );
    assert!(
        update_job(&old, |j| {
            let s = spec_mut(j);
            s.completions = Some(4);
            s.parallelism = Some(4);
        })
        .is_empty()
    );
    let errs = update_job(&old, |j| spec_mut(j).completions = Some(3));
    assert_eq!(
        errs,
        vec![
            "spec.completions: Invalid value: 3: can only be modified in tandem with spec.parallelism"
        ]
    );
    // Setting completions to nil gives only the Required error (twice: ValidateJob runs on
    // the new object and again inside the update checks).
    let errs = update_job(&old, |j| spec_mut(j).completions = None);
    assert_eq!(
        errs,
        vec![
            "spec.completions: Required value: when completion mode is Indexed",
            "spec.completions: Required value: when completion mode is Indexed"
        ]
    );
}

#[test]
fn suspended_unstarted_job_may_change_scheduling_directives() {
    let old = prepared_job(json!({"spec": {"suspend": true}}));
    let edit = |j: &mut Job| {
        let s = spec_mut(j);
        let ps = s.template.spec.as_mut().expect("pod spec");
        ps.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
        ps.tolerations = Some(vec![decode(json!({"operator": "Exists"}))]);
        s.template
            .metadata
            .get_or_insert_with(Default::default)
            .annotations = Some([("a".to_string(), "b".to_string())].into());
    };
    assert!(update_job(&old, edit).is_empty());
    // Other template fields stay immutable even then.
    let errs = update_job(&old, |j| {
        spec_mut(j)
            .template
            .spec
            .as_mut()
            .expect("pod spec")
            .containers[0]
            .image = Some("other".into())
    });
    assert_eq!(errs.len(), 1, "{errs:?}");
    // Once started, or when not suspended, scheduling directives are immutable too.
    let mut started = old.clone();
    started.status = Some(decode(json!({"startTime": "2026-01-01T00:00:00Z"})));
    assert_eq!(update_job(&started, edit).len(), 1);
    let running = prepared_job(json!({}));
    assert_eq!(update_job(&running, edit).len(), 1);
}

#[test]
fn safely_suspended_job_may_change_resources_and_scheduling_directives() {
    // MutablePodResourcesForSuspendedJobs and MutableSchedulingDirectivesForSuspendedJobs
    // (on by default since 1.36), as upstream's strategy tests for KEP-5440.
    let resize = |j: &mut Job| {
        let ps = spec_mut(j).template.spec.as_mut().expect("pod spec");
        ps.containers[0].resources = Some(decode(json!({
            "requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4"}})));
    };
    let select = |j: &mut Job| {
        let ps = spec_mut(j).template.spec.as_mut().expect("pod spec");
        ps.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
    };
    let with = |spec: Value, status: Value| {
        let mut j = prepared_job(spec);
        j.status = Some(decode(status));
        j
    };
    let suspended = json!({"spec": {"suspend": true}});
    let suspended_cond = json!([{"type": "Suspended", "status": "True",
        "reason": "JobSuspended", "message": "Job suspended"}]);
    let cases = [
        (
            "suspended, never started",
            with(suspended.clone(), json!({})),
            true,
        ),
        (
            "started, then suspended, pods gone",
            with(
                suspended.clone(),
                json!({"startTime": "2026-01-01T00:00:00Z", "conditions": suspended_cond}),
            ),
            true,
        ),
        (
            "suspended, never started, pods still active",
            with(suspended.clone(), json!({"active": 1})),
            false,
        ),
        (
            "started and suspended, no Suspended condition yet",
            with(
                suspended.clone(),
                json!({"startTime": "2026-01-01T00:00:00Z"}),
            ),
            false,
        ),
        (
            "started, then suspended, pods still active",
            with(
                suspended,
                json!({"startTime": "2026-01-01T00:00:00Z", "active": 2,
                       "conditions": suspended_cond}),
            ),
            false,
        ),
        ("not suspended", with(json!({}), json!({})), false),
    ];
    for (name, old, allowed) in cases {
        for (what, edit) in [
            ("resources", &resize as &dyn Fn(&mut Job)),
            ("nodeSelector", &select),
        ] {
            let errs = update_job(&old, edit);
            if allowed {
                assert!(errs.is_empty(), "{name}, {what}: {errs:?}");
            } else {
                assert_eq!(errs.len(), 1, "{name}, {what}: {errs:?}");
                assert!(
                    errs[0].starts_with("spec.template: Invalid value:")
                        && errs[0].ends_with("field is immutable"),
                    "{name}, {what}: {errs:?}"
                );
            }
        }
    }
    // Init containers' resources may change too; other container fields may not.
    let mut old = prepared_job(json!({"spec": {"suspend": true, "template": {"spec": {
        "initContainers": [{"name": "init", "image": "busybox"}]}}}}));
    old.status = Some(decode(json!({})));
    let errs = update_job(&old, |j| {
        let ps = spec_mut(j).template.spec.as_mut().expect("pod spec");
        if let Some(init) = ps.init_containers.as_mut() {
            init[0].resources = Some(decode(json!({"requests": {"memory": "64Mi"}})));
        }
    });
    assert!(errs.is_empty(), "{errs:?}");
    let errs = update_job(&old, |j| {
        let ps = spec_mut(j).template.spec.as_mut().expect("pod spec");
        ps.containers[0].resources = Some(decode(json!({"requests": {"cpu": "1"}})));
        ps.containers[0].command = Some(vec!["other".into()]);
    });
    assert_eq!(errs.len(), 1, "{errs:?}");
}

fn status_update(spec_patch: Value, old_status: Value, new_status: Value) -> Vec<String> {
    let mut old = prepared_job(spec_patch);
    old.metadata.resource_version = Some("1".into());
    old.status = Some(decode(old_status));
    let mut new = old.clone();
    new.status = Some(decode(new_status));
    strategy::job_status_prepare_for_update(&mut new, &old);
    validation::job_status_update(&new, &old)
        .iter()
        .map(ToString::to_string)
        .collect()
}

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

fn cond(t: &str) -> Value {
    json!({"type": t, "status": "True"})
}

#[test]
fn job_status_update_rules() {
    let none = json!({});
    // (spec patch, old status, new status, expected messages)
    let cases: Vec<(Value, Value, Value, Vec<&str>)> = vec![
        (
            none.clone(),
            json!({}),
            json!({"active": 1, "ready": 1, "startTime": T0}),
            vec![],
        ),
        (
            none.clone(),
            json!({"active": 1, "succeeded": 2, "failed": 3}),
            json!({"active": -1, "succeeded": -2, "failed": 3}),
            vec![
                "status.active: Invalid value: -1: must be greater than or equal to 0",
                "status.succeeded: Invalid value: -2: must be greater than or equal to 0",
                "status.succeeded: Invalid value: -2: cannot decrease the succeeded counter",
            ],
        ),
        (
            none.clone(),
            json!({}),
            json!({"uncountedTerminatedPods": {"succeeded": ["a", "b", "c", "a", ""], "failed": ["c", "d", "e", "d", ""]}}),
            vec![
                "status.uncountedTerminatedPods.succeeded[3]: Duplicate value: \"a\"",
                "status.uncountedTerminatedPods.succeeded[4]: Invalid value: \"\": must not be empty",
                "status.uncountedTerminatedPods.failed[0]: Duplicate value: \"c\"",
                "status.uncountedTerminatedPods.failed[3]: Duplicate value: \"d\"",
                "status.uncountedTerminatedPods.failed[4]: Invalid value: \"\": must not be empty",
            ],
        ),
        (
            none.clone(),
            json!({"failed": 2}),
            json!({"failed": 1}),
            vec!["status.failed: Invalid value: 1: cannot decrease the failed counter"],
        ),
        (
            json!({"spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3}}),
            json!({"succeeded": 2}),
            json!({"succeeded": 1}),
            vec![],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T0, "completionTime": T1, "conditions": [cond("Complete")]}),
            vec![
                "status.conditions: Invalid value: cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T0, "completionTime": T1, "succeeded": 1, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            vec![],
        ),
        (
            none.clone(),
            json!({"startTime": T0, "completionTime": T1, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            json!({"startTime": T0, "conditions": [cond("SuccessCriteriaMet")]}),
            vec![
                "status.conditions: Invalid value: cannot disable the terminal Complete=True condition",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T0, "conditions": [cond("Failed")]}),
            vec![
                "status.conditions: Invalid value: cannot set Failed=True condition without the FailureTarget=true condition",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0, "active": 1}),
            json!({"startTime": T0, "active": 1, "conditions": [cond("FailureTarget"), cond("Failed")]}),
            vec!["status.active: Invalid value: 1: active>0 is invalid for finished job"],
        ),
        (
            none.clone(),
            json!({}),
            json!({"conditions": [cond("FailureTarget"), cond("Failed")]}),
            vec!["status.startTime: Required value: startTime is required for finished job"],
        ),
        (
            json!({"spec": {"suspend": true, "completions": 0}}),
            json!({}),
            json!({"completionTime": T0, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            vec![],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T0, "terminating": 1, "uncountedTerminatedPods": {"failed": ["u"]}, "conditions": [cond("FailureTarget"), cond("Failed")]}),
            vec![
                "status.uncountedTerminatedPods: Invalid value: {\"failed\":[\"u\"]}: must be empty for finished job",
                "status.terminating: Invalid value: 1: terminating>0 is invalid for finished job",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T1}),
            vec![
                "status.startTime: Invalid value: \"2026-01-01T00:01:00Z\": field is immutable for unsuspended job once set",
            ],
        ),
        (
            json!({"spec": {"suspend": true}}),
            json!({"startTime": T0}),
            json!({}),
            vec![],
        ),
        (
            none.clone(),
            json!({"startTime": T1}),
            json!({"startTime": T1, "completionTime": T0, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            vec![
                "status.completionTime: Invalid value: \"2026-01-01T00:00:00Z\": must be equal to or after `startTime`",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0, "completionTime": T0, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            json!({"startTime": T0, "completionTime": T1, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            vec![
                "status.completionTime: Invalid value: \"2026-01-01T00:01:00Z\": field is immutable",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T0, "completionTime": T1}),
            vec![
                "status.completionTime: Invalid value: \"2026-01-01T00:01:00Z\": cannot set completionTime when there is no Complete=True condition",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0}),
            json!({"startTime": T0, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}),
            vec![
                "status.completionTime: Required value: completionTime is required for Complete jobs",
            ],
        ),
        (
            none.clone(),
            json!({"startTime": T0, "conditions": [cond("FailureTarget")]}),
            json!({"startTime": T0, "completionTime": T1, "conditions": [cond("FailureTarget"), cond("SuccessCriteriaMet"), cond("Complete")]}),
            vec![
                "status.conditions: Invalid value: cannot set Complete=True and FailureTarget=true conditions",
                "status.conditions: Invalid value: cannot set SuccessCriteriaMet=True and FailureTarget=true conditions",
            ],
        ),
        (
            none.clone(),
            json!({"active": 2}),
            json!({"active": 2, "ready": 3}),
            vec!["status.ready: Invalid value: 3: cannot set more ready pods than active"],
        ),
        (
            none.clone(),
            json!({}),
            json!({"completedIndexes": "0"}),
            vec![
                "status.completedIndexes: Invalid value: \"0\": cannot set non-empty completedIndexes when non-indexed completion mode",
            ],
        ),
        (
            json!({"spec": {"completionMode": "Indexed", "completions": 5}}),
            json!({}),
            json!({"completedIndexes": "3,1"}),
            vec![
                "status.completedIndexes: Invalid value: \"3,1\": error parsing completedIndexes: non-increasing order, previous: 3, current: 1",
            ],
        ),
        (
            json!({"spec": {"completionMode": "Indexed", "completions": 5}}),
            json!({}),
            json!({"failedIndexes": "1"}),
            vec![
                "status.failedIndexes: Invalid value: \"1\": cannot set non-null failedIndexes when backoffLimitPerIndex is null",
            ],
        ),
        (
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "backoffLimitPerIndex": 1}}),
            json!({}),
            json!({"completedIndexes": "0-2", "failedIndexes": "2,9"}),
            vec![
                "status.failedIndexes: Invalid value: \"2,9\": error parsing failedIndexes: too large index: \"9\"",
                "status.failedIndexes: Invalid value: \"2,9\": failedIndexes and completedIndexes overlap at index: 2",
            ],
        ),
        (
            none.clone(),
            json!({"conditions": [cond("SuccessCriteriaMet")]}),
            json!({}),
            vec![
                "status.conditions: Invalid value: cannot disable the SuccessCriteriaMet=True condition",
            ],
        ),
        (
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [{"succeededCount": 1}]}}}),
            json!({"startTime": T0}),
            json!({"startTime": T0, "completionTime": T1, "conditions": [cond("Complete")]}),
            vec![
                "status.conditions: Invalid value: cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
                "status.conditions: Invalid value: cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True",
            ],
        ),
        (
            // Old bad state is carried along when the related fields do not change.
            none.clone(),
            json!({"startTime": T0, "active": 1, "conditions": [cond("Failed")]}),
            json!({"startTime": T0, "active": 1, "conditions": [cond("Failed")]}),
            vec![],
        ),
    ];
    for (i, (spec, old, new, want)) in cases.into_iter().enumerate() {
        let got = status_update(spec, old, new);
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn status_update_rejects_metadata_changes_and_ignores_spec() {
    let old = prepared_job(json!({}));
    let mut new = old.clone();
    new.metadata.namespace = Some("other".into());
    spec_mut(&mut new).parallelism = Some(7);
    strategy::job_status_prepare_for_update(&mut new, &old);
    let errs: Vec<String> = validation::job_status_update(&new, &old)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec!["metadata.namespace: Invalid value: \"other\": field is immutable"]
    );
    assert_eq!(new.spec, old.spec);
}

#[test]
fn metadata_update_rules() {
    let mut old = prepared_job(json!({"metadata": {"finalizers": ["example.com/a"]}}));
    old.metadata.deletion_timestamp = Some(decode(json!(T0)));
    let mut new = old.clone();
    new.metadata.finalizers = Some(vec!["example.com/a".into(), "example.com/b".into()]);
    new.metadata.generation = Some(0);
    let errs: Vec<String> = validation::job_update(&new, &old)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}",
            "metadata.generation: Invalid value: 0: must not be decremented",
        ]
    );
    // Removing finalizers while deleting is fine.
    let mut new = old.clone();
    new.metadata.finalizers = None;
    assert!(validation::job_update(&new, &old).is_empty());
}

fn cronjob_update(old_patch: Value, new_patch: Value) -> Vec<String> {
    let old = prepared_cronjob(old_patch);
    let mut new = prepared_cronjob(new_patch);
    new.metadata = old.metadata.clone();
    strategy::cronjob_prepare_for_update(&mut new, &old);
    validation::cronjob_update(&new, &old)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn cronjob_update_rules() {
    // Everything in the spec is mutable, the job template included.
    assert!(cronjob_update(json!({}), json!({"spec": {"schedule": "@daily", "suspend": true, "jobTemplate": {"spec": {"parallelism": 4, "template": {"spec": {"containers": [{"name": "x", "image": "y"}]}}}}}})).is_empty());
    // The 52-character limit does not apply on update.
    let long = json!({"metadata": {"name": "c".repeat(60)}});
    assert!(cronjob_update(long.clone(), long).is_empty());
    // TZ in the schedule is allowed only when the old schedule already had it.
    let mut legacy = prepared_cronjob(json!({}));
    legacy.spec.schedule = "TZ=UTC 0 * * * *".into();
    let mut new = legacy.clone();
    new.spec.schedule = "TZ=UTC 5 * * * *".into();
    assert!(validation::cronjob_update(&new, &legacy).is_empty());
    new.spec.time_zone = Some("UTC".into());
    let errs: Vec<String> = validation::cronjob_update(&new, &legacy)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            "spec.schedule: Invalid value: \"TZ=UTC 5 * * * *\": cannot use both timeZone field and TZ or CRON_TZ in schedule"
        ]
    );
    let errs = cronjob_update(
        json!({}),
        json!({"spec": {"schedule": "CRON_TZ=UTC 0 * * * *"}}),
    );
    assert_eq!(
        errs,
        vec![
            "spec.schedule: Invalid value: \"CRON_TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
        ]
    );
    // An unchanged time zone is not re-validated.
    let mut old = prepared_cronjob(json!({}));
    old.spec.time_zone = Some("Mars/Olympus".into());
    let new = old.clone();
    assert!(validation::cronjob_update(&new, &old).is_empty());
    // The status subresource validates nothing.
    assert!(validation::cronjob_status_update(&new, &old).is_empty());
    // Other schedule errors come from the cron parser.
    let errs = cronjob_update(json!({}), json!({"spec": {"schedule": "61 * * * *"}}));
    assert_eq!(
        errs,
        vec![
            "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61"
        ]
    );
}

#[test]
fn warnings() {
    let job = prepared_job(json!({"metadata": {"name": "a.b"}}));
    let w = validation::job_warnings(&job);
    assert_eq!(
        w,
        vec![
            "metadata.name: this is used in Pod names and hostnames, which can result in surprising behavior; a DNS label is recommended: [must not contain dots]"
        ]
    );
    assert!(validation::job_warnings(&prepared_job(json!({}))).is_empty());
    let cj = prepared_cronjob(json!({"spec": {"schedule": "TZ=UTC * * * * *"}}));
    assert_eq!(
        validation::cronjob_warnings(&cj),
        vec![
            "cannot use TZ or CRON_TZ in spec.spec.schedule, use timeZone instead, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"
        ]
    );
}

fn pod_update(old: &Pod, mutate: impl FnOnce(&mut Pod)) -> Vec<String> {
    let mut new = old.clone();
    mutate(&mut new);
    strategy::pod_prepare_for_update(&mut new, old);
    validation::pod_update(&new, old)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn pspec(p: &mut Pod) -> &mut kbatch_api::k8s_openapi::api::core::v1::PodSpec {
    p.spec.get_or_insert_with(Default::default)
}

#[test]
fn pod_update_rules() {
    let old = prepared_pod(
        json!({"spec": {"activeDeadlineSeconds": 100, "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]}}),
    );
    assert!(
        pod_update(&old, |p| pspec(p).containers[0].image =
            Some("busybox:2".into()))
        .is_empty()
    );
    assert!(pod_update(&old, |p| pspec(p).active_deadline_seconds = Some(50)).is_empty());
    assert!(
        pod_update(&old, |p| {
            pspec(p)
                .tolerations
                .get_or_insert_with(Vec::new)
                .push(decode(json!({"key": "x", "operator": "Exists"})))
        })
        .is_empty()
    );
    assert_eq!(
        pod_update(&old, |p| pspec(p).active_deadline_seconds = Some(200)),
        vec![
            "spec.activeDeadlineSeconds: Invalid value: 200: must be less than or equal to previous value"
        ]
    );
    assert_eq!(
        pod_update(&old, |p| pspec(p).active_deadline_seconds = None),
        vec![
            "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
        ]
    );
    let errs = pod_update(&old, |p| {
        pspec(p).containers[0].command = Some(vec!["sh".into()])
    });
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"), "{errs:?}");
    let errs = pod_update(&old, |p| pspec(p).tolerations = None);
    assert!(errs.contains(&"spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds".to_string()), "{errs:?}");
    let errs = pod_update(&old, |p| {
        let c = pspec(p).containers[0].clone();
        pspec(p)
            .containers
            .push(kbatch_api::k8s_openapi::api::core::v1::Container {
                name: "d".into(),
                ..c
            });
    });
    assert_eq!(
        errs,
        vec!["spec.containers: Forbidden: pod updates may not add or remove containers"]
    );
}

fn terminated(code: i32) -> Value {
    json!({"name": "c", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
           "state": {"terminated": {"exitCode": code}}})
}

fn running() -> Value {
    json!({"name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 1,
           "state": {"running": {}}})
}

fn pod_status(restart: &str, old_cs: Value, new_cs: Value) -> Vec<String> {
    let mut old = prepared_pod(json!({"spec": {"restartPolicy": restart}}));
    old.status = Some(decode(
        json!({"phase": "Running", "containerStatuses": [old_cs]}),
    ));
    let mut new = old.clone();
    new.status = Some(decode(
        json!({"phase": "Running", "containerStatuses": [new_cs]}),
    ));
    strategy::pod_status_prepare_for_update(&mut new, &old);
    validation::pod_status_update(&new, &old)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn pod_status_rules() {
    let forbidden = vec!["status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state".to_string()];
    assert_eq!(pod_status("Never", terminated(0), running()), forbidden);
    assert_eq!(pod_status("Never", terminated(1), running()), forbidden);
    assert_eq!(pod_status("OnFailure", terminated(0), running()), forbidden);
    assert!(pod_status("OnFailure", terminated(1), running()).is_empty());
    assert!(pod_status("Always", terminated(0), running()).is_empty());
    assert!(pod_status("Never", running(), terminated(0)).is_empty());

    // nodeName may only change through binding; custom condition types must be qualified.
    let old = prepared_pod(json!({}));
    let mut new = old.clone();
    pspec(&mut new).node_name = Some("n".into());
    new.status = Some(decode(
        json!({"conditions": [{"type": "bad type", "status": "True"}, {"type": "Ready", "status": "True"}]}),
    ));
    let errs: Vec<String> = validation::pod_status_update(&new, &old)
        .iter()
        .map(|e| format!("{} {}", e.field, e.kind.reason()))
        .collect();
    assert_eq!(
        errs,
        vec![
            "metadata.conditions[0].Type FieldValueInvalid",
            "status.nodeName FieldValueForbidden"
        ]
    );
}

#[test]
fn supporting_kinds() {
    use kbatch_api::k8s_openapi::api::coordination::v1::Lease;
    use kbatch_api::k8s_openapi::api::core::v1::{Event, Namespace, Node};
    let ns: Namespace = decode(json!({"metadata": {"name": "team-a"}}));
    assert!(validation::namespace_create(&ns).is_empty());
    let bad: Namespace = decode(json!({"metadata": {"name": "Team", "namespace": "x"}}));
    let errs: Vec<String> = validation::namespace_create(&bad)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].starts_with("metadata.name: Invalid value: \"Team\": a lowercase RFC 1123 label")
    );
    assert_eq!(
        errs[1],
        "metadata.namespace: Forbidden: not allowed on this type"
    );

    let node: Node = decode(json!({"metadata": {"name": "kbatch-node"}}));
    assert!(validation::node_create(&node).is_empty());
    let node: Node = decode(json!({"metadata": {}}));
    assert_eq!(
        validation::node_create(&node)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["metadata.name: Required value: name or generateName is required"]
    );

    let ev: Event = decode(
        json!({"metadata": {"name": "e.1", "namespace": "ns"}, "involvedObject": {"kind": "Job", "name": "j", "namespace": "ns"}, "type": "Normal"}),
    );
    assert!(validation::event_create(&ev).is_empty());
    let ev: Event = decode(
        json!({"metadata": {"name": "e.1", "namespace": "ns"}, "involvedObject": {"kind": "Job", "name": "j", "namespace": "other"}}),
    );
    assert_eq!(
        validation::event_create(&ev)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"]
    );

    let lease: Lease = decode(
        json!({"metadata": {"name": "kbatch-controller", "namespace": "kube-system"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
    );
    assert!(validation::lease_create(&lease).is_empty());
    let lease: Lease = decode(
        json!({"metadata": {"name": "l", "namespace": "kube-system"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}),
    );
    assert_eq!(
        validation::lease_create(&lease)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
            "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"
        ]
    );
    let lease2 = lease.clone();
    assert_eq!(validation::lease_update(&lease2, &lease).len(), 2);
}
