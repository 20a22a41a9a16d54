use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};

use super::typed::{compare, field_set, merge};
use super::*;
use crate::ServerState;

fn job_schema() -> Schema {
    Schema::for_kind("Job")
}

fn fields_of(config: &Value) -> Value {
    field_set(config, &job_schema())
        .unwrap()
        .difference(strip_set())
        .to_fields_v1()
}

#[test]
fn fields_v1_of_an_applied_job() {
    let config = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "labels": {"app": "pi"}},
        "spec": {"activeDeadlineSeconds": 2, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "pi", "image": "perl",
                "ports": [{"containerPort": 80}],
                "env": [{"name": "A", "value": "1"}]}]}}}
    });
    // Exactly upstream's encoding: keyed items carry `.`, the port's key includes the
    // defaulted protocol, the atomic selector is one leaf, metadata.name is not owned.
    assert_eq!(
        serde_json::to_string(&fields_of(&config)).unwrap(),
        r#"{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:activeDeadlineSeconds":{},"f:selector":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"pi\"}":{".":{},"f:env":{"k:{\"name\":\"A\"}":{".":{},"f:name":{},"f:value":{}}},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}},"f:restartPolicy":{}}}}}"#
    );
}

#[test]
fn fields_v1_round_trips_sets_and_order() {
    let config = json!({"metadata": {"finalizers": ["b", "a"], "ownerReferences": [{"uid": "u1", "name": "x"}]}});
    let set = field_set(&config, &Schema::for_kind("Pod")).unwrap();
    let v1 = set.to_fields_v1();
    assert_eq!(
        serde_json::to_string(&v1).unwrap(),
        r#"{"f:metadata":{"f:finalizers":{"v:\"a\"":{},"v:\"b\"":{}},"f:ownerReferences":{"k:{\"uid\":\"u1\"}":{}}}}"#
    );
    assert_eq!(FieldSet::from_fields_v1(&v1).unwrap(), set);
    // Keys with numbers name their items exactly, and read back as the same set.
    let ports = json!({"spec": {"containers": [{"name": "c", "ports": [
        {"containerPort": 10}, {"containerPort": 9}]}]}});
    let set = field_set(&ports, &Schema::for_kind("Pod")).unwrap();
    let v1 = set.to_fields_v1();
    let mut keys: Vec<&String> = v1["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]["f:ports"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "k:{\"containerPort\":10,\"protocol\":\"TCP\"}",
            "k:{\"containerPort\":9,\"protocol\":\"TCP\"}"
        ]
    );
    assert_eq!(FieldSet::from_fields_v1(&v1).unwrap(), set);
    assert!(FieldSet::from_fields_v1(&json!({"x:1": {}})).is_err());
    assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
}

#[test]
fn create_records_added_fields_like_upstream() {
    let target = Target::new("Job", "batch/v1", Part::Main);
    let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "namespace": "default", "labels": {"app": "pi"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "pi", "image": "perl"}]}}},
        "status": {"active": 1}});
    track_create(&target, &mut job, "kubectl-create", "2024-01-01T00:00:00Z");
    let mf = &job["metadata"]["managedFields"];
    assert_eq!(
        mf,
        &json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "batch/v1",
            "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"pi\"}": {".": {}, "f:image": {}, "f:name": {}}},
                "f:restartPolicy": {}}}}}}])
    );
}

