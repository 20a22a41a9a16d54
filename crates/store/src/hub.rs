//! The watch hub: the history window of the last N events, in memory (mirrored on disk by the
//! engine's log table), and a notification channel carrying the latest revision. The window
//! in memory is bounded by bytes too, so that big objects or a burst of writes cannot make it
//! hold hundreds of MiB; a watch from before it gets `Expired` and re-lists.
//!
//! Every watcher reads its events out of the window by revision, whether it is replaying or
//! following live changes. There is no per-watcher queue that could overflow, so a slow
//! watcher never loses events: it either catches up from the window or, once the window has
//! moved past its position, gets `Expired`.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use crate::{StoreError, WatchEvent};

/// How many window entries one refill scans under the read lock, so that the writer is never
/// held up for long by a watcher skipping over many non-matching events.
const SCAN_CHUNK: usize = 4096;

struct History {
    /// Events `compacted+1 ..= compacted+events.len()`, one per revision, in order.
    events: VecDeque<WatchEvent>,
    /// The last revision dropped from the window: the oldest revision a watch can start from.
    compacted: u64,
    cap: usize,
    /// Bound on `bytes`; the newest event stays even if it alone is bigger.
    byte_cap: usize,
    /// The events' weight: see [`weight`].
    bytes: usize,
}

/// What an event keeps alive: its object (the previous state is the object of an earlier
/// event, or the current object of the index, so it is not counted again).
fn weight(e: &WatchEvent) -> usize {
    e.object.packed_len() + e.object.key.len()
}

impl History {
    /// Drops the oldest events beyond either bound.
    fn trim(&mut self) {
        while self.events.len() > self.cap || (self.bytes > self.byte_cap && self.events.len() > 1)
        {
            let Some(dropped) = self.events.pop_front() else {
                break;
            };
            self.bytes -= weight(&dropped);
            self.compacted += 1;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Signal {
    revision: u64,
    closed: bool,
}

pub(crate) struct Hub {
    history: Arc<RwLock<History>>,
    signal: watch::Sender<Signal>,
}

fn read(h: &RwLock<History>) -> RwLockReadGuard<'_, History> {
    // The window is updated in full before its guard drops; a poisoned lock still holds it.
    h.read().unwrap_or_else(|e| e.into_inner())
}

fn write(h: &RwLock<History>) -> RwLockWriteGuard<'_, History> {
    h.write().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    pub(crate) fn new(
        events: VecDeque<WatchEvent>,
        compacted: u64,
        cap: usize,
        byte_cap: usize,
        revision: u64,
    ) -> Hub {
        let (signal, _) = watch::channel(Signal {
            revision,
            closed: false,
        });
        Hub {
            history: Arc::new(RwLock::new({
                let bytes = events.iter().map(weight).sum();
                let mut h = History {
                    events,
                    compacted,
                    cap,
                    byte_cap,
                    bytes,
                };
                h.trim();
                h
            })),
            signal,
        }
    }

    /// (events held, oldest revision a watch can start from).
    pub(crate) fn window(&self) -> (usize, u64) {
        let h = read(&self.history);
        (h.events.len(), h.compacted)
    }

    /// Append a committed batch (contiguous revisions) and wake the watchers.
    pub(crate) fn push(&self, changes: &[WatchEvent], revision: u64) {
        {
            let mut h = write(&self.history);
            h.bytes += changes.iter().map(weight).sum::<usize>();
            h.events.extend(changes.iter().cloned());
            h.trim();
        }
        // The window is updated before the signal, so a watcher that sees the new revision
        // always finds its events.
        self.signal.send_modify(|s| s.revision = revision);
    }

    pub(crate) fn close(&self) {
        self.signal.send_modify(|s| s.closed = true);
    }

    /// The changes under `prefix` with revisions in `(after, upto]`, oldest first; `Expired`
    /// when the window no longer starts at or before `after`. `upto` must be published.
    pub(crate) fn changes_between(
        &self,
        prefix: &str,
        after: u64,
        upto: u64,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let h = read(&self.history);
        if after < h.compacted {
            return Err(StoreError::Expired {
                requested: after,
                oldest: h.compacted,
            });
        }
        // Revisions are contiguous from compacted + 1, so positions follow from them.
        let start = usize::try_from(after - h.compacted).unwrap_or(usize::MAX);
        let stop = usize::try_from(upto.saturating_sub(h.compacted)).unwrap_or(usize::MAX);
        let stop = stop.min(h.events.len());
        Ok(h.events
            .range(start.min(stop)..stop)
            .filter(|ev| ev.object.key.starts_with(prefix))
            .cloned()
            .collect())
    }

    /// Waits until a batch reaching `rv` is published (the index holds it before the hub
    /// does), or the store closes. Returns whether `rv` was reached.
    pub(crate) async fn reached(&self, rv: u64) -> bool {
        let mut rx = self.signal.subscribe();
        match rx.wait_for(|s| s.revision >= rv || s.closed).await {
            Ok(s) => s.revision >= rv,
            Err(_) => false,
        }
    }

    pub(crate) fn watch(&self, prefix: &str, from_rv: u64) -> Result<WatchCursor, StoreError> {
        let h = read(&self.history);
        if from_rv < h.compacted {
            return Err(StoreError::Expired {
                requested: from_rv,
                oldest: h.compacted,
            });
        }
        Ok(WatchCursor {
            history: Arc::clone(&self.history),
            signal: self.signal.subscribe(),
            prefix: prefix.to_owned(),
            cursor: from_rv,
            buf: VecDeque::new(),
            finished: false,
        })
    }
}

pub(crate) struct WatchCursor {
    history: Arc<RwLock<History>>,
    signal: watch::Receiver<Signal>,
    prefix: String,
    /// The last revision examined; the next event to deliver has a greater one.
    cursor: u64,
    buf: VecDeque<WatchEvent>,
    finished: bool,
}

impl WatchCursor {
    pub(crate) fn position(&self) -> u64 {
        // Buffered events are not consumed yet: resume from just before the first of them.
        match self.buf.front() {
            Some(ev) => ev.object.rv.saturating_sub(1),
            None => self.cursor,
        }
    }

