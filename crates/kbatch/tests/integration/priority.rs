//! Pod priority against a real `kbatch up`: the scheduling.k8s.io PriorityClasses (the system
//! ones created at start, validation, one global default), the Priority admission of new pods,
//! and the node's scheduler taking the highest priority first.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::time::Duration;

use common::{Server, eventually, raw, send_json};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const PCS: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";

#[tokio::test]
async fn priority_classes_and_pod_admission() {
    let server = Server::start().await;
    let client = server.client().await;

    // The system classes are there from the start, as kube-apiserver creates them.
    let (code, out, err) = server.kubectl(&["get", "priorityclasses"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    );
    assert_eq!(
        lines[1][..3],
        ["system-cluster-critical", "2000000000", "false"]
    );
    assert_eq!(
        lines[2][..3],
        ["system-node-critical", "2000001000", "false"]
    );
    assert_eq!(lines[2][4], "PreemptLowerPriority");
    let snc = raw(
        &client,
        "GET",
        &format!("{PCS}/system-node-critical"),
        None,
        Vec::new(),
    )
    .await
    .json();
    assert_eq!(
        snc["description"],
        "Used for system critical pods that must not be moved from their current node."
    );
    assert_eq!(snc["metadata"]["generation"], 1);

    // kubectl's own create (protobuf), defaults and the admission checks.
    let (code, out, err) = server.kubectl(&[
        "create",
        "priorityclass",
        "high",
        "--value=1000",
        "--description=urgent",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let high = raw(&client, "GET", &format!("{PCS}/high"), None, Vec::new())
        .await
        .json();
    assert_eq!(high["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(high["value"], 1000);
    let (code, _, err) = server.kubectl(&[
        "create",
        "priorityclass",
        "low",
        "--value=10",
        "--global-default",
        "--preemption-policy=Never",
    ]);
    assert_eq!(code, 0, "{err}");
    let create = |name: &str, value: i64, default: bool| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "globalDefault": default})
    };
    let r = send_json(&client, "POST", PCS, &create("second-default", 5, true)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "priorityclasses.scheduling.k8s.io \"second-default\" is forbidden: PriorityClass low is already marked as default. Only one default can exist"
    );
    let r = send_json(&client, "POST", PCS, &create("system-mine", 5, false)).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "PriorityClass.scheduling.k8s.io \"system-mine\" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"
    );
    let r = send_json(&client, "POST", PCS, &create("huge", 1_000_000_001, false)).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["details"]["causes"][0],
        json!({"reason": "FieldValueForbidden", "field": "value",
            "message": "Forbidden: maximum allowed value of a user defined priority is 1000000000"})
    );
    let r = raw(
        &client,
        "PATCH",
        &format!("{PCS}/high"),
        Some("application/merge-patch+json"),
        br#"{"value": 2000}"#.to_vec(),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.body
            .contains("value: Forbidden: may not be changed in an update."),
        "{}",
        r.body
    );
    let r = raw(
        &client,
        "DELETE",
        &format!("{PCS}/system-cluster-critical"),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "priorityclasses.scheduling.k8s.io \"system-cluster-critical\" is forbidden: this is a system priority class and cannot be deleted"
    );

    // Pods: the global default's priority and name, or the named class's.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = |name: &str, extra: Value| -> Pod {
        let mut spec = json!({"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]});
        if let (Some(o), Some(x)) = (spec.as_object_mut(), extra.as_object()) {
            o.extend(x.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod")
    };
    let p = pods
        .create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .expect("create plain");
    let spec = p.spec.expect("spec");
    assert_eq!(
        (
            spec.priority,
            spec.priority_class_name.as_deref(),
            spec.preemption_policy.as_deref()
        ),
        (Some(10), Some("low"), Some("Never"))
    );
    let p = pods
        .create(
            &PostParams::default(),
            &pod("urgent", json!({"priorityClassName": "high"})),
        )
        .await
        .expect("create urgent");
    let spec = p.spec.expect("spec");
    assert_eq!(
        (spec.priority, spec.preemption_policy.as_deref()),
        (Some(1000), Some("PreemptLowerPriority"))
    );
    // The fields admission set are not the client's: managedFields leave them out.
    let mf = serde_json::to_string(&p.metadata.managed_fields).expect("encode");
    assert!(mf.contains("f:priorityClassName"), "{mf}");
    assert!(!mf.contains("f:priority\""), "{mf}");
    assert!(!mf.contains("f:preemptionPolicy"), "{mf}");

    // A missing class, named by generateName as admission sees it; a priority of its own.
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "gen-"},
        "spec": {"priorityClassName": "nope", "containers": [{"name": "c", "image": "busybox"}]}});
    let r = send_json(&client, "POST", "/api/v1/namespaces/default/pods", &body).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods \"gen-\" is forbidden: no PriorityClass with name nope was found",
            "reason": "Forbidden", "details": {"name": "gen-", "kind": "pods"}, "code": 403})
    );
    let mut body = body;
    body["metadata"] = json!({"name": "self-made"});
    body["spec"]["priorityClassName"] = json!("high");
    body["spec"]["priority"] = json!(7);
    let r = send_json(&client, "POST", "/api/v1/namespaces/default/pods", &body).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "pods \"self-made\" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"
    );

    // A replacing update that leaves the admitted fields out keeps them.
    let mut cur = serde_json::to_value(pods.get("urgent").await.expect("get")).expect("json");
    if let Some(spec) = cur["spec"].as_object_mut() {
        spec.remove("priority");
        spec.remove("preemptionPolicy");
    }
    cur["metadata"]["labels"] = json!({"touched": "yes"});
    let r = send_json(
        &client,
        "PUT",
        "/api/v1/namespaces/default/pods/urgent",
        &cur,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["spec"]["priority"], 1000);
}