#[test]
fn update_moves_changed_fields_to_the_updater() {
    let target = Target::new("Job", "batch/v1", Part::Main);
    let mut live =
        json!({"metadata": {"name": "pi"}, "spec": {"activeDeadlineSeconds": 1, "completions": 1}});
    track_create(&target, &mut live, "creator", "2024-01-01T00:00:00Z");
    let mut new = live.clone();
    new["spec"]["activeDeadlineSeconds"] = json!(3);
    track_update(
        &target,
        &live,
        &mut new,
        "kubectl-patch",
        "2024-01-02T00:00:00Z",
    );
    let m = Managed::decode(new.pointer("/metadata/managedFields")).unwrap();
    assert_eq!(m.0.len(), 2);
    let creator = m.0.iter().find(|e| e.manager == "creator").unwrap();
    let patcher = m.0.iter().find(|e| e.manager == "kubectl-patch").unwrap();
    let par = [field("spec"), field("activeDeadlineSeconds")];
    assert!(!creator.set.has(&par) && patcher.set.has(&par));
    assert!(creator.set.has(&[field("spec"), field("completions")]));
    // Unchanged: the live entries are kept as they are.
    let mut same = new.clone();
    track_update(&target, &new, &mut same, "other", "2024-01-03T00:00:00Z");
    assert_eq!(same, new);
    // A status write through the main resource is not owned by anyone.
    let mut st = new.clone();
    st["status"] = json!({"active": 1});
    track_update(&target, &new, &mut st, "x", "2024-01-03T00:00:00Z");
    assert_eq!(
        st["metadata"]["managedFields"],
        new["metadata"]["managedFields"]
    );
}

#[test]
fn compare_reports_nodes_and_leaves() {
    let s = Schema::for_kind("Pod");
    let a = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
    let b = json!({"spec": {"containers": [{"name": "a", "image": "y"}, {"name": "b"}]}});
    let c = compare(&a, &b, &s, &FieldSet::new()).unwrap();
    assert_eq!(
        c.modified.to_fields_v1(),
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {"f:image": {}}}}})
    );
    assert_eq!(
        c.added.to_fields_v1(),
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {".": {}, "f:name": {}}}}})
    );
    assert!(c.removed.is_empty());
}

#[test]
fn merge_orders_and_merges_keyed_lists() {
    let s = Schema::for_kind("Pod");
    let live = json!({"spec": {"containers": [
        {"name": "a", "image": "x", "imagePullPolicy": "Always"}, {"name": "b"}, {"name": "c"}]}});
    let config =
        json!({"spec": {"containers": [{"name": "c", "image": "z"}, {"name": "a", "image": "y"}]}});
    let m = merge(Some(&live), &config, &s);
    assert_eq!(
        m,
        json!({"spec": {"containers": [{"name": "b"}, {"name": "c", "image": "z"},
            {"name": "a", "image": "y", "imagePullPolicy": "Always"}]}})
    );
    // Atomic lists are replaced.
    let live = json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}});
    let config = json!({"spec": {"tolerations": [{"key": "c"}]}});
    assert_eq!(merge(Some(&live), &config, &s), config);
}

#[test]
fn bad_keyed_lists_are_rejected() {
    let t = Target::new("Job", "batch/v1", Part::Main);
    let config = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"image": "x"}, {"name": "a"}, {"name": "a"}]}}}});
    let e = apply(&t, None, &config, "m", false, "2024-01-01T00:00:00Z").unwrap_err();
    assert_eq!(e.code, 500);
    assert_eq!(
        e.message,
        "failed to create typed patch object (default/pi; batch/v1, Kind=Job): errors:\n  .spec.template.spec.containers: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)\n  .spec.template.spec.containers: duplicate entries for key [name=\"a\"]"
    );
}

#[test]
fn manager_from_user_agent() {
    let q = Query::parse(None);
    assert_eq!(
        manager_name(&q, "kubectl/v1.32.4 (linux/amd64) kubernetes/abc"),
        "kubectl"
    );
    assert_eq!(manager_name(&q, ""), "");
    let q = Query::parse(Some("fieldManager=mine"));
    assert_eq!(manager_name(&q, "kubectl/v1"), "mine");
}

// ---- Through the HTTP handlers ----

const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";

struct Server {
    _dir: tempfile::TempDir,
    st: Arc<ServerState>,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store =
        kbatch_store::Store::open(dir.path(), kbatch_store::StoreOptions::default()).unwrap();
    let st = ServerState::new(store, "127.0.0.1:0".into());
    st.bootstrap().await.unwrap();
    Server { _dir: dir, st }
}

