//! 1.37's alpha probe fields through the server: with their feature gates off, as by
//! default, a created pod or Job template comes back without a grpc probe's `mode` or an
//! httpGet probe's `protocol`, as upstream drops them.

use crate::common;

use axum::body::Body;
use axum::http::Request;
use kbatch_apiserver::router;
use serde_json::{Value, json};

async fn create(app: &axum::Router, uri: &str, body: Value) -> Value {
    let req = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json");
    let reply = common::send(app, req, Body::from(body.to_string())).await;
    assert!(reply.status.is_success(), "POST {uri}: {}", reply.body);
    reply.body
}

fn probed_spec() -> Value {
    json!({
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox",
            "livenessProbe": {"grpc": {"port": 9090, "mode": "TLS"}},
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080, "protocol": "HTTP2"}}}]
    })
}

#[tokio::test]
async fn alpha_probe_fields_are_dropped_from_new_pods_and_templates() {
    let (state, _dir) = common::state();
    state.bootstrap().await.expect("bootstrap");
    let app = router(state);
    common::default_accounts(&app, &["default"]).await;

    let pod = create(
        &app,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": probed_spec()}),
    )
    .await;
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["livenessProbe"]["grpc"], json!({"port": 9090}), "{c}");
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/", "port": 8080, "scheme": "HTTP"}),
        "{c}"
    );

    let job = create(
        &app,
        "/apis/batch/v1/namespaces/default/jobs",
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"template": {"spec": probed_spec()}}}),
    )
    .await;
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["livenessProbe"]["grpc"], json!({"port": 9090}), "{c}");
    assert!(
        c["readinessProbe"]["httpGet"].get("protocol").is_none(),
        "{c}"
    );
}
