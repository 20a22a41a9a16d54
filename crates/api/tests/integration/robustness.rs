//! Validation is total: hostile inputs produce error lists, never panics.

use crate::common;

use common::*;
use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, Job};
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::{defaults, strategy, validation};
use serde_json::{Value, json};

fn hostile_values() -> Vec<Value> {
    vec![
        json!(""),
        json!("é"),
        json!("a-"),
        json!("-"),
        json!("ß/ü"),
        json!("['"),
        json!("metadata.labels[''']"),
        json!("x".repeat(70_000)),
        json!(i32::MIN),
        json!(i32::MAX),
        json!(0),
    ]
}

fn string_paths() -> Vec<Vec<&'static str>> {
    vec![
        vec!["metadata", "name"],
        vec!["metadata", "generateName"],
        vec!["metadata", "namespace"],
        vec!["spec", "managedBy"],
        vec!["spec", "completionMode"],
        vec!["spec", "schedule"],
        vec!["spec", "timeZone"],
        vec!["spec", "restartPolicy"],
        vec!["spec", "nodeName"],
    ]
}

fn int_paths() -> Vec<Vec<&'static str>> {
    vec![
        vec!["metadata", "generation"],
        vec!["spec", "completions"],
        vec!["spec", "parallelism"],
        vec!["spec", "backoffLimitPerIndex"],
        vec!["spec", "maxFailedIndexes"],
        vec!["spec", "activeDeadlineSeconds"],
        vec!["spec", "startingDeadlineSeconds"],
    ]
}

fn set(v: &mut Value, path: &[&str], leaf: Value) {
    let mut cur = v;
    for p in &path[..path.len() - 1] {
        cur = cur
            .as_object_mut()
            .expect("object")
            .entry(p.to_string())
            .or_insert(json!({}));
    }
    cur[path[path.len() - 1]] = leaf;
}

fn exercise_job(v: Value) {
    let Ok(mut job) = serde_json::from_value::<Job>(v) else {
        return;
    };
    defaults::job(&mut job);
    let old = job.clone();
    strategy::job_prepare_for_create(&mut job);
    let _ = validation::job_create(&job);
    let _ = validation::job_warnings(&job);
    let _ = validation::job_update(&job, &old);
    let _ = validation::job_status_update(&job, &old);
}

fn exercise_cronjob(v: Value) {
    let Ok(mut cj) = serde_json::from_value::<CronJob>(v) else {
        return;
    };
    defaults::cronjob(&mut cj);
    let old = cj.clone();
    strategy::cronjob_prepare_for_create(&mut cj);
    let _ = validation::cronjob_create(&cj);
    let _ = validation::cronjob_update(&cj, &old);
}

fn exercise_pod(v: Value) {
    let Ok(mut pod) = serde_json::from_value::<Pod>(v) else {
        return;
    };
    defaults::pod(&mut pod);
    let old = pod.clone();
    strategy::pod_prepare_for_create(&mut pod);
    let _ = validation::pod_create(&pod);
    let _ = validation::pod_update(&pod, &old);
    let _ = validation::pod_status_update(&pod, &old);
}

#[test]
fn hostile_scalars_never_panic() {
    for value in hostile_values() {
        for path in string_paths().into_iter().chain(int_paths()) {
            for base in [base_job(), base_cronjob(), base_pod()] {
                let mut v = base.clone();
                set(&mut v, &path, value.clone());
                exercise_job(v.clone());
                exercise_cronjob(v.clone());
                exercise_pod(v);
            }
        }
    }
}

#[test]
fn hostile_structures_never_panic() {
    let patches = [
        json!({"spec": {"completionMode": "Indexed", "parallelism": 3, "successPolicy": {"rules": [{"succeededIndexes": "0-1", "succeededCount": 5}]}}}),
        json!({"spec": {"completionMode": "Indexed", "completions": i32::MAX, "backoffLimitPerIndex": 0}}),
        json!({"spec": {"podFailurePolicy": {"rules": (0..30).map(|_| json!({"action": "", "onExitCodes": {"operator": "", "values": (0..300).collect::<Vec<_>>()}})).collect::<Vec<_>>()}}}),
        json!({"spec": {"template": {"spec": {"containers": [], "volumes": [{"name": ""}, {"name": "a", "emptyDir": {}, "hostPath": {"path": "/"}}]}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "", "env": [{"name": "", "valueFrom": {}}, {"name": "x", "valueFrom": {"fieldRef": {"apiVersion": "v2", "fieldPath": ""}, "resourceFieldRef": {"resource": ""}}}], "resources": {"limits": {"": "-1", "a/b/c": "1e999999"}, "requests": {"cpu": "+.5", "x": "."}}, "ports": [{"containerPort": -5, "name": "--", "hostPort": 70000, "protocol": "x"}]}]}}}}),
        json!({"spec": {"selector": {"matchExpressions": [{"key": "", "operator": "Nope", "values": ["-"]}]}, "manualSelector": true}}),
        json!({"metadata": {"ownerReferences": [{"apiVersion": "a/b/c", "kind": "", "name": "", "uid": "", "controller": true}, {"apiVersion": "", "kind": "", "name": "", "uid": "", "controller": true}]}}),
        json!({"status": {"completedIndexes": "1-2-3,,x", "failedIndexes": "-,9-1", "ready": -1, "terminating": -1, "active": i32::MIN}}),
    ];
    for p in patches {
        for base in [base_job(), base_cronjob(), base_pod()] {
            let v = patched(base, p.clone());
            exercise_job(v.clone());
            exercise_cronjob(v.clone());
            exercise_pod(v);
        }
    }
    // Status rules with extreme values on both sides.
    let mut old = prepared_job(
        json!({"spec": {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1}}),
    );
    old.metadata.generation = Some(i64::MAX);
    old.status = Some(decode(
        json!({"failedIndexes": "x", "completedIndexes": "0-1,1", "succeeded": i32::MAX}),
    ));
    let mut new = old.clone();
    new.status = Some(decode(
        json!({"failedIndexes": "0,1-2", "completedIndexes": "a,0-2"}),
    ));
    let _ = validation::job_status_update(&new, &old);
    let mut changed = old.clone();
    if let Some(s) = changed.spec.as_mut() {
        s.parallelism = Some(7);
    }
    strategy::job_prepare_for_update(&mut changed, &old);
    assert_eq!(changed.metadata.generation, Some(i64::MAX));
}
