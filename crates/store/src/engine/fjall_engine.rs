//! fjall (LSM tree with a write-ahead journal) as the store's engine: three keyspaces written
//! with one atomic batch per commit. A durable store logs each batch in its commit log
//! (`wal`, synced) before fjall takes it unsynced; fjall's journal is fsync'd at checkpoints,
//! and at open the log's batches fjall lost are applied again.

use std::path::Path;
use std::sync::Arc;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::wal::{self, Wal};
use super::{CommitBatch, Engine, Loaded, history_window};
use crate::{EventType, Object, StoreError, WatchEvent};
use crate::{codec, pack};

/// Directory of the database inside the store directory.
const DB_DIR: &str = "fjall";
/// The commit log, inside the store directory.
const WAL_FILE: &str = "commit.log";
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
    /// The commit log of a durable store.
    wal: Option<Wal>,
    /// Makes fjall's next write fail (tests of what follows a failed commit).
    #[cfg(test)]
    fail_next_write: bool,
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

        let mut engine = FjallEngine {
            db,
            objects,
            log,
            meta,
            wal: None,
            #[cfg(test)]
            fail_next_write: false,
        };
        if durable {
            engine.wal = Some(engine.replay(&dir.join(WAL_FILE))?);
        }
        let meta_revision = engine.read_meta(META_REVISION)?;
        let meta_compacted = engine.read_meta(META_COMPACTED)?;

        let mut revision = meta_revision;
        let mut loaded_objects = Vec::new();
        for item in engine.objects.iter() {
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
        for item in engine.log.range(from..) {
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

    fn read_meta(&self, name: &[u8]) -> Result<u64, StoreError> {
        match self.meta.get(name).map_err(be("read meta"))? {
            None => Ok(0),
            Some(v) => {
                u64_of(&v).ok_or_else(|| StoreError::Backend("corrupt meta record".to_owned()))
            }
        }
    }

    /// Applies the commit log's batches that fjall does not hold, makes fjall durable, and
    /// returns the log rewound, ready for the next commit.
    fn replay(&mut self, path: &Path) -> Result<Wal, StoreError> {
        let (mut log, content) = Wal::open(path)?;
        let revision = self.read_meta(META_REVISION)?;
        let mut old_compacted = self.read_meta(META_COMPACTED)?;
        let records = wal::to_replay(&content, revision);
        for rec in &records {
            let batch = CommitBatch {
                changes: &rec.changes,
                revision: rec.revision,
                old_compacted,
                compacted: rec.compacted,
            };
            self.write_batch(&batch)?;
            old_compacted = rec.compacted;
        }
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(be("persist"))?;
        if let Some(last) = records.last() {
            tracing::info!(
                batches = records.len(),
                from = revision,
                to = last.revision,
                "store: commit log replayed"
            );
        }
        log.rewind();
        Ok(log)
    }

    /// Writes `batch` into fjall, unsynced.
    fn write_batch(&mut self, batch: &CommitBatch<'_>) -> Result<(), StoreError> {
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_write) {
            return Err(StoreError::Backend("injected failure".into()));
        }
        let mut b = self.db.batch().durability(None);
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
        b.commit().map_err(be("commit"))
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
        if let Some(log) = self.wal.as_mut() {
            let len = log.prepare(batch)?;
            if log.wants_checkpoint(len) {
                // Everything the log holds goes durable in fjall: the log can start over.
                self.db
                    .persist(PersistMode::SyncAll)
                    .map_err(be("checkpoint"))?;
                log.rewind();
            }
            log.append_prepared()?;
        }
        let written = self.write_batch(batch);
        if written.is_err()
            && let Some(log) = self.wal.as_mut()
        {
            // The batch is answered as failed and its revisions go to the next one.
            log.retract();
        }
        written
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(be("persist"))?;
        if let Some(log) = self.wal.as_mut() {
            log.rewind();
        }
        Ok(())
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

    /// A change of a pod whose document carries `x`.
    fn change_with(kind: EventType, key: &str, rv: u64, x: String) -> WatchEvent {
        let doc = serde_json::json!({"kind": "Pod", "metadata": {"name": key}, "x": x});
        WatchEvent {
            kind,
            object: Arc::new(Object::from_json(key.to_string(), rv, doc).expect("packs")),
            prev: None,
        }
    }

    fn change(kind: EventType, key: &str, rv: u64, filler: usize) -> WatchEvent {
        change_with(kind, key, rv, "y".repeat(filler))
    }

    /// The batch of `changes`, ending at the last one's revision.
    fn batch_of(changes: &[WatchEvent]) -> CommitBatch<'_> {
        CommitBatch {
            changes,
            revision: changes.last().map_or(0, |c| c.object.rv),
            old_compacted: 0,
            compacted: 0,
        }
    }

    fn commit_one(engine: &mut FjallEngine, ev: WatchEvent) {
        engine.commit(&batch_of(&[ev])).expect("commits");
    }

    /// Appends `changes` to the commit log only, as if fjall's unsynced journal was lost in
    /// a crash right after.
    fn log_only(engine: &mut FjallEngine, changes: &[WatchEvent]) {
        let log = engine.wal.as_mut().expect("durable stores log");
        log.prepare(&batch_of(changes)).expect("encodes");
        log.append_prepared().expect("logged");
    }

    fn keys(loaded: &Loaded) -> Vec<(String, u64)> {
        loaded
            .objects
            .iter()
            .map(|o| (o.key.clone(), o.rv))
            .collect()
    }

    /// A crash after a batch reached the commit log but not fjall's journal: the batch is
    /// applied at open, with its event in the history.
    #[test]
    fn batches_only_in_the_commit_log_are_applied_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut engine, _) = FjallEngine::open(dir.path(), 100, true).expect("opens");
            commit_one(&mut engine, change(EventType::Added, "/pods/d/a", 1, 10));
            log_only(
                &mut engine,
                &[
                    change(EventType::Modified, "/pods/d/a", 2, 20),
                    change(EventType::Added, "/pods/d/b", 3, 30),
                ],
            );
            // Dropped without fjall ever seeing revisions 2 and 3.
        }
        let (mut engine, loaded) = FjallEngine::open(dir.path(), 100, true).expect("reopens");
        assert_eq!(loaded.revision, 3);
        assert_eq!(
            keys(&loaded),
            [("/pods/d/a".to_string(), 2), ("/pods/d/b".to_string(), 3)]
        );
        let history: Vec<_> = loaded.history.iter().map(|e| e.object.rv).collect();
        assert_eq!(history, [1, 2, 3]);
        // Writing on from there, and opening again, replays nothing twice.
        commit_one(&mut engine, change(EventType::Deleted, "/pods/d/b", 4, 30));
        drop(engine);
        let (_engine, loaded) = FjallEngine::open(dir.path(), 100, true).expect("reopens");
        assert_eq!(loaded.revision, 4);
        assert_eq!(keys(&loaded), [("/pods/d/a".to_string(), 2)]);
        let kinds: Vec<_> = loaded.history.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventType::Added,
                EventType::Modified,
                EventType::Added,
                EventType::Deleted
            ]
        );
    }

    /// A batch fjall refuses is answered as failed; the next batch, taking its revisions, is
    /// the one a restart finds.
    #[test]
    fn a_batch_fjall_refuses_is_not_replayed_over_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut engine, _) = FjallEngine::open(dir.path(), 100, true).expect("opens");
            commit_one(&mut engine, change(EventType::Added, "/pods/d/a", 1, 10));
            engine.fail_next_write = true;
            let refused = [change(EventType::Added, "/pods/d/refused", 2, 400)];
            assert!(engine.commit(&batch_of(&refused)).is_err());
            // The next two batches reach only the log, as after a crash that lost fjall's
            // unsynced journal.
            for (key, rv) in [("/pods/d/b", 2), ("/pods/d/c", 3)] {
                log_only(&mut engine, &[change(EventType::Added, key, rv, 10)]);
            }
        }
        let (_engine, loaded) = FjallEngine::open(dir.path(), 100, true).expect("reopens");
        assert_eq!(loaded.revision, 3);
        assert_eq!(
            keys(&loaded),
            [
                ("/pods/d/a".to_string(), 1),
                ("/pods/d/b".to_string(), 2),
                ("/pods/d/c".to_string(), 3)
            ]
        );
    }

    /// Past the checkpoint size the log starts over (fjall synced first): it stops growing,
    /// and everything is still there after a restart.
    #[test]
    fn the_commit_log_starts_over_after_a_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = 1 << 20;
        let n = wal::CHECKPOINT_BYTES / (1 << 20) + 4;
        {
            let (mut engine, _) = FjallEngine::open(dir.path(), 1000, true).expect("opens");
            for rv in 1..=n {
                // Incompressible filler, so that each record is ~1 MiB.
                let noise: String = (0..big)
                    .map(|i| char::from(b'a' + ((i * 7919 + rv as usize * 31) % 26) as u8))
                    .collect();
                let key = format!("/pods/d/p{rv}");
                commit_one(&mut engine, change_with(EventType::Added, &key, rv, noise));
            }
        }
        let size = std::fs::metadata(dir.path().join(WAL_FILE))
            .expect("log exists")
            .len();
        assert!(
            size <= wal::CHECKPOINT_BYTES + (2 << 20),
            "log grew to {size} bytes"
        );
        let (_engine, loaded) = FjallEngine::open(dir.path(), 1000, true).expect("reopens");
        assert_eq!(loaded.revision, n);
        assert_eq!(loaded.objects.len() as u64, n);
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
