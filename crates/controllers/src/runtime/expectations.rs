//! What a controller expects to see in its informer cache after its own writes, so that it does
//! not act twice on a cache that has not caught up (upstream `ControllerExpectations` in
//! `pkg/controller/controller_utils.go`, and the Job controller's `uidTrackingExpectations` in
//! `pkg/controller/job/tracking_utils.go`).
//!
//! After creating N pods a controller expects N creations; each pod seen by the informer lowers
//! the count. Until the counts reach zero, or the expectations are older than the TTL (a lost
//! watch event must not block a controller forever), the controller does not create or delete
//! more pods.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tracing::trace;

use super::clock::{Clock, TokioClock};

/// Upstream `ExpectationsTimeout`: unmet expectations older than this count as satisfied.
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Updates under these locks are single arithmetic or set operations: a poisoned lock still
    // guards consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Outstanding creations and deletions of one controller key. Negative when more were observed
/// than expected (observations of objects the controller did not create also count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    pub add: i64,
    pub del: i64,
}

impl Expected {
    pub fn fulfilled(&self) -> bool {
        self.add <= 0 && self.del <= 0
    }
}

struct Entry {
    expected: Expected,
    set_at: Instant,
}

/// Expected creations and deletions per controller key (`namespace/name`).
pub struct ControllerExpectations {
    clock: Arc<dyn Clock>,
    ttl: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for ControllerExpectations {
    fn default() -> Self {
        ControllerExpectations::new()
    }
}

impl ControllerExpectations {
    /// On tokio's clock with the upstream TTL.
    pub fn new() -> Self {
        ControllerExpectations::with_clock(Arc::new(TokioClock), EXPECTATIONS_TIMEOUT)
    }

