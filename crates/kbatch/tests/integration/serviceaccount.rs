//! ServiceAccounts against a real `kbatch up`: the core/v1 resource (`kubectl create sa`, its
//! table), the service account controller (every namespace's `default`, made again when
//! deleted) and the ServiceAccount admission of new pods (the default account, a missing one
//! refused in upstream's words, pull secrets from the account), down to a Job whose pods name
//! an account that does not exist yet.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::time::Duration;

use common::{Server, eventually, raw, send_json};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn pod(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox"}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        s.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn accounts_the_controller_keeps_and_pod_admission() {
    let server = Server::start().await;
    let client = server.client().await;

    // Every namespace gets its default account, the ones made at start and new ones.
    let (code, out, err) = server.kubectl(&["create", "namespace", "team"]);
    assert_eq!(code, 0, "{out}{err}");
    let team: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    let first = eventually(
        Duration::from_secs(10),
        "team's default account",
        || async { team.get_opt("default").await.ok().flatten() },
    )
    .await;
    // Deleted, it is made again (a new object).
    team.delete("default", &DeleteParams::default())
        .await
        .expect("delete the default account");
    eventually(
        Duration::from_secs(10),
        "the account made again",
        || async {
            team.get_opt("default")
                .await
                .ok()
                .flatten()
                .filter(|sa| sa.metadata.uid != first.metadata.uid)
        },
    )
    .await;

    // kubectl's create and table.
    let (code, out, err) = server.kubectl(&["create", "serviceaccount", "builder"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "serviceaccount/builder created");
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "puller"},
        "secrets": [{"name": "s1", "namespace": "default", "uid": "x"}],
        "imagePullSecrets": [{"name": "registry"}]});
    let created = send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        &sa,
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    // A listed secret is kept by name only.
    assert_eq!(created.json()["secrets"], json!([{"name": "s1"}]));
    let (code, out, err) = server.kubectl(&["get", "sa"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "SECRETS", "AGE"]);
    let names: Vec<(&str, &str)> = rows[1..].iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        names,
        [("builder", "0"), ("default", "0"), ("puller", "1")],
        "{out}"
    );
    let bad = send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "Bad_Name"}}),
    )
    .await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(
        bad.json()["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("ServiceAccount \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"),
        "{}",
        bad.body
    );

    // A pod without an account runs as default; both spellings come back, and neither is in
    // the request's managedFields (admission set them).
    let r = send_json(&client, "POST", PODS, &pod("plain", json!({}))).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v = r.json();
    assert_eq!(v["spec"]["serviceAccountName"], "default");
    assert_eq!(v["spec"]["serviceAccount"], "default");
    let fields = v["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].clone();
    assert!(fields.get("f:restartPolicy").is_some(), "{fields}");
    assert!(fields.get("f:serviceAccountName").is_none(), "{fields}");
    assert!(fields.get("f:serviceAccount").is_none(), "{fields}");

    // The deprecated spelling alone names the account; the pull secrets come from it.
    let r = send_json(
        &client,
        "POST",
        PODS,
        &pod("old-spelling", json!({"serviceAccount": "puller"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v = r.json();
    assert_eq!(v["spec"]["serviceAccountName"], "puller");
    assert_eq!(v["spec"]["serviceAccount"], "puller");
    assert_eq!(v["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));
    // A pod's own pull secrets stay.
    let r = send_json(
        &client,
        "POST",
        PODS,
        &pod(
            "own-secrets",
            json!({"serviceAccountName": "puller", "imagePullSecrets": [{"name": "mine"}]}),
        ),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["spec"]["imagePullSecrets"],
        json!([{"name": "mine"}])
    );

    // A missing account: Forbidden, named by generateName when there is no name yet.
    let mut ghost = pod("", json!({"serviceAccountName": "ghost"}));
    ghost["metadata"] = json!({"generateName": "g-"});
    let r = send_json(&client, "POST", PODS, &ghost).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods \"g-\" is forbidden: error looking up service account default/ghost: serviceaccount \"ghost\" not found",
            "reason": "Forbidden", "details": {"name": "g-", "kind": "pods"}, "code": 403})
    );
    // A missing namespace is reported as such, before any account is looked up.
    let r = send_json(
        &client,
        "POST",
        "/api/v1/namespaces/nowhere/pods",
        &pod("p", json!({})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["message"], "namespaces \"nowhere\" not found");

    // An account that enforces its mountable secrets.
    let strict = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "strict",
            "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"}},
        "secrets": [{"name": "allowed"}]});
    let r = send_json(
        &client,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        &strict,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let with_volume = |secret: &str| {
        pod(
            &format!("vol-{secret}"),
            json!({"serviceAccountName": "strict",
                "volumes": [{"name": "v", "secret": {"secretName": secret}}]}),
        )
    };
    let r = send_json(&client, "POST", PODS, &with_volume("allowed")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = send_json(&client, "POST", PODS, &with_volume("other")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "pods \"vol-other\" is forbidden: volume with secret.secretName=\"other\" is not allowed because service account strict does not reference that secret"
    );

    // kubectl shows the account.
    let got = raw(&client, "GET", &format!("{PODS}/plain"), None, Vec::new())
        .await
        .json();
    assert_eq!(got["spec"]["serviceAccountName"], "default");
}

/// A Job whose pods name an account that does not exist cannot create them (FailedCreate, in
/// upstream's words); once the account is created, the Job runs.
#[tokio::test]
async fn a_job_waits_for_its_service_account() {
    let server = Server::start_with(&[
        "--executor",
        "simulate",
        "--controllers",
        "job,serviceaccount",
        "--pod-failure-backoff",
        "100ms",
    ])
    .await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job = serde_json::from_value(json!({
        "metadata": {"name": "needs-sa"},
        "spec": {"template": {"spec": {"serviceAccountName": "runner",
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("job");
    let created = jobs
        .create(&PostParams::default(), &job)
        .await
        .expect("create job");
    // The template keeps both spellings, as a cluster returns it.
    let template = created
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("template spec");
    assert_eq!(template.service_account.as_deref(), Some("runner"));
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let failed = eventually(Duration::from_secs(20), "a FailedCreate event", || async {
        events
            .list(&ListParams::default().fields("involvedObject.name=needs-sa"))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedCreate"))
    })
    .await;
    assert_eq!(
        failed.message.as_deref(),
        Some(
            "Error creating: pods \"needs-sa-\" is forbidden: error looking up service account default/runner: serviceaccount \"runner\" not found"
        )
    );
    let (code, out, err) = server.kubectl(&["create", "serviceaccount", "runner"]);
    assert_eq!(code, 0, "{out}{err}");
    let done = common::wait_job_complete(&jobs, "needs-sa", Duration::from_secs(60)).await;
    assert_eq!(done.status.and_then(|s| s.succeeded), Some(1));
}