/// A node with one place (simulated pods), and the classes `high` (1000) and `low` (1).
async fn one_place_two_classes() -> (Server, kube::Client) {
    let server = Server::start_with(&["--executor", "simulate", "--max-pods", "1"]).await;
    let client = server.client().await;
    two_classes(&client).await;
    (server, client)
}

/// Creates the classes `high` (1000) and `low` (1).
async fn two_classes(client: &kube::Client) {
    for (name, value) in [("high", 1000), ("low", 1)] {
        let body = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value});
        let r = send_json(client, "POST", PCS, &body).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
}

#[tokio::test]
async fn the_node_schedules_the_highest_priority_first() {
    let (_server, client) = one_place_two_classes().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = |name: &str, class: &str, millis: u32| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name,
                "annotations": {"kbatch.dev/simulate-duration": format!("{millis}ms")}},
            "spec": {"priorityClassName": class, "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}
        }))
        .expect("pod")
    };
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    // The one place is taken; then a low-priority pod waits, and a high-priority one after it.
    pods.create(&PostParams::default(), &pod("blocker", "low", 1500))
        .await
        .expect("create blocker");
    eventually(Duration::from_secs(10), "the blocker is bound", || async {
        let p = pods.get("blocker").await.ok()?;
        (!node_of(&p).is_empty()).then_some(())
    })
    .await;
    pods.create(&PostParams::default(), &pod("waiting-low", "low", 60_000))
        .await
        .expect("create low");
    tokio::time::sleep(Duration::from_millis(200)).await;
    pods.create(&PostParams::default(), &pod("later-high", "high", 60_000))
        .await
        .expect("create high");
    // When the blocker ends, the place goes to the higher priority, younger as it is.
    eventually(Duration::from_secs(20), "later-high is bound", || async {
        let p = pods.get("later-high").await.ok()?;
        (!node_of(&p).is_empty()).then_some(())
    })
    .await;
    let low = pods.get("waiting-low").await.expect("get low");
    assert!(node_of(&low).is_empty(), "the low-priority pod was bound");
}

