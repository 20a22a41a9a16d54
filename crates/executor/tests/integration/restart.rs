//! What a restarted executor does with pods a previous run was running: their processes are
//! stopped and the pods are reported Failed (reason ExecutorRestarted), never run twice.

use crate::common;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::*;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

fn assert_failed_by_restart(p: &k8s_openapi::api::core::v1::Pod) {
    let s = p.status.as_ref().unwrap();
    assert_eq!(s.reason.as_deref(), Some("ExecutorRestarted"));
    assert!(
        s.message
            .as_deref()
            .unwrap_or("")
            .contains("executor restarted"),
        "{:?}",
        s.message
    );
    let t = status_of(p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(t.exit_code, 137);
    assert_eq!(t.reason.as_deref(), Some("ContainerStatusUnknown"));
}

use kbatch_api::k8s_openapi;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_executor_stops_processes_and_the_next_run_fails_the_pod() {
    let mut c = Cluster::start().await;
    let m = marker("graceful");
    let mut p = pod("long", &["sh", "-c", "sleep 1000 & wait"], "Never");
    p["spec"]["containers"][0]["env"] = json!([{"name": "KBATCH_TEST_MARKER", "value": m}]);
    c.create(p).await;
    c.wait_phase("long", "Running", 10).await;
    eventually(Duration::from_secs(5), "processes run", || async {
        (processes_with_marker(&m).len() >= 2).then_some(())
    })
    .await;
    c.stop_executor().await;
    assert!(
        processes_with_marker(&m).is_empty(),
        "no process outlives the executor"
    );
    assert_eq!(phase_of(&c.pods().get("long").await.unwrap()), "Running");
    c.start_executor();
    let p = c.wait_phase("long", "Failed", 10).await;
    assert_failed_by_restart(&p);
    let uid = p.metadata.uid.clone().unwrap();
    assert!(
        !journal_holds(&c, &uid),
        "the failed pod has nothing left to find"
    );
    c.shutdown().await;
}

/// Whether the executor's state journal still holds a pod.
fn journal_holds(c: &Cluster, uid: &str) -> bool {
    let journal = c.data_dir().join("executor/state/journal");
    let bytes = std::fs::read(journal).unwrap_or_default();
    kbatch_executor::state::replay(&bytes).contains_key(uid)
}

/// A previous run killed with -9: its processes still run, its state (as an earlier version
/// wrote it, one file per pod) names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_of_a_crashed_run_are_killed() {
    let mut c = Cluster::server_only().await;
    let m = marker("crash");
    let state_dir = c.data_dir().join("executor/state");
    std::fs::create_dir_all(&state_dir).unwrap();
    let spawn = || {
        std::process::Command::new("sleep")
            .arg("1000")
            .env("KBATCH_TEST_MARKER", &m)
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let start_ticks = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        after
            .split_whitespace()
            .nth(19)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let write_state = |uid: &str, name: &str, pid: u32| {
        let rec = json!({"namespace": "default", "name": name, "uid": uid,
            "processes": [{"container": "main", "run": 0, "pid": pid, "startTicks": start_ticks(pid)}]});
        std::fs::write(state_dir.join(format!("{uid}.json")), rec.to_string()).unwrap();
    };

    // A pod the crashed run had bound and started.
    let pod = c.create(pod("orphaned", &["sleep", "1000"], "Never")).await;
    let uid = pod.metadata.uid.clone().unwrap();
    let pods = c.pods();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "orphaned"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kbatch-node"}});
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "orphaned",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    pods.patch_status(
        "orphaned",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"phase": "Running", "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,
            "containerID": format!("kbatch://{uid}/main/0"),
            "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]}}),
        ),
    )
    .await
    .unwrap();
    let mut running = spawn();
    write_state(&uid, "orphaned", running.id());
    // A pod deleted while the executor was down: only its process and files are left.
    let mut gone = spawn();
    write_state("0000-gone", "gone", gone.id());
    let stale_logs = c.log_dir().join("default_gone_0000-gone/main");
    std::fs::create_dir_all(&stale_logs).unwrap();
    // spawn() returns when exec begins; the new environment shows in /proc a moment later.
    eventually(Duration::from_secs(5), "both leftovers run", || async {
        (processes_with_marker(&m).len() == 2).then_some(())
    })
    .await;

    c.start_executor();
    c.wait_for_node().await;
    let p = c.wait_phase("orphaned", "Failed", 10).await;
    assert_failed_by_restart(&p);
    eventually(
        Duration::from_secs(5),
        "leftover processes are killed",
        || async { processes_with_marker(&m).is_empty().then_some(()) },
    )
    .await;
    let _ = running.wait();
    let _ = gone.wait();
    // The sweep removes the files once the process is gone, a moment after the kill.
    eventually(
        Duration::from_secs(5),
        "the gone pod's state file and logs are removed",
        || async {
            (!state_dir.join("0000-gone.json").exists()
                && !journal_holds(&c, "0000-gone")
                && !journal_holds(&c, &uid)
                && !stale_logs.exists())
            .then_some(())
        },
    )
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_finished_before_a_restart_is_kept_then_removed_with_its_logs() {
    let mut c = Cluster::start().await;
    c.create(pod("earlier", &["sh", "-c", "echo done"], "Never"))
        .await;
    let p = c.wait_phase("earlier", "Succeeded", 10).await;
    let uid = p.metadata.uid.clone().unwrap();
    let logs = c.log_dir().join(format!("default_earlier_{uid}"));
    c.stop_executor().await;
    c.start_executor();
    // The restarted executor leaves the finished pod as it is: not failed, not run again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p = c.pods().get("earlier").await.unwrap();
    assert_eq!(phase_of(&p), "Succeeded");
    assert_eq!(status_of(&p, "main").restart_count, 0);
    assert!(logs.exists());
    c.delete("earlier").await;
    c.wait_gone("earlier", 10).await;
    eventually(
        Duration::from_secs(5),
        "logs removed with the pod",
        || async { (!logs.exists()).then_some(()) },
    )
    .await;
    c.shutdown().await;
}