impl Server {
    async fn call(&self, method: &str, path: &str, ct: &str, body: Value) -> (u16, Value) {
        let body = match body {
            Value::String(s) => s,
            v => v.to_string(),
        };
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .header("user-agent", "kbatch-tests/v0 (linux)")
            .body(Body::from(body))
            .unwrap();
        let resp = crate::dispatch(&self.st, req).await;
        let code = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    async fn apply(&self, path: &str, query: &str, config: Value) -> (u16, Value) {
        self.call("PATCH", &format!("{path}?{query}"), CONTENT_TYPE, config)
            .await
    }

    async fn get(&self, path: &str) -> Value {
        let (code, v) = self
            .call("GET", path, "", Value::String(String::new()))
            .await;
        assert_eq!(code, 200, "{v}");
        v
    }
}

/// A Job; `deadline` sets `spec.activeDeadlineSeconds` (mutable, no default).
fn job(labels: Value, deadline: Option<i64>) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "namespace": "default", "labels": labels},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "pi", "image": "perl", "command": ["true"]}]}}}});
    if let Some(d) = deadline {
        j["spec"]["activeDeadlineSeconds"] = json!(d);
    }
    j
}

fn entries(v: &Value) -> Vec<(String, String, String)> {
    v["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
                    (s("manager"), s("operation"), s("subresource"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn owners(v: &Value, path: &[&str]) -> Vec<String> {
    let p: Vec<PathElement> = path.iter().map(|f| field(f)).collect();
    Managed::decode(v.pointer("/metadata/managedFields"))
        .unwrap()
        .0
        .into_iter()
        .filter(|e| e.set.has(&p))
        .map(|e| e.manager)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[tokio::test]
async fn apply_creates_then_removes_what_it_no_longer_applies() {
    let s = server().await;
    let (code, v) = s
        .apply(
            &format!("{JOBS}/pi"),
            "fieldManager=kubectl&force=false",
            job(json!({"a": "1", "b": "2"}), Some(2)),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        entries(&v),
        [("kubectl".into(), "Apply".into(), String::new())]
    );
    assert_eq!(v["spec"]["activeDeadlineSeconds"], 2);
    // Defaulted and server-set fields are nobody's.
    assert!(owners(&v, &["spec", "backoffLimit"]).is_empty());
    assert_eq!(owners(&v, &["spec", "activeDeadlineSeconds"]), ["kubectl"]);

    // The same configuration again changes nothing (same resourceVersion).
    let (code, again) = s
        .apply(
            &format!("{JOBS}/pi"),
            "fieldManager=kubectl",
            job(json!({"a": "1", "b": "2"}), Some(2)),
        )
        .await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(
        again["metadata"]["resourceVersion"],
        v["metadata"]["resourceVersion"]
    );

    // Label b and the deadline left the configuration: both go.
    let (code, v) = s
        .apply(
            &format!("{JOBS}/pi"),
            "fieldManager=kubectl",
            job(json!({"a": "1"}), None),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["metadata"]["labels"], json!({"a": "1"}));
    assert!(v["spec"].get("activeDeadlineSeconds").is_none(), "{v}");
    assert!(owners(&v, &["spec", "activeDeadlineSeconds"]).is_empty());
}

#[tokio::test]
async fn appliers_share_a_field_until_both_let_go() {
    let s = server().await;
    let path = format!("{JOBS}/pi");
    let (code, _) = s
        .apply(&path, "fieldManager=one", job(json!({"x": "1"}), None))
        .await;
    assert_eq!(code, 201);
    let (code, v) = s
        .apply(&path, "fieldManager=two", job(json!({"x": "1"}), None))
        .await;
    assert_eq!(code, 200, "{v}");
    let x = ["metadata", "labels", "x"];
    assert_eq!(owners(&v, &x), ["one", "two"]);
    let (_, v) = s
        .apply(&path, "fieldManager=one", job(json!({}), None))
        .await;
    assert_eq!(v["metadata"]["labels"]["x"], "1", "two still applies it");
    assert_eq!(owners(&v, &x), ["two"]);
    let (_, v) = s
        .apply(&path, "fieldManager=two", job(json!({}), None))
        .await;
    assert!(v["metadata"]["labels"].get("x").is_none(), "{v}");
}

#[tokio::test]
async fn conflict_with_an_updater_and_force() {
    let s = server().await;
    let path = format!("{JOBS}/pi");
    let (code, _) = s
        .call(
            "POST",
            &format!("{JOBS}?fieldManager=kubectl-create"),
            "application/json",
            job(json!({}), Some(2)),
        )
        .await;
    assert_eq!(code, 201);
    // Same value: shared, no conflict.
    let (code, v) = s
        .apply(&path, "fieldManager=kubectl", job(json!({}), Some(2)))
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        owners(&v, &["spec", "activeDeadlineSeconds"]),
        ["kubectl", "kubectl-create"]
    );
    // kubectl-patch takes the deadline; then the applier wants another value.
    let (code, v) = s
        .call(
            "PATCH",
            &format!("{path}?fieldManager=kubectl-patch"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"activeDeadlineSeconds": 3}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        owners(&v, &["spec", "activeDeadlineSeconds"]),
        ["kubectl-patch"]
    );
    let (code, status) = s
        .apply(
            &path,
            "fieldManager=kubectl&force=false",
            job(json!({}), Some(4)),
        )
        .await;
    assert_eq!(code, 409);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Apply failed with 1 conflict: conflict with \"kubectl-patch\" using batch/v1: .spec.activeDeadlineSeconds",
            "reason": "Conflict",
            "details": {"causes": [{"reason": "FieldManagerConflict",
                "message": "conflict with \"kubectl-patch\" using batch/v1", "field": ".spec.activeDeadlineSeconds"}]},
            "code": 409})
    );
    // Two conflicts, two managers: upstream's multi-line message.
    let two = job(json!({"l": "v"}), Some(4));
    let (code, _) = s
        .call(
            "PATCH",
            &format!("{path}?fieldManager=labeler"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"l": "w"}}}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, status) = s.apply(&path, "fieldManager=kubectl", two.clone()).await;
    assert_eq!(code, 409);
    assert_eq!(
        status["message"],
        "Apply failed with 2 conflicts: conflicts with \"kubectl-patch\" using batch/v1:\n- .spec.activeDeadlineSeconds\nconflicts with \"labeler\" using batch/v1:\n- .metadata.labels.l"
    );
    // Forced: the applier takes the fields away from the others.
    let (code, v) = s.apply(&path, "fieldManager=kubectl&force=true", two).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"]["activeDeadlineSeconds"], 4);
    assert_eq!(owners(&v, &["spec", "activeDeadlineSeconds"]), ["kubectl"]);
    assert_eq!(owners(&v, &["metadata", "labels", "l"]), ["kubectl"]);
    assert!(
        !entries(&v)
            .iter()
            .any(|e| e.0 == "kubectl-patch" || e.0 == "labeler"),
        "{v}"
    );
}

