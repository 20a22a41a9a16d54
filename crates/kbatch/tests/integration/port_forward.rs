//! `kubectl port-forward` against `kbatch up --executor process`: the API server passes the
//! upgrade to the node's kubelet endpoint, which connects each forwarded connection to the
//! port on the pod's network (the host's, for host processes). kubectl's default (SPDY
//! tunnelled through WebSocket) and its SPDY fallback both work; a port nothing listens on is
//! reported in kubelet's words.
//!
//! Needs kubectl and python3 on PATH (fails, not skips, without them).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

/// A port nothing listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A ready pod whose container answers each connection with what it read, upper-cased.
async fn serving_pod(server: &Server, name: &str, port: u16) {
    let script = format!(
        "import socket\n\
         s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('127.0.0.1', {port})); s.listen()\n\
         while True:\n    c, _ = s.accept(); c.sendall(c.recv(1024).upper()); c.close()\n"
    );
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "python", "command": ["python3", "-c", script],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    eventually(Duration::from_secs(30), "pod ready", || async {
        pods.get(name).await.ok().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;
}

/// A running `kubectl port-forward`, killed when dropped.
struct Forward {
    child: Child,
    /// The local port kubectl chose.
    local: u16,
    stderr: mpsc::Receiver<String>,
}

impl Forward {
    fn start(server: &Server, pod: &str, remote: u16, websockets: bool) -> Forward {
        let mut child = Command::new("kubectl")
            .args([
                "port-forward",
                &format!("pod/{pod}"),
                &format!(":{remote}"),
                "--address",
                "127.0.0.1",
            ])
            .env("KUBECONFIG", server.kubeconfig())
            .env(
                "KUBECTL_PORT_FORWARD_WEBSOCKETS",
                if websockets { "true" } else { "false" },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl port-forward");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // "Forwarding from 127.0.0.1:PORT -> REMOTE"
                if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:")
                    && let Some(port) = rest.split_whitespace().next()
                    && let Ok(port) = port.parse::<u16>()
                {
                    let _ = tx.send(port);
                }
            }
        });
        let stderr = child.stderr.take().expect("stderr");
        let (etx, erx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut all = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut all);
            let _ = etx.send(all);
        });
        let local = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                let err = erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
                panic!("kubectl port-forward did not start: {err}");
            }
        };
        Forward {
            child,
            local,
            stderr: erx,
        }
    }

    /// One forwarded connection: what the pod answered to `message`.
    fn round_trip(&self, message: &[u8]) -> Vec<u8> {
        let mut c = TcpStream::connect(("127.0.0.1", self.local)).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        c.write_all(message).expect("write");
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("read");
        got
    }

    /// kubectl's exit code and stderr once it has ended (within `timeout`).
    fn wait_end(mut self, timeout: Duration) -> (Option<i32>, String) {
        let deadline = std::time::Instant::now() + timeout;
        let code = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status.code();
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let err = self
            .stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default();
        (code, err)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn kubectl_port_forward_reaches_the_pods_port_over_websocket_and_spdy() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let port = free_port();
    serving_pod(&server, "web", port).await;

    for websockets in [true, false] {
        let forward = Forward::start(&server, "web", port, websockets);
        // Several connections through one session, one after another.
        for i in 0..3 {
            let got = forward.round_trip(format!("hello {i}").as_bytes());
            assert_eq!(
                String::from_utf8_lossy(&got),
                format!("HELLO {i}"),
                "websockets={websockets}\n{}",
                server.logs()
            );
        }
        drop(forward);
    }
}

#[tokio::test]
async fn a_port_nothing_listens_on_is_reported_in_kubelets_words() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let port = free_port();
    serving_pod(&server, "web", port).await;
    let closed = free_port();

    let forward = Forward::start(&server, "web", closed, true);
    let local = forward.local;
    let got = forward.round_trip(b"anyone?");
    assert!(got.is_empty());
    // kubectl prints the error stream's message and gives up on the session.
    let (code, err) = forward.wait_end(Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "an error occurred forwarding {local} -> {closed}: error forwarding port {closed} \
             to pod "
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "dial tcp4 127.0.0.1:{closed}: connect: connection refused"
        )),
        "{err}"
    );
    assert!(err.contains("lost connection to pod"), "{err}");
}

async fn get(client: &kube::Client, path: &str) -> common::Raw {
    common::raw(client, "GET", path, None, Vec::new()).await
}

#[tokio::test]
async fn port_forward_requests_are_checked_as_upstream_checks_them() {
    let server = Server::start_with(&["--executor", "process"]).await;
    let client = server.client().await;
    let port = free_port();
    serving_pod(&server, "web", port).await;

    // A plain request (no upgrade).
    let r = get(&client, "/api/v1/namespaces/default/pods/web/portforward").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["message"], "Upgrade request required");

    // Ports that are not 16-bit numbers, in the conversion's words.
    let r = get(
        &client,
        "/api/v1/namespaces/default/pods/web/portforward?ports=80,http",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "cannot convert to []int32: strconv.ParseUint: parsing \"http\": invalid syntax"
    );

    // A pod that does not exist, or is not on a node.
    let r = get(&client, "/api/v1/namespaces/default/pods/nope/portforward").await;
    assert_eq!(r.status, 404, "{}", r.body);
    let pending: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending"},
        "spec": {"schedulerName": "elsewhere", "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    Api::<Pod>::default_namespaced(client.clone())
        .create(&PostParams::default(), &pending)
        .await
        .expect("create");
    let r = get(
        &client,
        "/api/v1/namespaces/default/pods/pending/portforward",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "pod pending does not have a host assigned"
    );

    // Discovery lists the subresource.
    let r = get(&client, "/api/v1").await;
    let resources = r.json()["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pf = resources
        .iter()
        .find(|r| r["name"] == "pods/portforward")
        .unwrap_or_else(|| panic!("{}", r.body));
    assert_eq!(pf["kind"], "PodPortForwardOptions");
    assert_eq!(pf["verbs"], json!(["create", "get"]));
}
