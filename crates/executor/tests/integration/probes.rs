//! Container probes against the real API server, as kubelet runs them: readiness gates a
//! container's `ready` (and the pod's Ready conditions), startup gates `started` and the other
//! probes, a failed liveness probe kills the container, which restarts unless restartPolicy is
//! Never; failures are recorded as `Unhealthy` events.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn has_status(p: &kbatch_api::k8s_openapi::api::core::v1::Pod, container: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == container))
}

async fn wait_event(c: &Cluster, name: &str, reason: &str, prefix: &str) -> String {
    eventually(
        Duration::from_secs(15),
        &format!("a {reason} event starting {prefix:?} for {name}"),
        || async {
            events_of(c, name)
                .await
                .into_iter()
                .find(|(r, m)| r == reason && m.starts_with(prefix))
                .map(|(_, m)| m)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_then_readiness_gate_started_and_ready() {
    let c = Cluster::start().await;
    // The probes run in the container's working directory with its env. The gap between the
    // two files outlasts a startup probe period plus a loaded machine's status write, so the
    // started-but-not-ready state is there to be seen.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox",
            "command": ["sh", "-c", "sleep 1; touch started; sleep 3; touch ready; exec sleep 60"],
            "env": [{"name": "MARK", "value": "ready"}],
            "startupProbe": {"exec": {"command": ["test", "-f", "started"]},
                             "periodSeconds": 1, "failureThreshold": 30},
            "readinessProbe": {"exec": {"command": ["sh", "-c", "test -f $MARK || { echo not yet; exit 1; }"]},
                               "periodSeconds": 1}
        }]}
    }))
    .await;
    let p = c
        .wait_pod("gated", 10, "main running", |p| phase_of(p) == "Running")
        .await;
    let s = status_of(&p, "main");
    assert_eq!((s.started, s.ready), (Some(false), false), "{s:?}");
    assert_eq!(condition(&p, "ContainersReady").status, "False");

    let p = c
        .wait_pod("gated", 10, "main started", |p| {
            has_status(p, "main") && status_of(p, "main").started == Some(true)
        })
        .await;
    assert!(!status_of(&p, "main").ready, "ready only after its probe");
    let p = c
        .wait_pod("gated", 10, "main ready", |p| is_ready(p, "main"))
        .await;
    assert_eq!(condition(&p, "Ready").status, "True");
    assert_eq!(condition(&p, "ContainersReady").status, "True");
    assert_eq!(status_of(&p, "main").restart_count, 0);

    // The readiness probe ran and failed before the file existed.
    let message = wait_event(&c, "gated", "Unhealthy", "Readiness probe failed:").await;
    assert_eq!(message, "Readiness probe failed: not yet\n");
    c.delete("gated").await;
    c.wait_gone("gated", 15).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_liveness_probe_restarts_the_container_or_fails_the_pod_under_never() {
    let c = Cluster::start().await;
    let live = |name: &str, policy: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": policy, "terminationGracePeriodSeconds": 5, "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "60"],
                "livenessProbe": {"exec": {"command": ["sh", "-c", "echo sick; exit 1"]},
                                  "periodSeconds": 1, "failureThreshold": 2}
            }]}
        })
    };
    c.create(live("restarts", "OnFailure")).await;
    c.create(live("fails", "Never")).await;

    // OnFailure: killed (SIGTERM: exit 143), then started again.
    let p = c
        .wait_pod("restarts", 20, "a restart", |p| {
            has_status(p, "main") && status_of(p, "main").restart_count >= 1
        })
        .await;
    let last = status_of(&p, "main")
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.clone())
        .expect("the killed run is the last state");
    assert_eq!(last.exit_code, 143);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    let killing = wait_event(&c, "restarts", "Killing", "Container main").await;
    assert_eq!(
        killing,
        "Container main failed liveness probe, will be restarted"
    );
    let unhealthy = wait_event(&c, "restarts", "Unhealthy", "Liveness").await;
    assert_eq!(unhealthy, "Liveness probe failed: sick\n");

    // Never: killed and not restarted, so the pod fails.
    let p = c.wait_phase("fails", "Failed", 20).await;
    let s = status_of(&p, "main");
    assert_eq!(s.restart_count, 0);
    let t = s
        .state
        .as_ref()
        .and_then(|st| st.terminated.clone())
        .expect("terminated");
    assert_eq!(t.exit_code, 143);
    let killing = wait_event(&c, "fails", "Killing", "Container main").await;
    assert_eq!(killing, "Container main failed liveness probe");

    c.delete("restarts").await;
    c.wait_gone("restarts", 15).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_http_readiness_probes_reach_the_pod_ip() {
    let c = Cluster::start().await;
    // A port nobody listens on yet: the probe fails until the test listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tcp"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox", "command": ["sleep", "60"],
            "ports": [{"name": "svc", "containerPort": port}],
            "readinessProbe": {"tcpSocket": {"port": "svc"}, "periodSeconds": 1}
        }, {
            "name": "web", "image": "busybox", "command": ["sleep", "60"],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 1}
        }]}
    }))
    .await;
    let refused = wait_event(&c, "tcp", "Unhealthy", "Readiness probe failed: dial tcp").await;
    assert!(
        refused.ends_with("connect: connection refused"),
        "{refused}"
    );
    let p = c.pods().get("tcp").await.expect("get");
    assert!(!is_ready(&p, "main") && !is_ready(&p, "web"));

    // Serve HTTP on the port: both probes pass.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the probed port");
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if request.starts_with("GET /healthz ") {
                    "ok"
                } else {
                    ""
                };
                let status = if body.is_empty() {
                    "404 Not Found"
                } else {
                    "200 OK"
                };
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    c.wait_pod("tcp", 15, "both containers ready", |p| {
        is_ready(p, "main") && is_ready(p, "web")
    })
    .await;
    server.abort();
    c.delete("tcp").await;
    c.wait_gone("tcp", 15).await;
    c.shutdown().await;
}

