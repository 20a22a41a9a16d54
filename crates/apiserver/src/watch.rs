//! Watch streams: newline-delimited `{"type","object"}` events over a chunked HTTP response.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use kbatch_store::{EventType, Object, StoreError, WatchEvent};
use serde_json::json;
use tokio::sync::mpsc;

use crate::State;
use crate::error::ApiError;
use crate::handlers::{Filter, TableRequest, output_bytes, storage_resource};
use crate::list_options::{self, ReadOptions, WatchStart};
use crate::request::{Query, Target};
use crate::resources::Resource;
use crate::table;

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

/// The bookmark that tells a watch list's client its initial events are all there.
fn initial_events_end(res: &Resource, rv: u64) -> Bytes {
    let obj = json!({"kind": res.kind_name, "apiVersion": res.api_version(), "metadata": {
        "resourceVersion": rv.to_string(),
        "annotations": {list_options::INITIAL_EVENTS_END: "true"},
    }});
    event_line("BOOKMARK", obj.to_string().as_bytes())
}

fn error_line(e: &ApiError) -> Bytes {
    event_line("ERROR", &e.to_status_bytes())
}

/// Events already queued go out together, up to this many bytes in one chunk: a burst of
/// events costs one write and one client wake-up rather than one per event.
const CHUNK_BYTES: usize = 64 * 1024;

