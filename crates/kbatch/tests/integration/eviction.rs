//! Disruptions against a real `kbatch up`: `kubectl drain` evicts a Job's pods through
//! `pods/eviction`, whose `DisruptionTarget` condition a pod failure policy then sees; the
//! subresource's own rules through raw requests; and NoExecute taints, which the taint
//! eviction controller enforces.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::time::Duration;

use common::{Server, eventually, raw, send_json};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A Job of one long-running pod, with a pod failure policy on disruptions.
fn sleeper_job(name: &str, action: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [
                {"action": action, "onPodConditions": [{"type": "DisruptionTarget"}]}
            ]},
            "template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"]}]
            }}
        }
    }))
    .expect("a Job")
}

async fn running_pod_of(pods: &Api<Pod>, job: &str) -> String {
    eventually(Duration::from_secs(30), "the Job's pod runs", || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels(&format!("job-name={job}")))
            .await
            .ok()?;
        list.items.into_iter().find_map(|p| {
            let running = p.status.as_ref()?.phase.as_deref() == Some("Running")
                && p.metadata.deletion_timestamp.is_none();
            running.then(|| p.metadata.name.clone().unwrap_or_default())
        })
    })
    .await
}

fn condition<'a>(job: &'a Job, ty: &str) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty && c.status == "True")
}

#[tokio::test]
async fn kubectl_drain_evicts_job_pods_whose_failure_policy_sees_the_disruption() {
    let server = Server::start_with(&[
        "--executor",
        "process",
        "--controllers",
        "job,serviceaccount",
        "--pod-failure-backoff",
        "1s",
    ])
    .await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &sleeper_job("tolerant", "Ignore"))
        .await
        .expect("create tolerant");
    jobs.create(&PostParams::default(), &sleeper_job("strict", "FailJob"))
        .await
        .expect("create strict");
    let first = running_pod_of(&pods, "tolerant").await;
    let strict_pod = running_pod_of(&pods, "strict").await;

    // kubectl finds the subresource in discovery and evicts rather than deletes.
    let (code, out, err) = server.kubectl(&[
        "drain",
        "kbatch-node",
        "--ignore-daemonsets",
        "--timeout=60s",
    ]);
    assert_eq!(code, 0, "drain: {out}{err}");
    assert!(out.contains("node/kbatch-node cordoned"), "{out}");
    for p in [&first, &strict_pod] {
        assert!(out.contains(&format!("pod/{p} evicted")), "{out}{err}");
    }
    assert!(out.contains("node/kbatch-node drained"), "{out}");

    // FailJob on DisruptionTarget: the evicted pod carried the condition.
    let failed = eventually(Duration::from_secs(30), "strict fails", || async {
        let j = jobs.get("strict").await.ok()?;
        condition(&j, "Failed").cloned()
    })
    .await;
    assert_eq!(failed.reason.as_deref(), Some("PodFailurePolicy"));
    assert_eq!(
        failed.message.as_deref(),
        Some(
            format!(
                "Pod default/{strict_pod} has condition DisruptionTarget matching FailJob rule at index 0"
            )
            .as_str()
        )
    );

    // Ignore: the eviction is not counted against backoffLimit 0, and once the node takes
    // pods again a replacement runs.
    let (code, _, err) = server.kubectl(&["uncordon", "kbatch-node"]);
    assert_eq!(code, 0, "uncordon: {err}");
    let second = running_pod_of(&pods, "tolerant").await;
    assert_ne!(second, first);
    let j = jobs.get("tolerant").await.expect("get tolerant");
    let status = j.status.clone().unwrap_or_default();
    assert_eq!(status.failed.unwrap_or(0), 0, "{status:?}");
    assert!(condition(&j, "Failed").is_none(), "{status:?}");
    assert!(condition(&j, "FailureTarget").is_none(), "{status:?}");
}

/// A pod held by a finalizer of the test's own, so that it can be read after its deletion;
/// `extra` goes into its spec.
async fn held_pod(pods: &Api<Pod>, name: &str, extra: Value) -> Pod {
    let mut spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"]}]
    });
    if let (Some(o), Some(x)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in x {
            o.insert(k.clone(), v.clone());
        }
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "finalizers": ["example.com/hold"]},
        "spec": spec
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