#[tokio::test]
async fn a_higher_priority_pod_preempts_a_lower_one_when_the_node_is_full() {
    let (server, client) = one_place_two_classes().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = |name: &str, class: &str, finalizers: Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "finalizers": finalizers,
                "annotations": {"kbatch.dev/simulate-duration": "600s"}},
            "spec": {"priorityClassName": class, "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox"}]}
        }))
        .expect("pod")
    };
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    pods.create(
        &PostParams::default(),
        &pod("victim", "low", json!(["example.com/hold"])),
    )
    .await
    .expect("create victim");
    eventually(Duration::from_secs(10), "the victim runs", || async {
        let p = pods.get("victim").await.ok()?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    let preemptor = pods
        .create(&PostParams::default(), &pod("preemptor", "high", json!([])))
        .await
        .expect("create preemptor");

    // The victim is marked and deleted, as the scheduler does it.
    let victim = eventually(Duration::from_secs(10), "the victim is deleted", || async {
        let p = pods.get("victim").await.ok()?;
        p.metadata.deletion_timestamp.is_some().then_some(p)
    })
    .await;
    let c = victim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .cloned()
        .expect("DisruptionTarget");
    assert_eq!(c.reason.as_deref(), Some("PreemptionByScheduler"));
    assert_eq!(
        c.message.as_deref(),
        Some("default-scheduler: preempting to accommodate a higher priority pod")
    );
    // The preemptor was nominated, then takes the place once the victim has stopped.
    let bound = eventually(Duration::from_secs(20), "the preemptor runs", || async {
        let p = pods.get("preemptor").await.ok()?;
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    assert_eq!(
        bound
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref()),
        Some("kbatch-node")
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = events
        .list(&kube::api::ListParams::default().fields("involvedObject.name=victim"))
        .await
        .expect("events");
    let uid = preemptor.metadata.uid.clone().unwrap_or_default();
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Preempted")
                && e.message.as_deref()
                    == Some(format!("Preempted by pod {uid} on node kbatch-node").as_str())),
        "{:?}",
        list.items
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    let (code, out, err) = server.kubectl(&["describe", "pod", "preemptor"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("0/1 nodes are available: 1 Too many pods."),
        "{out}"
    );
    // A pod of the same priority preempts nothing: it waits.
    pods.create(&PostParams::default(), &pod("peer", "high", json!([])))
        .await
        .expect("create peer");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let peer = pods.get("peer").await.expect("get peer");
    assert!(
        peer.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none()
    );
    let running = pods.get("preemptor").await.expect("get preemptor");
    assert!(running.metadata.deletion_timestamp.is_none());
    let _ = pods
        .patch(
            "victim",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

/// A Job's pod preempted for a higher-priority pod fails with `DisruptionTarget`, which the
/// Job's pod failure policy ignores: the Job replaces it and completes, with no failure counted.
#[tokio::test]
async fn a_preempted_job_pod_is_ignored_by_the_failure_policy_and_replaced() {
    let server = Server::start_with(&[
        "--executor",
        "simulate",
        "--max-pods",
        "1",
        "--controllers",
        "job,serviceaccount",
        "--pod-failure-backoff",
        "1s",
    ])
    .await;
    let client = server.client().await;
    two_classes(&client).await;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "default");
    let job = serde_json::from_value(json!({
        "metadata": {"name": "background"},
        "spec": {
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
            ]},
            "template": {
                "metadata": {"annotations": {"kbatch.dev/simulate-duration": "2s"}},
                "spec": {"priorityClassName": "low", "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox"}]}
            }
        }
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running_job_pod = || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels("job-name=background"))
            .await
            .ok()?;
        list.items.into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        })
    };
    let first = eventually(
        Duration::from_secs(10),
        "the Job's pod runs",
        running_job_pod,
    )
    .await;
    let urgent: Pod = serde_json::from_value(json!({
        "metadata": {"name": "urgent",
            "annotations": {"kbatch.dev/simulate-duration": "1s"}},
        "spec": {"priorityClassName": "high", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &urgent)
        .await
        .expect("create urgent");
    let done = common::wait_job_complete(&jobs, "background", Duration::from_secs(40)).await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(status.failed.unwrap_or(0), 0, "{status:?}");
    assert_eq!(status.succeeded, Some(1), "{status:?}");
    // The urgent pod ran in between: it preempted the Job's first pod.
    let urgent = pods.get("urgent").await.expect("get urgent");
    assert_eq!(
        urgent.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    assert!(
        pods.get_opt(first.metadata.name.as_deref().unwrap_or(""))
            .await
            .expect("get first")
            .is_none(),
        "the preempted pod is gone"
    );
}
