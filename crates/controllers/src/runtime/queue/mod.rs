//! A work queue with client-go's semantics (`util/workqueue`: the basic queue, the delaying
//! queue and the rate-limiting queue in one type).
//!
//! - A key is queued at most once: adding a queued key does nothing.
//! - A key handed out by [`WorkQueue::get`] is "processing" until [`WorkQueue::done`]. It is never
//!   handed to a second worker meanwhile: a re-add while processing is remembered and the key is
//!   queued again by `done`. This is what lets a controller run N workers without two of them
//!   syncing the same object.
//! - [`WorkQueue::add_after`] holds a key back until a delay has passed; a second `add_after` for
//!   the same key keeps the earlier time. It does not remove the key from the queue if it is
//!   already there.
//! - [`WorkQueue::add_rate_limited`] is `add_after` with the delay from a [`RateLimiter`].
//!
//! Time is tokio's, so tests can pause and advance it. Delayed keys move into the queue when
//! the queue is next looked at (every method does) or when a waiting `get` wakes at the earliest
//! ready time, in order of their ready times; no background task is needed.

pub mod rate_limiter;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use rate_limiter::{
    ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter, MaxOfRateLimiter, RateLimiter,
    WithMaxWaitRateLimiter,
};

/// A client-go style rate-limited, delaying work queue. Cloning gives another handle to the same
/// queue.
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Shared<K> {
    name: String,
    state: Mutex<State<K>>,
    rate_limiter: Box<dyn RateLimiter<K>>,
    // Wakes waiters (get, shut_down_with_drain), which re-check the state. A key that enters
    // the queue wakes one get (a controller may run a thousand workers: waking them all for
    // each key costs more than the sync); shutting down, and a done while draining, wake all.
    changed: Notify,
}

struct State<K> {
    queue: VecDeque<K>,
    // Keys that need processing: queued ones, and processing ones that were re-added.
    dirty: HashSet<K>,
    processing: HashSet<K>,
    // Delayed keys by (ready time, arrival order), with the reverse index for the dedup rule.
    waiting: BTreeMap<(Instant, u64), K>,
    waiting_at: HashMap<K, (Instant, u64)>,
    next_seq: u64,
    shutting_down: bool,
    drain: bool,
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Queues `key` unless it is already dirty; a processing key waits for `done`.
    fn add(&mut self, key: K) -> bool {
        if self.shutting_down || self.dirty.contains(&key) {
            return false;
        }
        self.dirty.insert(key.clone());
        if self.processing.contains(&key) {
            return false;
        }
        self.queue.push_back(key);
        true
    }

