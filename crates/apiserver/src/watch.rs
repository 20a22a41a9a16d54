//! Watch streams: newline-delimited `{"type","object"}` events over a chunked HTTP response.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use kbatch_store::{EventType, Object, StoreError};
use serde_json::json;
use tokio::sync::mpsc;

use crate::State;
use crate::error::ApiError;
use crate::handlers::{Filter, output_bytes, storage_resource};
use crate::request::{Query, Target};
use crate::resources::Resource;

/// Upstream's minimum request timeout; a watch without timeoutSeconds lasts this long.
const DEFAULT_WATCH_SECONDS: u64 = 1800;
/// Bookmarks keep idle watches fresh well inside clients' idle timeouts.
const BOOKMARK_EVERY: Duration = Duration::from_secs(15);

fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.put_slice(b"{\"type\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"\",\"object\":");
    b.put_slice(object);
    b.put_slice(b"}\n");
    b.freeze()
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Added => "ADDED",
        EventType::Modified => "MODIFIED",
        EventType::Deleted => "DELETED",
    }
}

fn bookmark(res: &Resource, rv: u64) -> Bytes {
    let obj = json!({"kind": res.kind_name, "apiVersion": res.api_version(), "metadata": {"resourceVersion": rv.to_string()}});
    event_line("BOOKMARK", obj.to_string().as_bytes())
}

fn error_line(e: &ApiError) -> Bytes {
    event_line("ERROR", e.to_status().to_string().as_bytes())
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub async fn watch(st: &State, t: &Target, q: &Query) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let filter = Filter::from_query(res, q)?;
    let bookmarks = q.bool("allowWatchBookmarks")?;
    let timeout = q
        .int("timeoutSeconds")?
        .filter(|s| *s > 0)
        .map(|s| s as u64)
        .unwrap_or(DEFAULT_WATCH_SECONDS);
    let prefix = sres.prefix(t.namespace.as_deref());
    let (tx, rx) = mpsc::channel::<Bytes>(256);

    // No resourceVersion (or "0"): the current state as ADDED events first, then changes.
    let (initial, from_rv) = match q.get("resourceVersion") {
        None | Some("0") => {
            let page = st.store.list(&prefix, None, None);
            (page.items, page.revision)
        }
        Some(rv) => {
            let rv = rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resourceVersion {rv:?}: must be an unsigned integer"
                ))
            })?;
            (Vec::new(), rv)
        }
    };
    let mut w = match st.store.watch(&prefix, from_rv) {
        Ok(w) => w,
        Err(StoreError::Expired { requested, oldest }) => {
            // Upstream answers 200 and then one ERROR event: clients re-list on it.
            let e = ApiError::expired(format!(
                "too old resource version: {requested} ({})",
                oldest
            ));
            let _ = tx.try_send(error_line(&e));
            return Ok(stream_response(rx));
        }
        Err(e) => return Err(crate::handlers::store_err(res, "", e)),
    };
    let mut shutdown = st.shutdown.subscribe();
    if *shutdown.borrow_and_update() {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    tokio::spawn(async move {
        for o in initial.iter().filter(|o| filter.matches(o)) {
            let Ok(bytes) = output_bytes(res, o) else {
                continue;
            };
            if tx.send(event_line("ADDED", &bytes)).await.is_err() {
                return;
            }
        }
        let mut last_rv = from_rv;
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = shutdown.changed() => return,
                _ = tick.tick(), if bookmarks => {
                    if tx.send(bookmark(res, last_rv)).await.is_err() {
                        return;
                    }
                }
                ev = w.next() => {
                    let line = match ev {
                        None => return,
                        Some(Err(e)) => error_line(&crate::handlers::store_err(res, "", e)),
                        Some(Ok(ev)) => {
                            last_rv = ev.object.rv;
                            if !filter.matches(&ev.object) {
                                continue;
                            }
                            match render(res, &ev.object) {
                                Some(bytes) => event_line(type_name(ev.kind), &bytes),
                                None => continue,
                            }
                        }
                    };
                    let is_error = line.starts_with(b"{\"type\":\"ERROR\"");
                    if tx.send(line).await.is_err() || is_error {
                        return;
                    }
                }
            }
        }
    });
    Ok(stream_response(rx))
}

fn render(res: &Resource, o: &Object) -> Option<Bytes> {
    output_bytes(res, o).ok()
}