    /// Move matching events after the cursor into `buf`. Returns whether the window holds
    /// more revisions past the new cursor.
    fn refill(&mut self) -> Result<bool, StoreError> {
        let h = read(&self.history);
        if self.cursor < h.compacted {
            return Err(StoreError::Expired {
                requested: self.cursor,
                oldest: h.compacted,
            });
        }
        let end = h.compacted + h.events.len() as u64;
        if self.cursor >= end {
            return Ok(false);
        }
        // cursor - compacted < events.len() here, so it fits in usize.
        let start = usize::try_from(self.cursor - h.compacted).unwrap_or(usize::MAX);
        let stop = h.events.len().min(start.saturating_add(SCAN_CHUNK));
        for ev in h.events.range(start..stop) {
            if ev.object.key.starts_with(self.prefix.as_str()) {
                self.buf.push_back(ev.clone());
            }
        }
        self.cursor = h.compacted + stop as u64;
        Ok(self.cursor < end)
    }

    pub(crate) async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        loop {
            if let Some(ev) = self.buf.pop_front() {
                return Some(Ok(ev));
            }
            if self.finished {
                return None;
            }
            // Mark the current signal seen before reading the window: a push after this
            // point makes `changed()` return at once, so no wake-up is lost.
            let closed = self.signal.borrow_and_update().closed;
            match self.refill() {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
                Ok(true) => continue,
                Ok(false) => {}
            }
            if !self.buf.is_empty() {
                continue;
            }
            if closed || self.signal.changed().await.is_err() {
                self.finished = true;
                return None;
            }
        }
    }
}
