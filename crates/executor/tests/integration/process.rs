//! The process runtime against the real API server: pods are created directly, the executor
//! binds and runs them, and what it reports is checked.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use kbatch_executor::RuntimeKind;
use kube::api::LogParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn true_succeeds_with_kubelet_status() {
    let c = Cluster::start().await;
    c.create(pod("ok", &["true"], "Never")).await;
    let p = c.wait_phase("ok", "Succeeded", 10).await;
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("kbatch-node"));
    let s = p.status.as_ref().unwrap();
    assert_eq!(s.pod_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(s.host_ip.as_deref(), Some("127.0.0.1"));
    assert!(s.start_time.is_some());
    let cs = status_of(&p, "main");
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.exit_code, 0);
    assert_eq!(t.reason.as_deref(), Some("Completed"));
    assert!(t.started_at.is_some() && t.finished_at.is_some());
    let id = cs.container_id.as_deref().unwrap();
    assert!(
        id.starts_with("kbatch://") && id.ends_with("/main/0"),
        "{id}"
    );
    assert_eq!(cs.restart_count, 0);
    assert!(!cs.ready);
    assert_eq!(condition(&p, "PodScheduled").status, "True");
    assert_eq!(condition(&p, "Initialized").status, "True");
    let ready = condition(&p, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    assert!(ready.last_transition_time.is_some());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonzero_exit_fails_with_its_code() {
    let c = Cluster::start().await;
    c.create(pod("bad", &["sh", "-c", "exit 3"], "Never")).await;
    let p = c.wait_phase("bad", "Failed", 10).await;
    let t = status_of(&p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert_eq!(condition(&p, "Ready").reason.as_deref(), Some("PodFailed"));
    // A program that does not exist: kubelet's StartError, exit code 128.
    c.create(pod("nosuch", &["no-such-program-kbatch"], "Never"))
        .await;
    let p = c.wait_phase("nosuch", "Failed", 10).await;
    let t = status_of(&p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (128, Some("StartError"))
    );
    assert!(
        t.message
            .as_deref()
            .unwrap_or("")
            .contains("executable file not found"),
        "{t:?}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_containers_log_tail_is_its_message_when_the_policy_falls_back_to_logs() {
    let c = Cluster::start().await;
    // One stream: the order of two pipes' output in the log is not fixed.
    let script = "for i in $(seq 1 100); do echo line $i; done; echo boom; exit 3";
    let mut p = pod("tail", &["sh", "-c", script], "Never");
    p["spec"]["containers"][0]["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    c.create(p).await;
    // The same, but succeeding: no message; and with the default policy (File): none either.
    let mut ok = pod("tail-ok", &["sh", "-c", "echo fine"], "Never");
    ok["spec"]["containers"][0]["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    c.create(ok).await;
    c.create(pod("file", &["sh", "-c", "echo boom; exit 3"], "Never"))
        .await;
    // stderr is in the log too.
    let mut err = pod("tail-err", &["sh", "-c", "echo oops >&2; exit 1"], "Never");
    err["spec"]["containers"][0]["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    c.create(err).await;
    let terminated = |p: &kbatch_api::k8s_openapi::api::core::v1::Pod| {
        status_of(p, "main")
            .state
            .clone()
            .and_then(|s| s.terminated)
            .expect("terminated")
    };
    let t = terminated(&c.wait_phase("tail", "Failed", 10).await);
    let expected: String = (22..=100)
        .map(|i| format!("line {i}\n"))
        .chain(["boom\n".to_string()])
        .collect();
    assert_eq!(
        t.message.as_deref(),
        Some(expected.as_str()),
        "the last 80 lines"
    );
    assert_eq!(t.reason.as_deref(), Some("Error"));
    let t = terminated(&c.wait_phase("tail-ok", "Succeeded", 10).await);
    assert_eq!(t.message, None);
    let t = terminated(&c.wait_phase("file", "Failed", 10).await);
    assert_eq!(t.message, None);
    let t = terminated(&c.wait_phase("tail-err", "Failed", 10).await);
    assert_eq!(t.message.as_deref(), Some("oops\n"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_field_refs_and_expansion_reach_the_process() {
    let c = Cluster::start().await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "env", "labels": {"batch.kubernetes.io/job-completion-index": "7"},
            "annotations": {"note": "hello"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "command": ["sh", "-c"],
            "args": ["echo name=$POD_NAME ns=$POD_NS idx=$(INDEX) note=$NOTE node=$NODE ip=$IP lit=$LIT uidlen=${#POD_UID} 'esc=$$(INDEX) unknown=$(NOPE)'; pwd"],
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}},
                {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "LIT", "value": "v-$(INDEX)"},
            ]
        }]}
    }))
    .await;
    let p = c.wait_phase("env", "Succeeded", 10).await;
    let uid = p.metadata.uid.clone().unwrap();
    let logs = c.pods().logs("env", &LogParams::default()).await.unwrap();
    let mut lines = logs.lines();
    assert_eq!(
        lines.next(),
        Some(
            "name=env ns=default idx=7 note=hello node=kbatch-node ip=127.0.0.1 lit=v-7 uidlen=36 esc=$(INDEX) unknown=$(NOPE)"
        ),
        "{logs}"
    );
    // No workingDir: a directory of the pod's own under the data dir.
    let pwd = lines.next().unwrap_or("");
    assert!(
        pwd.ends_with(&uid) && pwd.starts_with(c.data_dir().to_str().unwrap()),
        "{pwd}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_restarts_in_place_and_keeps_the_previous_log() {
    let c = Cluster::start().await;
    let wd = tempfile::tempdir().unwrap();
    let mut p = pod(
        "flaky",
        &[
            "sh",
            "-c",
            "if [ -f ran ]; then echo second; exit 0; fi; touch ran; echo first; exit 1",
        ],
        "OnFailure",
    );
    p["spec"]["containers"][0]["workingDir"] = json!(wd.path());
    c.create(p).await;
    let p = c.wait_phase("flaky", "Succeeded", 10).await;
    let cs = status_of(&p, "main");
    assert_eq!(cs.restart_count, 1);
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    assert!(cs.container_id.as_deref().unwrap().ends_with("/main/1"));
    let pods = c.pods();
    assert_eq!(
        pods.logs("flaky", &LogParams::default()).await.unwrap(),
        "second\n"
    );
    let previous = LogParams {
        previous: true,
        ..LogParams::default()
    };
    assert_eq!(pods.logs("flaky", &previous).await.unwrap(), "first\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_loop_backs_off_and_reports_it() {
    let c = Cluster::start().await;
    c.create(pod("crash", &["sh", "-c", "exit 2"], "OnFailure"))
        .await;
    // First restart is immediate, the next waits 10 s: the container shows CrashLoopBackOff.
    let p = c
        .wait_pod("crash", 10, "CrashLoopBackOff", |p| {
            waiting_of(p, "main").and_then(|w| w.reason).as_deref() == Some("CrashLoopBackOff")
        })
        .await;
    let cs = status_of(&p, "main");
    assert_eq!(cs.restart_count, 1);
    let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
    let msg = w.message.as_deref().unwrap_or("");
    assert!(
        msg.starts_with("back-off 10s restarting failed container=main pod=crash_default("),
        "{msg}"
    );
    assert_eq!(
        cs.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        2
    );
    assert_eq!(phase_of(&p), "Running");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_pod_stops_its_process_group_and_removes_it() {
    let c = Cluster::start().await;
    let m = marker("delete");
    let mut p = pod(
        "sleeper",
        &["sh", "-c", "echo started; sleep 1000 & wait"],
        "Never",
    );
    p["spec"]["containers"][0]["env"] = json!([{"name": "KBATCH_TEST_MARKER", "value": m}]);
    c.create(p).await;
    let p = c.wait_phase("sleeper", "Running", 10).await;
    let uid = p.metadata.uid.clone().unwrap();
    eventually(
        Duration::from_secs(5),
        "sh and sleep are running",
        || async { (processes_with_marker(&m).len() >= 2).then_some(()) },
    )
    .await;
    let log_dir = c.log_dir().join(format!("default_sleeper_{uid}"));
    assert!(log_dir.exists());
    c.delete("sleeper").await;
    c.wait_gone("sleeper", 10).await;
    assert!(
        processes_with_marker(&m).is_empty(),
        "processes left behind"
    );
    assert!(!log_dir.exists(), "logs removed with the pod");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pod_keeps_its_logs_until_deleted_then_is_removed_with_them() {
    let c = Cluster::start().await;
    // Two finished pods: deleting one leaves the other's logs in place. Each leaves a file in
    // its working directory, which is kept with the pod.
    for name in ["done", "kept"] {
        c.create(pod(
            name,
            &["sh", "-c", "echo bye; echo 42 > result"],
            "Never",
        ))
        .await;
    }
    let mut dirs = Vec::new();
    for name in ["done", "kept"] {
        let p = c.wait_phase(name, "Succeeded", 10).await;
        let uid = p.metadata.uid.clone().unwrap();
        dirs.push((
            c.log_dir().join(format!("default_{name}_{uid}")),
            c.data_dir().join("executor/pods").join(&uid),
        ));
    }
    // Long after it ended, the pod and its logs are still there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (logs, workdir) = &dirs[0];
    assert!(logs.exists() && workdir.join("result").exists());
    c.delete("done").await;
    c.wait_gone("done", 10).await;
    eventually(
        Duration::from_secs(5),
        "files removed with the pod",
        || async { (!logs.exists() && !workdir.exists()).then_some(()) },
    )
    .await;
    assert!(dirs[1].0.exists(), "another pod's logs stay");
    assert_eq!(phase_of(&c.pods().get("kept").await.unwrap()), "Succeeded");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_working_directory_of_a_finished_pod_becomes_the_next_pods() {
    let c = Cluster::start().await;
    // Each pod prints its working directory's inode number.
    let inode_of_cwd = ["sh", "-c", "stat -c %i ."];
    let workdir_of = |p: &kbatch_api::k8s_openapi::api::core::v1::Pod| {
        let uid = p.metadata.uid.as_deref().unwrap();
        c.data_dir().join("executor/pods").join(uid)
    };
    c.create(pod("first", &inode_of_cwd, "Never")).await;
    let first_dir = workdir_of(&c.wait_phase("first", "Succeeded", 10).await);
    eventually(
        Duration::from_secs(5),
        "the empty directory moved aside",
        || async { (!first_dir.exists()).then_some(()) },
    )
    .await;
    c.create(pod("second", &inode_of_cwd, "Never")).await;
    let second_dir = workdir_of(&c.wait_phase("second", "Succeeded", 10).await);
    let pods = c.pods();
    let (first, second) = (
        pods.logs("first", &LogParams::default()).await.unwrap(),
        pods.logs("second", &LogParams::default()).await.unwrap(),
    );
    let (first, second) = (first.trim(), second.trim());
    assert!(first.parse::<u64>().is_ok(), "{first:?}");
    assert_eq!(
        first, second,
        "the second pod ran in the first one's directory"
    );
    assert!(
        !second_dir.exists(),
        "moved aside again once empty and finished"
    );
    // The pods' objects, and their logs, are untouched.
    assert_eq!(phase_of(&c.pods().get("first").await.unwrap()), "Succeeded");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_reports_the_terminated_state_before_removal() {
    let c = Cluster::start().await;
    let mut p = pod("held", &["sleep", "1000"], "Never");
    // A finalizer keeps the object after the executor's final delete, so the status stays visible.
    p["metadata"]["finalizers"] = json!(["kbatch.dev/test"]);
    c.create(p).await;
    c.wait_phase("held", "Running", 10).await;
    c.delete("held").await;
    let p = c.wait_phase("held", "Failed", 10).await;
    let t = status_of(&p, "main")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((t.exit_code, t.signal), (143, Some(15)));
    // Confirmed with grace 0, as kubelet does.
    c.wait_pod("held", 10, "grace period 0", |p| {
        p.metadata.deletion_grace_period_seconds == Some(0)
    })
    .await;
    c.pods()
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    c.wait_gone("held", 10).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_the_pod() {
    let c = Cluster::start().await;
    let m = marker("deadline");
    let mut p = pod("late", &["sleep", "1000"], "Never");
    p["spec"]["activeDeadlineSeconds"] = json!(1);
    p["spec"]["containers"][0]["env"] = json!([{"name": "KBATCH_TEST_MARKER", "value": m}]);
    c.create(p).await;
    let p = c.wait_phase("late", "Failed", 10).await;
    let s = p.status.as_ref().unwrap();
    assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    assert!(processes_with_marker(&m).is_empty());

    // A deadline set on a running pod applies too (counted from its start).
    c.create(pod("later", &["sleep", "1000"], "Never")).await;
    c.wait_phase("later", "Running", 10).await;
    c.pods()
        .patch(
            "later",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 1}})),
        )
        .await
        .unwrap();
    let p = c.wait_phase("later", "Failed", 10).await;
    assert_eq!(
        p.status.as_ref().unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_pods_is_honoured() {
    let c = Cluster::start_with(RuntimeKind::Process, 2).await;
    for i in 0..4 {
        c.create(pod(&format!("p{i}"), &["sleep", "1"], "Never"))
            .await;
    }
    let pods = c.pods();
    let mut max_running = 0;
    let mut max_bound_active = 0;
    let mut done = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while done < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "pods did not all finish"
        );
        let list = pods.list(&Default::default()).await.unwrap();
        let phases: HashMap<String, String> = list
            .items
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap(), phase_of(p).to_string()))
            .collect();
        let running = phases.values().filter(|p| *p == "Running").count();
        let bound_active = list
            .items
            .iter()
            .filter(|p| {
                p.spec.as_ref().unwrap().node_name.is_some()
                    && !matches!(phase_of(p), "Succeeded" | "Failed")
            })
            .count();
        max_running = max_running.max(running);
        max_bound_active = max_bound_active.max(bound_active);
        done = phases.values().filter(|p| *p == "Succeeded").count();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(max_running <= 2, "{max_running} running at once");
    assert!(max_bound_active <= 2, "{max_bound_active} bound at once");
    assert_eq!(max_running, 2, "two ran side by side");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_without_command_fails_clearly() {
    let c = Cluster::start().await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nocmd"},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "args": ["echo"]}]}
    }))
    .await;
    let p = c.wait_phase("nocmd", "Failed", 10).await;
    let w = waiting_of(&p, "main").expect("main is waiting");
    assert_eq!(w.reason.as_deref(), Some("CreateContainerConfigError"));
    let msg = w.message.unwrap_or_default();
    assert!(
        msg.contains("container \"main\" has no command") && msg.contains("process executor"),
        "{msg}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_first_in_order() {
    let c = Cluster::start().await;
    let wd = tempfile::tempdir().unwrap();
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "init"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [
                {"name": "one", "image": "x", "workingDir": wd.path(), "command": ["sh", "-c", "echo one >> order"]},
                {"name": "two", "image": "x", "workingDir": wd.path(), "command": ["sh", "-c", "echo two >> order"]}
            ],
            "containers": [{"name": "main", "image": "x", "workingDir": wd.path(),
                "command": ["sh", "-c", "echo main >> order; cat order"]}]}
    }))
    .await;
    let p = c.wait_phase("init", "Succeeded", 10).await;
    for name in ["one", "two"] {
        let t = init_status_of(&p, name)
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!(t.exit_code, 0);
    }
    let logs = c
        .pods()
        .logs(
            "init",
            &LogParams {
                container: Some("main".into()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(logs, "one\ntwo\nmain\n");

    // A failing init container under Never fails the pod; the main container never starts.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "badinit"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [{"name": "one", "image": "x", "command": ["false"]}],
            "containers": [{"name": "main", "image": "x", "command": ["true"]}]}
    }))
    .await;
    let p = c.wait_phase("badinit", "Failed", 10).await;
    let w = waiting_of(&p, "main").expect("main is waiting");
    assert_eq!(w.reason.as_deref(), Some("PodInitializing"));
    assert_eq!(condition(&p, "Initialized").status, "False");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_run_beside_the_containers_and_stop_after_them() {
    let c = Cluster::start().await;
    let wd = tempfile::tempdir().unwrap();
    let m = marker("sidecar");
    // The sidecar exits once at first (restarted at once: its first back-off is zero), then
    // runs until stopped; the main container waits for the sidecar's second run and the next
    // init container, which only starts once the sidecar has run.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "side"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [
                {"name": "proxy", "image": "x", "restartPolicy": "Always", "workingDir": wd.path(),
                 "env": [{"name": "KBATCH_TEST_MARKER", "value": m}],
                 "command": ["sh", "-c", "echo run >> proxy-runs; [ $(wc -l < proxy-runs) -ge 2 ] || exit 7; exec sleep 600"]},
                {"name": "setup", "image": "x", "workingDir": wd.path(), "command": ["sh", "-c", "echo setup >> order"]}
            ],
            "containers": [{"name": "main", "image": "x", "workingDir": wd.path(),
                "command": ["sh", "-c", "while [ $(wc -l < proxy-runs) -lt 2 ]; do sleep 0.05; done; sleep 0.3; echo main >> order"]}]}
    }))
    .await;
    let running = c
        .wait_pod("side", 10, "main running beside the sidecar", |p| {
            phase_of(p) == "Running" && is_ready(p, "main")
        })
        .await;
    let proxy = init_status_of(&running, "proxy");
    assert!(proxy.state.as_ref().unwrap().running.is_some(), "{proxy:?}");
    assert_eq!(proxy.started, Some(true));
    assert!(proxy.ready);
    assert_eq!(condition(&running, "Initialized").status, "True");
    assert_eq!(condition(&running, "ContainersReady").status, "True");

    // The main container's success decides the pod; the sidecar is stopped, and its end
    // (by SIGTERM) does not fail the pod.
    let p = c.wait_phase("side", "Succeeded", 20).await;
    let proxy = init_status_of(&p, "proxy");
    assert!(proxy.restart_count >= 1, "{proxy:?}");
    assert!(
        proxy.state.as_ref().unwrap().terminated.is_some(),
        "{proxy:?}"
    );
    let last = proxy
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref());
    assert_eq!(last.map(|t| t.exit_code), Some(7), "{proxy:?}");
    let setup = init_status_of(&p, "setup").state.clone().unwrap();
    assert_eq!(setup.terminated.map(|t| t.exit_code), Some(0));
    let order = std::fs::read_to_string(wd.path().join("order")).unwrap();
    assert_eq!(order, "setup\nmain\n");
    eventually(
        Duration::from_secs(5),
        "no sidecar process left",
        || async { processes_with_marker(&m).is_empty().then_some(()) },
    )
    .await;
    c.shutdown().await;
}

