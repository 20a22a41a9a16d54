//! `kubectl exec` and `kubectl attach` (and `kubectl run -i`), over WebSocket and over SPDY,
//! against `kbatch up --executor process`: the API server checks the request and passes the upgraded connection to the
//! node's kubelet endpoint, which runs the command beside the container's process, with its
//! environment and working directory, or joins the container's own stdin and output.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// kubectl with the server's kubeconfig: (exit code, stdout, stderr).
fn kubectl(server: &Server, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new("kubectl");
    cmd.args(args).env("KUBECONFIG", server.kubeconfig());
    let out = common::run_captured(cmd, stdin);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// kubectl speaking SPDY for exec and attach, as kubectl before 1.30 (and client-go's
/// `SPDYExecutor`) does.
fn kubectl_spdy(server: &Server, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .env("KUBECONFIG", server.kubeconfig())
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
    let out = common::run_captured(cmd, stdin);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running pod whose container sleeps in `dir` with `GREETING` in its environment.
async fn running_pod(server: &Server, name: &str, dir: &std::path::Path) -> Api<Pod> {
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox", "command": ["sleep", "60"],
            "workingDir": dir.to_string_lossy(),
            "env": [{"name": "GREETING", "value": "hello from the container"}]}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    eventually(Duration::from_secs(20), "pod running", || async {
        pods.get(name).await.ok().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.running.is_some())
        })
    })
    .await;
    pods
}

