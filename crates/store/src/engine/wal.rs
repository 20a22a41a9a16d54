//! The commit log: each commit batch is appended to one file and made durable with one
//! `fdatasync` before it is acknowledged; fjall then takes the batch without syncing its own
//! journal. A checkpoint (fjall's journal fsync'd) lets the log start over from its beginning.
//!
//! Why a log of our own: fjall's journal only ever grows, so every fsync of it is also a
//! metadata commit of the file system (on ext4 a jbd2 transaction, done by a kernel thread
//! that has to be scheduled). This file is written over in place once it has been written
//! through once, the way etcd preallocates its WAL segments, so that a sync writes data
//! blocks only: 0.05 ms against 0.15 ms idle on a journaled ext4, and far less under load,
//! when the jbd2 thread waits for a CPU.
//!
//! A record: magic, payload length, xxh3 of the payload, then the payload: the batch's first
//! and last revision, its window start, and its changes. After a restart the records whose
//! revisions follow what fjall holds are applied again, in order, up to the first record that
//! is torn, damaged or not contiguous. A checkpoint rewinds the log: the records of the pass
//! before are all at revisions fjall already holds, and whatever follows the current pass's
//! last record is either one of them or not a whole record at all.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::CommitBatch;
use crate::codec;
use crate::{Object, StoreError, WatchEvent};

const MAGIC: u32 = 0x4B42_5731;
const HEADER_BYTES: usize = 16;
/// Past this many bytes the next record comes after a checkpoint, from the log's start.
/// Written through once, the log then stays this long (plus at most one batch).
pub(crate) const CHECKPOINT_BYTES: u64 = 16 << 20;
/// The file grows by zeroes at least this much at a time: an append makes a sync commit file
/// metadata too, so it is paid once per this many bytes, not once per batch.
const GROW_BYTES: u64 = 1 << 20;

fn io(context: &'static str) -> impl Fn(std::io::Error) -> StoreError {
    move |e| StoreError::Backend(format!("commit log: {context}: {e}"))
}

fn len_u32(n: usize) -> Result<u32, StoreError> {
    u32::try_from(n).map_err(|_| StoreError::Backend("commit log: record too large".into()))
}

/// Appends the record of `batch` to `out`.
pub(crate) fn encode(batch: &CommitBatch<'_>, out: &mut Vec<u8>) -> Result<(), StoreError> {
    let first_rv = batch
        .changes
        .first()
        .map_or(batch.revision, |c| c.object.rv);
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    out.extend_from_slice(&first_rv.to_le_bytes());
    out.extend_from_slice(&batch.revision.to_le_bytes());
    out.extend_from_slice(&batch.compacted.to_le_bytes());
    out.extend_from_slice(&len_u32(batch.changes.len())?.to_le_bytes());
    for ev in batch.changes {
        let o = &ev.object;
        out.push(codec::kind_byte(ev.kind));
        out.extend_from_slice(&o.rv.to_le_bytes());
        out.extend_from_slice(&len_u32(o.key.len())?.to_le_bytes());
        out.extend_from_slice(o.key.as_bytes());
        out.extend_from_slice(&len_u32(o.body().len())?.to_le_bytes());
        out.extend_from_slice(o.body());
    }
    let payload_len = len_u32(out.len() - start - HEADER_BYTES)?;
    let sum = xxhash_rust::xxh3::xxh3_64(&out[start + HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&MAGIC.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&payload_len.to_le_bytes());
    out[start + 8..start + 16].copy_from_slice(&sum.to_le_bytes());
    Ok(())
}

/// A batch read back from the log.
#[derive(Debug)]
pub(crate) struct Record {
    pub first_rv: u64,
    pub revision: u64,
    pub compacted: u64,
    pub changes: Vec<WatchEvent>,
}

/// Reads little-endian fields off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.u32()?).ok()
    }
}

