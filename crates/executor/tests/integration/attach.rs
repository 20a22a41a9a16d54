//! The node side of `kubectl attach` and `kubectl run -it`: containers with `stdin`,
//! `stdinOnce` and `tty` run by the process runtime, and `/attach` on the node's streaming
//! endpoint joining their streams, through an independent WebSocket client.

use crate::common;

use common::streams::*;
use common::*;
use futures::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const POD_LOG: &str = "/api/v1/namespaces/default/pods";

/// `/attach/default/{pod}/main` with kubelet's query.
fn attach_path(pod: &str, streams: &[&str]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for s in streams {
        q.append_pair(s, "1");
    }
    format!("/attach/default/{pod}/main?{}", q.finish())
}

/// A pod whose one container `main` runs `command` with `io` merged into its spec.
async fn interactive(c: &Cluster, name: &str, command: &[&str], io: Value) {
    let mut container = json!({"name": "main", "image": "busybox", "command": command});
    if let (Some(c), Some(io)) = (container.as_object_mut(), io.as_object()) {
        c.extend(io.clone());
    }
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container]
        }
    }))
    .await;
    c.wait_pod(name, 10, "main running", |p| running(p, "main"))
        .await;
}

async fn log_of(c: &Cluster, pod: &str) -> String {
    let (code, body) = get_raw(&c.client, &format!("{POD_LOG}/{pod}/log")).await;
    assert_eq!(code, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_once_ends_with_the_first_session() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    interactive(
        &c,
        "cat",
        &["cat"],
        json!({"stdin": true, "stdinOnce": true}),
    )
    .await;

    // Two sessions at once: both get the output, the second without stdin.
    let (mut writer, chosen) = open(
        port,
        &attach_path("cat", &["input", "output", "error"]),
        &[V5],
    )
    .await;
    assert_eq!(chosen.as_deref(), Some(V5));
    let (mut watcher, _) = open(port, &attach_path("cat", &["output"]), &[V4]).await;
    // The streams are open (kubelet's empty first message) before anything is typed.
    read_until(&mut watcher, 1, "").await;
    writer.send(chan(0, b"hello\n")).await.expect("send");
    read_until(&mut writer, 1, "hello\n").await;
    read_until(&mut watcher, 1, "hello\n").await;
    writer.send(chan(0, b"world\n")).await.expect("send");
    // The first session's stdin ends: cat reads EOF and exits, and every session ends with
    // kubelet's Success once the output is delivered.
    writer
        .send(Message::binary(vec![255, 0]))
        .await
        .expect("close stdin");
    let s = collect(&mut writer).await;
    assert!(s.text(1).contains("world\n"), "{s:?}");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);
    assert_eq!(s.close, Some(1000));
    let s = collect(&mut watcher).await;
    assert!(s.text(1).ends_with("world\n"), "{s:?}");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);

    c.wait_phase("cat", "Succeeded", 10).await;
    assert_eq!(log_of(&c, "cat").await, "hello\nworld\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_stays_open_across_sessions() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    interactive(&c, "keep", &["cat"], json!({"stdin": true})).await;

    let path = attach_path("keep", &["input", "output"]);
    let (mut ws, _) = open(port, &path, &[V5]).await;
    ws.send(chan(0, b"one\n")).await.expect("send");
    read_until(&mut ws, 1, "one\n").await;
    // Without stdinOnce the end of a session's stdin ends that session only.
    ws.send(Message::binary(vec![255, 0]))
        .await
        .expect("close stdin");
    let s = collect(&mut ws).await;
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);
    // A client that just leaves does not close it either.
    let (ws, _) = open(port, &path, &[V4]).await;
    drop(ws);

    let (mut ws, _) = open(port, &path, &[V4]).await;
    ws.send(chan(0, b"two\n")).await.expect("send");
    let seen = read_until(&mut ws, 1, "two\n").await;
    assert!(!seen.contains("one"), "no history: {seen:?}");
    let pods = c.pods();
    let p = pods.get("keep").await.expect("pod");
    assert!(running(&p, "main"), "cat still runs");
    assert_eq!(log_of(&c, "keep").await, "one\ntwo\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_only_gets_live_stdout_and_stderr() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    let script =
        "i=0; while [ $i -lt 15 ]; do echo out-$i; echo err-$i >&2; i=$((i+1)); sleep 0.2; done";
    interactive(&c, "talker", &["sh", "-c", script], json!({})).await;

    // stdin asked of a container without it: the output is attached, the input goes nowhere
    // (containerd attaches no stdin then).
    let (mut ws, _) = open(
        port,
        &attach_path("talker", &["input", "output", "error"]),
        &[V4],
    )
    .await;
    ws.send(chan(0, b"ignored\n")).await.expect("send");
    let s = collect(&mut ws).await;
    assert_eq!(s.messages.first(), Some(&(1, Vec::new())));
    let (out, err) = (s.text(1), s.text(2));
    assert!(out.ends_with("out-14\n") && !out.contains("err"), "{out:?}");
    assert!(err.ends_with("err-14\n") && !err.contains("out"), "{err:?}");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);
    assert_eq!(s.close, Some(1000));

    c.wait_phase("talker", "Succeeded", 10).await;
    let log = log_of(&c, "talker").await;
    assert!(log.contains("out-0\n") && log.contains("err-14\n"), "{log}");

    // The container has stopped: nothing to attach to.
    let (status, _, body) = raw_request(
        port,
        &attach_path("talker", &["output"]),
        &upgrade_headers(V5),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (500, "container main not found in pod talker_default")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tty_container_answers_and_follows_resizes() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    interactive(
        &c,
        "shell",
        &["sh"],
        json!({"stdin": true, "stdinOnce": true, "tty": true}),
    )
    .await;

    // kubectl attach -it: stderr is folded into the terminal's one stream.
    let path = attach_path("shell", &["input", "output", "error", "tty"]);
    let (mut ws, _) = open(port, &path, &[V5]).await;
    ws.send(chan(4, br#"{"Width":100,"Height":40}"#))
        .await
        .expect("resize");
    ws.send(chan(0, b"tty; stty size; echo sum-$((1+2)) >&2\n"))
        .await
        .expect("send");
    let seen = read_until(&mut ws, 1, "sum-3").await;
    assert!(seen.contains("40 100"), "{seen:?}");
    assert!(seen.contains("/dev/pts/"), "{seen:?}");
    ws.send(chan(4, br#"{"Width":81,"Height":25}"#))
        .await
        .expect("resize");
    ws.send(chan(0, b"stty size\n")).await.expect("send");
    read_until(&mut ws, 1, "25 81").await;
    // The shell exits: the session ends with Success, and the pod completes.
    ws.send(chan(0, b"exit\n")).await.expect("send");
    let s = collect(&mut ws).await;
    assert_eq!(s.text(2), "");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);
    c.wait_phase("shell", "Succeeded", 10).await;
    // The terminal's output, echo included, is in the log as stdout.
    let log = log_of(&c, "shell").await;
    assert!(log.contains("sum-3") && log.contains("25 81"), "{log}");
    c.shutdown().await;
}