/// A gRPC health service on `port` answering every check with the serving status in `status`
/// (grpc.health.v1: 1 SERVING, 2 NOT_SERVING); it records the services asked about.
async fn health_service(
    port: u16,
    status: std::sync::Arc<std::sync::atomic::AtomicU8>,
    asked: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the probed port");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (status, asked) = (status.clone(), asked.clone());
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    let mut body = request.into_body();
                    let mut data = Vec::new();
                    while let Some(Ok(chunk)) = body.data().await {
                        let _ = body.flow_control().release_capacity(chunk.len());
                        data.extend_from_slice(&chunk);
                    }
                    // The request message after its 5-byte prefix.
                    asked
                        .lock()
                        .expect("asked")
                        .push(data.get(5..).unwrap_or_default().to_vec());
                    let head = http::Response::builder()
                        .status(200)
                        .header("content-type", "application/grpc")
                        .body(())
                        .expect("response");
                    let Ok(mut stream) = respond.send_response(head, false) else {
                        continue;
                    };
                    let value = status.load(std::sync::atomic::Ordering::SeqCst);
                    let message = [0u8, 0, 0, 0, 2, 0x08, value];
                    let _ = stream.send_data(bytes::Bytes::copy_from_slice(&message), false);
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    let _ = stream.send_trailers(trailers);
                }
            });
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_readiness_probe_follows_the_health_service() {
    let c = Cluster::start().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let status = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(2));
    let asked = std::sync::Arc::default();
    let server = health_service(port, status.clone(), std::sync::Arc::clone(&asked)).await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "grpc"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox", "command": ["sleep", "60"],
            "readinessProbe": {"grpc": {"port": port, "service": "db"}, "periodSeconds": 1}
        }]}
    }))
    .await;
    let message = wait_event(&c, "grpc", "Unhealthy", "Readiness probe failed:").await;
    assert_eq!(
        message,
        "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
    );
    let p = c.pods().get("grpc").await.expect("get");
    assert!(!is_ready(&p, "main"));
    // The check names the probe's service: field 1, "db".
    assert_eq!(asked.lock().expect("asked")[0], b"\x0a\x02db".to_vec());

    status.store(1, std::sync::atomic::Ordering::SeqCst);
    let p = c
        .wait_pod("grpc", 15, "main ready", |p| is_ready(p, "main"))
        .await;
    assert_eq!(condition(&p, "Ready").status, "True");
    server.abort();
    c.delete("grpc").await;
    c.wait_gone("grpc", 15).await;
    c.shutdown().await;
}
