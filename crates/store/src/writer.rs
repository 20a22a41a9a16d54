//! The single writer: a dedicated thread that drains the request queue and commits every
//! request waiting in it as one transaction with one fsync (group commit). Preconditions are
//! checked against the current state plus the earlier writes of the same batch, so each caller
//! gets the answer it would have had with one transaction per write.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::engine::{CommitBatch, Engine};
use crate::pack::Packed;
use crate::{EventType, Object, Shared, StoreError, WatchEvent};

pub(crate) enum Op {
    Create {
        key: String,
        doc: Packed,
    },
    Update {
        key: String,
        doc: Packed,
        expected_rv: Option<u64>,
    },
    Delete {
        key: String,
        expected_rv: Option<u64>,
    },
}

type Reply = oneshot::Sender<Result<Arc<Object>, StoreError>>;

pub(crate) struct WriteRequest {
    pub op: Op,
    pub reply: Reply,
}

pub(crate) enum Msg {
    Write(WriteRequest),
    /// Stop after the writes queued before this message; the sender is told once the
    /// database is flushed and released.
    Close(oneshot::Sender<()>),
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

pub(crate) struct Writer {
    engine: Option<Box<dyn Engine>>,
    shared: Arc<Shared>,
    revision: u64,
    compacted: u64,
    history_cap: u64,
    max_batch: usize,
}

impl Writer {
    pub(crate) fn new(
        engine: Box<dyn Engine>,
        shared: Arc<Shared>,
        revision: u64,
        compacted: u64,
        history_cap: usize,
        max_batch: usize,
    ) -> Writer {
        Writer {
            engine: Some(engine),
            shared,
            revision,
            compacted,
            history_cap: history_cap as u64,
            max_batch,
        }
    }

    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut acks: Vec<oneshot::Sender<()>> = Vec::new();
        let mut batch: Vec<WriteRequest> = Vec::with_capacity(self.max_batch);
        'outer: while let Some(first) = rx.blocking_recv() {
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Write(req) => batch.push(req),
                    Msg::Close(ack) => {
                        acks.push(ack);
                        break;
                    }
                }
                if batch.len() >= self.max_batch {
                    break;
                }
                next = rx.try_recv().ok();
            }
            if !batch.is_empty() {
                self.commit_batch(&mut batch);
            }
            if !acks.is_empty() {
                break 'outer;
            }
        }
        // Refuse whatever was queued after the close (or is still racing in).
        rx.close();
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Msg::Write(req) => {
                    let _ = req.reply.send(Err(StoreError::Closed));
                }
                Msg::Close(ack) => acks.push(ack),
            }
        }
        if let Some(mut engine) = self.engine.take() {
            if let Err(e) = engine.flush() {
                tracing::error!(error = %e, "final flush failed");
            }
            // Dropping the engine releases the database file before anyone is told.
            drop(engine);
        }
        self.shared.hub.close();
        tracing::info!(revision = self.revision, "store writer stopped");
        for ack in acks {
            let _ = ack.send(());
        }
    }

    fn set_commit_failure(&self, failure: Option<String>) {
        let mut slot = self
            .shared
            .commit_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Written only on a change: the common case is a success after a success.
        if slot.is_some() || failure.is_some() {
            *slot = failure;
        }
    }

    fn commit_batch(&mut self, batch: &mut Vec<WriteRequest>) {
        let started = Instant::now();
        let size = batch.len();
        let mut revision = self.revision;
        // Batch-local view of the keys this batch has touched so far (None = deleted).
        let mut overlay: HashMap<String, Option<Arc<Object>>> = HashMap::new();
        let mut changes: Vec<WatchEvent> = Vec::with_capacity(size);
        let mut outcomes: Vec<(Reply, Result<Arc<Object>, StoreError>)> = Vec::with_capacity(size);
        let mut rejected = 0u64;

        for req in batch.drain(..) {
            let result = self.apply_one(req.op, revision + 1, &mut overlay);
            let result = match result {
                Ok(ev) => {
                    revision += 1;
                    let obj = Arc::clone(&ev.object);
                    changes.push(ev);
                    Ok(obj)
                }
                Err(e) => {
                    rejected += 1;
                    Err(e)
                }
            };
            outcomes.push((req.reply, result));
        }
        let counters = &self.shared.counters;
        counters.rejected.fetch_add(rejected, Ordering::Relaxed);

        if !changes.is_empty() {
            let compacted = self
                .compacted
                .max(revision.saturating_sub(self.history_cap));
            let commit = CommitBatch {
                changes: &changes,
                revision,
                old_compacted: self.compacted,
                compacted,
            };
            let commit_started = Instant::now();
            let result = match self.engine.as_mut() {
                Some(engine) => engine.commit(&commit),
                None => Err(StoreError::Closed),
            };
            counters
                .commit_micros
                .fetch_add(micros(commit_started), Ordering::Relaxed);
            self.set_commit_failure(result.as_ref().err().map(|e| e.to_string()));
            if let Err(e) = result {
                tracing::error!(error = %e, writes = changes.len(), "commit failed");
                // Every answer in the batch may depend on a write that did not happen.
                for (reply, _) in outcomes {
                    let _ = reply.send(Err(StoreError::Backend(e.to_string())));
                }
                return;
            }
            self.revision = revision;
            self.compacted = compacted;
            self.shared.index.apply(&changes, revision);
            self.shared.hub.append(&changes);
            counters.commits.fetch_add(1, Ordering::Relaxed);
            counters
                .writes
                .fetch_add(changes.len() as u64, Ordering::Relaxed);
            counters
                .max_batch
                .fetch_max(changes.len() as u64, Ordering::Relaxed);
            tracing::debug!(
                writes = changes.len(),
                rejected,
                revision,
                micros = micros(started),
                "batch committed"
            );
        }
        for (reply, result) in outcomes {
            // A caller that gave up waiting still had its write applied; nothing to do.
            let _ = reply.send(result);
        }
        // Writers are answered before watchers are woken: on the server's threads their
        // requests then go on ahead of the batch's watch events, a write's round trip being
        // what a controller's sync waits for.
        if !changes.is_empty() {
            self.shared.hub.publish(&changes, revision);
        }
        counters
            .busy_micros
            .fetch_add(micros(started), Ordering::Relaxed);
    }

    /// Check one request's precondition and build its event at revision `rv`.
    fn apply_one(
        &self,
        op: Op,
        rv: u64,
        overlay: &mut HashMap<String, Option<Arc<Object>>>,
    ) -> Result<WatchEvent, StoreError> {
        let current =
            |overlay: &HashMap<String, Option<Arc<Object>>>, key: &str| match overlay.get(key) {
                Some(v) => v.clone(),
                None => self.shared.index.get(key),
            };
        let check = |key: &str, cur: &Object, expected: Option<u64>| match expected {
            Some(exp) if exp != cur.rv => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected: exp,
                actual: cur.rv,
            }),
            _ => Ok(()),
        };
        let (kind, object, prev) = match op {
            Op::Create { key, doc } => {
                if current(overlay, &key).is_some() {
                    return Err(StoreError::AlreadyExists(key));
                }
                let body = doc.0;
                (EventType::Added, Arc::new(Object { key, rv, body }), None)
            }
            Op::Update {
                key,
                doc,
                expected_rv,
            } => {
                let Some(cur) = current(overlay, &key) else {
                    return Err(StoreError::NotFound(key));
                };
                check(&key, &cur, expected_rv)?;
                let body = doc.0;
                (
                    EventType::Modified,
                    Arc::new(Object { key, rv, body }),
                    Some(cur),
                )
            }
            Op::Delete { key, expected_rv } => {
                let Some(cur) = current(overlay, &key) else {
                    return Err(StoreError::NotFound(key));
                };
                check(&key, &cur, expected_rv)?;
                // The last state, re-stamped with the deletion's revision when unpacked.
                let body = cur.body.clone();
                (
                    EventType::Deleted,
                    Arc::new(Object { key, rv, body }),
                    Some(cur),
                )
            }
        };
        let after = match kind {
            EventType::Deleted => None,
            _ => Some(Arc::clone(&object)),
        };
        overlay.insert(object.key.clone(), after);
        Ok(WatchEvent { kind, object, prev })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicBool;

    use serde_json::json;

    use super::*;
    use crate::engine::{CommitBatch, Engine};
    use crate::hub::Hub;
    use crate::index::Index;
    use crate::{Counters, Store, StoreOptions};

    /// An engine whose commits fail while `failing` is set.
    struct Flaky {
        failing: Arc<AtomicBool>,
    }

    impl Engine for Flaky {
        fn commit(&mut self, _: &CommitBatch<'_>) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                Err(StoreError::Backend("commit: Poisoned".into()))
            } else {
                Ok(())
            }
        }

        fn flush(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// A failed commit makes the store unhealthy with its reason until a commit succeeds.
    #[tokio::test]
    async fn a_failed_commit_shows_in_health_until_one_succeeds() {
        let opts = StoreOptions::default();
        let shared = Arc::new(Shared {
            index: Index::new(Vec::new(), 0),
            hub: Hub::new(VecDeque::new(), 0, 100, 1 << 20, 0),
            counters: Counters::default(),
            commit_failure: std::sync::Mutex::new(None),
        });
        let failing = Arc::new(AtomicBool::new(false));
        let engine = Box::new(Flaky {
            failing: Arc::clone(&failing),
        });
        let store = Store::start(engine, shared, 0, 0, 100, &opts).expect("start");
        let doc = |name: &str| json!({"kind": "Job", "metadata": {"name": name}});

        store.create("/a".into(), doc("a")).await.expect("create a");
        assert_eq!(store.health(), Ok(()));

        failing.store(true, Ordering::SeqCst);
        assert!(store.create("/b".into(), doc("b")).await.is_err());
        let reason = store.health().expect_err("unhealthy after a failed commit");
        assert!(reason.contains("Poisoned"), "{reason}");

        failing.store(false, Ordering::SeqCst);
        store.create("/c".into(), doc("c")).await.expect("create c");
        assert_eq!(store.health(), Ok(()));
        store.close().await;
    }
}
