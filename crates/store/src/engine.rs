//! The on-disk backend. redb won the engine comparison (see benches/store-engines); the
//! writer talks to it only through [`Engine`], so another engine can be dropped in.
//!
//! Tables, all written in one transaction per commit batch:
//! - `objects`: key -> (rv, JSON) of every current object;
//! - `log`: rv -> (event type, key, JSON) for the revisions in the history window;
//! - `meta`: `revision` (last committed) and `compacted` (last revision dropped from the log).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use crate::codec;
use crate::{EventType, Object, StoreError, WatchEvent};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_REVISION: &str = "revision";
const META_COMPACTED: &str = "compacted";

/// File name of the database inside the store directory.
pub(crate) const DB_FILE: &str = "store.redb";

/// One commit batch: the changes in revision order, plus the new revision and window start.
pub(crate) struct CommitBatch<'a> {
    pub changes: &'a [WatchEvent],
    pub revision: u64,
    /// Log entries with rv in `(old_compacted, compacted]` are dropped in this commit.
    pub old_compacted: u64,
    pub compacted: u64,
}

pub(crate) trait Engine: Send {
    /// Apply the batch atomically; durable on return when the store is durable.
    fn commit(&mut self, batch: &CommitBatch<'_>) -> Result<(), StoreError>;
    /// Make every earlier commit durable (matters only for non-durable stores).
    fn flush(&mut self) -> Result<(), StoreError>;
}

/// What open() found on disk.
pub(crate) struct Loaded {
    pub objects: Vec<Arc<Object>>,
    pub revision: u64,
    /// The oldest revision a watch can start from: events `compacted+1..=revision` are in
    /// `history`, contiguous.
    pub compacted: u64,
    pub history: VecDeque<WatchEvent>,
}

pub(crate) struct RedbEngine {
    db: Database,
    durable: bool,
}

fn backend(context: &str) -> impl Fn(redb::Error) -> StoreError + '_ {
    move |e| StoreError::Backend(format!("{context}: {e}"))
}

/// redb has one error type per operation; funnel them all through redb::Error.
fn be<E: Into<redb::Error>>(context: &str) -> impl Fn(E) -> StoreError + '_ {
    let f = backend(context);
    move |e| f(e.into())
}

impl RedbEngine {
    pub(crate) fn open(
        dir: &Path,
        history_cap: usize,
        durable: bool,
    ) -> Result<(RedbEngine, Loaded), StoreError> {
        let path = dir.join(DB_FILE);
        let db = Database::create(&path).map_err(be("open database"))?;

        let wtx = db.begin_write().map_err(be("begin"))?;
        {
            wtx.open_table(OBJECTS).map_err(be("open objects"))?;
            wtx.open_table(LOG).map_err(be("open log"))?;
            wtx.open_table(META).map_err(be("open meta"))?;
        }
        wtx.commit().map_err(be("commit"))?;

        let rtx = db.begin_read().map_err(be("begin read"))?;
        let meta = rtx.open_table(META).map_err(be("open meta"))?;
        let read_meta = |name: &str| -> Result<u64, StoreError> {
            Ok(meta
                .get(name)
                .map_err(be("read meta"))?
                .map(|g| g.value())
                .unwrap_or(0))
        };
        let meta_revision = read_meta(META_REVISION)?;
        let meta_compacted = read_meta(META_COMPACTED)?;

        let mut revision = meta_revision;
        let mut objects = Vec::new();
        let table = rtx.open_table(OBJECTS).map_err(be("open objects"))?;
        for item in table.iter().map_err(be("scan objects"))? {
            let (k, v) = item.map_err(be("scan objects"))?;
            let key = k.value().to_owned();
            let (rv, raw) = codec::decode_object(v.value())
                .ok_or_else(|| StoreError::Backend(format!("corrupt object record {key}")))?;
            revision = revision.max(rv);
            objects.push(Arc::new(Object { key, rv, raw }));
        }

        let mut events: Vec<WatchEvent> = Vec::new();
        let log = rtx.open_table(LOG).map_err(be("open log"))?;
        for item in log
            .range(meta_compacted.saturating_add(1)..)
            .map_err(be("scan log"))?
        {
            let (k, v) = item.map_err(be("scan log"))?;
            let rv = k.value();
            let (kind, key, raw) = codec::decode_event(v.value())
                .ok_or_else(|| StoreError::Backend(format!("corrupt log record {rv}")))?;
            revision = revision.max(rv);
            events.push(WatchEvent {
                kind,
                object: Arc::new(Object { key, rv, raw }),
                prev: None,
            });
        }
        drop((meta, table, log, rtx));

        // Keep the contiguous run of events that ends at the current revision; the writer
        // always commits log and objects together, so anything else means a damaged file,
        // and a shorter history is the safe answer.
        let mut start = events.len();
        let mut expect = revision;
        while start > 0 && events[start - 1].object.rv == expect {
            start -= 1;
            expect = expect.saturating_sub(1);
        }
        if start > 0 {
            tracing::warn!(
                dropped = start,
                "event log is not contiguous with the revision; truncating history"
            );
        }
        let keep_from = start.max(events.len().saturating_sub(history_cap));
        let mut history: VecDeque<WatchEvent> = events.drain(keep_from..).collect();
        // Previous states are not persisted: within the window, each change's previous state
        // is the key's preceding event.
        let mut last: HashMap<String, Arc<Object>> = HashMap::new();
        for ev in history.iter_mut() {
            ev.prev = last.get(&ev.object.key).cloned();
            last.insert(ev.object.key.clone(), Arc::clone(&ev.object));
        }
        let compacted = revision - history.len() as u64;

        let engine = RedbEngine { db, durable };
        if compacted != meta_compacted || revision != meta_revision {
            engine.fix_meta(meta_compacted, compacted, revision)?;
        }
        Ok((
            engine,
            Loaded {
                objects,
                revision,
                compacted,
                history,
            },
        ))
    }

