//! The executor as its node's scheduler, against the real API server: a pod is bound only
//! when it fits as the default scheduler's filters decide (resources, node selector and
//! affinity, taints, a cordoned node); one that does not stays Pending with the scheduler's
//! `PodScheduled` condition and `FailedScheduling` event, and is bound once what kept it out
//! changes (a pod beyond the node's `max_pods` too: `Too many pods`). A pod with scheduling
//! gates waits, `SchedulingGated`, until they are removed.

use crate::common;

use std::time::Duration;

use common::*;
use kbatch_api::k8s_openapi::api::core::v1::{Node, Pod};
use kbatch_executor::RuntimeKind;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// A pod that sleeps, with `extra` merged into its spec.
fn sleeper(name: &str, extra: Value) -> Value {
    let mut p = pod(name, &["sleep", "30"], "Never");
    p["spec"]["terminationGracePeriodSeconds"] = json!(1);
    if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    p
}

/// The pod's PodScheduled condition as (status, reason, message).
fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// Wait until the pod is reported not scheduled for `reason`; returns the message.
async fn wait_not_scheduled(c: &Cluster, name: &str, reason: &str) -> String {
    let p = c
        .wait_pod(name, 15, &format!("PodScheduled False/{reason}"), |p| {
            scheduled_condition(p).is_some_and(|(s, r, _)| s == "False" && r == reason)
        })
        .await;
    assert_eq!(
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        None,
        "not bound"
    );
    assert_eq!(phase_of(&p), "Pending");
    scheduled_condition(&p)
        .map(|(_, _, m)| m)
        .unwrap_or_default()
}

async fn wait_bound(c: &Cluster, name: &str) -> Pod {
    c.wait_pod(name, 20, "bound and running", |p| phase_of(p) == "Running")
        .await
}

