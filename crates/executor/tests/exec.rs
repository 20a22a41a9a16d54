//! The node's streaming endpoint (kubelet's `/exec`) against real running containers: the
//! executor runs with the API server in-process, the Node says where the endpoint listens, and
//! an independent WebSocket client speaks the remote-command protocols to it.

mod common;

use std::time::Duration;

use common::*;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kbatch_api::k8s_openapi;
use kbatch_executor::RuntimeKind;
use kube::api::Api;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{WebSocketStream, client_async};

const V5: &str = "v5.channel.k8s.io";
const V4: &str = "v4.channel.k8s.io";

/// The streaming port the Node reports.
async fn node_port(c: &Cluster) -> u16 {
    let nodes: Api<Node> = Api::all(c.client.clone());
    let node = nodes.get("kbatch-node").await.expect("node");
    let port = node
        .status
        .and_then(|s| s.daemon_endpoints)
        .and_then(|d| d.kubelet_endpoint)
        .map(|e| e.port)
        .unwrap_or(0);
    assert!(port > 0, "the node reports its streaming port");
    u16::try_from(port).expect("port")
}

fn running(p: &Pod, container: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// A pod whose container `main` sleeps, with an env var and a working directory of its own.
async fn sleeper(c: &Cluster, name: &str) -> String {
    let workdir = c.data_dir().join(format!("wd-{name}"));
    let workdir = workdir.to_string_lossy().into_owned();
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sleep", "300"],
                "workingDir": workdir,
                "env": [{"name": "GREETING", "value": "hello from main"}]
            }]
        }
    }))
    .await;
    c.wait_pod(name, 10, "main running", |p| running(p, "main"))
        .await;
    workdir
}

/// `/exec/default/{pod}/{container}` with kubelet's query.
fn exec_path(pod: &str, container: &str, command: &[&str], streams: &[&str]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for c in command {
        q.append_pair("command", c);
    }
    for s in streams {
        q.append_pair(s, "1");
    }
    format!("/exec/default/{pod}/{container}?{}", q.finish())
}

type Ws = WebSocketStream<TcpStream>;

/// Open the exec session, offering `protocols`; the protocol the node chose.
async fn open(port: u16, path: &str, protocols: &[&str]) -> (Ws, Option<String>) {
    let mut req = format!("ws://127.0.0.1:{port}{path}")
        .into_client_request()
        .expect("request");
    if !protocols.is_empty() {
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocols.join(", ").parse().expect("header"),
        );
    }
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (ws, resp) = client_async(req, tcp).await.expect("websocket handshake");
    let chosen = resp
        .headers()
        .get("Sec-WebSocket-Protocol")
        .map(|v| v.to_str().expect("protocol").to_string());
    (ws, chosen)
}

/// What a session delivered, by channel, until the node closed it.
#[derive(Debug, Default)]
struct Session {
    /// Every data message, as (channel, payload), in order.
    messages: Vec<(u8, Vec<u8>)>,
    close: Option<u16>,
}

impl Session {
    fn channel(&self, ch: u8) -> Vec<u8> {
        self.messages
            .iter()
            .filter(|(c, _)| *c == ch)
            .flat_map(|(_, d)| d.clone())
            .collect()
    }

    fn text(&self, ch: u8) -> String {
        String::from_utf8(self.channel(ch)).expect("utf-8")
    }

    /// The status, checked to be the last message.
    fn status(&self) -> String {
        let (ch, data) = self.messages.last().expect("a status message");
        assert_eq!(*ch, 3, "the status comes last: {self:?}");
        String::from_utf8(data.clone()).expect("utf-8")
    }
}

/// One binary message on the v4/v5 channels.
fn chan(ch: u8, data: &[u8]) -> Message {
    let mut m = vec![ch];
    m.extend_from_slice(data);
    Message::binary(m)
}

/// Read the session to its end (the node's close frame), within 20 s.
async fn collect(ws: &mut Ws) -> Session {
    let mut s = Session::default();
    let read = async {
        while let Some(m) = ws.next().await {
            match m.expect("websocket message") {
                Message::Binary(b) => {
                    let (ch, data) = b.split_first().expect("channel byte");
                    s.messages.push((*ch, data.to_vec()));
                }
                Message::Text(t) => panic!("a text message on a binary protocol: {t}"),
                Message::Close(frame) => {
                    s.close = frame.map(|f| u16::from(f.code));
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the session ends");
    s
}

/// Read binary messages until channel `ch` has delivered text containing `what`.
async fn read_until(ws: &mut Ws, ch: u8, what: &str) -> String {
    let mut seen = Vec::new();
    let read = async {
        while let Some(m) = ws.next().await {
            if let Message::Binary(b) = m.expect("websocket message")
                && b.first() == Some(&ch)
            {
                seen.extend_from_slice(&b[1..]);
                if String::from_utf8_lossy(&seen).contains(what) {
                    return;
                }
            }
        }
        panic!("the session ended before {what:?}");
    };
    if tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .is_err()
    {
        panic!(
            "timed out waiting for {what:?}; got {:?}",
            String::from_utf8_lossy(&seen)
        );
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// A plain HTTP request: status, headers (lower-cased names) and body.
async fn raw_request(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut resp))
        .await
        .expect("response in time")
        .expect("read");
    let resp = String::from_utf8(resp).expect("utf-8");
    let (head, body) = resp.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, head.to_ascii_lowercase(), body.to_string())
}

type Headers = Vec<(&'static str, &'static str)>;

/// The headers of a WebSocket upgrade, with `protocol` offered.
fn upgrade_headers(protocol: &'static str) -> Headers {
    vec![
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", protocol),
    ]
}

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
