//! kbatch-store: a durable, revisioned object store.
//!
//! Objects are JSON documents under string keys (`/<resource>/<namespace>/<name>`, or
//! `/<resource>/<name>` for cluster-scoped kinds). One global revision counter gives every write
//! its revision, which the store stamps into the document as `metadata.resourceVersion`.
//! Writes are atomic per object with optimistic concurrency; a watch streams every change
//! after a revision that is still inside the history window.
//!
//! Layout:
//! - `engine`: the on-disk backend (fjall): current objects, the event log of the history
//!   window, and the revision counters, all written in one transaction per commit batch,
//!   made durable by the commit log (`engine::wal`: one synced append per batch to a file
//!   written over in place, fjall's journal synced at checkpoints).
//! - `writer`: the single writer thread; it drains the request queue and commits every waiting
//!   request in one transaction with one sync (group commit).
//! - `index`: the in-memory map of current objects that serves get and list.
//! - `hub`: the in-memory history window that serves watches, both replay and live.
//! - `pack`: documents compressed against a dictionary of typical objects, the form the
//!   index, the history and the disk keep (a sixth of the JSON or less for pods and Jobs).

mod codec;
mod engine;
mod hub;
mod index;
mod pack;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::hub::Hub;
use crate::index::Index;
use crate::writer::{Msg, Op, WriteRequest};

/// A stored object: its key, the revision of its last write, and its document, kept packed
/// (`raw` gives the JSON, with `metadata.resourceVersion` set to `rv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub rv: u64,
    body: Bytes,
}

impl Object {
    /// The object's JSON bytes, stamped with its revision (unpacked on each call).
    pub fn raw(&self) -> Bytes {
        match pack::unpack(&self.body, self.rv) {
            Ok(raw) => raw,
            // Every body is packed by this crate or checked when read from disk.
            Err(e) => {
                tracing::error!(key = %self.key, error = %e, "unreadable stored object");
                Bytes::from_static(b"{}")
            }
        }
    }

    /// The length of `raw()`, without unpacking.
    pub fn raw_len(&self) -> usize {
        pack::json_len(&self.body, self.rv)
    }

    /// An object holding `value` at revision `rv` (its resourceVersion is set to `rv`), as the
    /// store would keep it; for code that builds objects without a store, such as tests.
    pub fn from_json(key: String, rv: u64, value: serde_json::Value) -> Result<Object, StoreError> {
        let pack::Packed(body) = pack::pack_value(value)?;
        Ok(Object { key, rv, body })
    }

    pub(crate) fn from_parts(key: String, rv: u64, body: Bytes) -> Object {
        Object { key, rv, body }
    }

    /// The packed document.
    pub(crate) fn body(&self) -> &[u8] {
        &self.body
    }

    /// The bytes the object takes in memory (and, with its key and revision, on disk).
    pub fn packed_len(&self) -> usize {
        self.body.len()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change. For `Deleted`, `object` is the last state, stamped with the deletion's revision.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: EventType,
    pub object: Arc<Object>,
    /// The object's state before this change, when known (`None` for a create, and for a
    /// change whose previous state fell out of the history before a restart). Lets a
    /// filtered watch tell an object entering or leaving its selector.
    pub prev: Option<Arc<Object>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {0} already exists")]
    AlreadyExists(String),
    #[error("key {0} not found")]
    NotFound(String),
    /// The precondition revision did not match the stored one.
    #[error("conflict on {key}: expected revision {expected}, found {actual}")]
    Conflict {
        key: String,
        expected: u64,
        actual: u64,
    },
    /// The requested revision is older than the history window; `oldest` is the oldest revision
    /// a watch can still start from.
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    #[error("object is not a JSON object with metadata")]
    BadObject,
    #[error("store is closed")]
    Closed,
    #[error("storage error: {0}")]
    Backend(String),
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How many past events the watch history keeps (in memory and on disk). At least 1.
    pub history_events: usize,
    /// Bound on the bytes of the objects the history keeps in memory (the oldest go first;
    /// older revisions then get `Expired`, as past `history_events`).
    pub history_bytes: usize,
    /// Sync every commit batch to disk before answering (true in production; tests of logic
    /// may turn it off).
    pub durable: bool,
    /// Upper bound on the writes one commit batch takes from the queue.
    pub max_batch: usize,
    /// Capacity of the write queue; callers wait (asynchronously) when it is full.
    pub queue_capacity: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            history_events: 50_000,
            history_bytes: 64 << 20,
            durable: true,
            max_batch: 1024,
            queue_capacity: 8192,
        }
    }
}

/// The result of a list: items in key order, the store revision the list was taken at, and
/// whether more items follow after the last one.
#[derive(Debug, Clone)]
pub struct ListResult {
    pub items: Vec<Arc<Object>>,
    pub revision: u64,
    pub more: bool,
}

