//! PodDisruptionBudgets against a real `kbatch up`: `kubectl create pdb` and its table, the
//! disruption controller's status over a Job's pods, evictions that take the budget's allowed
//! disruptions and are refused (429, upstream's words) once none is left, a budget allowing
//! again when the Job replaces the evicted pod, several budgets over one pod, and a
//! `maxUnavailable` budget over Job pods failing safe.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::time::Duration;

use common::{Server, eventually, raw, send_json};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

fn evict(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}})
}

async fn ready_pods(pods: &Api<Pod>, count: usize) -> Vec<String> {
    eventually(
        Duration::from_secs(30),
        "the Job's pods are ready",
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=guarded"))
                .await
                .ok()?;
            let ready: Vec<String> = list
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .filter_map(|p| p.metadata.name)
                .collect();
            (ready.len() == count).then_some(ready)
        },
    )
    .await
}

async fn budget_status(client: &kube::Client, name: &str, want: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(20), "the budget's status", || async {
        let v = raw(client, "GET", &format!("{PDBS}/{name}"), None, Vec::new())
            .await
            .json();
        want(&v["status"]).then_some(v)
    })
    .await
}

/// Job `guarded` of `pods` simulated pods labelled `app=guarded`, running for two minutes.
async fn guarded_job(client: &kube::Client, pods: u32) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job = serde_json::from_value(json!({
        "metadata": {"name": "guarded"},
        "spec": {"parallelism": pods, "completions": pods, "template": {
            "metadata": {"labels": {"app": "guarded"},
                "annotations": {"kbatch.dev/simulate-duration": "120s"}},
            "spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
}

#[tokio::test]
async fn evictions_take_the_budgets_allowed_disruptions() {
    let server = Server::start_with(&[
        "--executor",
        "simulate",
        "--controllers",
        "job,serviceaccount,disruption",
        // The evicted pod's replacement waits this long, so the budget stays spent meanwhile.
        "--pod-failure-backoff",
        "10s",
    ])
    .await;
    let client = server.client().await;
    guarded_job(&client, 3).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let first = ready_pods(&pods, 3).await;

    // kubectl's own create (protobuf) and table.
    let (code, out, err) = server.kubectl(&[
        "create",
        "pdb",
        "guard",
        "--selector=app=guarded",
        "--min-available=2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v = budget_status(&client, "guard", |s| s["disruptionsAllowed"] == 1).await;
    let status = &v["status"];
    assert_eq!(
        (
            status["currentHealthy"].as_i64(),
            status["desiredHealthy"].as_i64(),
            status["expectedPods"].as_i64(),
            status["observedGeneration"].as_i64()
        ),
        (Some(3), Some(2), Some(3), Some(1)),
        "{v}"
    );
    let c = &status["conditions"][0];
    assert_eq!(
        (
            c["type"].as_str(),
            c["status"].as_str(),
            c["reason"].as_str()
        ),
        (
            Some("DisruptionAllowed"),
            Some("True"),
            Some("SufficientPods")
        )
    );
    let (code, out, err) = server.kubectl(&["get", "pdb"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ]
    );
    assert_eq!(rows[1][..4], ["guard", "2", "N/A", "1"]);

    // One eviction takes the one allowed disruption.
    let r = send_json(
        &client,
        "POST",
        &format!("/api/v1/namespaces/default/pods/{}/eviction", first[0]),
        &evict(&first[0]),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v = raw(&client, "GET", &format!("{PDBS}/guard"), None, Vec::new())
        .await
        .json();
    assert_eq!(v["status"]["disruptionsAllowed"], 0, "{v}");
    assert_eq!(v["status"]["conditions"][0]["reason"], "InsufficientPods");

    // The next is refused, in upstream's words.
    // (kube's client would retry the 429 until the budget allows.)
    let no_retries = server.client_without_retries().await;
    let r = send_json(
        &no_retries,
        "POST",
        &format!("/api/v1/namespaces/default/pods/{}/eviction", first[1]),
        &evict(&first[1]),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.body);
    let body = r.json();
    assert_eq!(
        body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(body["reason"], "TooManyRequests");
    let cause = body["details"]["causes"][0]["message"]
        .as_str()
        .unwrap_or("");
    assert!(
        cause.starts_with("The disruption budget guard needs 2 healthy pods and has"),
        "{body}"
    );
    assert!(pods.get_opt(&first[1]).await.expect("get").is_some());

    // The Job replaces the evicted pod; with three ready pods again the budget allows one.
    ready_pods(&pods, 3).await;
    budget_status(&client, "guard", |s| s["disruptionsAllowed"] == 1).await;
    let r = send_json(
        &client,
        "POST",
        &format!("/api/v1/namespaces/default/pods/{}/eviction", first[1]),
        &evict(&first[1]),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);

    // Two budgets over the same pods: evictions are not supported.
    let second = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "second"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}});
    let r = send_json(&client, "POST", PDBS, &second).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = send_json(
        &no_retries,
        "POST",
        &format!("/api/v1/namespaces/default/pods/{}/eviction", first[2]),
        &evict(&first[2]),
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            "code": 500})
    );

    // maxUnavailable needs the pods' controllers' scale, which a Job does not have.
    let v = budget_status(&client, "second", |s| {
        s["conditions"][0]["reason"] == "SyncFailed"
    })
    .await;
    assert_eq!(v["status"]["disruptionsAllowed"], 0);
    assert_eq!(
        v["status"]["conditions"][0]["message"],
        "jobs.batch does not implement the scale subresource"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let failed = eventually(Duration::from_secs(10), "the budget's event", || async {
        events
            .list(&ListParams::default().fields("involvedObject.name=second"))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("CalculateExpectedPodCountFailed"))
    })
    .await;
    assert_eq!(
        failed.message.as_deref(),
        Some(
            "Failed to calculate the number of expected pods: jobs.batch does not implement the scale subresource"
        )
    );
}

#[tokio::test]
async fn budgets_are_validated_as_upstream() {
    let server = Server::start().await;
    let client = server.client().await;
    let bad = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "bad"},
        "spec": {"minAvailable": "120%", "selector": {}}});
    let r = send_json(&client, "POST", PDBS, &bad).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "PodDisruptionBudget.policy \"bad\" is invalid: spec.minAvailable: Invalid value: \"120%\": must not be greater than 100%"
    );
    // A spec update bumps the generation; the status is the controller's.
    let ok = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "ok"}, "spec": {"minAvailable": 1, "selector": {}},
        "status": {"disruptionsAllowed": 5}});
    let r = send_json(&client, "POST", PDBS, &ok).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let created = r.json();
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(
        created
            .get("status")
            .is_none_or(|s| s["disruptionsAllowed"] != 5),
        "{created}"
    );
    let r = raw(
        &client,
        "PATCH",
        &format!("{PDBS}/ok"),
        Some("application/merge-patch+json"),
        json!({"spec": {"minAvailable": 2}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["metadata"]["generation"], 2);
}

/// `kubectl drain` retries an eviction its budget refuses, until its timeout; the pods stay.
#[tokio::test]
async fn kubectl_drain_waits_for_the_budget() {
    let server = Server::start_with(&[
        "--executor",
        "simulate",
        "--controllers",
        "job,serviceaccount,disruption",
    ])
    .await;
    let client = server.client().await;
    guarded_job(&client, 2).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running = ready_pods(&pods, 2).await;
    let (code, out, err) = server.kubectl(&[
        "create",
        "pdb",
        "all-of-them",
        "--selector=app=guarded",
        "--min-available=2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    budget_status(&client, "all-of-them", |s| s["currentHealthy"] == 2).await;
    let (code, out, err) = server.kubectl(&[
        "drain",
        "kbatch-node",
        "--ignore-daemonsets",
        "--timeout=3s",
    ]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    for name in &running {
        let pod = pods.get(name).await.expect("the pod stays");
        assert!(pod.metadata.deletion_timestamp.is_none());
    }
    let (code, _, err) = server.kubectl(&["uncordon", "kbatch-node"]);
    assert_eq!(code, 0, "{err}");
}
