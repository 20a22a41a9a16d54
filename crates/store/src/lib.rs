//! kbatch-store: a durable, revisioned object store.
//!
//! Objects are JSON documents under string keys (`/<resource>/<namespace>/<name>`, or
//! `/<resource>/<name>` for cluster-scoped kinds). One global revision counter gives every write
//! its revision, which the store stamps into the document as `metadata.resourceVersion`.
//! Writes are atomic per object with optimistic concurrency; a watch streams every change
//! after a revision that is still inside the history window.
//!
//! INTERFACE STUB: the signatures below are the contract; bodies are filled in by the store
//! implementation.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

/// A stored object: its key, the revision of its last write, and its JSON bytes
/// (with `metadata.resourceVersion` already set to `rv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub rv: u64,
    pub raw: Bytes,
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
    /// How many past events the watch history keeps (in memory and on disk).
    pub history_events: usize,
    /// fsync every commit batch (true in production; tests of logic may turn it off).
    pub durable: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            history_events: 50_000,
            durable: true,
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

/// A stream of changes after the watch's start revision, in revision order.
pub struct Watch {
    _private: (),
}

impl Watch {
    /// The next event, or `None` when the store is closed. Never skips an event: a slow watcher
    /// that falls out of the live channel catches up from the history, or gets `Expired`.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        unimplemented!()
    }
}

/// Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct Store {
    _private: Arc<()>,
}

impl Store {
    /// Open (or create) the store in `dir`, loading existing objects and watch history.
    pub fn open(_dir: &Path, _opts: StoreOptions) -> Result<Store, StoreError> {
        unimplemented!()
    }

    /// The revision of the last committed write.
    pub fn revision(&self) -> u64 {
        unimplemented!()
    }

    pub fn get(&self, _key: &str) -> Option<Arc<Object>> {
        unimplemented!()
    }

    /// Objects whose key starts with `prefix`, in key order, strictly after `start_after` when
    /// given, at most `limit` when given.
    pub fn list(
        &self,
        _prefix: &str,
        _start_after: Option<&str>,
        _limit: Option<usize>,
    ) -> ListResult {
        unimplemented!()
    }

    /// Create `key`; fails with `AlreadyExists`. Stamps `metadata.resourceVersion`.
    pub async fn create(
        &self,
        _key: String,
        _value: serde_json::Value,
    ) -> Result<Arc<Object>, StoreError> {
        unimplemented!()
    }

    /// Replace `key`; `expected_rv` (when given) must equal the stored revision, else `Conflict`.
    pub async fn update(
        &self,
        _key: String,
        _value: serde_json::Value,
        _expected_rv: Option<u64>,
    ) -> Result<Arc<Object>, StoreError> {
        unimplemented!()
    }

    /// Remove `key`; `expected_rv` as for update. Returns the deleted object stamped with the
    /// deletion's revision.
    pub async fn delete(
        &self,
        _key: String,
        _expected_rv: Option<u64>,
    ) -> Result<Arc<Object>, StoreError> {
        unimplemented!()
    }

    /// Changes to keys under `prefix` with a revision greater than `from_rv`.
    pub fn watch(&self, _prefix: &str, _from_rv: u64) -> Result<Watch, StoreError> {
        unimplemented!()
    }

    /// Flush and stop the writer; later writes fail with `Closed`.
    pub async fn close(&self) {
        unimplemented!()
    }
}
