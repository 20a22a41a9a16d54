//! The NamespaceLifecycle admission on create, as kube-apiserver runs it first of all plugins:
//! a missing namespace is NotFound before the object is validated, and a terminating one
//! refuses new content with the `NamespaceTerminating` cause controllers look for.

use crate::common;

use axum::body::Body;
use axum::http::StatusCode;
use kbatch_apiserver::router;
use serde_json::{Value, json};

async fn post(app: &axum::Router, uri: &str, body: Value) -> common::Reply {
    let req = common::kubectl_request("POST", uri, "application/json")
        .header("content-type", "application/json");
    common::send(app, req, Body::from(body.to_string())).await
}

#[tokio::test]
async fn namespaces_are_checked_before_validation_and_refuse_while_terminating() {
    let (state, _dir) = common::state();
    state.bootstrap().await.expect("bootstrap");
    let app = router(state);

    // An invalid Job in a missing namespace: the namespace is reported, not the Job.
    let bad_job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": []}}}});
    let r = post(&app, "/apis/batch/v1/namespaces/nowhere/jobs", bad_job).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(r.body["message"], "namespaces \"nowhere\" not found");

    // A namespace held by a finalizer stays terminating after its deletion.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "going", "finalizers": ["example.com/hold"]}});
    let r = post(&app, "/api/v1/namespaces", ns).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let req = common::kubectl_request("DELETE", "/api/v1/namespaces/going", "application/json");
    let r = common::send(&app, req, Body::empty()).await;
    assert!(r.status.is_success(), "{}", r.body);

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "c-"}});
    let r = post(&app, "/api/v1/namespaces/going/configmaps", cm).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"c-\" is forbidden: unable to create new content in namespace going because it is being terminated",
            "reason": "Forbidden",
            "details": {"name": "c-", "kind": "configmaps", "causes": [{"reason": "NamespaceTerminating",
                "message": "namespace going is being terminated", "field": "metadata.namespace"}]},
            "code": 403})
    );
}
