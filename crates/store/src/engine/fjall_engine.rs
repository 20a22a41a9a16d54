//! fjall (LSM tree with a write-ahead journal) as the store's engine: three keyspaces written
//! with one atomic batch per commit, the journal fsync'd before the batch is acknowledged.

use std::path::Path;
use std::sync::Arc;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{CommitBatch, Engine, Loaded, history_window};
use crate::{EventType, Object, StoreError, WatchEvent};
use crate::{codec, pack};

/// Directory of the database inside the store directory.
const DB_DIR: &str = "fjall";
const META_REVISION: &[u8] = b"revision";
const META_COMPACTED: &[u8] = b"compacted";
/// Block cache: reads are served from memory, so the cache only helps open() and compaction.
const CACHE_BYTES: u64 = 16 << 20;
/// Journal bound (fjall's minimum): it caps what open() replays after a crash.
const JOURNAL_BYTES: u64 = 64 << 20;
/// Memtable size of the objects and log keyspaces. fjall's default (64 MiB each) let the
/// memtables alone take a few hundred MiB of a busy server; smaller ones flush sooner. With
/// packed documents 2 MiB holds thousands of writes, and sealed memtables waiting for their
/// flush, plus the skiplist's own nodes, make several times that.
const MEMTABLE_BYTES: u64 = 2 << 20;
/// One background worker for flushes and compactions. With more, fjall 3.1's first worker
/// hands every compaction request back to the queue for the others and spins re-reading it
/// while they compact (~10% of the CPU under sustained writes).
const WORKER_THREADS: usize = 1;
/// Size of the tables compaction writes (fjall's default: 64 MiB). A table being written
/// holds the last key of each of its blocks until it is finished, and each key shares the
/// allocation of the input block it was read from: with ~1 object per 4 KiB block a 64 MiB
/// table kept tens of MiB of input blocks alive while it was written.
const TABLE_BYTES: u64 = 8 << 20;

fn keyspace_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .max_memtable_size(MEMTABLE_BYTES)
        .compaction_strategy(Arc::new(
            fjall::compaction::Leveled::default().with_table_target_size(TABLE_BYTES),
        ))
}

pub(crate) struct FjallEngine {
    db: Database,
    objects: Keyspace,
    log: Keyspace,
    meta: Keyspace,
    durable: bool,
}

fn be(context: &'static str) -> impl Fn(fjall::Error) -> StoreError {
    move |e| StoreError::Backend(format!("{context}: {e}"))
}

fn u64_of(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

impl FjallEngine {
    pub(crate) fn open(
        dir: &Path,
        history_cap: usize,
        durable: bool,
    ) -> Result<(FjallEngine, Loaded), StoreError> {
        let db = Database::builder(dir.join(DB_DIR))
            .cache_size(CACHE_BYTES)
            .max_journaling_size(JOURNAL_BYTES)
            .worker_threads(WORKER_THREADS)
            .open()
            .map_err(be("open database"))?;
        let objects = db
            .keyspace("objects", keyspace_options)
            .map_err(be("open objects"))?;
        let log = db
            .keyspace("log", keyspace_options)
            .map_err(be("open log"))?;
        let meta = db
            .keyspace("meta", keyspace_options)
            .map_err(be("open meta"))?;

        let read_meta = |name: &[u8]| -> Result<u64, StoreError> {
            match meta.get(name).map_err(be("read meta"))? {
                None => Ok(0),
                Some(v) => {
                    u64_of(&v).ok_or_else(|| StoreError::Backend("corrupt meta record".to_owned()))
                }
            }
        };
        let meta_revision = read_meta(META_REVISION)?;
        let meta_compacted = read_meta(META_COMPACTED)?;

        let mut revision = meta_revision;
        let mut loaded_objects = Vec::new();
        for item in objects.iter() {
            let (k, v) = item.into_inner().map_err(be("scan objects"))?;
            let key = String::from_utf8(k.to_vec())
                .map_err(|_| StoreError::Backend("corrupt object key".to_owned()))?;
            let corrupt = || StoreError::Backend(format!("corrupt object record {key}"));
            let (rv, raw) = codec::decode_object(&v).ok_or_else(corrupt)?;
            let body = pack::from_disk(raw).map_err(|_| corrupt())?;
            revision = revision.max(rv);
            loaded_objects.push(Arc::new(Object::from_parts(key, rv, body)));
        }

        let mut events = Vec::new();
        let from = meta_compacted.saturating_add(1).to_be_bytes();
        for item in log.range(from..) {
            let (k, v) = item.into_inner().map_err(be("scan log"))?;
            let rv = u64_of(&k).ok_or_else(|| StoreError::Backend("corrupt log key".to_owned()))?;
            let corrupt = || StoreError::Backend(format!("corrupt log record {rv}"));
            let (kind, key, raw) = codec::decode_event(&v).ok_or_else(corrupt)?;
            let body = pack::from_disk(raw).map_err(|_| corrupt())?;
            revision = revision.max(rv);
            events.push(WatchEvent {
                kind,
                object: Arc::new(Object::from_parts(key, rv, body)),
                prev: None,
            });
        }
        let (history, compacted) = history_window(events, revision, history_cap);

        let engine = FjallEngine {
            db,
            objects,
            log,
            meta,
            durable,
        };
        if compacted != meta_compacted || revision != meta_revision {
            engine.fix_meta(meta_compacted, compacted, revision)?;
        }
        Ok((
            engine,
            Loaded {
                objects: loaded_objects,
                revision,
                compacted,
                history,
            },
        ))
    }

    /// Bring meta and the log in line with what open() decided to keep.
    fn fix_meta(
        &self,
        old_compacted: u64,
        compacted: u64,
        revision: u64,
    ) -> Result<(), StoreError> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        for item in self.log.range(..=compacted.to_be_bytes()) {
            let k = item.key().map_err(be("scan log"))?;
            batch.remove(&self.log, k);
        }
        batch.insert(&self.meta, META_REVISION, revision.to_be_bytes());
        batch.insert(&self.meta, META_COMPACTED, compacted.to_be_bytes());
        batch.commit().map_err(be("commit"))?;
        tracing::info!(
            old_compacted,
            compacted,
            revision,
            "store metadata repaired"
        );
        Ok(())
    }
}

