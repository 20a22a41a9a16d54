//! Shared fixtures: objects built from JSON and run through the API server's create and update
//! pipeline (defaults, system fields, strategy, validation) exactly as the server does.
#![allow(dead_code)]

use kbatch_api::field::FieldError;
use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, Job};
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::{defaults, strategy, validation};
use serde_json::{Value, json};

pub const UID: &str = "uid-1";

/// RFC 7386 merge patch, enough to derive cases from a base object.
pub fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

pub fn base_job() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi"},
        "spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "restartPolicy": "Never"
        }}}
    })
}

pub fn base_cronjob() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "cj"},
        "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "restartPolicy": "OnFailure"
        }}}}}
    })
}

pub fn base_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    })
}

pub fn patched(mut base: Value, patch: Value) -> Value {
    merge(&mut base, &patch);
    base
}

pub fn decode<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture decodes")
}

/// The create pipeline for a Job: defaults, system fields, strategy; returns the object.
pub fn prepared_job(patch: Value) -> Job {
    let mut job: Job = decode(patched(base_job(), patch));
    defaults::job(&mut job);
    job.metadata.uid.get_or_insert_with(|| UID.to_string());
    job.metadata
        .namespace
        .get_or_insert_with(|| "default".to_string());
    strategy::job_prepare_for_create(&mut job);
    job
}

pub fn create_job(patch: Value) -> Vec<FieldError> {
    validation::job_create(&prepared_job(patch))
}

pub fn prepared_cronjob(patch: Value) -> CronJob {
    let mut cj: CronJob = decode(patched(base_cronjob(), patch));
    defaults::cronjob(&mut cj);
    cj.metadata.uid.get_or_insert_with(|| UID.to_string());
    cj.metadata
        .namespace
        .get_or_insert_with(|| "default".to_string());
    strategy::cronjob_prepare_for_create(&mut cj);
    cj
}

pub fn create_cronjob(patch: Value) -> Vec<FieldError> {
    validation::cronjob_create(&prepared_cronjob(patch))
}

pub fn prepared_pod(patch: Value) -> Pod {
    let mut pod: Pod = decode(patched(base_pod(), patch));
    defaults::pod(&mut pod);
    pod.metadata.uid.get_or_insert_with(|| UID.to_string());
    if pod.metadata.namespace.is_none() {
        pod.metadata.namespace = Some("default".to_string());
    }
    strategy::pod_prepare_for_create(&mut pod);
    pod
}

pub fn create_pod(patch: Value) -> Vec<FieldError> {
    validation::pod_create(&prepared_pod(patch))
}

/// `(field, reason, full message)` of each error, for exact comparisons.
pub fn triples(errs: &[FieldError]) -> Vec<(String, String, String)> {
    errs.iter()
        .map(|e| (e.field.clone(), e.kind.reason().to_string(), e.to_string()))
        .collect()
}

/// An expected field error: (field path, reason, full message).
pub type Triple = (String, String, String);

pub const INV: &str = "FieldValueInvalid";
pub const REQ: &str = "FieldValueRequired";
pub const NSUP: &str = "FieldValueNotSupported";
pub const FORB: &str = "FieldValueForbidden";

pub const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
pub const PORT_LETTER: &str = "must contain at least one letter (a-z)";

/// `(field, reason, "<field>: <body>")`.
pub fn e(field: &str, reason: &str, body: &str) -> Triple {
    (
        field.to_string(),
        reason.to_string(),
        format!("{field}: {body}"),
    )
}

pub fn invalid(field: &str, value: &str, detail: &str) -> Triple {
    e(field, INV, &format!("Invalid value: {value}: {detail}"))
}

/// A container named `c` with `patch` merged in.
pub fn container(patch: Value) -> Value {
    let mut c = json!({"name": "c", "image": "busybox"});
    merge(&mut c, &patch);
    c
}
