//! The authentication.k8s.io/v1 reviews through the router, in process: SelfSubjectReview
//! answers who the requester is (the insecure port's user on plain HTTP, the token's admin
//! when a bearer token is required), TokenReview whose a token is; both with upstream's
//! checks, status codes and response shapes, JSON or protobuf bodies; discovery lists them.

use crate::common;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use base64::Engine;
use kbatch_apiserver::router;
use serde_json::{Value, json};
use tower::ServiceExt;

use common::Reply;

const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const TR: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const TOKEN: &str = "s3cret-token";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A server that, with `token`, requires that bearer token as `kbatch up` does over HTTPS.
fn server(token: Option<&str>) -> (Router, tempfile::TempDir) {
    let (state, dir) = common::state();
    if let Some(t) = token {
        state.require_bearer_token(t.to_string());
    }
    (router(state), dir)
}

/// One request: `body` sent as `content_type`, with `token` as its bearer token.
async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<(&str, Vec<u8>)>,
) -> Reply {
    let mut req = common::kubectl_request(method, uri, "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some((content_type, bytes)) => {
            req = req.header("content-type", content_type);
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    common::send(app, req, body).await
}

async fn post(app: &Router, uri: &str, token: Option<&str>, body: Value) -> Reply {
    let bytes = body.to_string().into_bytes();
    send(app, "POST", uri, token, Some(("application/json", bytes))).await
}

fn ssr() -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
}

fn token_review(spec: Value) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
}

/// The body kubectl 1.32 sent for `kubectl auth whoami` (a SelfSubjectReview of zero values).
const WHOAMI_PROTOBUF: &str = "azhzAAotChhhdXRoZW50aWNhdGlvbi5rOHMuaW8vdjESEVNlbGZTdWJqZWN0UmV2aWV3EhoKEAoAEgAaACIAKgAyADgAQgASBgoECgASABoAIgA=";

fn field(num: u32, bytes: &[u8]) -> Vec<u8> {
    common::pb_field(num, bytes)
}

/// `k8s\0` and a runtime.Unknown holding `raw` as `apiVersion`/`kind`.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    let unknown = [
        field(1, &type_meta),
        field(2, raw),
        field(3, b""),
        field(4, b""),
    ]
    .concat();
    [b"k8s\0".to_vec(), unknown].concat()
}

fn is_rfc3339_seconds(s: &str) -> bool {
    // `2006-01-02T15:04:05Z`, as Go's metav1.Time writes it.
    s.len() == 20 && s.ends_with('Z') && s.as_bytes().get(10) == Some(&b'T')
}

