//! The node's streaming endpoint (kubelet's `/exec`) against real running containers: the
//! executor runs with the API server in-process, the Node says where the endpoint listens, and
//! an independent WebSocket client speaks the remote-command protocols to it.

use crate::common;

use std::time::Duration;

use common::streams::*;
use common::*;
use futures::{SinkExt, StreamExt};
use kbatch_executor::RuntimeKind;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_commands_in_the_container() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    let workdir = sleeper(&c, "box").await;

    // Output on its channels, then the status, then a normal close. kubectl asks for v5.
    let path = exec_path(
        "box",
        "main",
        &["sh", "-c", "echo out; echo err >&2"],
        &["output", "error"],
    );
    let (mut ws, chosen) = open(port, &path, &[V5, V4]).await;
    assert_eq!(chosen.as_deref(), Some(V5));
    let s = collect(&mut ws).await;
    // kubelet's first message: an empty one on stdout, the lowest channel it writes.
    assert_eq!(s.messages.first(), Some(&(1, Vec::new())));
    assert_eq!(s.text(1), "out\n");
    assert_eq!(s.text(2), "err\n");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);
    assert_eq!(s.close, Some(1000));

    // The container's environment and working directory, exactly.
    let path = exec_path(
        "box",
        "main",
        &["sh", "-c", "echo \"$GREETING\"; pwd; echo \"${HOSTNAME}\""],
        &["output"],
    );
    let (mut ws, _) = open(port, &path, &[V5]).await;
    let s = collect(&mut ws).await;
    assert_eq!(s.text(1), format!("hello from main\n{workdir}\nbox\n"));

    // A non-zero exit: the exit code as kube-apiserver's translator reports it to a v5 client.
    let path = exec_path("box", "main", &["sh", "-c", "exit 3"], &["output"]);
    let (mut ws, _) = open(port, &path, &[V5]).await;
    let s = collect(&mut ws).await;
    assert_eq!(
        s.status(),
        r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: command terminated with exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
    );
    // ... and as kubelet writes it to a v4 client (the Python client's protocol).
    let (mut ws, chosen) = open(port, &path, &[V4]).await;
    assert_eq!(chosen.as_deref(), Some(V4));
    let s = collect(&mut ws).await;
    assert_eq!(
        s.status(),
        r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
    );
    assert_eq!(s.close, Some(1000));

    // A command that cannot start: kubelet's internal error.
    let path = exec_path("box", "main", &["no-such-program-kbatch"], &["output"]);
    let (mut ws, _) = open(port, &path, &[V4]).await;
    let s = collect(&mut ws).await;
    assert_eq!(
        s.status(),
        r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: exec: \"no-such-program-kbatch\": executable file not found in $PATH","reason":"InternalError","details":{"causes":[{"message":"error executing command in container: exec: \"no-such-program-kbatch\": executable file not found in $PATH"}]},"code":500}"#
    );

    // stdin, ended by v5's close signal: cat sees EOF and exits.
    let path = exec_path("box", "main", &["cat"], &["input", "output"]);
    let (mut ws, _) = open(port, &path, &[V5]).await;
    ws.send(chan(0, b"hello\n")).await.expect("send");
    ws.send(chan(0, b"world")).await.expect("send");
    ws.send(Message::binary(vec![255, 0]))
        .await
        .expect("close stdin");
    let s = collect(&mut ws).await;
    assert_eq!(s.text(1), "hello\nworld");
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);

    // Only stderr asked for: the first message is on stderr; stdout goes nowhere.
    let path = exec_path(
        "box",
        "main",
        &["sh", "-c", "echo gone; echo kept >&2"],
        &["error"],
    );
    let (mut ws, _) = open(port, &path, &[V4]).await;
    let s = collect(&mut ws).await;
    assert_eq!(s.messages.first(), Some(&(2, Vec::new())));
    assert_eq!(s.text(1), "");
    assert_eq!(s.text(2), "kept\n");

    // Lots of output arrives whole and before the status.
    let path = exec_path(
        "box",
        "main",
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done",
        ],
        &["output"],
    );
    let (mut ws, _) = open(port, &path, &[V5]).await;
    let s = collect(&mut ws).await;
    let out = s.text(1);
    assert_eq!(out.lines().count(), 20000);
    assert!(out.ends_with("line-19999\n"));
    assert_eq!(s.status(), r#"{"metadata":{},"status":"Success"}"#);

    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_protocols() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    sleeper(&c, "old").await;
    let path = exec_path("old", "main", &["sh", "-c", "echo hi; exit 2"], &["output"]);

    // The unversioned protocol: a failure's message as text, no JSON.
    let (mut ws, chosen) = open(port, &path, &["channel.k8s.io"]).await;
    assert_eq!(chosen.as_deref(), Some("channel.k8s.io"));
    let s = collect(&mut ws).await;
    assert_eq!(s.text(1), "hi\n");
    assert_eq!(
        s.status(),
        "command terminated with non-zero exit code: error executing command [sh -c echo hi; exit 2], exit code 2"
    );

    // base64: text messages, the channel as a digit.
    let (mut ws, chosen) = open(port, &path, &["v4.base64.channel.k8s.io"]).await;
    assert_eq!(chosen.as_deref(), Some("v4.base64.channel.k8s.io"));
    let mut texts = Vec::new();
    while let Some(m) = ws.next().await {
        if let Message::Text(t) = m.expect("message") {
            texts.push(t.to_string());
        }
    }
    assert_eq!(texts[0], "1");
    assert_eq!(texts[1], "1aGkK");
    assert!(texts[2].starts_with('3'), "{texts:?}");

    // The client's order decides among the protocols kubelet serves.
    let (_ws, chosen) = open(port, &path, &["v3.channel.k8s.io", "channel.k8s.io", V4]).await;
    assert_eq!(chosen.as_deref(), Some("channel.k8s.io"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_the_upgrade() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    sleeper(&c, "here").await;
    c.create(pod("done", &["true"], "Never")).await;
    c.wait_phase("done", "Succeeded", 10).await;
    let upgrade = upgrade_headers(V5);
    let echo = ["echo", "x"];

    let cases: Vec<(String, Headers, u16, &str)> = vec![
        (
            exec_path("nowhere", "main", &echo, &["output"]),
            upgrade.clone(),
            404,
            "pod does not exist",
        ),
        (
            exec_path("here", "nope", &echo, &["output"]),
            upgrade.clone(),
            500,
            "container not found (\"nope\")",
        ),
        // Finished: nothing runs in it.
        (
            exec_path("done", "main", &echo, &["output"]),
            upgrade.clone(),
            500,
            "container not found (\"main\")",
        ),
        (
            exec_path("here", "main", &echo, &[]),
            upgrade.clone(),
            400,
            "you must specify at least 1 of stdin, stdout, stderr",
        ),
        (
            exec_path("here", "main", &[], &["output"]),
            upgrade.clone(),
            400,
            "you must specify at least one command for the container",
        ),
        (
            exec_path("here", "main", &echo, &["output"]),
            Vec::new(),
            400,
            "unable to upgrade: X-Stream-Protocol-Version is required\n",
        ),
        // No protocol kubelet serves.
        (
            exec_path("here", "main", &echo, &["output"]),
            upgrade_headers("v2.channel.k8s.io"),
            403,
            "",
        ),
        // SPDY: a protocol it does not serve, then one without the upgrade headers.
        (
            exec_path("here", "main", &echo, &["output"]),
            vec![
                ("Connection", "Upgrade"),
                ("Upgrade", "SPDY/3.1"),
                ("X-Stream-Protocol-Version", "v9.channel.k8s.io"),
            ],
            403,
            "unable to upgrade: unable to negotiate protocol: client supports \
             [v9.channel.k8s.io], server accepts [v4.channel.k8s.io v3.channel.k8s.io \
             v2.channel.k8s.io channel.k8s.io]\n",
        ),
        (
            exec_path("here", "main", &echo, &["output"]),
            vec![("X-Stream-Protocol-Version", "v4.channel.k8s.io")],
            400,
            "unable to upgrade: missing upgrade headers in request\n",
        ),
    ];
    for (path, headers, status, body) in cases {
        let (got, head, got_body) = raw_request(port, &path, &headers).await;
        assert_eq!((got, got_body.as_str()), (status, body), "{path}");
        if !body.is_empty() {
            assert!(
                head.contains("content-type: text/plain; charset=utf-8"),
                "{head}"
            );
        }
    }
    // The pod's UID in the path must be the pod's.
    let p = c.pods().get("here").await.expect("pod");
    let uid = p.metadata.uid.expect("uid");
    let path =
        exec_path("here", "main", &echo, &["output"]).replace("/here/", &format!("/here/{uid}/"));
    let (mut session, _) = open(port, &path, &[V5]).await;
    assert_eq!(collect(&mut session).await.text(1), "x\n");
    let path = exec_path("here", "main", &echo, &["output"]).replace("/here/", "/here/other-uid/");
    let (status, _, body) = raw_request(port, &path, &upgrade).await;
    assert_eq!(
        (status, body.as_str()),
        (500, "container not found (\"main\")")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_with_a_tty() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    sleeper(&c, "term").await;
    let path = exec_path(
        "term",
        "main",
        &[
            "sh",
            "-c",
            "test -t 0 && test -t 1 && echo on-a-tty; read a; stty size; read b; stty size; exit 4",
        ],
        &["input", "output", "error", "tty"],
    );
    let (mut ws, _) = open(port, &path, &[V5]).await;
    read_until(&mut ws, 1, "on-a-tty").await;
    ws.send(chan(4, br#"{"Width":100,"Height":40}"#))
        .await
        .expect("resize");
    ws.send(chan(0, b"a\n")).await.expect("stdin");
    read_until(&mut ws, 1, "40 100").await;
    ws.send(chan(4, br#"{"Width":120,"Height":50}"#))
        .await
        .expect("resize");
    ws.send(chan(0, b"b\n")).await.expect("stdin");
    let s = collect(&mut ws).await;
    let out = s.text(1);
    // The terminal echoes the input and ends lines with CRLF.
    assert!(out.contains("50 120\r\n"), "{out:?}");
    assert_eq!(s.text(2), "", "with a TTY, stderr goes to the terminal");
    assert!(
        s.status()
            .contains(r#""details":{"causes":[{"reason":"ExitCode","message":"4"}]}"#),
        "{}",
        s.status()
    );
    c.shutdown().await;
}

/// Whether a process with this pid is alive (zombies count as gone).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

async fn eventually_gone(pid: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_ends_with_its_client_and_its_container() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;
    sleeper(&c, "brief").await;

    // The client goes away: the command and what it started are killed.
    let path = exec_path(
        "brief",
        "main",
        &["sh", "-c", "sleep 300 & echo $! $$; wait"],
        &["output"],
    );
    let (mut ws, _) = open(port, &path, &[V5]).await;
    let pids = read_until(&mut ws, 1, "\n").await;
    let pids: Vec<String> = pids.split_whitespace().map(str::to_string).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(alive(&pids[0]) && alive(&pids[1]));
    ws.close(None).await.expect("close");
    drop(ws);
    for pid in &pids {
        eventually_gone(pid).await;
    }

    // The container stops: so does what was exec'd in it (SIGKILL: 137).
    let path = exec_path("brief", "main", &["sleep", "300"], &["output"]);
    let (mut ws, _) = open(port, &path, &[V5]).await;
    // The session is open once its first (empty) message came.
    match ws.next().await {
        Some(Ok(Message::Binary(b))) => assert_eq!(&b[..], &[1]),
        other => panic!("unexpected {other:?}"),
    }
    c.delete("brief").await;
    let s = collect(&mut ws).await;
    assert!(s.status().contains(r#""message":"137""#), "{}", s.status());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_containers_cannot_be_exec_d_into() {
    let c = Cluster::start_with(RuntimeKind::Simulate, 110).await;
    let port = node_port(&c).await;
    let mut p = pod("sim", &["sleep", "1"], "Never");
    p["metadata"]["annotations"] = json!({"kbatch.dev/simulate-duration": "30s"});
    c.create(p).await;
    c.wait_pod("sim", 10, "main running", |p| running(p, "main"))
        .await;
    let path = exec_path("sim", "main", &["true"], &["output"]);
    let (status, _, body) = raw_request(port, &path, &upgrade_headers(V5)).await;
    assert_eq!(
        (status, body.as_str()),
        (500, "container not found (\"main\")")
    );
    c.shutdown().await;
}