/// The record at the start of `buf` and its length in bytes; None when there is no whole,
/// undamaged record there.
pub(crate) fn decode(buf: &[u8]) -> Option<(Record, usize)> {
    let mut head = Reader(buf.get(..HEADER_BYTES)?);
    if head.u32()? != MAGIC {
        return None;
    }
    let payload_len = head.len()?;
    let sum = head.u64()?;
    let payload = buf.get(HEADER_BYTES..HEADER_BYTES.checked_add(payload_len)?)?;
    if xxhash_rust::xxh3::xxh3_64(payload) != sum {
        return None;
    }
    let mut r = Reader(payload);
    let first_rv = r.u64()?;
    let revision = r.u64()?;
    let compacted = r.u64()?;
    let count = r.len()?;
    let mut changes = Vec::with_capacity(count.min(payload_len / 17));
    for _ in 0..count {
        let kind = codec::kind_of_byte(r.u8()?)?;
        let rv = r.u64()?;
        let key_len = r.len()?;
        let key = std::str::from_utf8(r.take(key_len)?).ok()?.to_owned();
        let body_len = r.len()?;
        let body = Bytes::copy_from_slice(r.take(body_len)?);
        changes.push(WatchEvent {
            kind,
            object: Arc::new(Object::from_parts(key, rv, body)),
            prev: None,
        });
    }
    let record = Record {
        first_rv,
        revision,
        compacted,
        changes,
    };
    Some((record, HEADER_BYTES + payload_len))
}

/// The records of `buf` to apply on top of a store at `revision`, in order: those after it,
/// each starting where the one before ended, up to the first that is not whole or does not
/// follow (the tail of an earlier pass, or a batch torn by a crash).
pub(crate) fn to_replay(buf: &[u8], revision: u64) -> Vec<Record> {
    let mut out = Vec::new();
    let mut next = revision.saturating_add(1);
    let mut at = 0usize;
    while let Some((rec, len)) = buf.get(at..).and_then(decode) {
        at += len;
        if rec.revision < next {
            // Already in the store (fjall synced it before the crash).
            continue;
        }
        if rec.first_rv != next || rec.revision < rec.first_rv {
            if rec.first_rv > next {
                // Newer batches than the store holds, but not the ones right after it.
                tracing::warn!(
                    store = revision,
                    expected = next,
                    found = rec.first_rv,
                    "commit log: batches missing before the log's; not replayed"
                );
            }
            break;
        }
        next = rec.revision.saturating_add(1);
        out.push(rec);
    }
    out
}

/// The open log file.
pub(crate) struct Wal {
    file: File,
    /// Where the next record goes.
    offset: u64,
    /// Where the last record written went.
    last: u64,
    /// How much of the file has been written (by records or zeroes).
    written: u64,
    buf: Vec<u8>,
}