const PODS: &str = "/api/v1/namespaces/default/pods";

/// A server with pod `p` (one container) created without a fieldManager.
async fn server_with_pod() -> (Server, Value) {
    let s = server().await;
    // The account the ServiceAccount admission gives the pod (no controller makes it here).
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let (code, v) = s
        .call(
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            "application/json",
            sa,
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    let (code, v) = s.call("POST", PODS, "application/json", pod).await;
    assert_eq!(code, 201, "{v}");
    (s, v)
}

#[tokio::test]
async fn status_subresource_apply_and_updates() {
    let (s, v) = server_with_pod().await;
    let pods = PODS;
    // No fieldManager: the User-Agent's product names the manager.
    assert_eq!(
        entries(&v),
        [("kbatch-tests".into(), "Update".into(), String::new())]
    );
    let status = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {"containers": [{"name": "c", "image": "ignored"}]}});
    let (code, v) = s
        .apply(&format!("{pods}/p/status"), "fieldManager=kubelet", status)
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"]["containers"][0]["image"], "busybox",
        "status writes keep the spec"
    );
    assert_eq!(v["status"]["conditions"][0]["type"], "Ready");
    let e: Vec<_> = entries(&v);
    assert!(
        e.contains(&("kubelet".into(), "Apply".into(), "status".into())),
        "{e:?}"
    );
    let m = Managed::decode(v.pointer("/metadata/managedFields")).unwrap();
    let kubelet = m.0.iter().find(|e| e.manager == "kubelet").unwrap();
    assert_eq!(
        kubelet.set.to_fields_v1(),
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
    );
    // A status update by a controller is recorded with the subresource.
    let mut cur = s.get(&format!("{pods}/p")).await;
    cur["status"]["phase"] = json!("Running");
    let (code, v) = s
        .call(
            "PUT",
            &format!("{pods}/p/status?fieldManager=kbatch-executor"),
            "application/json",
            cur,
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert!(entries(&v).contains(&("kbatch-executor".into(), "Update".into(), "status".into())));
    assert_eq!(owners(&v, &["status", "phase"]), ["kbatch-executor"]);
    // Apply to a missing object's status is a 404.
    let (code, _) = s
        .apply(
            &format!("{pods}/nope/status"),
            "fieldManager=k",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nope"}}),
        )
        .await;
    assert_eq!(code, 404);
}

