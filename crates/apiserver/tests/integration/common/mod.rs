//! The in-process harness of the router tests: a server over a throw-away store, and one
//! request answered as status, JSON body and warnings.
#![allow(dead_code)]

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::StatusCode;
use axum::http::request::Builder;
use kbatch_apiserver::{ServerState, router};
use kbatch_store::{Store, StoreOptions};
use serde_json::Value;
use tower::ServiceExt;

/// The server's state over a store in a temporary directory (kept as long as it is used).
pub fn state() -> (Arc<ServerState>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let opts = StoreOptions {
        durable: false,
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), opts).expect("the store opens");
    (ServerState::new(store, "127.0.0.1:0".into()), dir)
}

/// A router over a fresh state.
pub fn server() -> (Router, tempfile::TempDir) {
    let (st, dir) = state();
    (router(st), dir)
}

/// Creates the `default` ServiceAccount of each of `namespaces`, which the service account
/// controller would make (pods are refused without their account).
pub async fn default_accounts(app: &Router, namespaces: &[&str]) {
    for ns in namespaces {
        let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default"}});
        let req = axum::http::Request::builder()
            .method("POST")
            .uri(format!("/api/v1/namespaces/{ns}/serviceaccounts"))
            .header("content-type", "application/json");
        let r = send(app, req, Body::from(sa.to_string())).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub warnings: Vec<String>,
}

/// Sends `req` with `body`; the reply's body must be JSON.
pub async fn send(app: &Router, req: Builder, body: Body) -> Reply {
    let what = format!(
        "{} {}",
        req.method_ref().map(|m| m.to_string()).unwrap_or_default(),
        req.uri_ref().map(|u| u.to_string()).unwrap_or_default()
    );
    let resp = app
        .clone()
        .oneshot(req.body(body).expect("a valid request"))
        .await
        .expect("the router answers");
    let status = resp.status();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|h| h.to_str().ok().map(str::to_string))
        .collect();
    let bytes = to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a response body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&bytes)));
    Reply {
        status,
        body,
        warnings,
    }
}

/// A protobuf varint, for hand-built protobuf bodies.
pub fn varint(mut v: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A length-delimited protobuf field.
pub fn pb_field(num: u32, data: &[u8]) -> Vec<u8> {
    [
        varint(((num as usize) << 3) | 2),
        varint(data.len()),
        data.to_vec(),
    ]
    .concat()
}

/// A request as kubectl sends it (its User-Agent), accepting `accept`.
pub fn kubectl_request(method: &str, uri: &str, accept: &str) -> Builder {
    axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header(
            "user-agent",
            "kubectl/v1.37.0 (linux/amd64) kubernetes/abcdef0",
        )
        .header("accept", accept)
}