#[tokio::test]
async fn self_subject_reviews_answer_with_the_insecure_port_user() {
    let (app, _dir) = server(None);
    let r = post(&app, SSR, None, ssr()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let created = r.body["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(is_rfc3339_seconds(&created), "{created}");
    // A new review: the time it was made and who asked, no uid (none given), no extra.
    assert_eq!(
        r.body,
        json!({
            "kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": created},
            "status": {"userInfo": {"username": "system:unsecured",
                "groups": ["system:masters", "system:authenticated"]}},
        })
    );
    assert!(r.warnings.is_empty());

    // What the request says is not echoed, but it must still be a SelfSubjectReview.
    let mut named = ssr();
    named["metadata"] = json!({"name": "me", "labels": {"a": "b"}});
    named["status"] = json!({"userInfo": {"username": "someone-else"}});
    let r = post(&app, SSR, None, named).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["status"]["userInfo"]["username"], "system:unsecured");
    assert!(r.body["metadata"].get("name").is_none());

    // kubectl's protobuf body.
    let body = base64::engine::general_purpose::STANDARD
        .decode(WHOAMI_PROTOBUF)
        .expect("base64");
    let r = send(&app, "POST", SSR, None, Some((PROTOBUF, body))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["status"]["userInfo"]["username"], "system:unsecured");

    // dryRun is accepted (nothing is written either way) and checked.
    let r = post(&app, &format!("{SSR}?dryRun=All"), None, ssr()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = post(&app, &format!("{SSR}?dryRun=Maybe"), None, ssr()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        r#"dryRun: Unsupported value: "Maybe": supported values: "All""#
    );
}

#[tokio::test]
async fn self_subject_review_requests_are_decoded_as_any_create() {
    let (app, _dir) = server(None);
    // Unknown fields: a warning by default, refused when strict.
    let mut body = ssr();
    body["spec"] = json!({"colour": "red"});
    let r = post(&app, SSR, None, body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.warnings, [r#"299 - "unknown field \"spec\"""#]);
    let r = post(&app, &format!("{SSR}?fieldValidation=Strict"), None, body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        r#"SelfSubjectReview in version "v1" cannot be handled as a SelfSubjectReview: strict decoding error: unknown field "spec""#
    );
    let r = post(&app, &format!("{SSR}?fieldValidation=Loose"), None, ssr()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // The body must be of the endpoint's kind and version.
    let mut wrong = ssr();
    wrong["kind"] = json!("TokenReview");
    let r = post(&app, SSR, None, wrong).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        "the kind in the data (TokenReview) does not match the expected kind (SelfSubjectReview)"
    );
    let mut wrong = ssr();
    wrong["apiVersion"] = json!("authentication.k8s.io/v1beta1");
    let r = post(&app, SSR, None, wrong).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        "the API version in the data (authentication.k8s.io/v1beta1) does not match the expected API version (authentication.k8s.io/v1)"
    );
    // A field manager must be a short printable name.
    let long = "m".repeat(200);
    let r = post(&app, &format!("{SSR}?fieldManager={long}"), None, ssr()).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
}

#[tokio::test]
async fn reviews_are_create_only() {
    let (app, _dir) = server(None);
    for uri in [SSR, TR] {
        for method in ["GET", "DELETE", "PUT", "PATCH"] {
            let r = send(&app, method, uri, None, None).await;
            assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
            assert_eq!(r.body["reason"], "MethodNotAllowed");
        }
        for path in [
            format!("{uri}/x"),
            uri.replace("/v1/", "/v1/watch/"),
            uri.replace("/v1/", "/v1/namespaces/default/"),
        ] {
            let r = send(&app, "GET", &path, None, None).await;
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
            assert_eq!(r.body["reason"], "NotFound");
        }
    }
    let r = send(
        &app,
        "GET",
        "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn with_a_bearer_token_its_holder_is_the_admin() {
    let (app, _dir) = server(Some(TOKEN));
    let r = post(&app, SSR, Some(TOKEN), ssr()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body["status"],
        json!({"userInfo": {"username": "kbatch-admin", "uid": "kbatch-admin",
            "groups": ["system:masters", "system:authenticated"]}})
    );
    // Anyone else is no one: upstream's 401 before any review.
    for token in [None, Some("not-the-token")] {
        let r = post(&app, SSR, token, ssr()).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(r.body["reason"], "Unauthorized");
    }
}

#[tokio::test]
async fn token_reviews_authenticate_the_instance_token() {
    let (app, _dir) = server(Some(TOKEN));
    let r = post(&app, TR, Some(TOKEN), token_review(json!({"token": TOKEN}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // The request, its status filled in: no audiences (the token is bound to none, and the
    // server has no API audiences), no error.
    assert_eq!(r.body["kind"], "TokenReview");
    assert_eq!(r.body["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(r.body["spec"], json!({"token": TOKEN}));
    assert_eq!(
        r.body["status"],
        json!({"authenticated": true, "user": {"username": "kbatch-admin", "uid": "kbatch-admin",
            "groups": ["system:masters", "system:authenticated"]}})
    );
    // Recorded as any create is.
    let meta = &r.body["metadata"];
    assert_eq!(meta["creationTimestamp"], Value::Null);
    let managed = &meta["managedFields"][0];
    assert_eq!(managed["manager"], "kubectl");
    assert_eq!(managed["operation"], "Update");
    assert_eq!(managed["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(managed["fieldsV1"], json!({"f:spec": {"f:token": {}}}));

    // A wrong token: not authenticated (false is omitted, as Go omits it), the bearer-token
    // authenticator's error, an empty user.
    for wrong in ["not-the-token", "s3cret-token-and-more", "s3cret"] {
        let r = post(&app, TR, Some(TOKEN), token_review(json!({"token": wrong}))).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(
            r.body["status"],
            json!({"user": {}, "error": "invalid bearer token"}),
            "{wrong}"
        );
    }
    // Read as a header's bearer token is read: trailing whitespace goes, and a second word
    // is not part of it; an empty word is no token at all (and no error).
    let r = post(
        &app,
        TR,
        Some(TOKEN),
        token_review(json!({"token": format!("{TOKEN} extra\n")})),
    )
    .await;
    assert_eq!(r.body["status"]["authenticated"], true, "{}", r.body);
    let r = post(
        &app,
        TR,
        Some(TOKEN),
        token_review(json!({"token": format!(" {TOKEN}")})),
    )
    .await;
    assert_eq!(r.body["status"], json!({"user": {}}));

    // Asked for an audience: the token is restricted to the server's API audiences, of which
    // there are none.
    let r = post(
        &app,
        TR,
        Some(TOKEN),
        token_review(json!({"token": TOKEN, "audiences": ["https://kubernetes.default.svc"]})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    assert_eq!(
        r.body["spec"]["audiences"],
        json!(["https://kubernetes.default.svc"])
    );
}

#[tokio::test]
async fn token_reviews_need_a_token() {
    let (app, _dir) = server(Some(TOKEN));
    for spec in [json!({}), json!({"token": ""}), json!({"audiences": ["a"]})] {
        let r = post(&app, TR, Some(TOKEN), token_review(spec.clone())).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{spec}");
        assert_eq!(
            r.body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "token is required for TokenReview in authentication",
                "reason": "BadRequest", "code": 400})
        );
    }
    let r = post(
        &app,
        TR,
        Some(TOKEN),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Strict field validation applies as to any create.
    let r = post(
        &app,
        &format!("{TR}?fieldValidation=Strict"),
        Some(TOKEN),
        token_review(json!({"token": "x", "tokn": "y"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        r#"TokenReview in version "v1" cannot be handled as a TokenReview: strict decoding error: unknown field "spec.tokn""#
    );
}

#[tokio::test]
async fn token_reviews_on_plain_http_authenticate_no_token() {
    // Without a bearer token configured, no token is anyone's.
    let (app, _dir) = server(None);
    let r = post(&app, TR, None, token_review(json!({"token": TOKEN}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
}

#[tokio::test]
async fn token_review_protobuf_bodies_decode() {
    let (app, _dir) = server(Some(TOKEN));
    let spec = [field(1, TOKEN.as_bytes()), field(2, b"aud")].concat();
    // ObjectMeta and status as Go writes their zero values: present, empty.
    let raw = [field(1, b""), field(2, &spec), field(3, &field(2, b""))].concat();
    let body = envelope("authentication.k8s.io/v1", "TokenReview", &raw);
    let r = send(&app, "POST", TR, Some(TOKEN), Some((PROTOBUF, body))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body["spec"],
        json!({"token": TOKEN, "audiences": ["aud"]})
    );
    assert_eq!(r.body["status"]["error"], "invalid bearer token");

    let spec = field(1, TOKEN.as_bytes());
    let raw = [field(1, b""), field(2, &spec)].concat();
    let body = envelope("authentication.k8s.io/v1", "TokenReview", &raw);
    let r = send(&app, "POST", TR, Some(TOKEN), Some((PROTOBUF, body))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["status"]["authenticated"], true);
}

#[tokio::test]
async fn discovery_lists_the_reviews() {
    let (app, _dir) = server(None);
    let groups = send(&app, "GET", "/apis", None, None).await;
    let names: Vec<&str> = groups.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    // Upstream lists authentication just before authorization.
    let at = names.iter().position(|n| *n == "authentication.k8s.io");
    assert!(
        at.is_some() && names.get(at.unwrap_or(0) + 1) == Some(&"authorization.k8s.io"),
        "{names:?}"
    );

    let group = send(&app, "GET", "/apis/authentication.k8s.io", None, None).await;
    assert_eq!(group.body["kind"], "APIGroup");
    assert_eq!(
        group.body["preferredVersion"],
        json!({"groupVersion": "authentication.k8s.io/v1", "version": "v1"})
    );

    let list = send(&app, "GET", "/apis/authentication.k8s.io/v1", None, None).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(
        list.body,
        json!({"kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": "authentication.k8s.io/v1", "resources": [
            {"name": "selfsubjectreviews", "singularName": "selfsubjectreview",
                "namespaced": false, "kind": "SelfSubjectReview", "verbs": ["create"]},
            {"name": "tokenreviews", "singularName": "tokenreview",
                "namespaced": false, "kind": "TokenReview", "verbs": ["create"]},
        ]})
    );

    let req = Request::builder()
        .uri("/apis")
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .body(Body::empty())
        .expect("a valid request");
    let resp = app.clone().oneshot(req).await.expect("the router answers");
    let bytes = to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    let aggregated: Value = serde_json::from_slice(&bytes).expect("JSON");
    let group = aggregated["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["metadata"]["name"] == "authentication.k8s.io")
        .expect("authentication.k8s.io in aggregated discovery");
    assert_eq!(group["versions"][0]["version"], "v1");
    assert_eq!(
        group["versions"][0]["resources"],
        json!([
            {"resource": "selfsubjectreviews",
                "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "SelfSubjectReview"},
                "scope": "Cluster", "singularResource": "selfsubjectreview", "verbs": ["create"]},
            {"resource": "tokenreviews",
                "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenReview"},
                "scope": "Cluster", "singularResource": "tokenreview", "verbs": ["create"]},
        ])
    );
}