async fn patch_node(c: &Cluster, patch: Value) {
    let nodes: Api<Node> = Api::all(c.client.clone());
    nodes
        .patch(
            "kbatch-node",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("patch the node");
}

async fn failed_scheduling(c: &Cluster, name: &str) -> String {
    eventually(
        Duration::from_secs(15),
        "a FailedScheduling event",
        || async {
            events_of(c, name)
                .await
                .into_iter()
                .find(|(reason, _)| reason == "FailedScheduling")
                .map(|(_, m)| m)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_does_not_fit_waits_until_resources_free_up() {
    let c = Cluster::start().await;
    let nodes: Api<Node> = Api::all(c.client.clone());
    let node = nodes.get("kbatch-node").await.expect("node");
    let cpu = node
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("cpu").cloned())
        .expect("allocatable cpu");
    let all_cpu = json!({"containers": [{"name": "main", "image": "busybox",
        "command": ["sleep", "30"], "resources": {"requests": {"cpu": cpu.0}}}]});
    c.create(sleeper("big", all_cpu)).await;
    wait_bound(&c, "big").await;
    let more = json!({"containers": [{"name": "main", "image": "busybox",
        "command": ["sleep", "30"], "resources": {"requests": {"cpu": "100m", "memory": "1Ki"}}}]});
    c.create(sleeper("more", more)).await;
    let message = wait_not_scheduled(&c, "more", "Unschedulable").await;
    let expected = "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, \
                    preemption: 0/1 nodes are available: 1 No preemption victims found for \
                    incoming pod.";
    assert_eq!(message, expected);
    assert_eq!(failed_scheduling(&c, "more").await, expected);
    // Pods without requests still fit beside them.
    c.create(sleeper("small", json!({}))).await;
    wait_bound(&c, "small").await;
    c.delete("big").await;
    let p = wait_bound(&c, "more").await;
    assert_eq!(
        scheduled_condition(&p).map(|(s, _, _)| s).as_deref(),
        Some("True")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_beyond_max_pods_is_told_too_many_pods_and_runs_once_one_leaves() {
    let c = Cluster::start_with(RuntimeKind::Process, 2).await;
    c.create(sleeper("one", json!({}))).await;
    c.create(sleeper("two", json!({}))).await;
    wait_bound(&c, "one").await;
    wait_bound(&c, "two").await;
    c.create(sleeper("three", json!({}))).await;
    let expected = "0/1 nodes are available: 1 Too many pods. no new claims to deallocate, \
                    preemption: 0/1 nodes are available: 1 No preemption victims found for \
                    incoming pod.";
    assert_eq!(
        wait_not_scheduled(&c, "three", "Unschedulable").await,
        expected
    );
    assert_eq!(failed_scheduling(&c, "three").await, expected);
    c.delete("one").await;
    wait_bound(&c, "three").await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selectors_taints_and_cordons_keep_pods_off_until_the_node_changes() {
    let c = Cluster::start().await;
    c.create(sleeper("picky", json!({"nodeSelector": {"disk": "ssd"}})))
        .await;
    assert_eq!(
        wait_not_scheduled(&c, "picky", "Unschedulable").await,
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. \
         no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not \
         helpful for scheduling."
    );
    patch_node(&c, json!({"metadata": {"labels": {"disk": "ssd"}}})).await;
    wait_bound(&c, "picky").await;

    patch_node(
        &c,
        json!({"spec": {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]}}),
    )
    .await;
    c.create(sleeper("plain", json!({}))).await;
    assert_eq!(
        wait_not_scheduled(&c, "plain", "Unschedulable").await,
        "0/1 nodes are available: 1 node(s) had untolerated taint(s). no new claims to \
         deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for \
         scheduling."
    );
    let tolerates = json!({"tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
    ]});
    c.create(sleeper("tolerant", tolerates)).await;
    wait_bound(&c, "tolerant").await;

    patch_node(&c, json!({"spec": {"taints": null, "unschedulable": true}})).await;
    c.create(sleeper("cordoned", json!({}))).await;
    assert_eq!(
        wait_not_scheduled(&c, "cordoned", "Unschedulable").await,
        "0/1 nodes are available: 1 node(s) were unschedulable. no new claims to deallocate, \
         preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
    patch_node(&c, json!({"spec": {"unschedulable": null}})).await;
    wait_bound(&c, "plain").await;
    wait_bound(&c, "cordoned").await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_waits_until_its_gates_are_removed() {
    let c = Cluster::start().await;
    c.create(sleeper(
        "gated",
        json!({"schedulingGates": [{"name": "example.com/wait"}]}),
    ))
    .await;
    assert_eq!(
        wait_not_scheduled(&c, "gated", "SchedulingGated").await,
        "Scheduling is blocked due to non-empty scheduling gates"
    );
    assert!(
        !events_of(&c, "gated")
            .await
            .iter()
            .any(|(r, _)| r == "FailedScheduling"),
        "a gated pod gets no FailedScheduling event"
    );
    let patch = json!({"spec": {"schedulingGates": null}});
    c.pods()
        .patch("gated", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("remove the gates");
    wait_bound(&c, "gated").await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_marks_a_pod_created_with_gates_as_gated() {
    // No executor: the condition comes from the API server's create.
    let c = Cluster::server_only().await;
    let created = c
        .create(sleeper(
            "gated",
            json!({"schedulingGates": [{"name": "example.com/wait"}]}),
        ))
        .await;
    let (status, reason, message) = scheduled_condition(&created).expect("PodScheduled");
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        (
            "False",
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates"
        )
    );
    let plain = c.create(sleeper("plain", json!({}))).await;
    assert_eq!(scheduled_condition(&plain), None);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_placed_by_node_name_that_does_not_fit_is_rejected_by_the_node() {
    let c = Cluster::start().await;
    let greedy = json!({"nodeName": "kbatch-node", "containers": [{"name": "main",
        "image": "busybox", "command": ["sleep", "30"],
        "resources": {"requests": {"cpu": "100000"}}}]});
    c.create(sleeper("placed", greedy)).await;
    let p = c.wait_phase("placed", "Failed", 15).await;
    let status = p.status.as_ref().expect("status");
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"));
    let message = status.message.clone().unwrap_or_default();
    assert!(
        message.starts_with(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 100000000, \
             used: 0, capacity: "
        ),
        "{message}"
    );
    assert!(status.container_statuses.is_none(), "never started");
    let event = eventually(Duration::from_secs(10), "an OutOfcpu event", || async {
        events_of(&c, "placed")
            .await
            .into_iter()
            .find(|(r, _)| r == "OutOfcpu")
            .map(|(_, m)| m)
    })
    .await;
    assert_eq!(
        Some(event.as_str()),
        message.strip_prefix("Pod was rejected: ")
    );
    // One that fits runs.
    let fits = json!({"nodeName": "kbatch-node"});
    c.create(sleeper("placed-ok", fits)).await;
    wait_bound(&c, "placed-ok").await;
    c.shutdown().await;
}
