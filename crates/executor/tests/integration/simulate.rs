//! The simulate runtime, and the Node and Lease the executor keeps.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use kbatch_api::k8s_openapi::api::coordination::v1::Lease;
use kbatch_api::k8s_openapi::api::core::v1::{Node, Pod};
use kbatch_executor::RuntimeKind;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::json;

fn sim_pod(name: &str, annotations: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_and_lease_are_kept_as_kubelet_keeps_them() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 7).await;
    let nodes: Api<Node> = Api::all(c.client.clone());
    let node = nodes.get("kbatch-node").await.unwrap();
    let status = node.status.unwrap();
    let cap = status.capacity.unwrap();
    assert_eq!(cap["pods"].0, "7");
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(cap["cpu"].0, cpus.to_string());
    assert!(cap["memory"].0.ends_with("Ki"));
    assert_eq!(status.allocatable.unwrap()["pods"].0, "7");
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    let info = status.node_info.unwrap();
    assert_eq!(info.operating_system, "linux");
    assert!(info.kubelet_version.starts_with("v1."));

    let leases: Api<Lease> = Api::namespaced(c.client.clone(), "kube-node-lease");
    let lease = eventually(Duration::from_secs(5), "the node lease exists", || async {
        leases.get_opt("kbatch-node").await.ok().flatten()
    })
    .await;
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("kbatch-node"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert!(spec.renew_time.is_some());
    let owner = &lease.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", "kbatch-node")
    );
    assert_eq!(Some(owner.uid.clone()), node.metadata.uid);

    // A restarted executor refreshes the existing Node instead of failing on it.
    let mut c = c;
    c.stop_executor().await;
    c.start_executor();
    c.create(sim_pod("after", json!({}))).await;
    c.wait_phase("after", "Succeeded", 10).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_simulation_succeeds_at_once_and_is_reported_once() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 110).await;
    let pods = c.pods();
    let phases = tokio::spawn({
        let pods = pods.clone();
        async move {
            let mut seen = Vec::new();
            let stream = pods
                .watch(&WatchParams::default().fields("metadata.name=quick"), "0")
                .await
                .unwrap();
            let mut stream = stream.boxed();
            while let Some(Ok(ev)) = stream.next().await {
                if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev {
                    let phase = phase_of(&p).to_string();
                    if seen.last() != Some(&phase) {
                        seen.push(phase.clone());
                    }
                    if phase == "Succeeded" {
                        break;
                    }
                }
            }
            seen
        }
    });
    c.create(sim_pod("quick", json!({}))).await;
    let seen = tokio::time::timeout(Duration::from_secs(10), phases)
        .await
        .expect("pod finishes")
        .unwrap();
    // A container that ends within the start-report delay is reported terminated only, as
    // kubelet reports a container that its relist first sees exited (the 1500ms pod of
    // `duration_and_exit_code_come_from_annotations` is seen Running).
    assert_eq!(seen, vec!["Pending", "Succeeded"]);
    let p = pods.get("quick").await.unwrap();
    let t = status_of(&p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_and_exit_code_come_from_annotations() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 110).await;
    let started = Instant::now();
    c.create(sim_pod(
        "slow",
        json!({"kbatch.dev/simulate-duration": "1500ms", "kbatch.dev/simulate-exit-code": "3"}),
    ))
    .await;
    c.wait_phase("slow", "Running", 5).await;
    let p = c.wait_phase("slow", "Failed", 10).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
    let t = status_of(&p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));

    c.create(sim_pod(
        "typo",
        json!({"kbatch.dev/simulate-duration": "soon"}),
    ))
    .await;
    let p = c.wait_phase("typo", "Failed", 10).await;
    let w = waiting_of(&p, "main").expect("main is waiting");
    assert_eq!(w.reason.as_deref(), Some("CreateContainerConfigError"));
    assert!(w.message.unwrap_or_default().contains("simulate-duration"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_simulated_pod_finishes_and_removes_it() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 110).await;
    let mut p = sim_pod("forever", json!({"kbatch.dev/simulate-duration": "1h"}));
    p["metadata"]["finalizers"] = json!(["kbatch.dev/test"]);
    c.create(p).await;
    c.wait_phase("forever", "Running", 5).await;
    c.delete("forever").await;
    let p = c.wait_phase("forever", "Failed", 10).await;
    let t = status_of(&p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(t.exit_code, 143);
    c.pods()
        .patch(
            "forever",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    c.wait_gone("forever", 10).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_simulated_pods_within_capacity() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 5).await;
    let started = Instant::now();
    for i in 0..40 {
        c.create(sim_pod(
            &format!("s{i}"),
            json!({"kbatch.dev/simulate-duration": "100ms"}),
        ))
        .await;
    }
    let pods = c.pods();
    let mut max_active = 0;
    loop {
        let list: Vec<Pod> = pods.list(&Default::default()).await.unwrap().items;
        let active = list
            .iter()
            .filter(|p| {
                p.spec.as_ref().unwrap().node_name.is_some()
                    && !matches!(phase_of(p), "Succeeded" | "Failed")
            })
            .count();
        max_active = max_active.max(active);
        if list.iter().all(|p| phase_of(p) == "Succeeded") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not all finished"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(max_active <= 5, "{max_active} bound at once");
    // 40 pods of 100 ms, 5 at a time: at least 8 rounds.
    assert!(started.elapsed() >= Duration::from_millis(800));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_sidecar_runs_until_the_main_container_ends() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 110).await;
    let mut pod = sim_pod("side", json!({"kbatch.dev/simulate-duration": "300ms"}));
    pod["spec"]["initContainers"] =
        json!([{"name": "proxy", "image": "busybox", "restartPolicy": "Always"}]);
    c.create(pod).await;
    let running = c
        .wait_pod("side", 5, "main running", |p| {
            phase_of(p) == "Running" && is_ready(p, "main")
        })
        .await;
    assert!(init_status_of(&running, "proxy").ready);
    let p = c.wait_phase("side", "Succeeded", 10).await;
    let proxy = init_status_of(&p, "proxy");
    assert!(
        proxy.state.as_ref().unwrap().terminated.is_some(),
        "{proxy:?}"
    );
    assert_eq!(proxy.restart_count, 0);
    c.shutdown().await;
}
