//! The on-disk backend. The writer talks to it only through [`Engine`].
//!
//! fjall won the engine comparison (benches/store-engines: group commit of ~1 KiB writes with
//! fsync; several times redb and SQLite at 8 and 32 concurrent writers), so it is the one
//! implemented. Whatever the engine, it keeps three things, written atomically per batch:
//! - objects: key -> (rv, JSON) of every current object;
//! - log: rv -> (event type, key, JSON) for the revisions in the history window;
//! - meta: `revision` (last committed) and `compacted` (last revision dropped from the log).

mod fjall_engine;
mod wal;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

pub(crate) use fjall_engine::FjallEngine;

use crate::{Object, StoreError, WatchEvent};

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

/// From the log events read at open (ascending), keep the contiguous run that ends at
/// `revision`, at most `cap` long. Returns it with the revision just before it.
///
/// Log and objects are always committed together, so a run that does not reach `revision`
/// means a damaged store; a shorter history is the safe answer to that.
pub(crate) fn history_window(
    mut events: Vec<WatchEvent>,
    revision: u64,
    cap: usize,
) -> (VecDeque<WatchEvent>, u64) {
    let mut start = events.len();
    let mut expect = revision;
    // Revisions start at 1, so the run stops there even in a damaged log.
    while start > 0 && expect > 0 && events[start - 1].object.rv == expect {
        start -= 1;
        expect = expect.saturating_sub(1);
    }
    if start > 0 {
        tracing::warn!(
            dropped = start,
            "event log is not contiguous with the revision; truncating history"
        );
    }
    let keep_from = start.max(events.len().saturating_sub(cap));
    let mut history: VecDeque<WatchEvent> = events.drain(keep_from..).collect();
    // Previous states are not persisted: within the window, each change's previous state is
    // the key's preceding event.
    let mut last: HashMap<String, Arc<Object>> = HashMap::new();
    for ev in history.iter_mut() {
        ev.prev = last.get(&ev.object.key).cloned();
        last.insert(ev.object.key.clone(), Arc::clone(&ev.object));
    }
    let compacted = revision.saturating_sub(history.len() as u64);
    (history, compacted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventType;

    fn ev(rv: u64) -> WatchEvent {
        WatchEvent {
            kind: EventType::Added,
            object: Arc::new(Object::from_parts(
                format!("/k/{rv}"),
                rv,
                bytes::Bytes::from_static(b"{}"),
            )),
            prev: None,
        }
    }

    fn rvs(h: &VecDeque<WatchEvent>) -> Vec<u64> {
        h.iter().map(|e| e.object.rv).collect()
    }

    #[test]
    fn window_keeps_the_contiguous_tail_up_to_the_cap() {
        let (h, compacted) = history_window((3..=10).map(ev).collect(), 10, 5);
        assert_eq!((rvs(&h), compacted), (vec![6, 7, 8, 9, 10], 5));
        // A gap: only the run that reaches the revision is usable.
        let (h, compacted) = history_window([2, 3, 5, 6].map(ev).to_vec(), 6, 100);
        assert_eq!((rvs(&h), compacted), (vec![5, 6], 4));
        // A log that stops short of the revision gives no history at all.
        let (h, compacted) = history_window([1, 2].map(ev).to_vec(), 4, 100);
        assert_eq!((h.len(), compacted), (0, 4));
        let (h, compacted) = history_window(Vec::new(), 0, 100);
        assert_eq!((h.len(), compacted), (0, 0));
    }
}
