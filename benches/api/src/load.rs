//! The write load: N clients, each on its own keep-alive HTTP/1.1 connection, creating pods
//! back to back.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

const PODS_PATH: &str = "/api/v1/namespaces/default/pods";
const NAME_MARK: &str = "@@NAME@@";

/// A pod body with a slot for its name, serialized once so the client spends its CPU on
/// the request rather than on building JSON.
pub struct PodTemplate {
    head: String,
    tail: String,
}

impl PodTemplate {
    /// A pod as a batch controller would create it: about 1 KiB of JSON with labels,
    /// annotations and one container with command, args, env and resources.
    pub fn new() -> PodTemplate {
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": NAME_MARK,
                "namespace": "default",
                "labels": {
                    "app.kubernetes.io/name": "bench",
                    "app.kubernetes.io/component": "worker",
                    "batch.kubernetes.io/job-name": "bench-job",
                    "batch.kubernetes.io/controller-uid": "6f1c2d3e-8a9b-4c5d-9e0f-112233445566",
                    "tier": "batch"
                },
                "annotations": {
                    "batch.kubernetes.io/job-completion-index": "0",
                    "bench.kbatch.dev/purpose": "api write throughput"
                }
            },
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "worker",
                    "image": "registry.example/batch/worker:1.4.2",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c"],
                    "args": ["echo processing shard $SHARD of $SHARDS; sleep 5; echo done"],
                    "workingDir": "/data",
                    "env": [
                        {"name": "SHARD", "value": "17"},
                        {"name": "SHARDS", "value": "128"},
                        {"name": "INPUT_URI", "value": "s3://bench-bucket/input/part-00017.parquet"},
                        {"name": "OUTPUT_URI", "value": "s3://bench-bucket/output/part-00017.parquet"},
                        {"name": "LOG_LEVEL", "value": "info"}
                    ],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "128Mi"},
                        "limits": {"cpu": "1", "memory": "256Mi"}
                    }
                }]
            }
        });
        let text = pod.to_string();
        let (head, tail) = text
            .split_once(NAME_MARK)
            .expect("the template holds the name mark once");
        PodTemplate {
            head: head.to_string(),
            tail: tail.to_string(),
        }
    }

    pub fn body(&self, name: &str) -> Bytes {
        let mut s = String::with_capacity(self.head.len() + name.len() + self.tail.len());
        s.push_str(&self.head);
        s.push_str(name);
        s.push_str(&self.tail);
        Bytes::from(s)
    }
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        // Request and response are small; Nagle would hold them back behind delayed ACKs.
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        // The connection task ends when the sender is dropped; a broken connection shows up
        // as an error on the next request, so its own result adds nothing.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            sender,
            host: addr.to_string(),
        })
    }

    async fn post(&mut self, path: &str, body: Bytes) -> anyhow::Result<(StatusCode, Bytes)> {
        self.sender
            .ready()
            .await
            .context("connection closed by the server")?;
        let req = Request::post(path)
            .header(HOST, &self.host)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .context("building the request")?;
        let resp = self
            .sender
            .send_request(req)
            .await
            .context("sending the request")?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .context("reading the response body")?
            .to_bytes();
        Ok((status, body))
    }
}

pub struct LevelResult {
    /// Latency of each create that started and finished inside the measured window, in µs.
    pub latencies_us: Vec<u32>,
    /// Every create sent at this level, warm-up included (all of them are stored objects).
    pub created: u64,
    /// Response bytes over all creates: the stored object (defaults, uid, timestamps added).
    pub response_bytes: u64,
}

/// The instants that bound one level: warm-up until `measure_from`, measured until `until`.
#[derive(Clone, Copy)]
pub struct Window {
    pub measure_from: Instant,
    pub until: Instant,
}

pub struct Clients(Vec<Conn>);

/// Open `n` connections up front so connection setup is not part of any figure.
pub async fn connect(addr: SocketAddr, n: usize) -> anyhow::Result<Clients> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(Conn::connect(addr).await?);
    }
    Ok(Clients(conns))
}

/// Each client creates pods back to back until the window ends. Pod names are
/// `bench-<tag>-<client>-<seq>`, so levels with different tags never collide.
pub async fn run(
    clients: Clients,
    tag: &str,
    template: &PodTemplate,
    w: Window,
) -> anyhow::Result<LevelResult> {
    let tasks = clients.0.into_iter().enumerate().map(|(i, mut conn)| {
        let prefix = format!("bench-{tag}-{i}-");
        async move {
            let mut latencies = Vec::new();
            let mut created = 0u64;
            let mut response_bytes = 0u64;
            let mut name = String::with_capacity(prefix.len() + 12);
            loop {
                let start = Instant::now();
                if start >= w.until {
                    break;
                }
                name.clear();
                name.push_str(&prefix);
                name.push_str(&created.to_string());
                let (status, body) = conn.post(PODS_PATH, template.body(&name)).await?;
                let end = Instant::now();
                if status != StatusCode::CREATED {
                    bail!(
                        "creating pod {name}: HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(500)])
                    );
                }
                created += 1;
                response_bytes += body.len() as u64;
                if start >= w.measure_from && end <= w.until {
                    let us = end.duration_since(start).as_micros();
                    latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
                }
            }
            anyhow::Ok((latencies, created, response_bytes))
        }
    });
    let mut out = LevelResult {
        latencies_us: Vec::new(),
        created: 0,
        response_bytes: 0,
    };
    for (lat, created, bytes) in futures::future::try_join_all(tasks).await? {
        out.latencies_us.extend(lat);
        out.created += created;
        out.response_bytes += bytes;
    }
    Ok(out)
}

/// Wait until `t` without holding up the clients.
pub async fn sleep_until(t: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await;
}
