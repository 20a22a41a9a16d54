//! The scraper: every resolution, each Node's kubelet `/metrics/resource` (at the node's
//! address and `daemonEndpoints.kubeletEndpoint.Port`, as `pods/exec` reaches it), fetched
//! concurrently within 90% of the resolution (metrics-server's scrape timeout), decoded,
//! and stored as one batch: a node that fails this time has no points until it answers
//! twice again, as in metrics-server.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper_util::rt::TokioIo;

use super::MetricsApi;
use super::decode::decode;
use super::storage::Batch;
use crate::ServerState;
use crate::resources::{self, Kind};

/// Bigger answers are refused (a node's text is a few hundred bytes per container).
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Scrapes until the server shuts down.
pub async fn run(st: Arc<ServerState>, api: Arc<MetricsApi>) {
    let mut shutdown = st.shutdown.subscribe();
    let mut ticks = tokio::time::interval(api.resolution);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timeout = api.resolution.mul_f64(0.9);
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => return,
        }
        let batch = scrape_all(&st, timeout).await;
        if let Ok(mut s) = api.storage.write() {
            s.store(batch);
        }
    }
}

/// One scrape of every node, merged.
async fn scrape_all(st: &ServerState, timeout: Duration) -> Batch {
    let nodes = resources::by_kind(Kind::Node);
    let listed = st.store.list(&nodes.prefix(None), None, None);
    let scrapes = listed.items.iter().filter_map(|o| {
        let node = crate::handlers::parse_stored(o).ok()?;
        let name = node.pointer("/metadata/name")?.as_str()?.to_string();
        let addr = crate::connect::kubelet_address(&node);
        Some(async move {
            let Some((host, port)) = addr else {
                tracing::debug!(node = %name, "node has no address to scrape");
                return None;
            };
            match tokio::time::timeout(timeout, scrape(&host, port, &name)).await {
                Ok(Ok(b)) => Some(b),
                Ok(Err(e)) => {
                    tracing::debug!(node = %name, error = %e, "failed to scrape node");
                    None
                }
                Err(_) => {
                    tracing::debug!(node = %name, "scraping the node timed out");
                    None
                }
            }
        })
    });
    let mut batch = Batch::default();
    for b in futures::future::join_all(scrapes)
        .await
        .into_iter()
        .flatten()
    {
        batch.merge(b);
    }
    batch
}

/// GET `/metrics/resource` from one kubelet and decode it.
async fn scrape(host: &str, port: u16, node: &str) -> Result<Batch, String> {
    let started_ms = jiff::Timestamp::now().as_millisecond();
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "kubelet metrics connection ended");
        }
    });
    let req = hyper::Request::get("/metrics/resource")
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .header(hyper::header::ACCEPT, "text/plain")
        .body(Body::empty())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    if resp.status() != hyper::StatusCode::OK {
        return Err(format!(
            "request failed, status: {:?}",
            resp.status().to_string()
        ));
    }
    let bytes = axum::body::to_bytes(Body::new(resp.into_body()), MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| format!("reading the response: {e}"))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| e.to_string())?;
    decode(text, started_ms, node)
}
