//! Objects come back as kube-apiserver encodes its Go structs: an `omitempty` field holding its
//! zero value is neither stored nor returned (from a create, a patch, a status update, a
//! dry run or a read), while pointers and fields without `omitempty` keep their zeros.

use crate::common;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::Request;
use kbatch_apiserver::router;
use serde_json::{Value, json};
use tower::ServiceExt;

const PODS: &str = "/api/v1/namespaces/default/pods";
const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";

async fn server() -> (Router, tempfile::TempDir) {
    let (state, dir) = common::state();
    state.bootstrap().await.expect("bootstrap");
    let app = router(state);
    common::default_accounts(&app, &["default"]).await;
    (app, dir)
}

async fn call(app: &Router, method: &str, uri: &str, content_type: &str, body: Value) -> Value {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(Body::from(body.to_string()))
        .expect("a valid request");
    let resp = app.clone().oneshot(req).await.expect("the router answers");
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a response body");
    let v: Value = serde_json::from_slice(&bytes).expect("a JSON response");
    assert!(status.is_success(), "{method} {uri}: {status}: {v}");
    v
}

async fn get(app: &Router, uri: &str) -> Value {
    let req = Request::builder()
        .uri(uri)
        .body(Body::empty())
        .expect("a valid request");
    let resp = app.clone().oneshot(req).await.expect("the router answers");
    let bytes = to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a response body");
    serde_json::from_slice(&bytes).expect("a JSON response")
}

#[tokio::test]
async fn a_pod_keeps_no_omitempty_zeros() {
    let (app, _dir) = server().await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {}, "annotations": {}, "finalizers": []},
        "spec": {"nodeSelector": {}, "volumes": [], "hostNetwork": false,
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "busybox", "command": ["true"], "args": [],
                     "workingDir": "", "env": [{"name": "A", "value": ""}],
                     "ports": [{"containerPort": 80, "hostPort": 0, "name": ""}]}]}
    });
    let dry = call(
        &app,
        "POST",
        &format!("{PODS}?dryRun=All"),
        "application/json",
        pod.clone(),
    )
    .await;
    let created = call(&app, "POST", PODS, "application/json", pod).await;
    for v in [&dry, &created, &get(&app, &format!("{PODS}/p")).await] {
        let meta = v["metadata"].as_object().expect("metadata");
        for gone in ["labels", "annotations", "finalizers"] {
            assert!(!meta.contains_key(gone), "{gone}: {v}");
        }
        let spec = v["spec"].as_object().expect("spec");
        for gone in ["nodeSelector", "volumes", "hostNetwork"] {
            assert!(!spec.contains_key(gone), "{gone}: {v}");
        }
        // A pointer keeps its zero.
        assert_eq!(spec["terminationGracePeriodSeconds"], 0);
        let c = &spec["containers"][0];
        assert!(
            c.get("args").is_none() && c.get("workingDir").is_none(),
            "{c}"
        );
        assert_eq!(c["env"], json!([{"name": "A"}]));
        assert_eq!(
            c["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}])
        );
    }

    // A status write: `restartCount` and `ready` have no omitempty, `started` is a pointer.
    let status = json!({"status": {"phase": "Running", "message": "", "containerStatuses": [
        {"name": "c", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
         "started": false, "state": {"running": {}}}]}});
    let v = call(
        &app,
        "PATCH",
        &format!("{PODS}/p/status"),
        "application/merge-patch+json",
        status,
    )
    .await;
    assert!(v["status"].get("message").is_none(), "{v}");
    assert_eq!(
        v["status"]["containerStatuses"][0],
        json!({"name": "c", "image": "busybox", "imageID": "", "ready": false,
               "restartCount": 0, "started": false, "state": {"running": {}}})
    );
}

#[tokio::test]
async fn a_job_status_has_no_zero_counts_that_go_would_omit() {
    let (app, _dir) = server().await;
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"parallelism": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}
    });
    let created = call(&app, "POST", JOBS, "application/json", job).await;
    assert_eq!(
        created["spec"]["parallelism"], 0,
        "a pointer keeps its zero"
    );
    let mut with_status = created.clone();
    with_status["status"] = json!({"active": 0, "succeeded": 1, "failed": 0, "ready": 0,
        "terminating": 0, "uncountedTerminatedPods": {"succeeded": [], "failed": []}});
    let v = call(
        &app,
        "PUT",
        &format!("{JOBS}/j/status"),
        "application/json",
        with_status,
    )
    .await;
    assert_eq!(
        v["status"],
        json!({"succeeded": 1, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}})
    );
}
