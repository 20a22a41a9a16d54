//! The preStop hook against the real API server: kubelet runs it when it stops a container,
//! before the stop signal, and reports a failed one as a FailedPreStopHook event.

mod common;

use std::time::Duration;

use common::*;
use kbatch_api::k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_stop_runs_before_the_stop_signal_and_a_failed_one_is_reported() {
    let c = Cluster::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let wd = dir.path().to_string_lossy().to_string();
    let pod = |name: &str, hook: serde_json::Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 10, "containers": [{
                "name": "main", "image": "busybox", "workingDir": wd,
                "command": ["sh", "-c", format!("trap 'echo term >> {name}.log; exit 0' TERM; while true; do sleep 0.1; done")],
                "lifecycle": {"preStop": hook}
            }]}
        })
    };
    c.create(pod(
        "ordered",
        json!({"exec": {"command": ["sh", "-c", "sleep 1; echo hook >> ordered.log"]}}),
    ))
    .await;
    c.create(pod(
        "failing",
        json!({"exec": {"command": ["sh", "-c", "echo broken; exit 2"]}}),
    ))
    .await;
    for name in ["ordered", "failing"] {
        c.wait_phase(name, "Running", 10).await;
    }
    // Let the shells install their traps.
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.delete("ordered").await;
    c.delete("failing").await;
    c.wait_gone("ordered", 20).await;
    c.wait_gone("failing", 20).await;
    let log = std::fs::read_to_string(dir.path().join("ordered.log")).expect("the log");
    assert_eq!(log, "hook\nterm\n", "the hook ran first, then SIGTERM");
    // A failed hook is reported and the container still gets its signal.
    let log = std::fs::read_to_string(dir.path().join("failing.log")).expect("the log");
    assert_eq!(log, "term\n");
    let events: Api<Event> = Api::namespaced(c.client.clone(), "default");
    let message = eventually(
        Duration::from_secs(10),
        "a FailedPreStopHook event",
        || async {
            events
                .list(&ListParams::default().fields("involvedObject.name=failing"))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedPreStopHook"))
                .and_then(|e| e.message)
        },
    )
    .await;
    assert!(
        message.starts_with("Exec lifecycle hook ([sh -c echo broken; exit 2]) for Container \"main\" in Pod \"failing_default("),
        "{message}"
    );
    assert!(message.ends_with("message: \"broken\\n\""), "{message}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_a_failed_liveness_probe_kills_runs_its_pre_stop_hook_first() {
    let c = Cluster::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sick"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 10, "containers": [{
            "name": "main", "image": "busybox", "workingDir": dir.path().to_string_lossy(),
            "command": ["sh", "-c", "trap 'echo term >> log; exit 1' TERM; while true; do sleep 0.1; done"],
            "livenessProbe": {"exec": {"command": ["false"]}, "initialDelaySeconds": 1,
                              "periodSeconds": 1, "failureThreshold": 1},
            "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo hook >> log"]}}}
        }]}
    }))
    .await;
    let p = c.wait_phase("sick", "Failed", 20).await;
    let t = status_of(&p, "main")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(t.exit_code, 1, "the trap ended it");
    let log = std::fs::read_to_string(dir.path().join("log")).expect("the log");
    assert_eq!(log, "hook\nterm\n");
    c.delete("sick").await;
    c.wait_gone("sick", 15).await;
    c.shutdown().await;
}