async fn release(pods: &Api<Pod>, name: &str) {
    let _ = pods
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

fn eviction(name: &str, extra: Value) -> Value {
    let mut e = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}});
    if let (Some(o), Some(x)) = (e.as_object_mut(), extra.as_object()) {
        for (k, v) in x {
            o.insert(k.clone(), v.clone());
        }
    }
    e
}

fn disruption(p: &Pod) -> Option<k8s_openapi::api::core::v1::PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .cloned()
}

#[tokio::test]
async fn the_eviction_subresource_marks_then_deletes_and_checks_its_input() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let path = |name: &str| format!("/api/v1/namespaces/default/pods/{name}/eviction");

    // Discovery lists it as kube-apiserver does.
    let v1 = raw(&client, "GET", "/api/v1", None, Vec::new())
        .await
        .json();
    let entry = v1["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == "pods/eviction"))
        .cloned()
        .expect("pods/eviction in discovery");
    assert_eq!(
        entry,
        json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
            "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    );

    held_pod(&pods, "runner", json!({})).await;
    let running = eventually(Duration::from_secs(30), "runner runs", || async {
        let p = pods.get("runner").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;

    // Input errors, worded as upstream's.
    let r = send_json(
        &client,
        "POST",
        &path("runner"),
        &eviction("other", json!({})),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "name in URL does not match name in Eviction object"
    );
    let mut wrong = eviction("runner", json!({}));
    wrong["apiVersion"] = json!("v1");
    let r = send_json(&client, "POST", &path("runner"), &wrong).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "the API version in the data (v1) does not match the expected API version (policy/v1)"
    );
    let r = send_json(
        &client,
        "POST",
        &path("ghost"),
        &eviction("ghost", json!({})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["message"], "pods \"ghost\" not found");
    let r = send_json(
        &client,
        "POST",
        &path("runner"),
        &eviction(
            "runner",
            json!({"deleteOptions": {"preconditions": {"uid": "not-it"}}}),
        ),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let uid = running.metadata.uid.clone().unwrap_or_default();
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"runner\": the UID in the precondition (not-it) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );

    // A dry run changes nothing.
    let r = send_json(
        &client,
        "POST",
        &format!("{}?dryRun=All", path("runner")),
        &eviction("runner", json!({})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let p = pods.get("runner").await.expect("get runner");
    assert!(p.metadata.deletion_timestamp.is_none());
    assert!(disruption(&p).is_none());

    // The real one: 201 Success, the condition, then a graceful deletion the node carries out.
    let r = send_json(
        &client,
        "POST",
        &path("runner"),
        &eviction("runner", json!({})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    let p = pods.get("runner").await.expect("get runner");
    assert!(p.metadata.deletion_timestamp.is_some());
    let c = disruption(&p).expect("DisruptionTarget");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("EvictionByEvictionAPI"));
    assert_eq!(c.message.as_deref(), Some("Eviction API: evicting"));
    let done = eventually(Duration::from_secs(30), "runner ends Failed", || async {
        let p = pods.get("runner").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(p)
    })
    .await;
    // The node's final status keeps the condition it did not write.
    assert_eq!(
        disruption(&done).and_then(|c| c.reason),
        Some("EvictionByEvictionAPI".to_string())
    );
    release(&pods, "runner").await;

    // A pending pod (it fits no node), evicted as policy/v1beta1, goes at once: nothing ran.
    held_pod(
        &pods,
        "waiter",
        json!({"nodeSelector": {"no-such-label": "x"}}),
    )
    .await;
    let mut beta = eviction("waiter", json!({}));
    beta["apiVersion"] = json!("policy/v1beta1");
    let r = send_json(&client, "POST", &path("waiter"), &beta).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let p = pods.get("waiter").await.expect("get waiter");
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(
        disruption(&p).and_then(|c| c.reason),
        Some("EvictionByEvictionAPI".to_string())
    );
    release(&pods, "waiter").await;
    eventually(Duration::from_secs(10), "waiter is gone", || async {
        pods.get_opt("waiter").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A held pod tolerating `dedicated` NoExecute taints for `seconds` (None: forever), or not
/// at all.
async fn tolerating_pod(pods: &Api<Pod>, name: &str, toleration: Option<Option<i64>>) {
    let mut extra = json!({});
    if let Some(seconds) = toleration {
        let mut t = json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = seconds {
            t["tolerationSeconds"] = json!(s);
        }
        extra["tolerations"] = json!([t]);
    }
    held_pod(pods, name, extra).await;
}

async fn deleting(pods: &Api<Pod>, name: &str) -> bool {
    pods.get(name)
        .await
        .map(|p| p.metadata.deletion_timestamp.is_some())
        .unwrap_or(false)
}

async fn events_about(client: &kube::Client, pod: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = events
        .list(&kube::api::ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .expect("list events");
    list.items
        .into_iter()
        .map(|e| {
            (
                e.source.and_then(|s| s.component).unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn no_execute_taints_evict_the_pods_that_do_not_tolerate_them() {
    let server = Server::start_with(&[
        "--executor",
        "process",
        "--controllers",
        "tainteviction,serviceaccount",
    ])
    .await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    tolerating_pod(&pods, "intolerant", None).await;
    tolerating_pod(&pods, "patient", Some(Some(3))).await;
    tolerating_pod(&pods, "forever", Some(None)).await;
    tolerating_pod(&pods, "saved", Some(Some(60))).await;
    for name in ["intolerant", "patient", "forever", "saved"] {
        eventually(Duration::from_secs(30), "the pods run", || async {
            let p = pods.get(name).await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;
    }

    let (code, out, err) =
        server.kubectl(&["taint", "nodes", "kbatch-node", "dedicated=batch:NoExecute"]);
    assert_eq!(code, 0, "taint: {out}{err}");
    let tainted_at = std::time::Instant::now();

    // Not tolerated: deleted at once, marked as the taint manager's doing.
    eventually(Duration::from_secs(10), "intolerant is deleted", || async {
        deleting(&pods, "intolerant").await.then_some(())
    })
    .await;
    let p = pods.get("intolerant").await.expect("get intolerant");
    let c = disruption(&p).expect("DisruptionTarget");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("DeletionByTaintManager"));
    assert_eq!(
        c.message.as_deref(),
        Some("Taint manager: deleting due to NoExecute taint")
    );
    let events = events_about(&client, "intolerant").await;
    assert!(
        events.contains(&(
            "taint-eviction-controller".to_string(),
            "TaintManagerEviction".to_string(),
            "Marking for deletion Pod default/intolerant".to_string()
        )),
        "{events:?}"
    );

    // Tolerated for 3 s: deleted once they are up, not before.
    eventually(Duration::from_secs(15), "patient is deleted", || async {
        deleting(&pods, "patient").await.then_some(())
    })
    .await;
    assert!(
        tainted_at.elapsed() >= Duration::from_millis(2500),
        "patient went after {:?}",
        tainted_at.elapsed()
    );
    assert_eq!(
        disruption(&pods.get("patient").await.expect("get patient")).and_then(|c| c.reason),
        Some("DeletionByTaintManager".to_string())
    );

    // The taint goes: the deletion waiting for `saved` is cancelled, with upstream's event.
    let (code, out, err) = server.kubectl(&[
        "taint",
        "nodes",
        "kbatch-node",
        "dedicated=batch:NoExecute-",
    ]);
    assert_eq!(code, 0, "untaint: {out}{err}");
    eventually(
        Duration::from_secs(10),
        "the cancellation event",
        || async {
            events_about(&client, "saved")
                .await
                .contains(&(
                    "taint-eviction-controller".to_string(),
                    "TaintManagerEviction".to_string(),
                    "Cancelling deletion of Pod default/saved".to_string(),
                ))
                .then_some(())
        },
    )
    .await;
    for name in ["forever", "saved"] {
        let p = pods.get(name).await.expect("get pod");
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "{name} was deleted"
        );
        assert!(disruption(&p).is_none(), "{name} was marked");
    }
    for name in ["intolerant", "patient", "forever", "saved"] {
        release(&pods, name).await;
    }
}