    /// Bring `meta` and the log in line with what open() decided to keep.
    fn fix_meta(
        &self,
        old_compacted: u64,
        compacted: u64,
        revision: u64,
    ) -> Result<(), StoreError> {
        let wtx = self.db.begin_write().map_err(be("begin"))?;
        {
            let mut log = wtx.open_table(LOG).map_err(be("open log"))?;
            log.retain_in(..=compacted, |_, _| false)
                .map_err(be("trim log"))?;
            let mut meta = wtx.open_table(META).map_err(be("open meta"))?;
            meta.insert(META_REVISION, revision)
                .map_err(be("write meta"))?;
            meta.insert(META_COMPACTED, compacted)
                .map_err(be("write meta"))?;
        }
        wtx.commit().map_err(be("commit"))?;
        tracing::info!(
            old_compacted,
            compacted,
            revision,
            "store metadata repaired"
        );
        Ok(())
    }
}

impl Engine for RedbEngine {
    fn commit(&mut self, batch: &CommitBatch<'_>) -> Result<(), StoreError> {
        let mut wtx = self.db.begin_write().map_err(be("begin"))?;
        let durability = if self.durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        wtx.set_durability(durability)
            .map_err(be("set durability"))?;
        {
            let mut objects = wtx.open_table(OBJECTS).map_err(be("open objects"))?;
            let mut log = wtx.open_table(LOG).map_err(be("open log"))?;
            for ev in batch.changes {
                let obj = &ev.object;
                match ev.kind {
                    EventType::Added | EventType::Modified => {
                        objects
                            .insert(
                                obj.key.as_str(),
                                codec::encode_object(obj.rv, &obj.raw).as_slice(),
                            )
                            .map_err(be("write object"))?;
                    }
                    EventType::Deleted => {
                        objects
                            .remove(obj.key.as_str())
                            .map_err(be("delete object"))?;
                    }
                }
                // Events that leave the window in this same batch need no log row.
                if obj.rv > batch.compacted {
                    log.insert(
                        obj.rv,
                        codec::encode_event(ev.kind, &obj.key, &obj.raw).as_slice(),
                    )
                    .map_err(be("write log"))?;
                }
            }
            let mut rv = batch.old_compacted.saturating_add(1);
            while rv <= batch.compacted {
                log.remove(rv).map_err(be("trim log"))?;
                rv += 1;
            }
            let mut meta = wtx.open_table(META).map_err(be("open meta"))?;
            meta.insert(META_REVISION, batch.revision)
                .map_err(be("write meta"))?;
            meta.insert(META_COMPACTED, batch.compacted)
                .map_err(be("write meta"))?;
        }
        wtx.commit().map_err(be("commit"))?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.durable {
            return Ok(());
        }
        // An empty Immediate commit makes the earlier Durability::None commits durable.
        let wtx = self.db.begin_write().map_err(be("begin"))?;
        wtx.commit().map_err(be("commit"))?;
        Ok(())
    }
}
