//! Ephemeral containers (`kubectl debug`): added to a running pod through
//! `pods/NAME/ephemeralcontainers` with a strategic merge patch, as kubectl adds them, then run
//! by the executor as kubelet runs them: started once, never restarted, reported in
//! `status.ephemeralContainerStatuses` without touching the phase or the conditions, stopped
//! with the pod, attachable and exec-able by name, their output in their own log.

use crate::common;

use std::time::Duration;

use common::streams::*;
use common::*;
use futures::SinkExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kbatch_api::k8s_openapi;
use kbatch_executor::RuntimeKind;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// Add `container` to the pod's ephemeral containers as `kubectl debug` does: a strategic
/// merge patch of the `ephemeralcontainers` subresource holding only the new entry.
async fn add_ephemeral(c: &Cluster, pod: &str, container: Value) {
    let patch = json!({"spec": {"ephemeralContainers": [container]}});
    let result = c
        .pods()
        .patch_subresource(
            "ephemeralcontainers",
            pod,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await;
    if let Err(e) = result {
        panic!("adding an ephemeral container to {pod} through pods/ephemeralcontainers: {e}");
    }
}

/// A debugging container as kubectl debug writes it (plus what the test adds).
fn debugger(name: &str, command: &[&str], extra: Value) -> Value {
    let mut c = json!({
        "name": name, "image": "busybox", "command": command,
        "terminationMessagePolicy": "File", "resources": {}
    });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    c
}

fn ephemeral_status<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    p.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

fn ephemeral_running(p: &Pod, name: &str) -> bool {
    ephemeral_status(p, name)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// The exit code and reason of a terminated ephemeral container.
fn ephemeral_ended(p: &Pod, name: &str) -> Option<(i32, String)> {
    let t = ephemeral_status(p, name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

/// A pod whose container `main` sleeps, running.
async fn sleeping_pod(c: &Cluster, name: &str, restart_policy: &str, env: Value) -> Pod {
    let mut p = pod(name, &["sleep", "300"], restart_policy);
    p["spec"]["terminationGracePeriodSeconds"] = json!(2);
    p["spec"]["containers"][0]["env"] = env;
    c.create(p).await;
    c.wait_pod(name, 20, "main running", |p| running(p, "main"))
        .await
}

/// `pods/NAME/log?container=...`.
async fn log_of(c: &Cluster, pod: &str, container: &str) -> String {
    let path = format!("/api/v1/namespaces/default/pods/{pod}/log?container={container}");
    let (code, body) = get_raw(&c.client, &path).await;
    assert_eq!(code, 200, "{body}");
    body
}

/// The events about `pod` with the field path of `container` in the ephemeral list:
/// (reason, message).
async fn ephemeral_events(c: &Cluster, pod: &str, container: &str) -> Vec<(String, String)> {
    let api: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(c.client.clone(), "default");
    let lp = kube::api::ListParams::default().fields(&format!(
        "involvedObject.name={pod},involvedObject.kind=Pod"
    ));
    let path = format!("spec.ephemeralContainers{{{container}}}");
    api.list(&lp)
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.field_path.as_deref() == Some(path.as_str()))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_runs_once_and_leaves_the_pod_alone() {
    let c = Cluster::start().await;
    let before = sleeping_pod(&c, "target", "Always", json!([])).await;
    let uid = before.metadata.uid.clone().unwrap_or_default();
    let workdir = c.data_dir().join("executor/pods").join(&uid);

    // Its env and `$(VAR)` expansion are built as a regular container's; it exits non-zero,
    // which would restart a regular container under restartPolicy Always.
    add_ephemeral(
        &c,
        "target",
        debugger(
            "debugger",
            &[
                "sh",
                "-c",
                "echo debug $(GREETING) in $PWD; echo oops >&2; exit 3",
            ],
            json!({"env": [{"name": "GREETING", "value": "hi"}]}),
        ),
    )
    .await;
    let p = c
        .wait_pod("target", 20, "the debugger ended", |p| {
            ephemeral_ended(p, "debugger").is_some()
        })
        .await;
    assert_eq!(
        ephemeral_ended(&p, "debugger"),
        Some((3, "Error".to_string()))
    );
    let s = ephemeral_status(&p, "debugger").expect("status");
    assert_eq!(s.restart_count, 0);
    assert!(!s.ready);
    assert_eq!(s.started, None, "kubelet sets no `started` for them");
    assert_eq!(s.image, "busybox");
    assert_eq!(s.image_id, "");
    let id = format!("kbatch://{uid}/debugger/0");
    assert_eq!(s.container_id.as_deref(), Some(id.as_str()));
    let t = s.state.as_ref().and_then(|st| st.terminated.as_ref());
    assert_eq!(t.and_then(|t| t.container_id.as_deref()), Some(id.as_str()));
    assert!(t.is_some_and(|t| t.started_at.is_some() && t.finished_at.is_some()));
    assert!(
        s.last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_none())
    );

    // The pod did not notice: still running, ready, its container never restarted.
    assert_eq!(phase_of(&p), "Running");
    assert_eq!(condition(&p, "Ready").status, "True");
    assert_eq!(condition(&p, "ContainersReady").status, "True");
    assert_eq!(status_of(&p, "main").restart_count, 0);
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    assert_eq!(statuses.map(Vec::len), Some(1), "only main is a container");

    // stdout and stderr are pumped apart: their order in the log is not the process's.
    let log = log_of(&c, "target", "debugger").await;
    let workdir = std::fs::canonicalize(&workdir).unwrap_or(workdir);
    let line = format!("debug hi in {}\n", workdir.display());
    assert!(log.contains(&line) && log.contains("oops\n"), "{log}");
    assert_eq!(log.len(), line.len() + "oops\n".len(), "{log}");

    // A second one: statuses are sorted by name (as kubelet sorts them), and each runs once.
    add_ephemeral(
        &c,
        "target",
        debugger("another", &["sh", "-c", "echo second"], json!({})),
    )
    .await;
    let p = c
        .wait_pod("target", 20, "the second debugger ended", |p| {
            ephemeral_ended(p, "another").is_some()
        })
        .await;
    assert_eq!(
        ephemeral_ended(&p, "another"),
        Some((0, "Completed".to_string()))
    );
    let names: Vec<&str> = p
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .map(|l| l.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["another", "debugger"]);
    assert_eq!(log_of(&c, "target", "another").await, "second\n");

    // Never restarted: a while later nothing has changed, and no second run was logged.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = c.pods().get("target").await.expect("pod");
    assert_eq!(
        ephemeral_ended(&p, "debugger"),
        Some((3, "Error".to_string()))
    );
    assert_eq!(
        ephemeral_status(&p, "debugger").map(|s| s.restart_count),
        Some(0)
    );
    let second_run = c
        .log_dir()
        .join(format!("default_target_{uid}"))
        .join("debugger")
        .join("1.log");
    assert!(!second_run.exists(), "{second_run:?}");
    assert_eq!(phase_of(&p), "Running");

    // kubelet's events, addressed to the ephemeral container.
    let events = eventually(Duration::from_secs(10), "Created and Started", || async {
        let e = ephemeral_events(&c, "target", "debugger").await;
        (e.len() >= 2).then_some(e)
    })
    .await;
    assert!(
        events.contains(&("Created".into(), "Created container: debugger".into())),
        "{events:?}"
    );
    assert!(
        events.contains(&("Started".into(), "Started container debugger".into())),
        "{events:?}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_pod_stops_its_ephemeral_container() {
    let c = Cluster::start().await;
    let m = marker("ephemeral-delete");
    sleeping_pod(&c, "doomed", "Never", json!([])).await;
    add_ephemeral(
        &c,
        "doomed",
        debugger(
            "debugger",
            &["sh", "-c", "sleep 300 & wait"],
            json!({"env": [{"name": "KBATCH_TEST_MARKER", "value": m}]}),
        ),
    )
    .await;
    let p = c
        .wait_pod("doomed", 20, "the debugger running", |p| {
            ephemeral_running(p, "debugger")
        })
        .await;
    // Running beside main, yet unready and uncounted: the pod stays Ready.
    assert_eq!(phase_of(&p), "Running");
    assert_eq!(condition(&p, "Ready").status, "True");
    assert!(ephemeral_status(&p, "debugger").is_some_and(|s| !s.ready));
    eventually(Duration::from_secs(10), "its processes run", || async {
        (processes_with_marker(&m).len() >= 2).then_some(())
    })
    .await;
    // `kubectl debug` without a command: the image's entrypoint is unknown here, so it waits
    // with kubelet's config error, and the pod runs on (a regular container would fail it).
    add_ephemeral(
        &c,
        "doomed",
        json!({"name": "bare", "image": "busybox", "terminationMessagePolicy": "File"}),
    )
    .await;
    let p = c
        .wait_pod("doomed", 20, "the bare debugger waiting", |p| {
            ephemeral_status(p, "bare")
                .and_then(|s| s.state.as_ref())
                .and_then(|s| s.waiting.as_ref())
                .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
        })
        .await;
    assert_eq!(phase_of(&p), "Running");
    assert!(ephemeral_running(&p, "debugger"));

    c.delete("doomed").await;
    c.wait_gone("doomed", 30).await;
    eventually(Duration::from_secs(10), "no process is left", || async {
        processes_with_marker(&m).is_empty().then_some(())
    })
    .await;
    eventually(Duration::from_secs(10), "a Killing event", || async {
        ephemeral_events(&c, "doomed", "debugger")
            .await
            .contains(&("Killing".into(), "Stopping container debugger".into()))
            .then_some(())
    })
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_ends_once_its_regular_containers_are_done_and_the_debugger_is_stopped() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    // main waits for a file in the pod's working directory, which the debugger shares.
    let mut p = pod(
        "job-like",
        &["sh", "-c", "while [ ! -e done ]; do sleep 0.1; done"],
        "OnFailure",
    );
    p["spec"]["terminationGracePeriodSeconds"] = json!(2);
    c.create(p).await;
    c.wait_pod("job-like", 20, "main running", |p| running(p, "main"))
        .await;
    add_ephemeral(
        &c,
        "job-like",
        debugger(
            "debugger",
            &["sh", "-c", "sleep 300 & wait"],
            json!({"env": [{"name": "WHO", "value": "the debugger"}]}),
        ),
    )
    .await;
    c.wait_pod("job-like", 20, "the debugger running", |p| {
        ephemeral_running(p, "debugger")
    })
    .await;

    // exec finds it by name, with its env, in its working directory.
    let path = exec_path(
        "job-like",
        "debugger",
        &["sh", "-c", "echo $WHO; touch done"],
        &["output"],
    );
    let (mut ws, _) = open(port, &path, &[V5]).await;
    let s = collect(&mut ws).await;
    assert_eq!(s.text(1), "the debugger\n");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);

    // main completes: the debugger is stopped (SIGTERM), and only then is the pod reported
    // Succeeded, the debugger's end counting for nothing.
    let p = c.wait_phase("job-like", "Succeeded", 30).await;
    assert_eq!(
        ephemeral_ended(&p, "debugger"),
        Some((143, "Error".to_string()))
    );
    let main = status_of(&p, "main");
    assert_eq!(main.restart_count, 0);
    let ended = main.state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(ended.map(|t| t.exit_code), Some(0));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_with_a_tty_can_be_attached() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    sleeping_pod(&c, "shell", "OnFailure", json!([])).await;
    // `kubectl debug -it shell --image=busybox -- sh`.
    add_ephemeral(
        &c,
        "shell",
        debugger("debugger", &["sh"], json!({"stdin": true, "tty": true})),
    )
    .await;
    c.wait_pod("shell", 20, "the debugger running", |p| {
        ephemeral_running(p, "debugger")
    })
    .await;

    let path = "/attach/default/shell/debugger?input=1&output=1&tty=1";
    let (mut ws, _) = open(port, path, &[V5]).await;
    ws.send(chan(4, br#"{"Width":90,"Height":30}"#))
        .await
        .expect("resize");
    ws.send(chan(0, b"stty size; echo sum-$((1+2))\n"))
        .await
        .expect("send");
    let seen = read_until(&mut ws, 1, "sum-3").await;
    assert!(seen.contains("30 90"), "{seen:?}");
    // The shell exits non-zero: under OnFailure a regular container would restart.
    ws.send(chan(0, b"exit 7\n")).await.expect("send");
    let s = collect(&mut ws).await;
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);

    let p = c
        .wait_pod("shell", 20, "the debugger ended", |p| {
            ephemeral_ended(p, "debugger").is_some()
        })
        .await;
    assert_eq!(
        ephemeral_ended(&p, "debugger"),
        Some((7, "Error".to_string()))
    );
    assert_eq!(phase_of(&p), "Running");
    let log = log_of(&c, "shell", "debugger").await;
    assert!(log.contains("sum-3"), "{log}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = c.pods().get("shell").await.expect("pod");
    assert_eq!(
        ephemeral_status(&p, "debugger").map(|s| s.restart_count),
        Some(0)
    );
    assert!(ephemeral_ended(&p, "debugger").is_some(), "not restarted");

    // Nothing runs under that name any more.
    let (status, _, body) = raw_request(port, path, &upgrade_headers(V5)).await;
    assert_eq!(
        (status, body.as_str()),
        (500, "container debugger not found in pod shell_default")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_executor_fails_a_pod_whose_debugger_ran_like_any_other() {
    let mut c = Cluster::start().await;
    let m = marker("ephemeral-restart");
    sleeping_pod(&c, "before", "Never", json!([])).await;
    add_ephemeral(
        &c,
        "before",
        debugger(
            "debugger",
            &["sleep", "300"],
            json!({"env": [{"name": "KBATCH_TEST_MARKER", "value": m}]}),
        ),
    )
    .await;
    c.wait_pod("before", 20, "the debugger running", |p| {
        ephemeral_running(p, "debugger")
    })
    .await;
    c.stop_executor().await;
    assert!(
        processes_with_marker(&m).is_empty(),
        "no process outlives the executor"
    );
    c.start_executor();
    let p = c.wait_phase("before", "Failed", 20).await;
    let s = p.status.as_ref().expect("status");
    assert_eq!(s.reason.as_deref(), Some("ExecutorRestarted"));
    // What ran when the executor stopped is reported as kubelet reports a lost container.
    for ended in [
        status_of(&p, "main")
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref()),
        ephemeral_status(&p, "debugger")
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.as_ref()),
    ] {
        let ended = ended.expect("terminated");
        assert_eq!(ended.exit_code, 137);
        assert_eq!(ended.reason.as_deref(), Some("ContainerStatusUnknown"));
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_ephemeral_containers_run_as_the_pod_says_once() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 110).await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sim", "annotations": {"kbatch.dev/simulate-duration": "2s"}},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "main", "image": "busybox"}]
        }
    }))
    .await;
    c.wait_phase("sim", "Running", 20).await;
    add_ephemeral(&c, "sim", debugger("debugger", &["sh"], json!({}))).await;
    let p = c
        .wait_pod("sim", 20, "the simulated debugger ended", |p| {
            ephemeral_ended(p, "debugger").is_some()
        })
        .await;
    assert_eq!(
        ephemeral_ended(&p, "debugger"),
        Some((0, "Completed".to_string()))
    );
    // main restarts under Always; the debugger does not.
    let p = c
        .wait_pod("sim", 30, "main restarted", |p| {
            status_of(p, "main").restart_count >= 1
        })
        .await;
    assert_eq!(
        ephemeral_status(&p, "debugger").map(|s| s.restart_count),
        Some(0)
    );
    assert!(ephemeral_ended(&p, "debugger").is_some());
    c.shutdown().await;
}
