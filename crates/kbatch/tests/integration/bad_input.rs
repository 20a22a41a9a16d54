//! Bad client input over raw HTTP: every rejection is a Kubernetes Status with upstream's code,
//! reason and (for 422) field causes, and nothing is ever answered with a 5xx.

use crate::common;

use common::{Raw, Server, cronjob_json, job_json, pod_json, raw};
use serde_json::{Value, json};

const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const CRONJOBS: &str = "/apis/batch/v1/namespaces/default/cronjobs";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// Send a request and check the answer is a client error or success, never a server error.
async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: impl Into<Vec<u8>>,
) -> Raw {
    let r = raw(client, method, path, ct, body).await;
    assert!(
        r.status < 500,
        "{method} {path}: server error {}: {}",
        r.status,
        r.body
    );
    r
}

async fn post(client: &kube::Client, path: &str, body: &Value) -> Raw {
    send(
        client,
        "POST",
        path,
        Some("application/json"),
        body.to_string(),
    )
    .await
}

/// Assert a failure Status with the given code and reason; returns it.
fn status(r: &Raw, code: u16, reason: &str) -> Value {
    let s = r.json();
    assert_eq!(
        (
            r.status,
            s["kind"].as_str(),
            s["apiVersion"].as_str(),
            s["status"].as_str()
        ),
        (code, Some("Status"), Some("v1"), Some("Failure")),
        "{}",
        r.body
    );
    assert_eq!(s["code"], code, "{}", r.body);
    assert_eq!(s["reason"], reason, "{}", r.body);
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json"),
        "errors are JSON"
    );
    s
}

/// RFC 7386 JSON merge patch, to describe each bad input as a change to a valid object.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

#[derive(Clone, Copy, Debug)]
enum K {
    Job,
    CronJob,
    Pod,
}

struct Case {
    kind: K,
    /// Merged into a valid object of `kind`.
    patch: Value,
    field: &'static str,
    reason: &'static str,
    /// Expected text of the cause's message (`<type>[: <value>][: <detail>]`); a prefix match,
    /// or `None` where only the field and reason are pinned.
    message: Option<String>,
}