/// The events about `pod`, oldest first: (reason, type, source component, source host,
/// field path, message).
async fn pod_events(c: &Cluster, pod: &str) -> Vec<[String; 6]> {
    let api: kube::Api<kbatch_api::k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(c.pods().into_client(), "default");
    let lp = kube::api::ListParams::default().fields(&format!(
        "involvedObject.name={pod},involvedObject.kind=Pod"
    ));
    let mut events = api.list(&lp).await.expect("list events").items;
    events.sort_by_key(|e| {
        e.metadata
            .resource_version
            .clone()
            .map(|v| v.parse::<u64>().unwrap_or(0))
    });
    events
        .into_iter()
        .map(|e| {
            let source = e.source.unwrap_or_default();
            [
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                source.component.unwrap_or_default(),
                source.host.unwrap_or_default(),
                e.involved_object.field_path.unwrap_or_default(),
                e.message.unwrap_or_default(),
            ]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_and_scheduler_events_tell_the_pod_story() {
    let c = Cluster::start().await;
    c.create(pod("story", &["true"], "Never")).await;
    c.wait_phase("story", "Succeeded", 10).await;
    let s = |v: &[&str; 6]| v.map(str::to_string);
    let mut events = eventually(Duration::from_secs(5), "three events", || async {
        let e = pod_events(&c, "story").await;
        (e.len() >= 3).then_some(e)
    })
    .await;
    // The scheduler's and kubelet's recorders write independently: compare without order.
    events.sort();
    assert_eq!(
        events,
        vec![
            s(&[
                "Created",
                "Normal",
                "kubelet",
                "kbatch-node",
                "spec.containers{main}",
                "Created container: main"
            ]),
            s(&[
                "Scheduled",
                "Normal",
                "default-scheduler",
                "",
                "",
                "Successfully assigned default/story to kbatch-node"
            ]),
            s(&[
                "Started",
                "Normal",
                "kubelet",
                "kbatch-node",
                "spec.containers{main}",
                "Started container main"
            ]),
        ]
    );

    // A crash loop is a BackOff warning; deleting a running pod, Killing.
    c.create(pod("loop", &["sh", "-c", "exit 2"], "OnFailure"))
        .await;
    let uid = c
        .wait_phase("loop", "Running", 10)
        .await
        .metadata
        .uid
        .unwrap_or_default();
    let back_off = format!("Back-off restarting failed container main in pod loop_default({uid})");
    eventually(Duration::from_secs(10), "a BackOff event", || async {
        pod_events(&c, "loop")
            .await
            .iter()
            .any(|e| e[0] == "BackOff" && e[1] == "Warning" && e[5] == back_off)
            .then_some(())
    })
    .await;
    c.create(pod("victim", &["sleep", "600"], "Never")).await;
    c.wait_phase("victim", "Running", 10).await;
    c.delete("victim").await;
    eventually(Duration::from_secs(10), "a Killing event", || async {
        pod_events(&c, "victim")
            .await
            .iter()
            .any(|e| e[0] == "Killing" && e[5] == "Stopping container main")
            .then_some(())
    })
    .await;
    c.shutdown().await;
}