    pub fn with_clock(clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        ControllerExpectations {
            clock,
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The current counts of `key`, if any were set.
    pub fn get_expectations(&self, key: &str) -> Option<Expected> {
        lock(&self.entries).get(key).map(|e| e.expected)
    }

    /// True when the controller may act on its cache for `key`: nothing is expected, the
    /// expectations are met, or they expired.
    pub fn satisfied_expectations(&self, key: &str) -> bool {
        let entries = lock(&self.entries);
        let Some(entry) = entries.get(key) else {
            // Never set, or deleted: nothing to wait for.
            return true;
        };
        if entry.expected.fulfilled() {
            return true;
        }
        if self.clock.now().saturating_duration_since(entry.set_at) > self.ttl {
            trace!(key, ?entry.expected, "expectations expired");
            return true;
        }
        trace!(key, ?entry.expected, "still waiting on expectations");
        false
    }

    /// Replaces the expectations of `key` and restarts its TTL.
    pub fn set_expectations(&self, key: &str, add: i64, del: i64) {
        trace!(key, add, del, "setting expectations");
        let entry = Entry {
            expected: Expected { add, del },
            set_at: self.clock.now(),
        };
        lock(&self.entries).insert(key.to_string(), entry);
    }

    pub fn expect_creations(&self, key: &str, adds: i64) {
        self.set_expectations(key, adds, 0);
    }

    pub fn expect_deletions(&self, key: &str, dels: i64) {
        self.set_expectations(key, 0, dels);
    }

    /// Adds to the counts of `key`; does nothing if none are set. Keeps the TTL running.
    pub fn raise_expectations(&self, key: &str, add: i64, del: i64) {
        if let Some(e) = lock(&self.entries).get_mut(key) {
            e.expected.add = e.expected.add.saturating_add(add);
            e.expected.del = e.expected.del.saturating_add(del);
            trace!(key, expected = ?e.expected, "raised expectations");
        }
    }

    /// Subtracts from the counts of `key`; does nothing if none are set. Used for observations
    /// and for writes that failed (they will never be observed).
    pub fn lower_expectations(&self, key: &str, add: i64, del: i64) {
        if let Some(e) = lock(&self.entries).get_mut(key) {
            e.expected.add = e.expected.add.saturating_sub(add);
            e.expected.del = e.expected.del.saturating_sub(del);
            trace!(key, expected = ?e.expected, "lowered expectations");
        }
    }

    pub fn creation_observed(&self, key: &str) {
        self.lower_expectations(key, 1, 0);
    }

    pub fn deletion_observed(&self, key: &str) {
        self.lower_expectations(key, 0, 1);
    }

    /// Forgets `key` (its object is gone).
    pub fn delete_expectations(&self, key: &str) {
        lock(&self.entries).remove(key);
    }
}

/// Pod UIDs whose tracking-finalizer removal a controller key still waits to observe. Unlike
/// [`ControllerExpectations`] there is no TTL: the Job controller only uses the set to avoid
/// counting a finished pod twice, and it shrinks with every observation.
#[derive(Default)]
pub struct UidTrackingExpectations {
    sets: Mutex<HashMap<String, HashSet<String>>>,
}

impl UidTrackingExpectations {
    pub fn new() -> Self {
        UidTrackingExpectations::default()
    }

    /// Adds `uids` to the removals expected for `key`.
    pub fn expect_finalizers_removed<I, S>(&self, key: &str, uids: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut sets = lock(&self.sets);
        let set = sets.entry(key.to_string()).or_default();
        set.extend(uids.into_iter().map(Into::into));
        trace!(
            key,
            expected = set.len(),
            "expecting tracking finalizers removed"
        );
    }

    /// Records that the finalizer of pod `uid` is gone (or the pod is), if it was expected.
    pub fn finalizer_removal_observed(&self, key: &str, uid: &str) {
        if let Some(set) = lock(&self.sets).get_mut(key)
            && set.remove(uid)
        {
            trace!(key, uid, "observed tracking finalizer removed");
        }
    }

    /// A copy of the UIDs still expected for `key`; `None` if nothing was ever expected (or the
    /// expectations were deleted).
    pub fn expected_uids(&self, key: &str) -> Option<HashSet<String>> {
        lock(&self.sets).get(key).cloned()
    }

    /// True when the removal of pod `uid`'s finalizer is outstanding for `key`: it was sent,
    /// and the cache has not shown it yet.
    pub fn is_expected(&self, key: &str, uid: &str) -> bool {
        lock(&self.sets)
            .get(key)
            .is_some_and(|set| set.contains(uid))
    }

    /// True when no removal is outstanding for `key`.
    pub fn finalizers_removed(&self, key: &str) -> bool {
        lock(&self.sets).get(key).is_none_or(HashSet::is_empty)
    }

    /// Forgets `key` (its object is gone).
    pub fn delete_expectations(&self, key: &str) {
        lock(&self.sets).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::clock::FakeClock;

    #[test]
    fn controller_expectations_are_lowered_by_observations_and_expire() {
        let ttl = Duration::from_secs(30);
        let clock = FakeClock::new();
        let e = ControllerExpectations::with_clock(Arc::new(clock.clone()), ttl);
        let key = "default/foobar";
        let (adds, dels) = (10, 30);
        e.set_expectations(key, adds, dels);

        // One observation more than expected, from many threads at once.
        std::thread::scope(|s| {
            for _ in 0..adds + 1 {
                s.spawn(|| e.creation_observed(key));
            }
        });
        assert!(!e.satisfied_expectations(key), "deletions still expected");

        std::thread::scope(|s| {
            for _ in 0..dels + 1 {
                s.spawn(|| e.deletion_observed(key));
            }
        });
        // Surpassed expectations are satisfied.
        assert_eq!(e.get_expectations(key), Some(Expected { add: -1, del: -1 }));
        assert!(e.satisfied_expectations(key));

        // New expectations replace the old ones, and are cleared by the TTL.
        e.set_expectations(key, 1, 2);
        assert_eq!(e.get_expectations(key), Some(Expected { add: 1, del: 2 }));
        assert!(!e.satisfied_expectations(key));
        clock.step(ttl + Duration::from_nanos(1));
        assert!(e.satisfied_expectations(key), "should have expired");
    }

    #[test]
    fn no_expectations_means_satisfied() {
        let e = ControllerExpectations::new();
        assert!(e.satisfied_expectations("ns/never-set"));
        assert_eq!(e.get_expectations("ns/never-set"), None);
    }

    #[test]
    fn raise_and_lower_only_touch_existing_expectations() {
        let e = ControllerExpectations::new();
        e.raise_expectations("ns/a", 3, 3);
        e.lower_expectations("ns/a", 1, 1);
        e.creation_observed("ns/a");
        assert_eq!(e.get_expectations("ns/a"), None);

        e.expect_creations("ns/a", 2);
        e.raise_expectations("ns/a", 1, 0);
        assert_eq!(
            e.get_expectations("ns/a"),
            Some(Expected { add: 3, del: 0 })
        );
        // A failed create will never be observed: the controller lowers for it.
        e.lower_expectations("ns/a", 1, 0);
        e.creation_observed("ns/a");
        assert!(!e.satisfied_expectations("ns/a"));
        e.creation_observed("ns/a");
        assert!(e.satisfied_expectations("ns/a"));

        e.expect_deletions("ns/a", 1);
        assert_eq!(
            e.get_expectations("ns/a"),
            Some(Expected { add: 0, del: 1 })
        );
        e.delete_expectations("ns/a");
        assert_eq!(e.get_expectations("ns/a"), None);
        assert!(e.satisfied_expectations("ns/a"));
    }

    #[test]
    fn keys_are_independent() {
        let e = ControllerExpectations::new();
        e.expect_creations("ns/a", 1);
        e.expect_deletions("ns/b", 1);
        e.creation_observed("ns/a");
        assert!(e.satisfied_expectations("ns/a"));
        assert!(!e.satisfied_expectations("ns/b"));
    }

    #[tokio::test(start_paused = true)]
    async fn default_ttl_is_five_minutes_of_tokio_time() {
        let e = ControllerExpectations::new();
        e.expect_creations("ns/job", 5);
        tokio::time::advance(EXPECTATIONS_TIMEOUT).await;
        // Expired means strictly older than the TTL.
        assert!(!e.satisfied_expectations("ns/job"));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(e.satisfied_expectations("ns/job"));
        // Setting again restarts the TTL.
        e.expect_creations("ns/job", 5);
        assert!(!e.satisfied_expectations("ns/job"));
    }

    fn sorted(set: Option<HashSet<String>>) -> Option<Vec<String>> {
        set.map(|s| {
            let mut v: Vec<_> = s.into_iter().collect();
            v.sort();
            v
        })
    }

    #[test]
    fn uid_tracking_rounds_in_parallel() {
        struct Track {
            job: &'static str,
            first: &'static [&'static str],
            second: &'static [&'static str],
        }
        let tracks = [
            Track {
                job: "foo",
                first: &["a", "b", "c", "d"],
                second: &["e", "f"],
            },
            Track {
                job: "bar",
                first: &["x", "y", "z"],
                second: &["u", "v", "w"],
            },
            Track {
                job: "baz",
                first: &["w"],
                second: &["a"],
            },
        ];
        let e = UidTrackingExpectations::new();

        std::thread::scope(|s| {
            for t in &tracks {
                let e = &e;
                s.spawn(move || e.expect_finalizers_removed(t.job, t.first.iter().copied()));
            }
        });
        for t in &tracks {
            let want: Vec<String> = t.first.iter().map(|s| s.to_string()).collect();
            assert_eq!(sorted(e.expected_uids(t.job)), Some(want), "{}", t.job);
        }

        // Observe the first round while the second is expected, all at once.
        std::thread::scope(|s| {
            for t in &tracks {
                let e = &e;
                for uid in t.first {
                    s.spawn(move || e.finalizer_removal_observed(t.job, uid));
                }
                s.spawn(move || e.expect_finalizers_removed(t.job, t.second.iter().copied()));
            }
        });
        for t in &tracks {
            let want: Vec<String> = t.second.iter().map(|s| s.to_string()).collect();
            assert_eq!(sorted(e.expected_uids(t.job)), Some(want), "{}", t.job);
        }

        for t in &tracks {
            e.delete_expectations(t.job);
            assert_eq!(e.expected_uids(t.job), None, "{}", t.job);
        }
    }

    #[test]
    fn finalizers_removed_once_every_uid_is_observed() {
        for pods in [2usize, 1, 0, 5] {
            let e = UidTrackingExpectations::new();
            let key = format!("default/job-{pods}");
            let uids: Vec<String> = (0..pods).map(|i| format!("pod{i}-uid")).collect();
            e.expect_finalizers_removed(&key, uids.iter().cloned());
            assert_eq!(e.finalizers_removed(&key), pods == 0);
            for uid in &uids {
                e.finalizer_removal_observed(&key, uid);
            }
            assert!(e.finalizers_removed(&key));
            assert_eq!(e.expected_uids(&key), Some(HashSet::new()));
            e.delete_expectations(&key);
            assert_eq!(e.expected_uids(&key), None);
        }
    }

    #[test]
    fn unexpected_observations_are_ignored() {
        let e = UidTrackingExpectations::new();
        e.finalizer_removal_observed("ns/none", "u1");
        assert_eq!(e.expected_uids("ns/none"), None);
        assert!(e.finalizers_removed("ns/none"));

        e.expect_finalizers_removed("ns/job", ["u1"]);
        e.finalizer_removal_observed("ns/job", "other");
        e.finalizer_removal_observed("ns/other-job", "u1");
        assert!(!e.finalizers_removed("ns/job"));
    }

    #[test]
    fn a_removal_is_expected_by_its_job_until_observed() {
        let e = UidTrackingExpectations::new();
        assert!(!e.is_expected("ns/job", "u1"));
        e.expect_finalizers_removed("ns/job", ["u1", "u2"]);
        assert!(e.is_expected("ns/job", "u1"));
        assert!(!e.is_expected("ns/other-job", "u1"));
        e.finalizer_removal_observed("ns/job", "u1");
        assert!(!e.is_expected("ns/job", "u1"));
        assert!(e.is_expected("ns/job", "u2"));
        e.delete_expectations("ns/job");
        assert!(!e.is_expected("ns/job", "u2"));
    }
}