/// An update records only what it could change: a status update that also sends a new spec
/// owns no spec field (the spec is kept), a main update that sends a new status owns no status
/// field (upstream's reset fields).
#[tokio::test]
async fn updates_own_nothing_their_strategy_resets() {
    let (s, _) = server_with_pod().await;
    let pods = PODS;

    let mut cur = s.get(&format!("{pods}/p")).await;
    cur["status"]["phase"] = json!("Running");
    cur["spec"]["activeDeadlineSeconds"] = json!(30);
    let (code, v) = s
        .call(
            "PUT",
            &format!("{pods}/p/status?fieldManager=node"),
            "application/json",
            cur,
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert!(v["spec"].get("activeDeadlineSeconds").is_none(), "{v}");
    let m = Managed::decode(v.pointer("/metadata/managedFields")).unwrap();
    let node = m.0.iter().find(|e| e.manager == "node").unwrap();
    assert_eq!(
        node.set.to_fields_v1(),
        json!({"f:status": {"f:phase": {}}})
    );

    let mut cur = s.get(&format!("{pods}/p")).await;
    cur["status"]["phase"] = json!("Failed");
    cur["metadata"]["labels"] = json!({"a": "b"});
    let (code, v) = s
        .call(
            "PUT",
            &format!("{pods}/p?fieldManager=labeller"),
            "application/json",
            cur,
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"]["phase"], "Running", "{v}");
    let m = Managed::decode(v.pointer("/metadata/managedFields")).unwrap();
    let labeller = m.0.iter().find(|e| e.manager == "labeller").unwrap();
    assert_eq!(
        labeller.set.to_fields_v1(),
        json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
    );
    assert_eq!(owners(&v, &["status", "phase"]), ["node"]);
}

#[tokio::test]
async fn managed_fields_reset_and_requests_that_are_refused() {
    let s = server().await;
    let path = format!("{JOBS}/pi");
    let (code, _) = s
        .apply(&path, "fieldManager=kubectl", job(json!({}), None))
        .await;
    assert_eq!(code, 201);
    // managedFields: [] resets them.
    let (code, v) = s
        .call(
            "PATCH",
            &path,
            "application/merge-patch+json",
            json!({"metadata": {"managedFields": []}}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert!(v["metadata"].get("managedFields").is_none(), "{v}");

    let (code, v) = s.apply(&path, "", job(json!({}), None)).await;
    assert_eq!(code, 422);
    assert_eq!(
        v["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let (code, v) = s
        .call(
            "PATCH",
            &format!("{path}?force=true"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        v["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    let (code, _) = s
        .apply(&path, "fieldManager=k&force=maybe", job(json!({}), None))
        .await;
    assert_eq!(code, 400);
    let mut wrong = job(json!({}), None);
    wrong["apiVersion"] = json!("batch/v2");
    let (code, v) = s.apply(&path, "fieldManager=k", wrong).await;
    assert_eq!(code, 400);
    assert_eq!(
        v["message"],
        "Incorrect version specified in apply patch. Specified patch version: batch/v2, expected: batch/v1"
    );
    let (code, v) = s
        .apply(
            &path,
            "fieldManager=k",
            Value::String("spec: [unclosed".into()),
        )
        .await;
    assert_eq!(code, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("error decoding YAML: ")
    );
    let mut with_mf = job(json!({}), None);
    with_mf["metadata"]["managedFields"] = json!([]);
    let (code, v) = s.apply(&path, "fieldManager=k", with_mf).await;
    assert_eq!(
        (code, v["message"].as_str()),
        (400, Some("metadata.managedFields must be nil"))
    );
    // With no managedFields left, the existing fields belong to "before-first-apply".
    let mut changed = job(json!({}), None);
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
    let (code, v) = s
        .apply(&path, "fieldManager=kubectl", changed.clone())
        .await;
    assert_eq!(code, 409, "{v}");
    assert_eq!(
        v["message"],
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using batch/v1: .spec.template.spec.containers[name=\"pi\"].image"
    );
    // Immutable fields stay immutable through apply.
    let (code, v) = s
        .apply(&path, "fieldManager=kubectl&force=true", changed)
        .await;
    assert_eq!(code, 422, "{v}");
    // Dry run creates nothing.
    let (code, _) = s
        .apply(&format!("{JOBS}/dry"), "fieldManager=k&dryRun=All", {
            let mut j = job(json!({}), None);
            j["metadata"]["name"] = json!("dry");
            j
        })
        .await;
    assert_eq!(code, 201);
    let (code, _) = s
        .call(
            "GET",
            &format!("{JOBS}/dry"),
            "",
            Value::String(String::new()),
        )
        .await;
    assert_eq!(code, 404);
    // YAML bodies are accepted; a name that differs from the URL is not.
    let yaml = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: other\n";
    let (code, v) = s
        .apply(
            &format!("{JOBS}/y"),
            "fieldManager=k",
            Value::String(yaml.into()),
        )
        .await;
    assert_eq!(code, 400, "{v}");
}

#[test]
fn update_entries_are_capped_into_ancient_changes() {
    let target = Target::new("Job", "batch/v1", Part::Main);
    let mut live = json!({"metadata": {"name": "pi", "labels": {}}});
    for i in 0..12 {
        let mut new = live.clone();
        new["metadata"]["labels"][format!("l{i}")] = json!("v");
        track_update(
            &target,
            &live,
            &mut new,
            &format!("m{i:02}"),
            &format!("2024-01-01T00:00:{i:02}Z"),
        );
        live = new;
    }
    let m = Managed::decode(live.pointer("/metadata/managedFields")).unwrap();
    let names: Vec<&str> = m.0.iter().map(|e| e.manager.as_str()).collect();
    assert_eq!(m.0.len(), 10, "{names:?}");
    // m00 was kept as the version's first entry and renamed when m01 joined it; m02 too.
    let ancient = m.0.iter().find(|e| e.manager == "ancient-changes").unwrap();
    for l in ["l0", "l1", "l2"] {
        assert!(
            ancient
                .set
                .has(&[field("metadata"), field("labels"), field(l)]),
            "{l}"
        );
    }
    assert_eq!(ancient.time.as_deref(), Some("2024-01-01T00:00:02Z"));
    assert!(!names.contains(&"m00") && !names.contains(&"m02") && names.contains(&"m03"));
}

#[tokio::test]
async fn kubectl_takes_over_from_client_side_apply() {
    let s = server().await;
    let path = format!("{JOBS}/pi");
    // What `kubectl apply -f` (client-side) leaves: its annotation and its manager.
    let applied = job(json!({}), Some(10));
    let mut created = applied.clone();
    created["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()});
    let (code, _) = s
        .call(
            "POST",
            &format!("{JOBS}?fieldManager=kubectl-client-side-apply"),
            "application/json",
            created,
        )
        .await;
    assert_eq!(code, 201);
    // Another applier conflicts with the client-side applier.
    let (code, v) = s
        .apply(&path, "fieldManager=other", job(json!({}), Some(20)))
        .await;
    assert_eq!(code, 409, "{v}");
    assert_eq!(
        v["details"]["causes"][0]["message"],
        "conflict with \"kubectl-client-side-apply\" using batch/v1"
    );
    // kubectl may take what its last-applied annotation set, and keeps the annotation current.
    let (code, v) = s
        .apply(&path, "fieldManager=kubectl", job(json!({}), Some(20)))
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"]["activeDeadlineSeconds"], 20);
    assert_eq!(owners(&v, &["spec", "activeDeadlineSeconds"]), ["kubectl"]);
    let annotation =
        v["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap();
    let expected = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"labels": {}, "name": "pi", "namespace": "default"},
        "spec": {"activeDeadlineSeconds": 20, "template": {"spec": {
            "containers": [{"command": ["true"], "image": "perl", "name": "pi"}],
            "restartPolicy": "Never"}}}});
    assert_eq!(annotation, expected.to_string());
    // A field someone else changed since is still a conflict.
    let (code, _) = s
        .call(
            "PATCH",
            &format!("{path}?fieldManager=edit"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"e": "1"}}}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, v) = s
        .apply(
            &path,
            "fieldManager=kubectl",
            job(json!({"e": "2"}), Some(20)),
        )
        .await;
    assert_eq!(code, 409, "{v}");
}

#[test]
fn deep_bodies_are_refused_not_overflowed() {
    let deep = format!("{{\"a\": {}1{}}}", "[".repeat(5000), "]".repeat(5000));
    let t = Target::new("Job", "batch/v1", Part::Main);
    match decode_config(deep.as_bytes()) {
        Err(e) => assert_eq!(e.code, 400),
        Ok(config) => {
            let e = apply(&t, None, &config, "m", false, "2024-01-01T00:00:00Z").unwrap_err();
            assert!(e.code >= 400);
        }
    }
    let deep_map = format!("{}1{}", "{\"a\": ".repeat(5000), "}".repeat(5000));
    if let Ok(config) = decode_config(deep_map.as_bytes()) {
        assert!(apply(&t, None, &config, "m", false, "2024-01-01T00:00:00Z").is_err());
    }
}

#[test]
fn merge_keeps_live_duplicates_the_config_does_not_name() {
    let s = Schema::for_kind("Pod");
    let live = json!({"spec": {"containers": [{"name": "c", "env": [
        {"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "B", "value": "3"}]}]}});
    let config =
        json!({"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "4"}]}]}});
    let m = merge(Some(&live), &config, &s);
    assert_eq!(
        m["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "B", "value": "4"}])
    );
}

#[tokio::test]
async fn events_apply_in_both_views() {
    let s = server().await;
    let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "default"},
        "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "me", "reportingInstance": "me-1",
        "action": "Did", "reason": "Because", "type": "Normal", "note": "first",
        "regarding": {"kind": "Job", "name": "pi", "namespace": "default"}});
    let path = "/apis/events.k8s.io/v1/namespaces/default/events/e1";
    let (code, v) = s.apply(path, "fieldManager=recorder", ev.clone()).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["note"], "first");
    let mut again = ev;
    again["note"] = json!("second");
    let (code, v) = s.apply(path, "fieldManager=recorder", again).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["note"], "second");
    let core = s.get("/api/v1/namespaces/default/events/e1").await;
    assert_eq!(core["message"], "second");
    assert_eq!(core["involvedObject"]["name"], "pi");
}

#[test]
fn a_field_child_is_found_by_name_as_by_its_path_element() {
    use super::fieldset::{FieldSet, PathElement};
    let field = |f: &str| PathElement::Field(f.to_string());
    let mut set = FieldSet::new();
    set.insert(&[field("apiVersion")]);
    set.insert(&[field("spec"), field("x")]);
    set.insert(&[field("status")]);
    set.insert(&[PathElement::Key(vec![("name".into(), json!("c"))])]);
    set.insert(&[PathElement::Index(0)]);
    for name in ["apiVersion", "spec", "status", "b", "zzz", "metadata", ""] {
        assert_eq!(
            set.child_field(name),
            set.child(&field(name)),
            "field {name:?}"
        );
    }
    assert_eq!(set.child_field("spec").map(|(m, _)| m), Some(false));
    assert_eq!(set.child_field("status").map(|(m, _)| m), Some(true));
    assert!(FieldSet::new().child_field("spec").is_none());
}
