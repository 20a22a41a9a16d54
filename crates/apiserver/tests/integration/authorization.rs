//! The authorization.k8s.io/v1 access reviews through the router, in process: kbatch allows
//! every request (upstream's AlwaysAllow), and the reviews say so with upstream's validation,
//! status codes and response shapes; discovery lists them.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use serde_json::{Value, json};

use common::{Reply, server};

const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SSRR: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

async fn send(app: &Router, method: &str, uri: &str, accept: &str, body: Option<&Value>) -> Reply {
    let mut req = common::kubectl_request(method, uri, accept);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    common::send(app, req, body).await
}

async fn post(app: &Router, uri: &str, body: Value) -> Reply {
    send(app, "POST", uri, "application/json", Some(&body)).await
}

fn ssar(spec: Value) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec})
}

#[tokio::test]
async fn self_subject_access_reviews_are_allowed() {
    let (app, _dir) = server();
    let r = post(
        &app,
        SSAR,
        ssar(json!({"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // AlwaysAllow: allowed, no reason, nothing denied, no evaluation error.
    assert_eq!(r.body["status"], json!({"allowed": true}));
    assert_eq!(r.body["kind"], "SelfSubjectAccessReview");
    assert_eq!(r.body["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(
        r.body["spec"],
        json!({"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}})
    );
    // Recorded as any create is, the time aside.
    let meta = &r.body["metadata"];
    assert_eq!(meta["creationTimestamp"], Value::Null);
    let managed = &meta["managedFields"][0];
    assert_eq!(managed["manager"], "kubectl");
    assert_eq!(managed["operation"], "Update");
    assert_eq!(managed["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(
        managed["fieldsV1"],
        json!({"f:spec": {"f:resourceAttributes": {".": {}, "f:namespace": {}, "f:resource": {}, "f:verb": {}}}})
    );

    // An empty optional field is dropped, as Go's encoding of the review drops it.
    let r = post(
        &app,
        SSAR,
        ssar(
            json!({"resourceAttributes": {"verb": "list", "group": "", "resource": "pods",
                                           "subresource": ""}}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["status"], json!({"allowed": true}));
    assert_eq!(
        r.body["spec"],
        json!({"resourceAttributes": {"verb": "list", "resource": "pods"}})
    );

    let r = post(
        &app,
        SSAR,
        ssar(json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["status"], json!({"allowed": true}));

    // Nothing is stored: there is nothing to read back.
    for method in ["GET", "DELETE"] {
        let r = send(&app, method, SSAR, "application/json", None).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(r.body["reason"], "MethodNotAllowed");
    }
    let r = send(&app, "GET", &format!("{SSAR}/x"), "application/json", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn access_reviews_need_exactly_one_kind_of_attributes() {
    let (app, _dir) = server();
    let neither = post(&app, SSAR, ssar(json!({}))).await;
    assert_eq!(neither.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        neither.body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            // Upstream names the decoded internal object's kind, which is empty.
            "message": ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            "reason": "Invalid",
            "details": {"group": "authorization.k8s.io", "causes": [{
                "reason": "FieldValueInvalid",
                "message": "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                "field": "spec.resourceAttributes",
            }]},
            "code": 422,
        })
    );
    let both = post(
        &app,
        SSAR,
        ssar(json!({
            "resourceAttributes": {"verb": "get", "resource": "pods"},
            "nonResourceAttributes": {"path": "/healthz", "verb": "get"},
        })),
    )
    .await;
    assert_eq!(both.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        both.body["details"]["causes"],
        json!([{
            "reason": "FieldValueInvalid",
            "message": "Invalid value: {\"Path\":\"/healthz\",\"Verb\":\"get\"}: cannot be specified in combination with resourceAttributes",
            "field": "spec.nonResourceAttributes",
        }])
    );

    // The metadata must be empty (managedFields aside, which the server sets).
    let mut named = ssar(json!({"resourceAttributes": {"verb": "get", "resource": "pods"}}));
    named["metadata"] = json!({"name": "mine"});
    let r = post(&app, SSAR, named).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let cause = &r.body["details"]["causes"][0];
    assert_eq!(cause["field"], "metadata");
    let message = cause["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(r#"Invalid value: {"name":"mine","creationTimestamp":null,"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"authorization.k8s.io/v1","time":"#)
            && message.ends_with("}]}: must be empty"),
        "{message}"
    );
}

#[tokio::test]
async fn requests_are_decoded_as_any_create() {
    let (app, _dir) = server();
    // Unknown fields: a warning by default, refused when strict.
    let body =
        ssar(json!({"resourceAttributes": {"verb": "get", "resource": "pods", "colour": "red"}}));
    let r = post(&app, SSAR, body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        r.warnings,
        [r#"299 - "unknown field \"spec.resourceAttributes.colour\"""#]
    );
    assert!(r.body["spec"]["resourceAttributes"].get("colour").is_none());
    let r = post(&app, &format!("{SSAR}?fieldValidation=Strict"), body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        r#"SelfSubjectAccessReview in version "v1" cannot be handled as a SelfSubjectAccessReview: strict decoding error: unknown field "spec.resourceAttributes.colour""#
    );
    // The body must be of the endpoint's kind.
    let mut wrong = ssar(json!({"resourceAttributes": {}}));
    wrong["kind"] = json!("SubjectAccessReview");
    let r = post(&app, SSAR, wrong).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["message"],
        "the kind in the data (SubjectAccessReview) does not match the expected kind (SelfSubjectAccessReview)"
    );
    // A selector the authorizer cannot read is noted; the answer stands.
    let r = post(
        &app,
        SSAR,
        ssar(
            json!({"resourceAttributes": {"verb": "list", "resource": "pods",
            "fieldSelector": {"rawSelector": "spec.nodeName"}}}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body["status"],
        json!({"allowed": true, "evaluationError": "spec.resourceAttributes.fieldSelector ignored due to parse error"})
    );
}

#[tokio::test]
async fn self_subject_rules_reviews_allow_everything() {
    let (app, _dir) = server();
    let r = post(
        &app,
        SSRR,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "metadata": {"name": "ignored"}, "spec": {"namespace": "default"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // A new review, as upstream returns: the request's metadata and spec are not echoed.
    assert_eq!(
        r.body,
        json!({
            "kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null}, "spec": {},
            "status": {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": false,
            },
        })
    );
    let r = post(
        &app,
        SSRR,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["message"], "no namespace on request");
}

#[tokio::test]
async fn subject_access_reviews_name_a_subject() {
    let (app, _dir) = server();
    let sar = |spec: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
    let r = post(
        &app,
        SAR,
        sar(
            json!({"user": "jane", "groups": ["dev"], "extra": {"scopes": ["a", "b"]},
            "resourceAttributes": {"verb": "delete", "resource": "jobs", "group": "batch"}}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["status"], json!({"allowed": true}));
    assert_eq!(r.body["spec"]["extra"], json!({"scopes": ["a", "b"]}));

    let r = post(
        &app,
        SAR,
        sar(json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.body["message"],
        r#".authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or group must be specified"#
    );

    // The local review is the namespace's: its own namespace is the URL's.
    let local = |ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
            "spec": {"user": "jane", "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "pods"}}})
    };
    let url = "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews";
    let r = post(&app, url, local("team")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["metadata"]["namespace"], "team");
    assert_eq!(r.body["status"], json!({"allowed": true}));
    let r = post(&app, url, local("other")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.body["details"]["causes"][0]["field"],
        "spec.resourceAttributes.namespace"
    );
    let r = post(
        &app,
        "/apis/authorization.k8s.io/v1/localsubjectaccessreviews",
        local("team"),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn discovery_lists_the_reviews() {
    let (app, _dir) = server();
    let groups = send(&app, "GET", "/apis", "application/json", None).await;
    let names: Vec<&str> = groups.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(names.contains(&"authorization.k8s.io"), "{names:?}");

    let group = send(
        &app,
        "GET",
        "/apis/authorization.k8s.io",
        "application/json",
        None,
    )
    .await;
    assert_eq!(group.body["kind"], "APIGroup");
    assert_eq!(
        group.body["preferredVersion"],
        json!({"groupVersion": "authorization.k8s.io/v1", "version": "v1"})
    );

    let list = send(
        &app,
        "GET",
        "/apis/authorization.k8s.io/v1",
        "application/json",
        None,
    )
    .await;
    assert_eq!(list.status, StatusCode::OK);
    let resources = list.body["resources"].as_array().expect("resources");
    let ssar = resources
        .iter()
        .find(|r| r["name"] == "selfsubjectaccessreviews")
        .expect("selfsubjectaccessreviews listed");
    assert_eq!(
        *ssar,
        json!({"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview",
            "namespaced": false, "kind": "SelfSubjectAccessReview", "verbs": ["create"]})
    );
    assert!(
        resources
            .iter()
            .any(|r| r["name"] == "selfsubjectrulesreviews" && r["verbs"] == json!(["create"]))
    );

    let aggregated = send(
        &app,
        "GET",
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        None,
    )
    .await;
    let group = aggregated.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["metadata"]["name"] == "authorization.k8s.io")
        .expect("authorization.k8s.io in aggregated discovery");
    let rules = group["versions"][0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["resource"] == "selfsubjectrulesreviews")
        .expect("selfsubjectrulesreviews listed");
    assert_eq!(rules["scope"], "Cluster");
    assert_eq!(rules["verbs"], json!(["create"]));
    assert_eq!(rules["responseKind"]["kind"], "SelfSubjectRulesReview");
}