    /// Moves every delayed key whose time has come into the queue, earliest first; returns
    /// how many entered the queue.
    fn promote_ready(&mut self, now: Instant) -> usize {
        let mut added = 0;
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.waiting_at.remove(&key);
            added += usize::from(self.add(key));
        }
        added
    }

    fn next_ready(&self) -> Option<Instant> {
        self.waiting.keys().next().map(|(at, _)| *at)
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// A queue whose rate-limited adds are delayed by `rate_limiter`. `name` labels log lines.
    pub fn new(name: impl Into<String>, rate_limiter: impl RateLimiter<K> + 'static) -> Self {
        WorkQueue {
            shared: Arc::new(Shared {
                name: name.into(),
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    waiting: BTreeMap::new(),
                    waiting_at: HashMap::new(),
                    next_seq: 0,
                    shutting_down: false,
                    drain: false,
                }),
                rate_limiter: Box::new(rate_limiter),
                changed: Notify::new(),
            }),
        }
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // The state is only changed under the lock by code that cannot panic half-way, so a
        // poisoned lock still guards a consistent state.
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match st.promote_ready(Instant::now()) {
            0 => {}
            1 => self.shared.changed.notify_one(),
            _ => self.shared.changed.notify_waiters(),
        }
        st
    }

    /// Marks `key` as needing processing. Ignored after shutdown.
    pub fn add(&self, key: K) {
        let added = self.lock().add(key);
        if added {
            self.shared.changed.notify_one();
        }
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). If the key is already
    /// waiting, the earlier of the two times wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let ready_at = Instant::now() + delay;
        {
            let mut st = self.lock();
            if st.shutting_down {
                return;
            }
            if let Some(&(at, seq)) = st.waiting_at.get(&key) {
                if at <= ready_at {
                    return;
                }
                st.waiting.remove(&(at, seq));
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            st.waiting.insert((ready_at, seq), key.clone());
            st.waiting_at.insert(key, (ready_at, seq));
        }
        // A waiting get may need to wake earlier than it planned (one is enough: it promotes
        // the key when its time comes).
        self.shared.changed.notify_one();
    }

    /// Adds `key` after the rate limiter's delay for it, counting one more failure.
    pub fn add_rate_limited(&self, key: K) {
        let delay = self.shared.rate_limiter.when(&key);
        self.add_after(key, delay);
    }

    /// Clears the failure count of `key` (it does not remove the key from the queue).
    pub fn forget(&self, key: &K) {
        self.shared.rate_limiter.forget(key);
    }

    /// How many failures the rate limiter counts for `key`.
    pub fn num_requeues(&self, key: &K) -> usize {
        self.shared.rate_limiter.num_requeues(key)
    }

    /// Waits for the next key and marks it processing; the caller must call [`done`] with it.
    /// Returns `None` once the queue is shut down and empty. Cancel-safe.
    ///
    /// [`done`]: WorkQueue::done
    pub async fn get(&self) -> Option<K> {
        loop {
            let mut notified = pin!(self.shared.changed.notified());
            // Registered before looking at the state, so no wake-up can slip in between.
            notified.as_mut().enable();
            let wake_at = {
                let mut st = self.lock();
                if let Some(key) = st.queue.pop_front() {
                    st.dirty.remove(&key);
                    st.processing.insert(key.clone());
                    return Some(key);
                }
                if st.shutting_down {
                    return None;
                }
                st.next_ready()
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Ends the processing of `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let (requeued, draining) = {
            let mut st = self.lock();
            st.processing.remove(key);
            let requeued = st.dirty.contains(key);
            if requeued {
                st.queue.push_back(key.clone());
            }
            (requeued, st.drain)
        };
        if draining {
            // A drain waits for processing to end, next to the gets.
            self.shared.changed.notify_waiters();
        } else if requeued {
            self.shared.changed.notify_one();
        }
    }

    /// Number of queued keys (neither delayed nor processing ones).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys waiting for their delay to pass.
    pub fn delayed_len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Stops accepting keys and drops delayed ones. Keys already queued are still handed out;
    /// then [`get`](WorkQueue::get) returns `None`. Does not wait for processing to end, and
    /// releases a pending [`shut_down_with_drain`](WorkQueue::shut_down_with_drain).
    pub fn shut_down(&self) {
        {
            let mut st = self.lock();
            st.drain = false;
            st.shutting_down = true;
            st.waiting.clear();
            st.waiting_at.clear();
        }
        self.shared.changed.notify_waiters();
    }

    /// Like [`shut_down`](WorkQueue::shut_down), then waits until no key is processing (every
    /// handed-out key is done), unless `shut_down` is called meanwhile.
    pub async fn shut_down_with_drain(&self) {
        {
            let mut st = self.lock();
            st.drain = true;
            st.shutting_down = true;
            st.waiting.clear();
            st.waiting_at.clear();
        }
        self.shared.changed.notify_waiters();
        loop {
            let mut notified = pin!(self.shared.changed.notified());
            notified.as_mut().enable();
            {
                let st = self.lock();
                if st.processing.is_empty() || !st.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + std::fmt::Display + 'static,
{
    /// A worker, as client-go's `processNextWorkItem` loop: takes one key at a time; a
    /// successful `sync` forgets the key's rate-limit history, a failed one is logged under
    /// `failed` (what failed, e.g. "pod garbage collection failed") and the key queued again
    /// rate-limited. Returns once the queue is shut down.
    pub async fn run_worker<E, F>(&self, failed: &str, mut sync: impl FnMut(K) -> F)
    where
        E: std::fmt::Display,
        F: std::future::Future<Output = Result<(), E>>,
    {
        while let Some(key) = self.get().await {
            match sync(key.clone()).await {
                Ok(()) => self.forget(&key),
                Err(e) => {
                    tracing::warn!(queue = %self.name(), key = %key, error = %e, "{failed}");
                    self.add_rate_limited(key.clone());
                }
            }
            self.done(&key);
        }
    }
}

#[cfg(test)]
mod tests;