#[tokio::test]
async fn kubectl_exec_runs_in_the_containers_environment() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _pods = running_pod(&server, "ex", dir.path()).await;

    let (code, out, err) = kubectl(
        &server,
        &[
            "exec",
            "ex",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING\"; pwd; echo to-stderr >&2",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}\n{err}\n{}", server.logs());
    let canonical = dir.path().canonicalize().expect("canonical dir");
    assert_eq!(
        out,
        format!("hello from the container\n{}\n", canonical.display())
    );
    assert!(err.contains("to-stderr"), "{err}");

    // The remote exit code is kubectl's.
    let (code, _, err) = kubectl(&server, &["exec", "ex", "--", "sh", "-c", "exit 3"], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("command terminated with exit code 3"), "{err}");

    // stdin reaches the command, and its end ends it.
    let (code, out, err) = kubectl(
        &server,
        &["exec", "-i", "ex", "--", "cat"],
        Some("line one\nline two\n"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "line one\nline two\n");

    // kubectl cp is tar through exec, both ways; the container's files are the host's.
    let src = dir.path().join("in.txt");
    std::fs::write(&src, "payload\n").expect("write");
    let to = dir.path().join("copied.txt");
    let (code, _, err) = kubectl(
        &server,
        &[
            "cp",
            &src.to_string_lossy(),
            &format!("ex:{}", to.display()),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&to).expect("copied"), "payload\n");
    let back = dir.path().join("back.txt");
    let (code, _, err) = kubectl(
        &server,
        &[
            "cp",
            &format!("ex:{}", src.display()),
            &back.to_string_lossy(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&back).expect("back"), "payload\n");
}

#[tokio::test]
async fn kubectl_exec_and_attach_over_spdy() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _pods = running_pod(&server, "sp", dir.path()).await;

    let (code, out, err) = kubectl_spdy(
        &server,
        &[
            "exec",
            "sp",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING\"; echo to-stderr >&2",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}\n{err}\n{}", server.logs());
    assert_eq!(out, "hello from the container\n");
    assert!(err.contains("to-stderr"), "{err}");

    // The exit code comes back in kubelet's v4 status.
    let (code, _, err) = kubectl_spdy(&server, &["exec", "sp", "--", "sh", "-c", "exit 3"], None);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("command terminated with exit code 3"), "{err}");

    // The end of the stdin stream closes the command's stdin.
    let (code, out, err) = kubectl_spdy(
        &server,
        &["exec", "-i", "sp", "--", "cat"],
        Some("line one\nline two\n"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "line one\nline two\n");

    // attach (through `kubectl run -i`): stdin in, output back.
    let (code, out, err) = kubectl_spdy(
        &server,
        &[
            "run",
            "-i",
            "--rm",
            "att",
            "--image=busybox",
            "--restart=Never",
            "--command",
            "--",
            "sh",
            "-c",
            "read l; echo got:$l",
        ],
        Some("over spdy\n"),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("got:over spdy"), "{out}");
}

#[tokio::test]
async fn exec_requests_are_checked_as_upstream_checks_them() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _pods = running_pod(&server, "chk", dir.path()).await;

    let (code, _, err) = kubectl(&server, &["exec", "nope", "--", "true"], None);
    assert_ne!(code, 0);
    assert!(err.contains("pods \"nope\" not found"), "{err}");

    let (code, _, err) = kubectl(&server, &["exec", "chk", "-c", "other", "--", "true"], None);
    assert_ne!(code, 0);
    assert!(
        err.contains("container other is not valid for pod chk"),
        "{err}"
    );

    // A plain request (no upgrade) is refused as upstream refuses it.
    let client = server.client().await;
    let r = common::raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/chk/exec?command=true&stdout=true",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["message"], "Upgrade request required");

    // A pod not yet on a node has no kubelet to ask.
    let pending: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending"},
        "spec": {"schedulerName": "elsewhere", "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pending)
        .await
        .expect("create");
    let (code, _, err) = kubectl(&server, &["exec", "pending", "--", "true"], None);
    assert_ne!(code, 0);
    assert!(
        err.contains("pod pending does not have a host assigned"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_run_attaches_to_the_containers_stdin() {
    let server = Server::start_with(&["--executor", "process"]).await;
    // kubectl creates the pod with stdin and stdinOnce, waits for it to run, attaches, and
    // with --rm deletes it once the session ends.
    let (code, out, err) = kubectl(
        &server,
        &[
            "run",
            "att",
            "--image=busybox",
            "--restart=Never",
            "-i",
            "--rm",
            "--command",
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"",
        ],
        Some("hello\n"),
    );
    assert_eq!(code, 0, "{out}\n{err}\n{}", server.logs());
    assert!(out.contains("got hello"), "{out}\n{err}");
    assert!(out.contains("pod \"att\" deleted"), "{out}\n{err}");
}

#[tokio::test]
async fn kubectl_attach_follows_a_containers_output() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox", "command": ["sh", "-c",
                "sleep 1; for i in 1 2 3 4 5 6; do echo tick $i; echo tock $i >&2; sleep 0.3; done"]}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    // kubectl attach waits for the pod to run, then follows its output until it exits.
    let (code, out, err) = kubectl(&server, &["attach", "ticker"], None);
    assert_eq!(code, 0, "{out}\n{err}\n{}", server.logs());
    assert!(out.contains("tick 6"), "{out}\n{err}");
    assert!(err.contains("tock 6"), "{out}\n{err}");
}

#[tokio::test]
async fn kubectl_debug_runs_an_ephemeral_container_beside_the_pods() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let pods = running_pod(&server, "dbg", dir.path()).await;
    // kubectl debug adds the container through pods/ephemeralcontainers, waits for it to run
    // and attaches to its output. (Not to its stdin: without stdinOnce, the end of a piped
    // stdin ends the session at once, as containerd's attach does, and the output may not
    // have come by then.)
    let (code, out, err) = kubectl(
        &server,
        &[
            "debug",
            "dbg",
            "--attach",
            "--image=busybox",
            "--profile=general",
            "--container=debugger",
            "--",
            "sh",
            "-c",
            "sleep 1; echo \"debugging $((6 * 7))\"",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}\n{err}\n{}", server.logs());
    assert!(out.contains("debugging 42"), "{out}\n{err}");

    // It ran once and ended; the pod's own container runs on, untouched.
    let pod = eventually(
        Duration::from_secs(20),
        "the debugger terminated",
        || async {
            pods.get("dbg").await.ok().filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.ephemeral_container_statuses.as_ref())
                    .and_then(|cs| cs.first())
                    .and_then(|c| c.state.as_ref())
                    .is_some_and(|s| s.terminated.is_some())
            })
        },
    )
    .await;
    let status = pod.status.expect("status");
    let debugger = &status.ephemeral_container_statuses.expect("ephemeral")[0];
    assert_eq!(debugger.name, "debugger");
    assert_eq!(debugger.restart_count, 0);
    let ended = debugger
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (0, Some("Completed"))
    );
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let main = &status.container_statuses.expect("containers")[0];
    assert!(main.state.as_ref().is_some_and(|s| s.running.is_some()));
    assert_eq!(main.restart_count, 0);

    let (code, out, err) = kubectl(&server, &["logs", "dbg", "-c", "debugger"], None);
    assert_eq!((code, out.as_str()), (0, "debugging 42\n"), "{err}");
    // Existing ephemeral containers may not be changed.
    let change =
        json!({"spec": {"ephemeralContainers": [{"name": "debugger", "command": ["true"]}]}});
    let err = pods
        .patch_subresource(
            "ephemeralcontainers",
            "dbg",
            &PatchParams::default(),
            &Patch::Strategic(change),
        )
        .await
        .expect_err("a change to an existing ephemeral container");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("may not be changed"), "{status:?}");
}

#[tokio::test]
async fn kubectl_exec_and_cp_see_the_containers_volumes() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A mount path that exists nowhere on the host: only the container's mount namespace
    // has the emptyDir there.
    let mount = dir.path().join("inside/data");
    let mount_path = mount.to_string_lossy().into_owned();
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vol"},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "echo written-inside > data.txt; sleep 60"],
                "workingDir": mount_path,
                "volumeMounts": [{"name": "data", "mountPath": mount_path}]
            }]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    eventually(Duration::from_secs(20), "pod running", || async {
        pods.get("vol").await.ok().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Running")
        })
    })
    .await;
    let (code, out, err) = kubectl(
        &server,
        &["exec", "vol", "--", "sh", "-c", "pwd; cat data.txt"],
        None,
    );
    assert_eq!(code, 0, "{out}\n{err}\n{}", server.logs());
    assert_eq!(out, format!("{mount_path}\nwritten-inside\n"));
    assert!(
        !mount.join("data.txt").exists(),
        "the host's mount point stays empty: the file is in the emptyDir"
    );
    // kubectl cp goes through exec: it reads inside the container's mounts too.
    let back = dir.path().join("back.txt");
    let (code, _, err) = kubectl(
        &server,
        &[
            "cp",
            &format!("vol:{mount_path}/data.txt"),
            &back.to_string_lossy(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(&back).expect("copied back"),
        "written-inside\n"
    );
}