impl Wal {
    /// Opens (or creates) the log at `path`; returns it with its current bytes for replay.
    /// It is not appended to before [`Wal::rewind`].
    pub(crate) fn open(path: &Path) -> Result<(Wal, Vec<u8>), StoreError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("open"))?;
        let mut content = Vec::new();
        file.read_to_end(&mut content).map_err(io("read"))?;
        let written = content.len() as u64;
        let wal = Wal {
            file,
            offset: written,
            last: written,
            written,
            buf: Vec::new(),
        };
        Ok((wal, content))
    }

    /// Whether a record of `len` more bytes should wait for a checkpoint and a rewind.
    pub(crate) fn wants_checkpoint(&self, len: usize) -> bool {
        self.offset > 0 && self.offset.saturating_add(len as u64) > CHECKPOINT_BYTES
    }

    /// Starts the log over: call only once everything in it is durable elsewhere.
    pub(crate) fn rewind(&mut self) {
        self.offset = 0;
        self.last = 0;
    }

    /// Takes back the last record (its batch failed after it was logged): the next record
    /// goes in its place. Until then a restart would apply it, as a write whose failure the
    /// client saw may still have happened (as with any error after a request was sent).
    pub(crate) fn retract(&mut self) {
        self.offset = self.last;
    }

    /// Encodes `batch` into the log's buffer; returns the record's length.
    pub(crate) fn prepare(&mut self, batch: &CommitBatch<'_>) -> Result<usize, StoreError> {
        self.buf.clear();
        encode(batch, &mut self.buf)?;
        Ok(self.buf.len())
    }

    /// Writes the prepared record and syncs it. On an error nothing counts as written: the
    /// next record goes to the same place.
    pub(crate) fn append_prepared(&mut self) -> Result<(), StoreError> {
        let end = self.offset.saturating_add(self.buf.len() as u64);
        if end > self.written {
            // Grow by zeroes first, so that later passes write over written blocks only.
            let target = end.max(self.written.saturating_add(GROW_BYTES));
            let zeroes = vec![0u8; usize::try_from(target - self.written).unwrap_or(0)];
            self.file
                .write_all_at(&zeroes, self.written)
                .map_err(io("grow"))?;
            self.written = target;
        }
        self.file
            .write_all_at(&self.buf, self.offset)
            .map_err(io("write"))?;
        self.file.sync_data().map_err(io("sync"))?;
        self.last = self.offset;
        self.offset = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventType;

    fn ev(kind: EventType, key: &str, rv: u64, body: &[u8]) -> WatchEvent {
        WatchEvent {
            kind,
            object: Arc::new(Object::from_parts(
                key.to_string(),
                rv,
                Bytes::copy_from_slice(body),
            )),
            prev: None,
        }
    }

    /// The record of a batch of `n` changes ending at `revision`.
    fn record(revision: u64, n: u64) -> Vec<u8> {
        let changes: Vec<WatchEvent> = (revision + 1 - n..=revision)
            .map(|rv| ev(EventType::Modified, &format!("/pods/d/p{rv}"), rv, b"body"))
            .collect();
        let batch = CommitBatch {
            changes: &changes,
            revision,
            old_compacted: 0,
            compacted: 0,
        };
        let mut out = Vec::new();
        encode(&batch, &mut out).expect("encodes");
        out
    }

    fn revisions(recs: &[Record]) -> Vec<(u64, u64)> {
        recs.iter().map(|r| (r.first_rv, r.revision)).collect()
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let changes = vec![
            ev(EventType::Added, "/pods/d/a", 7, b"\x01packed"),
            ev(EventType::Deleted, "/jobs/d/j", 8, b"last state"),
        ];
        let batch = CommitBatch {
            changes: &changes,
            revision: 8,
            old_compacted: 1,
            compacted: 3,
        };
        let mut buf = Vec::new();
        encode(&batch, &mut buf).expect("encodes");
        let (rec, len) = decode(&buf).expect("decodes");
        assert_eq!(len, buf.len());
        assert_eq!((rec.first_rv, rec.revision, rec.compacted), (7, 8, 3));
        let got: Vec<_> = rec
            .changes
            .iter()
            .map(|e| (e.kind, e.object.key.as_str(), e.object.rv, e.object.body()))
            .collect();
        assert_eq!(
            got,
            [
                (EventType::Added, "/pods/d/a", 7, &b"\x01packed"[..]),
                (EventType::Deleted, "/jobs/d/j", 8, &b"last state"[..]),
            ]
        );
    }

    #[test]
    fn damaged_or_torn_records_are_not_read() {
        let buf = record(5, 2);
        for cut in [0, 10, HEADER_BYTES, buf.len() - 1] {
            assert!(decode(&buf[..cut]).is_none(), "cut at {cut}");
        }
        for at in [0, 5, 12, HEADER_BYTES + 3, buf.len() - 2] {
            let mut bad = buf.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_none(), "byte {at} flipped");
        }
        assert!(decode(&[0u8; 64]).is_none());
    }

    #[test]
    fn replay_takes_the_contiguous_records_after_the_revision() {
        let mut log = Vec::new();
        for (rev, n) in [(3, 3), (5, 2), (9, 4), (10, 1)] {
            log.extend(record(rev, n));
        }
        assert_eq!(
            revisions(&to_replay(&log, 0)),
            [(1, 3), (4, 5), (6, 9), (10, 10)]
        );
        // fjall already holds the first two batches.
        assert_eq!(revisions(&to_replay(&log, 5)), [(6, 9), (10, 10)]);
        assert!(to_replay(&log, 10).is_empty());
        // A gap (a batch missing) ends the replay before it.
        let mut gap = record(3, 3);
        gap.extend(record(9, 4));
        assert_eq!(revisions(&to_replay(&gap, 0)), [(1, 3)]);
        // A store behind the log's first record replays nothing rather than leave a hole.
        assert!(to_replay(&record(9, 4), 2).is_empty());
    }

    #[test]
    fn replay_stops_at_a_torn_record_and_at_the_tail_of_an_earlier_pass() {
        // A crash while the third record was written.
        let mut log = record(3, 3);
        log.extend(record(5, 2));
        let third = record(9, 4);
        log.extend(&third[..third.len() / 2]);
        assert_eq!(revisions(&to_replay(&log, 0)), [(1, 3), (4, 5)]);

        // After a checkpoint at revision 20 the log was rewound: two new records, then what
        // is left of the earlier pass (whole records among them).
        let mut earlier = Vec::new();
        for (rev, n) in [(12, 2), (15, 3), (18, 3), (20, 2)] {
            earlier.extend(record(rev, n));
        }
        let mut rewound = record(22, 2);
        rewound.extend(record(23, 1));
        let at = rewound.len();
        rewound.extend(&earlier[at..]);
        assert_eq!(revisions(&to_replay(&rewound, 20)), [(21, 22), (23, 23)]);
    }

    fn log_batch(wal: &mut Wal, changes: &[WatchEvent], revision: u64) {
        let batch = CommitBatch {
            changes,
            revision,
            old_compacted: 0,
            compacted: 0,
        };
        wal.prepare(&batch).expect("encodes");
        wal.append_prepared().expect("appends");
    }

    /// A batch taken back (fjall refused it) is written over by the next one, which takes
    /// its revisions: a restart replays the next one, not both.
    #[test]
    fn a_retracted_record_is_written_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        let (mut wal, _) = Wal::open(&path).expect("opens");
        wal.rewind();
        log_batch(&mut wal, &[ev(EventType::Added, "/pods/d/a", 1, b"one")], 1);
        let refused = [
            ev(
                EventType::Added,
                "/pods/d/b",
                2,
                b"a long body that was refused",
            ),
            ev(EventType::Added, "/pods/d/c", 3, b"another"),
        ];
        log_batch(&mut wal, &refused, 3);
        wal.retract();
        log_batch(
            &mut wal,
            &[ev(EventType::Added, "/pods/d/d", 2, b"short")],
            2,
        );
        let content = std::fs::read(&path).expect("reads");
        let replayed = to_replay(&content, 0);
        assert_eq!(revisions(&replayed), [(1, 1), (2, 2)]);
        assert_eq!(replayed[1].changes[0].object.key, "/pods/d/d");
    }

    #[test]
    fn the_log_writes_over_its_start_after_a_rewind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal");
        let changes = [ev(EventType::Added, "/pods/d/a", 1, b"one")];
        let batch = |revision| CommitBatch {
            changes: &changes,
            revision,
            old_compacted: 0,
            compacted: 0,
        };
        {
            let (mut wal, content) = Wal::open(&path).expect("opens");
            assert!(content.is_empty());
            wal.rewind();
            let len = wal.prepare(&batch(1)).expect("encodes");
            assert!(!wal.wants_checkpoint(len));
            wal.append_prepared().expect("appends");
        }
        let (mut wal, content) = Wal::open(&path).expect("reopens");
        // Grown by zeroes past the record.
        assert_eq!(content.len() as u64, GROW_BYTES);
        assert_eq!(revisions(&to_replay(&content, 0)), [(1, 1)]);
        assert!(wal.wants_checkpoint(CHECKPOINT_BYTES as usize));
        wal.rewind();
        assert!(!wal.wants_checkpoint(CHECKPOINT_BYTES as usize));
        wal.prepare(&batch(1)).expect("encodes");
        wal.append_prepared().expect("appends");
        let content = std::fs::read(&path).expect("reads");
        assert_eq!(content.len() as u64, GROW_BYTES, "written over, not grown");
    }
}
