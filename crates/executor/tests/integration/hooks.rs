//! Lifecycle hooks against the real API server. preStop: kubelet runs it when it stops a
//! container, before the stop signal, and reports a failed one as a FailedPreStopHook event.
//! postStart: run right after the start; the container is reported running, and the pod's next
//! container starts, only once it is done; a failed one kills the container.

use crate::common;

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

/// The messages of the events of `reason` about pod `name`.
async fn events_with(c: &Cluster, name: &str, reason: &str) -> Vec<String> {
    events_of(c, name)
        .await
        .into_iter()
        .filter(|(r, _)| r == reason)
        .map(|(_, m)| m)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_holds_the_running_state_and_the_next_container() {
    let c = Cluster::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hooked"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [
            {"name": "first", "image": "busybox", "workingDir": dir.path().to_string_lossy(),
             "command": ["sh", "-c", "echo main >> first.log; sleep 30"],
             "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "sleep 2; echo hook >> first.log"]}}}},
            {"name": "second", "image": "busybox", "workingDir": dir.path().to_string_lossy(),
             "command": ["sh", "-c", "cat first.log > seen.log; sleep 30"]}
        ]}
    }))
    .await;
    // The container's process runs (the hook and the entrypoint run side by side) while it
    // is still reported waiting.
    let p = c
        .wait_pod("hooked", 10, "container statuses", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some()
        })
        .await;
    let log = std::fs::read_to_string(dir.path().join("first.log")).unwrap_or_default();
    assert_eq!(log, "main\n", "the entrypoint runs, the hook is not done");
    assert_eq!(
        waiting_of(&p, "first").and_then(|w| w.reason).as_deref(),
        Some("ContainerCreating"),
        "reported waiting while its postStart hook runs"
    );
    assert_eq!(phase_of(&p), "Pending");
    let p = c.wait_phase("hooked", "Running", 15).await;
    let first = status_of(&p, "first");
    assert!(
        first
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some(),
        "{first:?}"
    );
    eventually(
        Duration::from_secs(10),
        "the second container ran",
        || async { std::fs::read_to_string(dir.path().join("seen.log")).ok() },
    )
    .await;
    // The second container started only after the first one's hook was done.
    let seen = std::fs::read_to_string(dir.path().join("seen.log")).expect("seen");
    assert_eq!(seen, "main\nhook\n");
    assert!(
        events_with(&c, "hooked", "FailedPostStartHook")
            .await
            .is_empty()
    );
    c.delete("hooked").await;
    c.wait_gone("hooked", 15).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_post_start_hook_kills_the_container() {
    let c = Cluster::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let wd = dir.path().to_string_lossy().to_string();
    // Under OnFailure it restarts; its second hook takes a while, during which the waiting
    // reason tells why the last start failed.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "again"},
        "spec": {"restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 5, "containers": [{
            "name": "main", "image": "busybox", "workingDir": wd,
            "command": ["sh", "-c", "trap 'echo term >> again.log; exit 3' TERM; while true; do sleep 0.1; done"],
            "lifecycle": {
                "postStart": {"exec": {"command": ["sh", "-c", "if [ -f once ]; then sleep 3; fi; touch once; echo out; echo err >&2; exit 7"]}},
                "preStop": {"exec": {"command": ["sh", "-c", "echo prestop >> again.log"]}}
            }
        }]}
    }))
    .await;
    let p = c
        .wait_pod("again", 20, "waiting with PostStartHookError", |p| {
            waiting_of(p, "main")
                .and_then(|w| w.reason)
                .is_some_and(|r| r == "PostStartHookError")
        })
        .await;
    let status = status_of(&p, "main");
    let message = waiting_of(&p, "main")
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert!(
        message.starts_with("Exec lifecycle hook ([sh -c if [ -f once ]; then sleep 3; fi; touch once; echo out; echo err >&2; exit 7]) for Container \"main\" in Pod \"again_default("),
        "{message}"
    );
    assert!(
        message.ends_with("exited with 7: err\n, message: \"out\\nerr\\n\""),
        "{message}"
    );
    // The kill ran the preStop hook, then SIGTERM, which the trap answered with 3.
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("the killed run");
    assert_eq!(last.exit_code, 3);
    let log = std::fs::read_to_string(dir.path().join("again.log")).expect("log");
    assert!(log.starts_with("prestop\nterm\n"), "{log}");
    assert_eq!(
        events_with(&c, "again", "FailedPostStartHook").await,
        vec!["PostStartHook failed".to_string()]
    );
    assert!(
        events_with(&c, "again", "Killing")
            .await
            .contains(&"FailedPostStartHook".to_string())
    );
    c.delete("again").await;
    c.wait_gone("again", 20).await;

    // Under Never the pod fails with the killed run's status.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "never"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [{
            "name": "main", "image": "busybox", "command": ["sleep", "30"],
            "lifecycle": {"postStart": {"tcpSocket": {"port": 8080}}}
        }]}
    }))
    .await;
    let p = c.wait_phase("never", "Failed", 20).await;
    let t = status_of(&p, "main")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (143, Some("Error")));
    c.delete("never").await;
    c.wait_gone("never", 15).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_during_the_post_start_hook_is_taken_in_after_it() {
    let c = Cluster::start().await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "quick"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox", "command": ["true"],
            "lifecycle": {"postStart": {"sleep": {"seconds": 1}}}
        }]}
    }))
    .await;
    let started = std::time::Instant::now();
    let p = c.wait_phase("quick", "Succeeded", 15).await;
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "the pod ended only once the hook was done"
    );
    let t = status_of(&p, "main")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    c.delete("quick").await;
    c.wait_gone("quick", 15).await;
    c.shutdown().await;
}