/// Counters for monitoring and for tests that check group commit actually groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// The revision of the last committed write.
    pub revision: u64,
    /// Number of current objects.
    pub objects: usize,
    /// Transactions committed (each is one sync when `durable`).
    pub commits: u64,
    /// Writes committed (each took one revision).
    pub writes: u64,
    /// Writes refused by a precondition (AlreadyExists, NotFound, Conflict).
    pub rejected: u64,
    /// The largest number of writes committed in one transaction.
    pub max_batch: u64,
    /// Total time spent in engine commits (the fsync included), in microseconds.
    pub commit_micros: u64,
    /// Total time the writer spent on batches (checks, stamping, commit, publishing), in
    /// microseconds; the rest of its time it waited for requests.
    pub busy_micros: u64,
    /// Events currently held in the watch history.
    pub history_len: usize,
    /// The oldest revision a watch can start from.
    pub oldest_watchable: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub writes: AtomicU64,
    pub rejected: AtomicU64,
    pub max_batch: AtomicU64,
    pub commit_micros: AtomicU64,
    pub busy_micros: AtomicU64,
}

/// State shared by the writer thread, the store handles and the watches.
pub(crate) struct Shared {
    pub index: Index,
    pub hub: Hub,
    pub counters: Counters,
    /// Why the last commit failed; `None` once one succeeds. A database that fails a commit
    /// (fjall poisons itself on an I/O error) usually fails every later one too.
    pub commit_failure: std::sync::Mutex<Option<String>>,
}

/// A stream of changes after the watch's start revision, in revision order.
pub struct Watch {
    inner: hub::WatchCursor,
}

impl Watch {
    /// The next event, or `None` when the store is closed. Never skips an event: a slow watcher
    /// that falls out of the live channel catches up from the history, or gets `Expired`.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        self.inner.next().await
    }

    /// The revision of the last event this watch has consumed or skipped as not matching its
    /// prefix: resuming a watch from here loses nothing.
    pub fn position(&self) -> u64 {
        self.inner.position()
    }
}

/// Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    tx: Option<mpsc::Sender<Msg>>,
    writer: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the last sender lets the writer finish its queue and exit; joining it means
        // the database file is released when the last handle is gone, so it can be reopened.
        self.tx.take();
        if let Some(handle) = self.writer.take()
            && handle.join().is_err()
        {
            tracing::error!("store writer thread panicked");
        }
    }
}

