//! The watch hub: the history window of the last N events, in memory (mirrored on disk by the
//! engine's log table), and notification channels carrying the latest revision: one for every
//! change, and one per resource (a key's first segment, `/pods/`) that wakes only the watchers
//! of that resource. The window
//! in memory is bounded by bytes too, so that big objects or a burst of writes cannot make it
//! hold hundreds of MiB; a watch from before it gets `Expired` and re-lists.
//!
//! Every watcher reads its events out of the window by revision, whether it is replaying or
//! following live changes. There is no per-watcher queue that could overflow, so a slow
//! watcher never loses events: it either catches up from the window or, once the window has
//! moved past its position, gets `Expired`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
    /// Sent on every published batch: for `reached` and the watchers of every resource.
    signal: watch::Sender<Signal>,
    /// Sent on a published batch that changes the resource (see [`resource_of`]): a watcher
    /// of one resource is not woken by the writes of others (events, leases, ...).
    by_resource: Mutex<HashMap<String, watch::Sender<Signal>>>,
}

/// The resource part of a key or watch prefix, its first segment with both slashes (`/pods/`
/// of `/pods/ns/p` and of `/pods/ns/`); `None` for a prefix that spans resources (`/`).
fn resource_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix('/')?;
    let end = rest.find('/')?;
    key.get(..end + 2)
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
            by_resource: Mutex::new(HashMap::new()),
        }
    }

    fn by_resource(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Signal>>> {
        // Senders are inserted whole; a poisoned map is still a consistent one.
        self.by_resource.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// (events held, oldest revision a watch can start from).
    pub(crate) fn window(&self) -> (usize, u64) {
        let h = read(&self.history);
        (h.events.len(), h.compacted)
    }

    /// Append a committed batch (contiguous revisions) to the window, without waking anyone
    /// yet: the writer answers the batch's writers first, then [`Hub::publish`]es it.
    pub(crate) fn append(&self, changes: &[WatchEvent]) {
        let mut h = write(&self.history);
        h.bytes += changes.iter().map(weight).sum::<usize>();
        h.events.extend(changes.iter().cloned());
        h.trim();
    }

    /// Wake the watchers of an appended batch: those of every resource, and those of each
    /// resource the batch changes. The window is updated before the signal, so a watcher
    /// that sees the new revision always finds its events.
    pub(crate) fn publish(&self, changes: &[WatchEvent], revision: u64) {
        self.signal.send_modify(|s| s.revision = revision);
        let mut woken: Vec<&str> = Vec::new();
        let senders = self.by_resource();
        for ev in changes {
            let Some(resource) = resource_of(&ev.object.key) else {
                continue;
            };
            if woken.contains(&resource) {
                continue;
            }
            woken.push(resource);
            if let Some(tx) = senders.get(resource) {
                tx.send_modify(|s| s.revision = revision);
            }
        }
    }

    pub(crate) fn close(&self) {
        self.signal.send_modify(|s| s.closed = true);
        for tx in self.by_resource().values() {
            tx.send_modify(|s| s.closed = true);
        }
    }

    /// The channel that wakes a watcher of `prefix`.
    fn subscribe(&self, prefix: &str) -> watch::Receiver<Signal> {
        let Some(resource) = resource_of(prefix) else {
            return self.signal.subscribe();
        };
        let mut senders = self.by_resource();
        if let Some(tx) = senders.get(resource) {
            return tx.subscribe();
        }
        // Created closed if the hub is: a watcher never waits on a store that has stopped.
        let (tx, rx) = watch::channel(*self.signal.borrow());
        senders.insert(resource.to_owned(), tx);
        rx
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
            signal: self.subscribe(prefix),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventType, Object};
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    fn event(key: &str, rv: u64) -> WatchEvent {
        let value = serde_json::json!({"metadata": {"name": "x"}});
        let object = Object::from_json(key.to_owned(), rv, value).expect("packs");
        WatchEvent {
            kind: EventType::Added,
            object: Arc::new(object),
            prev: None,
        }
    }

    fn hub() -> Hub {
        Hub::new(VecDeque::new(), 0, 100, 1 << 20, 0)
    }

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A waker that counts its wake-ups, and the counter.
    fn counting_waker() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes::default());
        (Arc::clone(&wakes), Waker::from(wakes))
    }

    fn commit(hub: &Hub, changes: &[WatchEvent]) {
        hub.append(changes);
        let revision = changes.last().map_or(0, |e| e.object.rv);
        hub.publish(changes, revision);
    }

    #[test]
    fn the_resource_of_a_key_or_prefix_is_its_first_segment() {
        assert_eq!(resource_of("/pods/ns/p"), Some("/pods/"));
        assert_eq!(resource_of("/pods/ns/"), Some("/pods/"));
        assert_eq!(resource_of("/jobs.batch/"), Some("/jobs.batch/"));
        assert_eq!(resource_of("/nodes/n"), Some("/nodes/"));
        assert_eq!(resource_of("/"), None);
        assert_eq!(resource_of(""), None);
        assert_eq!(resource_of("/pods"), None);
    }

    #[test]
    fn a_watcher_is_woken_only_by_changes_of_its_resource() {
        let hub = hub();
        let mut pods = hub.watch("/pods/ns/", 0).expect("watch");
        let (wakes, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut next = Box::pin(pods.next());
        assert!(next.as_mut().poll(&mut cx).is_pending());

        commit(
            &hub,
            &[event("/jobs.batch/ns/j", 1), event("/events/ns/e", 2)],
        );
        assert_eq!(wakes.count(), 0, "woken by other resources' changes");

        // Another namespace of the same resource wakes it; it finds nothing and waits again.
        commit(&hub, &[event("/pods/other/p", 3)]);
        assert_eq!(wakes.count(), 1);
        assert!(next.as_mut().poll(&mut cx).is_pending());

        commit(&hub, &[event("/leases/ns/l", 4), event("/pods/ns/p", 5)]);
        assert_eq!(wakes.count(), 2);
        match next.as_mut().poll(&mut cx) {
            Poll::Ready(Some(Ok(ev))) => {
                assert_eq!((ev.object.key.as_str(), ev.object.rv), ("/pods/ns/p", 5));
            }
            other => panic!("expected the pod's event, got {other:?}"),
        }
    }

    #[test]
    fn a_watcher_of_every_resource_is_woken_by_every_change() {
        let hub = hub();
        let mut all = hub.watch("/", 0).expect("watch");
        let (wakes, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut next = Box::pin(all.next());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        commit(&hub, &[event("/leases/ns/l", 1)]);
        assert_eq!(wakes.count(), 1);
        assert!(matches!(
            next.as_mut().poll(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
    }

    #[test]
    fn appended_changes_are_found_before_they_are_published() {
        let hub = hub();
        let mut pods = hub.watch("/pods/", 0).expect("watch");
        hub.append(&[event("/pods/ns/p", 1)]);
        let (_, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut next = Box::pin(pods.next());
        assert!(matches!(
            next.as_mut().poll(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
    }

    #[test]
    fn closing_ends_the_watches_of_every_resource() {
        let hub = hub();
        let mut pods = hub.watch("/pods/", 0).expect("watch");
        let mut all = hub.watch("/", 0).expect("watch");
        let (wakes, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut pods_next = Box::pin(pods.next());
        let mut all_next = Box::pin(all.next());
        assert!(pods_next.as_mut().poll(&mut cx).is_pending());
        assert!(all_next.as_mut().poll(&mut cx).is_pending());
        hub.close();
        assert_eq!(wakes.count(), 2);
        assert!(matches!(
            pods_next.as_mut().poll(&mut cx),
            Poll::Ready(None)
        ));
        assert!(matches!(all_next.as_mut().poll(&mut cx), Poll::Ready(None)));
        // A watch of a resource first watched after the close ends at once too.
        let mut jobs = hub.watch("/jobs.batch/", 0).expect("watch");
        let mut jobs_next = Box::pin(jobs.next());
        assert!(matches!(
            jobs_next.as_mut().poll(&mut cx),
            Poll::Ready(None)
        ));
    }
}