fn case(
    kind: K,
    patch: Value,
    field: &'static str,
    reason: &'static str,
    message: Option<&str>,
) -> Case {
    Case {
        kind,
        patch,
        field,
        reason,
        message: message.map(str::to_string),
    }
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const NEG: &str = "must be greater than or equal to 0";

fn invalid_cases() -> Vec<Case> {
    use K::*;
    let ctr = |extra: Value| {
        let mut c = json!({"name": "main", "image": "busybox", "command": ["true"]});
        merge(&mut c, &extra);
        c
    };
    let name64 = "a".repeat(64);
    let name61 = "b".repeat(61);
    let name53 = "c".repeat(53);
    let neg = |path: &'static str, patch: Value| {
        case(
            Job,
            patch,
            path,
            "FieldValueInvalid",
            Some(&format!("Invalid value: -1: {NEG}")),
        )
    };
    let indexed = |extra: Value| {
        let mut s =
            json!({"spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3}});
        merge(&mut s, &extra);
        s
    };
    let tpl = |spec: Value| json!({"spec": {"template": {"spec": spec}}});
    let cj_tpl =
        |spec: Value| json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}});
    let mut v = vec![
        // --- Job: restartPolicy (§6.1, §6.2) ---
        case(
            Job,
            tpl(json!({"restartPolicy": null})),
            "spec.template.spec.restartPolicy",
            "FieldValueRequired",
            Some(r#"Required value: valid values: "OnFailure", "Never""#),
        ),
        case(
            Job,
            tpl(json!({"restartPolicy": "Always"})),
            "spec.template.spec.restartPolicy",
            "FieldValueRequired",
            Some(r#"Required value: valid values: "OnFailure", "Never""#),
        ),
        case(
            Job,
            tpl(json!({"restartPolicy": "Sometimes"})),
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
            Some(r#"Unsupported value: "Sometimes": supported values: "OnFailure", "Never""#),
        ),
        case(
            Job,
            tpl(json!({"restartPolicy": "Sometimes"})),
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#,
            ),
        ),
        // --- Job: names and generated labels (§6.3, §6.4, §2.1) ---
        case(
            Job,
            json!({"metadata": {"name": name64}}),
            "spec.template.labels",
            "FieldValueInvalid",
            Some(&format!(
                r#"Invalid value: "{name64}": must be no more than 63 bytes"#
            )),
        ),
        case(
            Job,
            indexed(
                json!({"metadata": {"name": name61}, "spec": {"completions": 100, "parallelism": 1}}),
            ),
            "metadata.name",
            "FieldValueInvalid",
            Some(&format!(
                r#"Invalid value: "{name61}": will not able to create pod with invalid DNS label: {name61}-99"#
            )),
        ),
        case(
            Job,
            json!({"metadata": {"name": "Bad_Name"}}),
            "metadata.name",
            "FieldValueInvalid",
            Some(&format!(r#"Invalid value: "Bad_Name": {SUBDOMAIN_MSG}"#)),
        ),
        case(
            Job,
            json!({"metadata": {"name": null}}),
            "metadata.name",
            "FieldValueRequired",
            Some("Required value: name or generateName is required"),
        ),
        case(
            Job,
            json!({"metadata": {"finalizers": ["cleanup"]}}),
            "metadata.finalizers[0]",
            "FieldValueInvalid",
            Some(
                r#"Invalid value: "cleanup": name is neither a standard finalizer name nor is it fully qualified"#,
            ),
        ),
        case(
            Job,
            json!({"metadata": {"labels": {"app": "bad value!"}}}),
            "metadata.labels",
            "FieldValueInvalid",
            Some(r#"Invalid value: "bad value!": a valid label must be an empty string"#),
        ),
        case(
            Job,
            json!({"metadata": {"labels": {"bad key!": "x"}}}),
            "metadata.labels",
            "FieldValueInvalid",
            Some(r#"Invalid value: "bad key!": name part must consist of alphanumeric characters"#),
        ),
        // --- Job: selector (§6.8, §2.2) ---
        case(
            Job,
            json!({"spec": {"manualSelector": true}}),
            "spec.selector",
            "FieldValueRequired",
            Some("Required value"),
        ),
        case(
            Job,
            json!({"spec": {"manualSelector": true}}),
            "spec.template.metadata.labels",
            "FieldValueInvalid",
            None,
        ),
        case(
            Job,
            json!({"spec": {"selector": {"matchLabels": {"app": "x"}}}}),
            "spec.selector",
            "FieldValueInvalid",
            None,
        ),
        // --- Job: scalars (§6.9, §6.10, §2.3) ---
        neg("spec.parallelism", json!({"spec": {"parallelism": -1}})),
        neg("spec.completions", json!({"spec": {"completions": -1}})),
        neg("spec.backoffLimit", json!({"spec": {"backoffLimit": -1}})),
        neg(
            "spec.activeDeadlineSeconds",
            json!({"spec": {"activeDeadlineSeconds": -1}}),
        ),
        neg(
            "spec.ttlSecondsAfterFinished",
            json!({"spec": {"ttlSecondsAfterFinished": -1}}),
        ),
        case(
            Job,
            indexed(json!({"spec": {"completions": null, "parallelism": 2}})),
            "spec.completions",
            "FieldValueRequired",
            Some("Required value: when completion mode is Indexed"),
        ),
        case(
            Job,
            json!({"spec": {"completionMode": "Bogus"}}),
            "spec.completionMode",
            "FieldValueNotSupported",
            Some(r#"Unsupported value: "Bogus": supported values: "NonIndexed", "Indexed""#),
        ),
        case(
            Job,
            indexed(json!({"spec": {"completions": 5, "parallelism": 100001}})),
            "spec.parallelism",
            "FieldValueInvalid",
            Some(
                "Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed",
            ),
        ),
        case(
            Job,
            json!({"spec": {"backoffLimitPerIndex": 1}}),
            "spec.backoffLimitPerIndex",
            "FieldValueInvalid",
            Some("Invalid value: 1: requires indexed completion mode"),
        ),
        case(
            Job,
            indexed(json!({"spec": {"maxFailedIndexes": 1}})),
            "spec.backoffLimitPerIndex",
            "FieldValueRequired",
            Some("Required value: when maxFailedIndexes is specified"),
        ),
        case(
            Job,
            indexed(json!({"spec": {"backoffLimitPerIndex": 1, "maxFailedIndexes": 4}})),
            "spec.maxFailedIndexes",
            "FieldValueInvalid",
            Some("Invalid value: 4: must be less than or equal to completions"),
        ),
        case(
            Job,
            json!({"spec": {"managedBy": "foo"}}),
            "spec.managedBy",
            "FieldValueInvalid",
            Some(r#"Invalid value: "foo": must be a domain-prefixed path (such as "acme.io/foo")"#),
        ),
        case(
            Job,
            json!({"spec": {"podReplacementPolicy": "Bogus"}}),
            "spec.podReplacementPolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Bogus": supported values: "Failed", "TerminatingOrFailed""#,
            ),
        ),
        // --- Job: podFailurePolicy and successPolicy (§6.11, §2.5, §2.6) ---
        case(
            Job,
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}]},
                "template": {"spec": {"restartPolicy": "OnFailure"}}}}),
            "spec.template.spec.restartPolicy",
            "FieldValueInvalid",
            Some(
                r#"Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified"#,
            ),
        ),
        case(
            Job,
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}}]}}}),
            "spec.podFailurePolicy.rules[0].onExitCodes.values[0]",
            "FieldValueInvalid",
            Some("Invalid value: 0: must not be 0 for the In operator"),
        ),
        case(
            Job,
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "Bogus", "onExitCodes": {"operator": "In", "values": [1]}}]}}}),
            "spec.podFailurePolicy.rules[0].action",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Bogus": supported values: "Count", "FailIndex", "FailJob", "Ignore""#,
            ),
        ),
        case(
            Job,
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}]}}}),
            "spec.podFailurePolicy.rules[0].action",
            "FieldValueInvalid",
            Some(r#"Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set"#),
        ),
        case(
            Job,
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2, 1]}}]}}}),
            "spec.podFailurePolicy.rules[0].onExitCodes.values",
            "FieldValueInvalid",
            None,
        ),
        case(
            Job,
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "FailJob"}]}}}),
            "spec.podFailurePolicy.rules[0]",
            "FieldValueInvalid",
            Some("Invalid value: specifying one of OnExitCodes and OnPodConditions is required"),
        ),
        case(
            Job,
            json!({"spec": {"successPolicy": {"rules": [{"succeededCount": 1}]}}}),
            "spec.successPolicy",
            "FieldValueInvalid",
            None,
        ),
        case(
            Job,
            indexed(json!({"spec": {"successPolicy": {"rules": []}}})),
            "spec.successPolicy.rules",
            "FieldValueRequired",
            Some(
                "Required value: at least one rules must be specified when the successPolicy is specified",
            ),
        ),
        case(
            Job,
            indexed(json!({"spec": {"successPolicy": {"rules": [{"succeededCount": 4}]}}})),
            "spec.successPolicy.rules[0].succeededCount",
            "FieldValueInvalid",
            Some(
                "Invalid value: 4: must be less than or equal to 3 (the number of specified completions)",
            ),
        ),
        // --- Job: pod template (§2.4) ---
        case(
            Job,
            tpl(json!({"containers": []})),
            "spec.template.spec.containers",
            "FieldValueRequired",
            Some("Required value"),
        ),
        case(
            Job,
            tpl(json!({"containers": [ctr(json!({"image": null}))]})),
            "spec.template.spec.containers[0].image",
            "FieldValueRequired",
            Some("Required value"),
        ),
        case(
            Job,
            tpl(json!({"containers": [ctr(json!({"name": "Main_1"}))]})),
            "spec.template.spec.containers[0].name",
            "FieldValueInvalid",
            Some(&format!(r#"Invalid value: "Main_1": {LABEL_MSG}"#)),
        ),
        case(
            Job,
            tpl(json!({"containers": [ctr(json!({})), ctr(json!({}))]})),
            "spec.template.spec.containers[1].name",
            "FieldValueDuplicate",
            Some(r#"Duplicate value: "main""#),
        ),
        case(
            Job,
            tpl(json!({"containers": [ctr(json!({"imagePullPolicy": "Sometimes"}))]})),
            "spec.template.spec.containers[0].imagePullPolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#,
            ),
        ),
        case(
            Job,
            tpl(json!({"activeDeadlineSeconds": 0})),
            "spec.template.spec.activeDeadlineSeconds",
            "FieldValueInvalid",
            Some("Invalid value: 0: must be between 1 and 2147483647, inclusive"),
        ),
        case(
            Job,
            tpl(json!({"dnsPolicy": "Bogus"})),
            "spec.template.spec.dnsPolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Bogus": supported values: "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None""#,
            ),
        ),
        case(
            Job,
            tpl(
                json!({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
            ),
            "spec.template.spec.tolerations[0].effect",
            "FieldValueInvalid",
            None,
        ),
        // --- CronJob (§6.5 - §6.7, §2.7) ---
        case(
            CronJob,
            json!({"metadata": {"name": name53}}),
            "metadata.name",
            "FieldValueInvalid",
            Some(&format!(
                r#"Invalid value: "{name53}": must be no more than 52 characters"#
            )),
        ),
        case(
            CronJob,
            json!({"spec": {"schedule": "* * * *"}}),
            "spec.schedule",
            "FieldValueInvalid",
            Some(r#"Invalid value: "* * * *": expected exactly 5 fields, found 4: [* * * *]"#),
        ),
        case(
            CronJob,
            json!({"spec": {"schedule": "61 * * * *"}}),
            "spec.schedule",
            "FieldValueInvalid",
            Some(r#"Invalid value: "61 * * * *": end of range (61) above maximum (59): 61"#),
        ),
        case(
            CronJob,
            json!({"spec": {"schedule": ""}}),
            "spec.schedule",
            "FieldValueRequired",
            Some("Required value"),
        ),
        case(
            CronJob,
            json!({"spec": {"schedule": "TZ=UTC 0 * * * *"}}),
            "spec.schedule",
            "FieldValueInvalid",
            Some(
                r#"Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"#,
            ),
        ),
        case(
            CronJob,
            json!({"spec": {"timeZone": "Mars/Olympus"}}),
            "spec.timeZone",
            "FieldValueInvalid",
            Some(r#"Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus"#),
        ),
        case(
            CronJob,
            json!({"spec": {"timeZone": "Local"}}),
            "spec.timeZone",
            "FieldValueInvalid",
            Some(
                r#"Invalid value: "Local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"#,
            ),
        ),
        case(
            CronJob,
            json!({"spec": {"timeZone": ""}}),
            "spec.timeZone",
            "FieldValueInvalid",
            Some(r#"Invalid value: "": timeZone must be nil or non-empty string"#),
        ),
        case(
            CronJob,
            json!({"spec": {"startingDeadlineSeconds": -1}}),
            "spec.startingDeadlineSeconds",
            "FieldValueInvalid",
            Some(&format!("Invalid value: -1: {NEG}")),
        ),
        case(
            CronJob,
            json!({"spec": {"successfulJobsHistoryLimit": -1}}),
            "spec.successfulJobsHistoryLimit",
            "FieldValueInvalid",
            Some(&format!("Invalid value: -1: {NEG}")),
        ),
        case(
            CronJob,
            json!({"spec": {"failedJobsHistoryLimit": -1}}),
            "spec.failedJobsHistoryLimit",
            "FieldValueInvalid",
            Some(&format!("Invalid value: -1: {NEG}")),
        ),
        case(
            CronJob,
            json!({"spec": {"concurrencyPolicy": "Sometimes"}}),
            "spec.concurrencyPolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace""#,
            ),
        ),
        case(
            CronJob,
            cj_tpl(json!({"restartPolicy": null})),
            "spec.jobTemplate.spec.template.spec.restartPolicy",
            "FieldValueRequired",
            Some(r#"Required value: valid values: "OnFailure", "Never""#),
        ),
        case(
            CronJob,
            json!({"spec": {"jobTemplate": {"spec": {"parallelism": -1}}}}),
            "spec.jobTemplate.spec.parallelism",
            "FieldValueInvalid",
            Some(&format!("Invalid value: -1: {NEG}")),
        ),
        case(
            CronJob,
            json!({"spec": {"jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}}}}}}),
            "spec.jobTemplate.spec.selector",
            "FieldValueInvalid",
            None,
        ),
        case(
            CronJob,
            json!({"spec": {"jobTemplate": {"spec": {"manualSelector": true}}}}),
            "spec.jobTemplate.spec.manualSelector",
            "FieldValueNotSupported",
            Some(r#"Unsupported value: true: supported values: "nil", "false""#),
        ),
        // --- Pod ---
        case(
            Pod,
            json!({"spec": {"containers": []}}),
            "spec.containers",
            "FieldValueRequired",
            Some("Required value"),
        ),
        case(
            Pod,
            json!({"spec": {"restartPolicy": "Sometimes"}}),
            "spec.restartPolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#,
            ),
        ),
        case(
            Pod,
            json!({"spec": {"containers": [ctr(json!({"restartPolicy": "Always"}))]}}),
            "spec.containers[0].restartPolicy",
            "FieldValueForbidden",
            Some("Forbidden: may not be set for non-init containers"),
        ),
        case(
            Pod,
            json!({"spec": {"containers": [ctr(json!({"image": ""}))]}}),
            "spec.containers[0].image",
            "FieldValueRequired",
            Some("Required value"),
        ),
        case(
            Pod,
            json!({"spec": {"containers": [ctr(json!({"terminationMessagePolicy": "Bogus"}))]}}),
            "spec.containers[0].terminationMessagePolicy",
            "FieldValueNotSupported",
            Some(
                r#"Unsupported value: "Bogus": supported values: "File", "FallbackToLogsOnError""#,
            ),
        ),
        case(
            Pod,
            json!({"spec": {"activeDeadlineSeconds": 0}}),
            "spec.activeDeadlineSeconds",
            "FieldValueInvalid",
            Some("Invalid value: 0: must be between 1 and 2147483647, inclusive"),
        ),
        case(
            Pod,
            json!({"metadata": {"name": "Bad.Pod"}}),
            "metadata.name",
            "FieldValueInvalid",
            Some(&format!(r#"Invalid value: "Bad.Pod": {SUBDOMAIN_MSG}"#)),
        ),
        case(
            Pod,
            json!({"spec": {"hostname": "a.b"}}),
            "spec.hostname",
            "FieldValueInvalid",
            Some(r#"Invalid value: "a.b": must not contain dots"#),
        ),
    ];
    // Each case gets its own object name unless it sets one (names may be reused across
    // cases because nothing is ever created).
    for c in &mut v {
        if c.patch.pointer("/metadata/name").is_none() && !c.patch["metadata"].is_object() {
            merge(&mut c.patch, &json!({"metadata": {"name": "bad"}}));
        }
    }
    v
}

#[tokio::test]
async fn invalid_specs_table() {
    let server = Server::start().await;
    let client = server.client().await;
    let cases = invalid_cases();
    assert!(
        cases.len() >= 40,
        "at least 40 invalid specs ({})",
        cases.len()
    );
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let (mut body, path, kind, group) = match c.kind {
            K::Job => (job_json("bad"), JOBS, "Job", "batch"),
            K::CronJob => (cronjob_json("bad"), CRONJOBS, "CronJob", "batch"),
            K::Pod => (pod_json("bad"), PODS, "Pod", ""),
        };
        merge(&mut body, &c.patch);
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        let r = post(&client, path, &body).await;
        let label = format!(
            "case {i} ({:?} {} {}): {}",
            c.kind, c.field, c.reason, c.patch
        );
        if r.status != 422 {
            failures.push(format!("{label}\n  want 422, got {}: {}", r.status, r.body));
            continue;
        }
        let s = r.json();
        let mut problems = Vec::new();
        if s["reason"] != "Invalid" || s["kind"] != "Status" || s["code"] != 422 {
            problems.push("not a 422 Invalid Status".to_string());
        }
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let msg = s["message"].as_str().unwrap_or("");
        let prefix = format!("{qualified} \"{name}\" is invalid: ");
        if !msg.starts_with(&prefix) {
            problems.push(format!("message does not start with {prefix:?}"));
        }
        let d = &s["details"];
        if d["kind"] != kind
            || d["name"].as_str().unwrap_or("") != name
            || d["group"].as_str().unwrap_or("") != group
        {
            problems.push("details name/group/kind".to_string());
        }
        let causes = d["causes"].as_array().cloned().unwrap_or_default();
        let hit = causes.iter().find(|cause| {
            cause["field"] == c.field
                && cause["reason"] == c.reason
                && c.message
                    .as_deref()
                    .is_none_or(|m| cause["message"].as_str().unwrap_or("").starts_with(m))
        });
        match hit {
            None => problems.push(format!(
                "no cause with field {:?} reason {:?} message {:?}",
                c.field, c.reason, c.message
            )),
            Some(cause) => {
                // The top-level message carries `<field>: <cause message>` for every cause.
                let full = format!("{}: {}", c.field, cause["message"].as_str().unwrap_or(""));
                if !msg.contains(&full) {
                    problems.push(format!("message lacks {full:?}"));
                }
            }
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{label}\n  {}\n  got: {}",
                problems.join("; "),
                r.body
            ));
        }
    }
    // Nothing was created by any rejected request.
    for path in [JOBS, CRONJOBS, PODS] {
        let r = send(&client, "GET", path, None, "").await;
        assert_eq!(
            r.json()["items"],
            json!([]),
            "{path} after rejected creates"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} invalid specs not rejected as upstream does:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Updates that upstream rejects (immutable fields, status rules).
#[tokio::test]
async fn invalid_updates() {
    let server = Server::start().await;
    let client = server.client().await;
    let created = post(&client, JOBS, &job_json("up")).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let job = created.json();
    let url = format!("{JOBS}/up");
    let put = |body: Value, sub: &'static str| {
        let client = client.clone();
        let url = format!("{url}{sub}");
        async move {
            send(
                &client,
                "PUT",
                &url,
                Some("application/json"),
                body.to_string(),
            )
            .await
        }
    };
    let expect_cause =
        |r: &Raw, field: &str, message: &str| {
            let s = status(r, 422, "Invalid");
            let causes = s["details"]["causes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                causes.iter().any(|c| c["field"] == field
                    && c["message"].as_str().unwrap_or("").starts_with(message)),
                "want cause {field}: {message}\ngot {}",
                r.body
            );
        };

    // NonIndexed completions are immutable.
    let mut b = job.clone();
    b["spec"]["completions"] = json!(3);
    b["metadata"]["resourceVersion"] = Value::Null;
    expect_cause(
        &put(b, "").await,
        "spec.completions",
        "Invalid value: 3: field is immutable",
    );
    // The pod template of a running (not suspended) job is immutable.
    let mut b = job.clone();
    b["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine");
    b["metadata"]["resourceVersion"] = Value::Null;
    expect_cause(&put(b, "").await, "spec.template", "Invalid value: ");
    // Status: counters may not be negative; Complete needs SuccessCriteriaMet.
    let mut b = job.clone();
    b["status"] = json!({"active": -1});
    b["metadata"]["resourceVersion"] = Value::Null;
    expect_cause(
        &put(b, "/status").await,
        "status.active",
        &format!("Invalid value: -1: {NEG}"),
    );
    let mut b = job.clone();
    b["metadata"]["resourceVersion"] = Value::Null;
    b["status"] = json!({
        "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:00Z",
        "active": 0, "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}]
    });
    expect_cause(
        &put(b, "/status").await,
        "status.conditions",
        "Invalid value: cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
    );
    // The failed counter never goes down.
    let mut b = job.clone();
    b["metadata"]["resourceVersion"] = Value::Null;
    b["status"] = json!({"failed": 2});
    let r = put(b.clone(), "/status").await;
    assert_eq!(r.status, 200, "{}", r.body);
    b["status"] = json!({"failed": 1});
    expect_cause(
        &put(b, "/status").await,
        "status.failed",
        "Invalid value: 1: cannot decrease the failed counter",
    );
    // The name in the body must match the URL: 400.
    let mut b = job.clone();
    b["metadata"]["name"] = json!("other");
    b["metadata"]["resourceVersion"] = Value::Null;
    let r = put(b, "").await;
    let s = status(&r, 400, "BadRequest");
    assert_eq!(
        s["message"],
        "the name of the object (other) does not match the name on the URL (up)"
    );
    // More status rules (JobManagedBy gate on): Failed needs FailureTarget; ready <= active.
    let mut b = job.clone();
    b["metadata"]["resourceVersion"] = Value::Null;
    b["status"] = json!({"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]});
    expect_cause(
        &put(b.clone(), "/status").await,
        "status.conditions",
        "Invalid value: cannot set Failed=True condition without the FailureTarget=true condition",
    );
    b["status"] = json!({"failed": 2, "active": 1, "ready": 2});
    expect_cause(
        &put(b, "/status").await,
        "status.ready",
        "Invalid value: 2: cannot set more ready pods than active",
    );

    // Indexed (elastic) completions change only in tandem with parallelism.
    let mut ix = job_json("ix");
    merge(
        &mut ix,
        &json!({"spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3}}),
    );
    let r = post(&client, JOBS, &ix).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mut b = r.json();
    b["metadata"]["resourceVersion"] = Value::Null;
    b["spec"]["completions"] = json!(4);
    let r = send(
        &client,
        "PUT",
        &format!("{JOBS}/ix"),
        Some("application/json"),
        b.to_string(),
    )
    .await;
    expect_cause(
        &r,
        "spec.completions",
        "Invalid value: 4: can only be modified in tandem with spec.parallelism",
    );
    b["spec"]["parallelism"] = json!(4);
    let r = send(
        &client,
        "PUT",
        &format!("{JOBS}/ix"),
        Some("application/json"),
        b.to_string(),
    )
    .await;
    assert_eq!(
        r.status, 200,
        "completions and parallelism together: {}",
        r.body
    );
}

/// Pod updates upstream rejects: spec fields other than the mutable few, and a terminated
/// container going back to running.
#[tokio::test]
async fn invalid_pod_updates() {
    let server = Server::start().await;
    let client = server.client().await;
    let r = post(&client, PODS, &pod_json("p")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mut pod = r.json();
    pod["metadata"]["resourceVersion"] = Value::Null;
    let url = format!("{PODS}/p");

    let mut b = pod.clone();
    b["spec"]["restartPolicy"] = json!("OnFailure");
    let r = send(
        &client,
        "PUT",
        &url,
        Some("application/json"),
        b.to_string(),
    )
    .await;
    let s = status(&r, 422, "Invalid");
    let causes = s["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        causes.iter().any(|c| c["field"] == "spec"
            && c["reason"] == "FieldValueForbidden"
            && c["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("Forbidden: pod updates may not change fields other than")),
        "{}",
        r.body
    );
    // The image is one of the mutable fields.
    let mut b = pod.clone();
    b["spec"]["containers"][0]["image"] = json!("alpine");
    let r = send(
        &client,
        "PUT",
        &url,
        Some("application/json"),
        b.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let cs = |state: Value| {
        json!({"phase": "Running", "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "state": state
        }]})
    };
    let mut b = pod.clone();
    b["status"] = cs(json!({"terminated": {"exitCode": 0, "reason": "Completed"}}));
    let r = send(
        &client,
        "PUT",
        &format!("{url}/status"),
        Some("application/json"),
        b.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    b["status"] = cs(json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}));
    let r = send(
        &client,
        "PUT",
        &format!("{url}/status"),
        Some("application/json"),
        b.to_string(),
    )
    .await;
    let s = status(&r, 422, "Invalid");
    let causes = s["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c["field"] == "status.containerStatuses[0].state"
                && c["reason"] == "FieldValueForbidden"
                && c["message"] == "Forbidden: may not be transitioned to non-terminated state"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn malformed_and_mistyped_bodies() {
    let server = Server::start().await;
    let client = server.client().await;

    // Malformed JSON → 400 BadRequest.
    for body in [
        &b"{\"apiVersion\": "[..],
        b"not json",
        b"[1, 2]",
        b"",
        b"\xff\xfe",
    ] {
        let r = send(
            &client,
            "POST",
            JOBS,
            Some("application/json"),
            body.to_vec(),
        )
        .await;
        status(&r, 400, "BadRequest");
    }
    // Wrong kind for the endpoint → 400 BadRequest: a whole Pod, and a Job body labelled Pod.
    let r = post(&client, JOBS, &pod_json("p")).await;
    status(&r, 400, "BadRequest");
    let mut j = job_json("k");
    j["kind"] = json!("Pod");
    let r = post(&client, JOBS, &j).await;
    let s = status(&r, 400, "BadRequest");
    assert!(
        s["message"].as_str().unwrap_or("").contains("Pod"),
        "{}",
        r.body
    );
    // Wrong apiVersion → 400 BadRequest naming it.
    let mut j = job_json("v2");
    j["apiVersion"] = json!("batch/v2");
    let r = post(&client, JOBS, &j).await;
    let s = status(&r, 400, "BadRequest");
    assert!(
        s["message"].as_str().unwrap_or("").contains("batch/v2"),
        "{}",
        r.body
    );
    // A field of the wrong JSON type → 400 BadRequest (upstream: cannot unmarshal).
    let mut j = job_json("types");
    j["spec"]["parallelism"] = json!("two");
    let r = post(&client, JOBS, &j).await;
    status(&r, 400, "BadRequest");
    // The body namespace must match the URL: 400.
    let mut j = job_json("ns");
    j["metadata"]["namespace"] = json!("kube-system");
    let r = post(&client, JOBS, &j).await;
    let s = status(&r, 400, "BadRequest");
    assert_eq!(
        s["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    // A body over 3 MiB → 413.
    let mut big = job_json("big");
    big["metadata"]["annotations"] = json!({"big": "x".repeat(3 * 1024 * 1024 + 1)});
    let r = post(&client, JOBS, &big).await;
    let s = status(&r, 413, "RequestEntityTooLarge");
    assert_eq!(s["message"], "Request entity too large: limit is 3145728");
    // An unknown content type on a write → 415.
    let r = send(
        &client,
        "POST",
        JOBS,
        Some("text/plain"),
        job_json("ct").to_string(),
    )
    .await;
    status(&r, 415, "UnsupportedMediaType");
    // A missing content type is JSON (the Python client sends none).
    let r = send(&client, "POST", JOBS, None, job_json("noct").to_string()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    // Patches: unsupported patch type, malformed merge patch, malformed JSON patch.
    let r = send(
        &client,
        "PATCH",
        &format!("{JOBS}/noct"),
        Some("application/json"),
        "{}",
    )
    .await;
    status(&r, 415, "UnsupportedMediaType");
    let r = send(
        &client,
        "PATCH",
        &format!("{JOBS}/noct"),
        Some("application/merge-patch+json"),
        "{nope",
    )
    .await;
    assert!((400..500).contains(&r.status), "{}", r.body);
    let r = send(
        &client,
        "PATCH",
        &format!("{JOBS}/noct"),
        Some("application/json-patch+json"),
        r#"{"op": "add"}"#,
    )
    .await;
    assert!((400..500).contains(&r.status), "{}", r.body);
    // A patch that makes the object invalid → 422.
    let r = send(
        &client,
        "PATCH",
        &format!("{JOBS}/noct"),
        Some("application/merge-patch+json"),
        r#"{"spec": {"parallelism": -1}}"#,
    )
    .await;
    status(&r, 422, "Invalid");
}

#[tokio::test]
async fn conflicts_not_found_and_bad_requests() {
    let server = Server::start().await;
    let client = server.client().await;
    let r = post(&client, JOBS, &job_json("c")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v1 = r.json();

    // Existing name → 409 AlreadyExists.
    let r = post(&client, JOBS, &job_json("c")).await;
    let s = status(&r, 409, "AlreadyExists");
    assert_eq!(s["message"], r#"jobs.batch "c" already exists"#);
    assert_eq!(
        s["details"],
        json!({"name": "c", "group": "batch", "kind": "jobs"})
    );

    // Stale resourceVersion → 409 Conflict.
    let mut b = v1.clone();
    b["metadata"]["labels"] = json!({"n": "1"});
    let r = send(
        &client,
        "PUT",
        &format!("{JOBS}/c"),
        Some("application/json"),
        b.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    b["metadata"]["labels"] = json!({"n": "2"});
    let r = send(
        &client,
        "PUT",
        &format!("{JOBS}/c"),
        Some("application/json"),
        b.to_string(),
    )
    .await;
    let s = status(&r, 409, "Conflict");
    assert_eq!(
        s["message"],
        r#"Operation cannot be fulfilled on jobs.batch "c": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(
        s["details"],
        json!({"name": "c", "group": "batch", "kind": "jobs"})
    );

    // Missing namespace → 404 for the namespace.
    let r = post(
        &client,
        "/apis/batch/v1/namespaces/nowhere/jobs",
        &job_json("c"),
    )
    .await;
    let s = status(&r, 404, "NotFound");
    assert_eq!(s["message"], r#"namespaces "nowhere" not found"#);
    // Missing object → 404.
    let r = send(&client, "GET", &format!("{JOBS}/ghost"), None, "").await;
    let s = status(&r, 404, "NotFound");
    assert_eq!(s["message"], r#"jobs.batch "ghost" not found"#);
    let r = send(&client, "GET", &format!("{PODS}/ghost"), None, "").await;
    let s = status(&r, 404, "NotFound");
    assert_eq!(s["message"], r#"pods "ghost" not found"#);

    // Unknown paths → 404 (a Status, like upstream's default handler).
    for path in [
        "/apis/batch/v1/namespaces/default/widgets",
        "/apis/nothing.example.com/v1/things",
        "/apis/batch/v9/jobs",
        "/api/v1/namespaces/default/pods/x/nosuchsub",
        "/nonexistent",
    ] {
        let r = send(&client, "GET", path, None, "").await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    // A verb the resource does not have → 405.
    let r = send(&client, "PUT", JOBS, Some("application/json"), "{}").await;
    status(&r, 405, "MethodNotAllowed");

    // Bad selectors and query parameters → 400.
    for q in [
        "labelSelector=a%20in%20(",
        "labelSelector=%3D%3Dx",
        "labelSelector=a%20notin%20b",
        "fieldSelector=spec.unknownField%3Dx",
        "limit=abc",
        "watch=maybe",
        "watch=true&timeoutSeconds=abc",
    ] {
        let r = send(&client, "GET", &format!("{JOBS}?{q}"), None, "").await;
        assert_eq!(r.status, 400, "{q}: {}", r.body);
        status(&r, 400, "BadRequest");
    }
    // Garbage continue tokens and resourceVersions: a client error, never a server error.
    for q in ["continue=garbage", "resourceVersion=abc&watch=true"] {
        let r = send(&client, "GET", &format!("{JOBS}?{q}"), None, "").await;
        assert!(
            (400..500).contains(&r.status),
            "{q}: {} {}",
            r.status,
            r.body
        );
    }

    // Bad propagationPolicy → 422 with upstream's DeleteOptions message, in the body or the query.
    let want = r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Foo": supported values: "Foreground", "Background", "Orphan", "nil""#;
    let r = send(
        &client,
        "DELETE",
        &format!("{JOBS}/c"),
        Some("application/json"),
        r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foo"}"#,
    )
    .await;
    let s = status(&r, 422, "Invalid");
    assert_eq!(s["message"], want);
    assert_eq!(s["details"]["kind"], "DeleteOptions");
    assert_eq!(s["details"]["group"], "meta.k8s.io");
    let r = send(
        &client,
        "DELETE",
        &format!("{JOBS}/c?propagationPolicy=Foo"),
        None,
        "",
    )
    .await;
    let s = status(&r, 422, "Invalid");
    assert_eq!(s["message"], want);
    // orphanDependents together with a policy → 422.
    let r = send(
        &client,
        "DELETE",
        &format!("{JOBS}/c"),
        Some("application/json"),
        r#"{"orphanDependents":true,"propagationPolicy":"Orphan"}"#,
    )
    .await;
    status(&r, 422, "Invalid");
    // Malformed DeleteOptions → 400.
    let r = send(
        &client,
        "DELETE",
        &format!("{JOBS}/c"),
        Some("application/json"),
        "{nope",
    )
    .await;
    status(&r, 400, "BadRequest");
    // None of these deleted the Job.
    let r = send(&client, "GET", &format!("{JOBS}/c"), None, "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A delete precondition on a stale resourceVersion → 409 Conflict.
    let r = send(
        &client,
        "DELETE",
        &format!("{JOBS}/c"),
        Some("application/json"),
        json!({"preconditions": {"resourceVersion": v1["metadata"]["resourceVersion"]}})
            .to_string(),
    )
    .await;
    status(&r, 409, "Conflict");
}

/// Query parameters are decoded strictly whatever the verb, as upstream's parameter codec does:
/// - a field selector value may not contain an unescaped `=` (`fields.UnescapeValue`), so
///   `metadata.name===` is a 400, not a selector on the value `=`;
/// - `timeoutSeconds` is part of ListOptions, so a non-number is a 400 on a plain list too;
/// - an unparsable resourceVersion on a list is a client error (it must not be ignored).
#[tokio::test]
async fn query_parameters_are_decoded_strictly() {
    let server = Server::start().await;
    let client = server.client().await;
    let mut wrong = Vec::new();
    for (q, want_400) in [
        ("fieldSelector=metadata.name%3D%3D%3D", true),
        ("fieldSelector=metadata.name%3Da%3Db", true),
        ("timeoutSeconds=abc", true),
        ("resourceVersion=abc", false),
    ] {
        let r = send(&client, "GET", &format!("{JOBS}?{q}"), None, "").await;
        let ok = if want_400 {
            r.status == 400
        } else {
            (400..500).contains(&r.status)
        };
        if !ok {
            wrong.push(format!("GET {JOBS}?{q} -> {} {}", r.status, r.body));
        }
    }
    assert!(
        wrong.is_empty(),
        "accepted bad query parameters:\n{}",
        wrong.join("\n")
    );
}

/// Every JSON path of valid Job, CronJob and Pod bodies, replaced in turn by values of the
/// wrong type or out of range: the server answers each with success or a 4xx Status, never
/// a 5xx, stays up, and whatever it accepted can be read back and deleted.
#[tokio::test]
async fn type_confusion_never_5xx() {
    fn paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let p = format!("{prefix}/{k}");
                    out.push(p.clone());
                    paths(child, &p, out);
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    let p = format!("{prefix}/{i}");
                    out.push(p.clone());
                    paths(child, &p, out);
                }
            }
            _ => {}
        }
    }
    let replacements = [
        Value::Null,
        json!(-1),
        json!(1e300),
        json!(2147483648i64),
        json!(""),
        json!("\u{1d11e}\u{0}"),
        json!(true),
        json!([]),
        json!({}),
    ];
    let server = Server::start().await;
    let client = server.client().await;
    let mut n = 0;
    for (base, path) in [
        (job_json("fuzz"), JOBS),
        (cronjob_json("fuzz"), CRONJOBS),
        (pod_json("fuzz"), PODS),
    ] {
        let mut all = Vec::new();
        paths(&base, "", &mut all);
        for p in &all {
            for r in &replacements {
                let mut body = base.clone();
                *body.pointer_mut(p).expect("path exists") = r.clone();
                let resp = post(&client, path, &body).await;
                n += 1;
                if resp.status == 201 {
                    let name = resp.json()["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let url = format!("{path}/{name}");
                    let got = send(&client, "GET", &url, None, "").await;
                    assert_eq!(
                        got.status, 200,
                        "{p} = {r}: accepted but unreadable: {}",
                        got.body
                    );
                    let del = send(
                        &client,
                        "DELETE",
                        &format!("{url}?gracePeriodSeconds=0&propagationPolicy=Background"),
                        None,
                        "",
                    )
                    .await;
                    assert_eq!(
                        del.status, 200,
                        "{p} = {r}: accepted but not deletable: {}",
                        del.body
                    );
                } else {
                    assert!(
                        resp.status == 400 || resp.status == 422,
                        "{p} = {r}: {} {}",
                        resp.status,
                        resp.body
                    );
                    let s = resp.json();
                    assert_eq!(s["kind"], "Status", "{p} = {r}: {}", resp.body);
                }
            }
        }
    }
    // The same values through JSON patches on stored objects (main resource and status).
    for (base, path, subs) in [
        (job_json("fuzzp"), JOBS, &["", "/status"][..]),
        (cronjob_json("fuzzp"), CRONJOBS, &["", "/status"][..]),
        (pod_json("fuzzp"), PODS, &["", "/status"][..]),
    ] {
        let created = post(&client, path, &base).await;
        assert_eq!(created.status, 201, "{}", created.body);
        let mut all = Vec::new();
        paths(&created.json(), "", &mut all);
        for sub in subs {
            for p in &all {
                for r in &replacements {
                    let patch = json!([{"op": "replace", "path": p, "value": r}]);
                    let resp = send(
                        &client,
                        "PATCH",
                        &format!("{path}/fuzzp{sub}"),
                        Some("application/json-patch+json"),
                        patch.to_string(),
                    )
                    .await;
                    n += 1;
                    assert!(
                        [200, 400, 404, 409, 422].contains(&resp.status),
                        "PATCH {sub} {p} = {r}: {} {}",
                        resp.status,
                        resp.body
                    );
                    if resp.status != 200 {
                        assert_eq!(resp.json()["kind"], "Status", "{}", resp.body);
                    }
                }
            }
        }
    }
    assert!(n > 300, "{n} requests");
    let ready = send(&client, "GET", "/readyz", None, "").await;
    assert_eq!(
        ready.status, 200,
        "server still ready after {n} bad requests"
    );
}

/// Server-side field validation: unknown fields are dropped with a warning by default
/// (`Warn`), rejected with `Strict`, and silently dropped with `Ignore`.
#[tokio::test]
async fn unknown_fields_per_field_validation() {
    let server = Server::start().await;
    let client = server.client().await;
    let body = |name: &str| {
        let mut j = job_json(name);
        j["spec"]["bogus"] = json!(1);
        j.to_string()
    };
    let warning = |r: &Raw| {
        r.headers
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };

    let r = send(
        &client,
        "POST",
        JOBS,
        Some("application/json"),
        body("warn"),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.json()["spec"].get("bogus").is_none(),
        "unknown fields are dropped"
    );
    assert_eq!(warning(&r), [r#"299 - "unknown field \"spec.bogus\"""#]);

    let r = send(
        &client,
        "POST",
        &format!("{JOBS}?fieldValidation=Strict"),
        Some("application/json"),
        body("strict"),
    )
    .await;
    let s = status(&r, 400, "BadRequest");
    assert!(
        s["message"]
            .as_str()
            .unwrap_or("")
            .contains(r#"strict decoding error: unknown field "spec.bogus""#),
        "{}",
        r.body
    );

    let r = send(
        &client,
        "POST",
        &format!("{JOBS}?fieldValidation=Ignore"),
        Some("application/json"),
        body("ignore"),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(warning(&r).is_empty(), "{:?}", warning(&r));

    let r = send(
        &client,
        "POST",
        &format!("{JOBS}?fieldValidation=Sometimes"),
        Some("application/json"),
        body("bad-directive"),
    )
    .await;
    status(&r, 400, "BadRequest");
}
