//! WebSocket clients of the node's streaming endpoint (exec and attach), through an
//! independent WebSocket implementation.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kbatch_api::k8s_openapi;
use kube::api::Api;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{WebSocketStream, client_async};

use super::Cluster;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

/// The streaming port the Node reports.
pub async fn node_port(c: &Cluster) -> u16 {
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

pub fn running(p: &Pod, container: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// A pod whose container `main` sleeps, with an env var and a working directory of its own.
pub async fn sleeper(c: &Cluster, name: &str) -> String {
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
pub fn exec_path(pod: &str, container: &str, command: &[&str], streams: &[&str]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for c in command {
        q.append_pair("command", c);
    }
    for s in streams {
        q.append_pair(s, "1");
    }
    format!("/exec/default/{pod}/{container}?{}", q.finish())
}

pub type Ws = WebSocketStream<TcpStream>;

/// Open the exec session, offering `protocols`; the protocol the node chose.
pub async fn open(port: u16, path: &str, protocols: &[&str]) -> (Ws, Option<String>) {
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
pub struct Session {
    /// Every data message, as (channel, payload), in order.
    pub messages: Vec<(u8, Vec<u8>)>,
    pub close: Option<u16>,
}

impl Session {
    pub fn channel(&self, ch: u8) -> Vec<u8> {
        self.messages
            .iter()
            .filter(|(c, _)| *c == ch)
            .flat_map(|(_, d)| d.clone())
            .collect()
    }

    pub fn text(&self, ch: u8) -> String {
        String::from_utf8(self.channel(ch)).expect("utf-8")
    }

    /// The status, checked to be the last message.
    pub fn status(&self) -> String {
        let (ch, data) = self.messages.last().expect("a status message");
        assert_eq!(*ch, 3, "the status comes last: {self:?}");
        String::from_utf8(data.clone()).expect("utf-8")
    }
}

/// One binary message on the v4/v5 channels.
pub fn chan(ch: u8, data: &[u8]) -> Message {
    let mut m = vec![ch];
    m.extend_from_slice(data);
    Message::binary(m)
}

/// Read the session to its end (the node's close frame), within 20 s.
pub async fn collect(ws: &mut Ws) -> Session {
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
pub async fn read_until(ws: &mut Ws, ch: u8, what: &str) -> String {
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
pub async fn raw_request(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
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

pub type Headers = Vec<(&'static str, &'static str)>;

/// The headers of a WebSocket upgrade, with `protocol` offered.
pub fn upgrade_headers(protocol: &'static str) -> Headers {
    vec![
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", protocol),
    ]
}