impl Store {
    /// Open (or create) the store in `dir`, loading existing objects and watch history.
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<Store, StoreError> {
        let history_cap = opts.history_events.max(1);
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Backend(format!("create {}: {e}", dir.display())))?;
        let (engine, loaded) = engine::FjallEngine::open(dir, history_cap, opts.durable)?;
        tracing::info!(
            objects = loaded.objects.len(),
            revision = loaded.revision,
            history = loaded.history.len(),
            oldest_watchable = loaded.compacted,
            "store opened"
        );
        let revision = loaded.revision;
        let compacted = loaded.compacted;
        let shared = Arc::new(Shared {
            index: Index::new(loaded.objects, revision),
            hub: Hub::new(
                loaded.history,
                compacted,
                history_cap,
                opts.history_bytes.max(1),
                revision,
            ),
            counters: Counters::default(),
            commit_failure: std::sync::Mutex::new(None),
        });
        Store::start(
            Box::new(engine),
            shared,
            revision,
            compacted,
            history_cap,
            &opts,
        )
    }

    /// Starts the writer thread over `engine`.
    fn start(
        engine: Box<dyn engine::Engine>,
        shared: Arc<Shared>,
        revision: u64,
        compacted: u64,
        history_cap: usize,
        opts: &StoreOptions,
    ) -> Result<Store, StoreError> {
        let (tx, rx) = mpsc::channel(opts.queue_capacity.max(1));
        let writer = writer::Writer::new(
            engine,
            Arc::clone(&shared),
            revision,
            compacted,
            history_cap,
            opts.max_batch.max(1),
        );
        let handle = std::thread::Builder::new()
            .name("kbatch-store-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Backend(format!("spawn writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                shared,
                tx: Some(tx),
                writer: Some(handle),
            }),
        })
    }

    /// The revision of the last committed write.
    pub fn revision(&self) -> u64 {
        self.inner.shared.index.revision()
    }

    /// Waits at most `timeout` for the store to reach revision `rv`; returns whether it did.
    /// What upstream's watch cache does before serving a read that must be at least that new.
    pub async fn wait_for_revision(&self, rv: u64, timeout: std::time::Duration) -> bool {
        if self.revision() >= rv {
            return true;
        }
        tokio::time::timeout(timeout, self.inner.shared.hub.reached(rv))
            .await
            .unwrap_or(false)
    }

    pub fn get(&self, key: &str) -> Option<Arc<Object>> {
        self.inner.shared.index.get(key)
    }

    /// How many objects have a key that starts with `prefix` (nothing is copied).
    pub fn count(&self, prefix: &str) -> usize {
        self.inner.shared.index.count(prefix)
    }

    /// Objects whose key starts with `prefix`, in key order, strictly after `start_after` when
    /// given, at most `limit` when given.
    pub fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
    ) -> ListResult {
        self.inner.shared.index.list(prefix, start_after, limit)
    }

    /// Objects under `prefix` as they were at revision `rv`, in key order: the current state
    /// with the history's later changes undone, as etcd serves a list at a past revision.
    /// `Expired` once those changes have left the history window (or a change lost its
    /// previous state in a restart). A revision not reached yet reads as the current one:
    /// callers wait for it first.
    pub async fn list_at(&self, prefix: &str, rv: u64) -> Result<ListResult, StoreError> {
        let now = self.list(prefix, None, None);
        if rv >= now.revision {
            return Ok(now);
        }
        // The index publishes a batch before the history does.
        if !self.inner.shared.hub.reached(now.revision).await {
            return Err(StoreError::Closed);
        }
        let later = self
            .inner
            .shared
            .hub
            .changes_between(prefix, rv, now.revision)?;
        let mut objects: std::collections::BTreeMap<String, Arc<Object>> =
            now.items.into_iter().map(|o| (o.key.clone(), o)).collect();
        for ev in later.iter().rev() {
            match (ev.kind, &ev.prev) {
                (EventType::Added, _) => {
                    objects.remove(&ev.object.key);
                }
                (_, Some(prev)) => {
                    objects.insert(ev.object.key.clone(), Arc::clone(prev));
                }
                (_, None) => {
                    return Err(StoreError::Expired {
                        requested: rv,
                        oldest: ev.object.rv,
                    });
                }
            }
        }
        Ok(ListResult {
            items: objects.into_values().collect(),
            revision: rv,
            more: false,
        })
    }

    /// Create `key`; fails with `AlreadyExists`. Stamps `metadata.resourceVersion`.
    pub async fn create(
        &self,
        key: String,
        value: serde_json::Value,
    ) -> Result<Arc<Object>, StoreError> {
        let doc = pack::pack_value(value)?;
        self.submit(Op::Create { key, doc }).await
    }

    /// Replace `key`; `expected_rv` (when given) must equal the stored revision, else `Conflict`.
    pub async fn update(
        &self,
        key: String,
        value: serde_json::Value,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Object>, StoreError> {
        let doc = pack::pack_value(value)?;
        self.submit(Op::Update {
            key,
            doc,
            expected_rv,
        })
        .await
    }

    /// Remove `key`; `expected_rv` as for update. Returns the deleted object stamped with the
    /// deletion's revision.
    pub async fn delete(
        &self,
        key: String,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Object>, StoreError> {
        self.submit(Op::Delete { key, expected_rv }).await
    }

    /// Changes to keys under `prefix` with a revision greater than `from_rv`.
    ///
    /// `from_rv` is taken literally: 0 means "from the very first revision", which is `Expired`
    /// once the history window has moved on. A `from_rv` ahead of the store waits for it.
    pub fn watch(&self, prefix: &str, from_rv: u64) -> Result<Watch, StoreError> {
        let inner = self.inner.shared.hub.watch(prefix, from_rv)?;
        Ok(Watch { inner })
    }

    /// Flush and stop the writer; later writes fail with `Closed`.
    pub async fn close(&self) {
        let Some(tx) = self.inner.tx.as_ref() else {
            return;
        };
        let (ack, done) = oneshot::channel();
        if tx.send(Msg::Close(ack)).await.is_err() {
            // Already closed (or closing): the writer has stopped taking messages.
            return;
        }
        // An error means the writer dropped the ack while exiting: it is gone either way.
        let _ = done.await;
    }

    /// Whether the store takes writes: `Err` with the reason while its last commit failed
    /// (kube-apiserver's `etcd` health check).
    pub fn health(&self) -> Result<(), String> {
        let failure = self
            .inner
            .shared
            .commit_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match failure.as_ref() {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }

    /// Counters and sizes, for monitoring and tests.
    pub fn stats(&self) -> StoreStats {
        let shared = &self.inner.shared;
        let (revision, objects) = shared.index.size();
        let (history_len, oldest_watchable) = shared.hub.window();
        StoreStats {
            revision,
            objects,
            commits: shared.counters.commits.load(Ordering::Relaxed),
            writes: shared.counters.writes.load(Ordering::Relaxed),
            rejected: shared.counters.rejected.load(Ordering::Relaxed),
            max_batch: shared.counters.max_batch.load(Ordering::Relaxed),
            commit_micros: shared.counters.commit_micros.load(Ordering::Relaxed),
            busy_micros: shared.counters.busy_micros.load(Ordering::Relaxed),
            history_len,
            oldest_watchable,
        }
    }

    async fn submit(&self, op: Op) -> Result<Arc<Object>, StoreError> {
        let tx = self.inner.tx.as_ref().ok_or(StoreError::Closed)?;
        let (reply, result) = oneshot::channel();
        tx.send(Msg::Write(WriteRequest { op, reply }))
            .await
            .map_err(|_| StoreError::Closed)?;
        // The writer drops the reply sender only when it stops without handling the request.
        result.await.map_err(|_| StoreError::Closed)?
    }
}