impl Engine for FjallEngine {
    fn commit(&mut self, batch: &CommitBatch<'_>) -> Result<(), StoreError> {
        // fjall only buffers the journal unless asked; SyncAll fsyncs it before commit returns.
        let mode = self.durable.then_some(PersistMode::SyncAll);
        let mut b = self.db.batch().durability(mode);
        for ev in batch.changes {
            let obj = &ev.object;
            match ev.kind {
                EventType::Added | EventType::Modified => b.insert(
                    &self.objects,
                    obj.key.as_str(),
                    codec::encode_object(obj.rv, obj.body()),
                ),
                EventType::Deleted => b.remove(&self.objects, obj.key.as_str()),
            }
            // Events that leave the window in this same batch need no log row.
            if obj.rv > batch.compacted {
                b.insert(
                    &self.log,
                    obj.rv.to_be_bytes(),
                    codec::encode_event(ev.kind, &obj.key, obj.body()),
                );
            }
        }
        let mut rv = batch.old_compacted.saturating_add(1);
        while rv <= batch.compacted {
            b.remove(&self.log, rv.to_be_bytes());
            rv += 1;
        }
        b.insert(&self.meta, META_REVISION, batch.revision.to_be_bytes());
        b.insert(&self.meta, META_COMPACTED, batch.compacted.to_be_bytes());
        b.commit().map_err(be("commit"))?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.db.persist(PersistMode::SyncAll).map_err(be("persist"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records written before documents were packed hold plain JSON: they still load, and
    /// come out exactly as they went in.
    #[test]
    fn plain_json_records_of_earlier_versions_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pod = br#"{"kind":"Pod","metadata":{"name":"p","resourceVersion":"2"},"spec":{}}"#;
        let job = br#"{"kind":"Job","metadata":{"name":"j","resourceVersion":"3"}}"#;
        {
            let db = Database::builder(dir.path().join(DB_DIR))
                .open()
                .expect("open");
            let objects = db.keyspace("objects", keyspace_options).expect("objects");
            let log = db.keyspace("log", keyspace_options).expect("log");
            let meta = db.keyspace("meta", keyspace_options).expect("meta");
            let mut b = db.batch().durability(Some(PersistMode::SyncAll));
            b.insert(&objects, "/pods/d/p", codec::encode_object(2, pod));
            b.insert(&objects, "/jobs/d/j", codec::encode_object(3, job));
            let added = codec::encode_event(EventType::Added, "/pods/d/p", pod);
            b.insert(&log, 2u64.to_be_bytes(), added);
            let added = codec::encode_event(EventType::Added, "/jobs/d/j", job);
            b.insert(&log, 3u64.to_be_bytes(), added);
            b.insert(&meta, META_REVISION, 3u64.to_be_bytes());
            b.insert(&meta, META_COMPACTED, 1u64.to_be_bytes());
            b.commit().expect("commit");
        }
        let (_engine, loaded) = FjallEngine::open(dir.path(), 100, true).expect("opens");
        assert_eq!(loaded.revision, 3);
        let raws: Vec<_> = loaded.objects.iter().map(|o| o.raw()).collect();
        assert_eq!(raws, [&job[..], &pod[..]]);
        assert!(loaded.objects.iter().all(|o| pack::is_packed(o.body())));
        let history: Vec<_> = loaded.history.iter().map(|e| e.object.raw()).collect();
        assert_eq!(history, [&pod[..], &job[..]]);
    }

    #[test]
    fn a_damaged_packed_record_is_refused_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = Database::builder(dir.path().join(DB_DIR))
                .open()
                .expect("open");
            let objects = db.keyspace("objects", keyspace_options).expect("objects");
            let mut b = db.batch().durability(Some(PersistMode::SyncAll));
            b.insert(
                &objects,
                "/pods/d/p",
                codec::encode_object(2, &[1, 9, 0, 0, 0]),
            );
            b.commit().expect("commit");
        }
        let err = FjallEngine::open(dir.path(), 100, true).err();
        assert!(
            matches!(&err, Some(StoreError::Backend(m)) if m.contains("/pods/d/p")),
            "{err:?}"
        );
    }
}