/// The next chunk of the stream: the next line plus whatever more is queued already.
async fn next_chunk(rx: &mut mpsc::Receiver<Bytes>) -> Option<Bytes> {
    let first = rx.recv().await?;
    let mut chunk: Option<BytesMut> = None;
    while chunk.as_ref().map_or(first.len(), BytesMut::len) < CHUNK_BYTES {
        let Ok(more) = rx.try_recv() else { break };
        let c = chunk.get_or_insert_with(|| {
            let mut c = BytesMut::with_capacity(CHUNK_BYTES.max(first.len() + more.len()));
            c.put_slice(&first);
            c
        });
        c.put_slice(&more);
    }
    Some(chunk.map_or(first, BytesMut::freeze))
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        next_chunk(&mut rx)
            .await
            .map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub async fn watch(
    st: &State,
    t: &Target,
    q: &Query,
    tr: Option<TableRequest>,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let filter = Filter::from_query(res, q)?;
    let opts = ReadOptions::from_query(q, true)?;
    let bookmarks = opts.allow_watch_bookmarks;
    let timeout = q
        .int("timeoutSeconds")?
        .filter(|s| *s > 0)
        .map(|s| s as u64)
        .unwrap_or(DEFAULT_WATCH_SECONDS);
    let prefix = sres.prefix(t.namespace.as_deref());
    let (tx, rx) = mpsc::channel::<Bytes>(256);

    let (initial, from_rv, end_bookmark) = match opts.watch_start(st.store.revision()) {
        WatchStart::InitialEvents {
            min_rv,
            end_bookmark,
        } => {
            if let Err(e) = list_options::wait_until_fresh(&st.store, min_rv).await {
                // Past its parameters a watch fails as a stream of one ERROR event.
                let _ = tx.try_send(error_line(&e));
                return Ok(stream_response(rx));
            }
            let page = st.store.list(&prefix, None, None);
            (page.items, page.revision, end_bookmark)
        }
        WatchStart::After(rv) => (Vec::new(), rv, false),
        WatchStart::Now => (Vec::new(), st.store.revision(), false),
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
        let mut render = Renderer {
            res,
            table: tr,
            columns_sent: false,
        };
        for o in initial.iter().filter(|o| filter.matches(o)) {
            let Some(bytes) = render.render(o) else {
                continue;
            };
            if tx.send(event_line("ADDED", &bytes)).await.is_err() {
                return;
            }
        }
        if end_bookmark && tx.send(initial_events_end(res, from_rv)).await.is_err() {
            return;
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
                            let Some(kind) = filtered_type(&filter, &ev) else { continue };
                            match render.render(&ev.object) {
                                Some(bytes) => event_line(kind, &bytes),
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

/// The event type a filtered watcher sees, as upstream's watch cache decides it: an object
/// entering the selector is ADDED, one leaving it is DELETED, others are not sent.
fn filtered_type(filter: &Filter, ev: &WatchEvent) -> Option<&'static str> {
    if filter.is_empty() {
        return Some(type_name(ev.kind));
    }
    let now = filter.matches(&ev.object);
    match ev.kind {
        EventType::Added | EventType::Deleted => now.then_some(type_name(ev.kind)),
        EventType::Modified => {
            let before = ev.prev.as_ref().map_or(now, |p| filter.matches(p));
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

/// Renders event objects: the object itself, or a one-row Table (column definitions only in
/// the first, as upstream sends them).
struct Renderer {
    res: &'static Resource,
    table: Option<TableRequest>,
    columns_sent: bool,
}

impl Renderer {
    fn render(&mut self, o: &Object) -> Option<Bytes> {
        let Some(tr) = self.table else {
            return output_bytes(self.res, o).ok();
        };
        let v = crate::handlers::parse_stored_bytes(&o.raw()).ok()?;
        let row = table::row(self.res.kind, &v, jiff::Timestamp::now(), tr.include);
        let meta = json!({"resourceVersion": o.rv.to_string()});
        let t = table::table(
            tr.api_version,
            self.res.kind,
            vec![row],
            meta,
            !self.columns_sent,
        );
        self.columns_sent = true;
        serde_json::to_vec(&t).ok().map(Bytes::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Kind;
    use crate::selector::{FieldSelector, LabelSelector};
    use std::sync::Arc;

    fn obj(rv: u64, app: &str) -> Arc<Object> {
        let raw = format!(
            r#"{{"metadata":{{"name":"p","labels":{{"app":"{app}"}},"resourceVersion":"{rv}"}}}}"#
        );
        let value = serde_json::from_str(&raw).expect("json");
        Arc::new(Object::from_json("/pods/d/p".into(), rv, value).expect("packs"))
    }

    #[tokio::test]
    async fn queued_lines_go_out_in_one_chunk_of_bounded_size() {
        let (tx, mut rx) = mpsc::channel(16);
        tx.send(Bytes::from_static(b"a\n")).await.unwrap();
        assert_eq!(
            next_chunk(&mut rx).await.unwrap(),
            Bytes::from_static(b"a\n")
        );
        for line in [&b"b\n"[..], b"c\n", b"d\n"] {
            tx.send(Bytes::copy_from_slice(line)).await.unwrap();
        }
        assert_eq!(
            next_chunk(&mut rx).await.unwrap(),
            Bytes::from_static(b"b\nc\nd\n")
        );
        // Past the bound the rest waits for the next chunk; no line is split or lost.
        let big = Bytes::from(vec![b'x'; CHUNK_BYTES - 1]);
        for line in [
            big.clone(),
            Bytes::from_static(b"e\n"),
            Bytes::from_static(b"f\n"),
        ] {
            tx.send(line).await.unwrap();
        }
        let first = next_chunk(&mut rx).await.unwrap();
        assert_eq!(first.len(), CHUNK_BYTES + 1);
        assert!(first.ends_with(b"e\n"));
        assert_eq!(
            next_chunk(&mut rx).await.unwrap(),
            Bytes::from_static(b"f\n")
        );
        drop(tx);
        assert_eq!(next_chunk(&mut rx).await, None);
    }

    #[test]
    fn selector_transitions() {
        let f = Filter {
            kind: Kind::Pod,
            label: LabelSelector::parse("app=a").unwrap(),
            field: FieldSelector::default(),
        };
        let ev = |kind, prev: Option<&str>, now: &str| WatchEvent {
            kind,
            object: obj(2, now),
            prev: prev.map(|p| obj(1, p)),
        };
        assert_eq!(
            filtered_type(&f, &ev(EventType::Added, None, "a")),
            Some("ADDED")
        );
        assert_eq!(filtered_type(&f, &ev(EventType::Added, None, "b")), None);
        assert_eq!(
            filtered_type(&f, &ev(EventType::Modified, Some("a"), "a")),
            Some("MODIFIED")
        );
        assert_eq!(
            filtered_type(&f, &ev(EventType::Modified, Some("b"), "a")),
            Some("ADDED")
        );
        assert_eq!(
            filtered_type(&f, &ev(EventType::Modified, Some("a"), "b")),
            Some("DELETED")
        );
        assert_eq!(
            filtered_type(&f, &ev(EventType::Modified, Some("b"), "b")),
            None
        );
        assert_eq!(
            filtered_type(&f, &ev(EventType::Deleted, Some("a"), "a")),
            Some("DELETED")
        );
        let all = Filter {
            kind: Kind::Pod,
            label: LabelSelector::default(),
            field: FieldSelector::default(),
        };
        assert_eq!(
            filtered_type(&all, &ev(EventType::Modified, Some("b"), "b")),
            Some("MODIFIED")
        );
    }
}
