//! Reading one's own writes (upstream's consistency store, KEP-5647, `StaleControllerConsistency*`):
//! a controller records the resourceVersion of each write it makes for an object it
//! reconciles, and does not sync that object again before its informers have caught up with
//! those writes. A sync on a cache that has not seen the last status write only ends in a
//! 409; one that has not seen the pods it created may create them again.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use kube::Resource;
use kube::api::ObjectMeta;

use super::informer::{Lister, SyncProgress};
use super::key::meta_key;

/// A kind's group and plural resource name, as the metrics label them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupResource {
    pub group: &'static str,
    pub resource: &'static str,
}

impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// The caches the controllers wait on before syncing an object again after writing for it.
pub const JOBS: GroupResource = GroupResource {
    group: "batch",
    resource: "jobs",
};
pub const PODS: GroupResource = GroupResource {
    group: "",
    resource: "pods",
};
pub const CRONJOBS: GroupResource = GroupResource {
    group: "batch",
    resource: "cronjobs",
};

/// A sync deferred for a stale cache is retried when the cache's event for the write queues
/// the object again; this later look is only a safety net.
pub const STALE_SYNC_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// A cache whose progress can be read.
pub trait ProgressSource: Send + Sync {
    fn progress(&self) -> SyncProgress;
}

impl<K: Resource + Send + Sync> ProgressSource for Lister<K> {
    fn progress(&self) -> SyncProgress {
        Lister::progress(self)
    }
}

/// The cache of `resource` has not yet seen a write made for `key`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cache for {key} ({resource}) is stale: expected RV >= {expected}, got {actual}")]
pub struct Stale {
    pub key: String,
    pub resource: GroupResource,
    pub expected: u64,
    pub actual: u64,
}

#[derive(Debug, Clone)]
struct Written {
    resource: GroupResource,
    /// The reconciled object's uid: a write for an earlier object of the same name is
    /// replaced rather than compared.
    uid: String,
    resource_version: u64,
    /// Lists the cache had begun when the write returned; one begun later reflects it.
    lists_started: u64,
}

impl Written {
    fn observed(&self, p: SyncProgress) -> bool {
        p.resource_version >= self.resource_version || p.lists_done > self.lists_started
    }
}

/// The writes each reconciled object (by key) waits to see, per resource.
pub struct ConsistencyStore {
    sources: Vec<(GroupResource, Box<dyn ProgressSource>)>,
    written: Mutex<HashMap<String, Vec<Written>>>,
}

impl ConsistencyStore {
    pub fn new(sources: Vec<(GroupResource, Box<dyn ProgressSource>)>) -> Self {
        ConsistencyStore {
            sources,
            written: Mutex::new(HashMap::new()),
        }
    }

    fn source(&self, resource: GroupResource) -> Option<&dyn ProgressSource> {
        self.sources
            .iter()
            .find(|(r, _)| *r == resource)
            .map(|(_, s)| &**s)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Written>>> {
        // Entries are replaced whole: a poisoned map is still consistent.
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`ConsistencyStore::wrote_at`] for a write made while reconciling the object `owner`
    /// describes.
    pub fn wrote_for(
        &self,
        owner: &ObjectMeta,
        resource: GroupResource,
        resource_version: Option<&str>,
    ) {
        let uid = owner.uid.as_deref().unwrap_or_default();
        self.wrote_at(&meta_key(owner), uid, resource, resource_version);
    }

    /// Records that a write made while reconciling `key` (whose object has `uid`) returned
    /// `resource_version` for an object of `resource`. Versions that are not numbers, and
    /// resources without a cache, are not waited for.
    pub fn wrote_at(
        &self,
        key: &str,
        uid: &str,
        resource: GroupResource,
        resource_version: Option<&str>,
    ) {
        let Some(rv) = resource_version.and_then(|rv| rv.parse::<u64>().ok()) else {
            return;
        };
        if rv == 0 {
            return;
        }
        let Some(source) = self.source(resource) else {
            return;
        };
        let written = Written {
            resource,
            uid: uid.to_string(),
            resource_version: rv,
            lists_started: source.progress().lists_started,
        };
        let mut all = self.lock();
        let entries = all.entry(key.to_string()).or_default();
        match entries.iter_mut().find(|w| w.resource == resource) {
            // An older write of the same object: the newer one covers it.
            Some(w) if w.uid == uid && w.resource_version >= rv => {}
            Some(w) => *w = written,
            None => entries.push(written),
        }
    }

    /// Ok when every cache has seen the writes recorded for `key` (those are then forgotten);
    /// otherwise the first cache that lags.
    pub fn ensure_ready(&self, key: &str) -> Result<(), Stale> {
        let mut written = self.lock();
        let Some(entries) = written.get_mut(key) else {
            return Ok(());
        };
        let mut stale = None;
        entries.retain(|w| {
            let Some(source) = self.source(w.resource) else {
                return false;
            };
            let p = source.progress();
            if w.observed(p) {
                return false;
            }
            stale.get_or_insert(Stale {
                key: key.to_string(),
                resource: w.resource,
                expected: w.resource_version,
                actual: p.resource_version,
            });
            true
        });
        if entries.is_empty() {
            written.remove(key);
        }
        stale.map_or(Ok(()), Err)
    }

    /// Forgets the writes recorded for `key`: all of them, or only those of the object `uid`
    /// (a deleted object's, while a new one of the same name may be reconciled).
    pub fn clear(&self, key: &str, uid: Option<&str>) {
        let mut written = self.lock();
        match uid {
            None => {
                written.remove(key);
            }
            Some(uid) => {
                if let Some(entries) = written.get_mut(key) {
                    entries.retain(|w| w.uid != uid);
                    if entries.is_empty() {
                        written.remove(key);
                    }
                }
            }
        }
    }

    /// How many keys wait for writes (for tests and leak checks).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    const NODES: GroupResource = GroupResource {
        group: "",
        resource: "nodes",
    };

    /// A cache whose progress the test sets.
    #[derive(Clone, Default)]
    struct Fake(Arc<[AtomicU64; 3]>);

    impl Fake {
        fn set(&self, rv: u64, started: u64, done: u64) {
            self.0[0].store(rv, Ordering::SeqCst);
            self.0[1].store(started, Ordering::SeqCst);
            self.0[2].store(done, Ordering::SeqCst);
        }
    }

    impl ProgressSource for Fake {
        fn progress(&self) -> SyncProgress {
            SyncProgress {
                resource_version: self.0[0].load(Ordering::SeqCst),
                lists_started: self.0[1].load(Ordering::SeqCst),
                lists_done: self.0[2].load(Ordering::SeqCst),
            }
        }
    }

    fn store() -> (ConsistencyStore, Fake, Fake) {
        let (jobs, pods) = (Fake::default(), Fake::default());
        jobs.set(10, 1, 1);
        pods.set(10, 1, 1);
        let s = ConsistencyStore::new(vec![
            (JOBS, Box::new(jobs.clone())),
            (PODS, Box::new(pods.clone())),
        ]);
        (s, jobs, pods)
    }

    #[test]
    fn nothing_written_is_ready() {
        let (s, _, _) = store();
        assert_eq!(s.ensure_ready("ns/a"), Ok(()));
        assert!(s.is_empty());
    }

    #[test]
    fn waits_for_each_resource_then_forgets() {
        let (s, jobs, pods) = store();
        s.wrote_at("ns/a", "u1", JOBS, Some("12"));
        s.wrote_at("ns/a", "u1", PODS, Some("15"));
        let err = s.ensure_ready("ns/a").expect_err("jobs cache is behind");
        assert_eq!(err.resource, JOBS);
        assert_eq!((err.expected, err.actual), (12, 10));
        assert_eq!(
            err.to_string(),
            "cache for ns/a (jobs.batch) is stale: expected RV >= 12, got 10"
        );
        jobs.set(12, 1, 1);
        let err = s.ensure_ready("ns/a").expect_err("pods cache is behind");
        assert_eq!(err.resource, PODS);
        assert_eq!(
            err.to_string(),
            "cache for ns/a (pods) is stale: expected RV >= 15, got 10"
        );
        pods.set(20, 1, 1);
        assert_eq!(s.ensure_ready("ns/a"), Ok(()));
        assert!(s.is_empty(), "observed writes are forgotten");
        // Other keys never waited.
        assert_eq!(s.ensure_ready("ns/b"), Ok(()));
    }

    #[test]
    fn keeps_the_newest_write_of_the_same_object() {
        let (s, _, pods) = store();
        s.wrote_at("ns/a", "u1", PODS, Some("30"));
        s.wrote_at("ns/a", "u1", PODS, Some("20"));
        pods.set(25, 1, 1);
        assert_eq!(s.ensure_ready("ns/a").map_err(|e| e.expected), Err(30));
    }

    #[test]
    fn a_new_object_of_the_same_name_replaces_the_old_ones_writes() {
        let (s, _, pods) = store();
        s.wrote_at("ns/a", "u1", PODS, Some("30"));
        s.wrote_at("ns/a", "u2", PODS, Some("20"));
        pods.set(25, 1, 1);
        assert_eq!(s.ensure_ready("ns/a"), Ok(()));
    }

    #[test]
    fn unusable_versions_and_unknown_resources_are_not_waited_for() {
        let (s, _, _) = store();
        s.wrote_at("ns/a", "u1", PODS, None);
        s.wrote_at("ns/a", "u1", PODS, Some(""));
        s.wrote_at("ns/a", "u1", PODS, Some("0"));
        s.wrote_at("ns/a", "u1", PODS, Some("abc"));
        s.wrote_at("ns/a", "u1", NODES, Some("99"));
        assert!(s.is_empty());
        assert_eq!(s.ensure_ready("ns/a"), Ok(()));
    }

    #[test]
    fn a_list_begun_after_the_write_covers_it() {
        let (s, _, pods) = store();
        // Written while list 1 was the last begun; the object is then deleted and the
        // deletion is only seen through a re-list, so no newer version arrives.
        s.wrote_at("ns/a", "u1", PODS, Some("50"));
        pods.set(40, 2, 1);
        assert!(s.ensure_ready("ns/a").is_err(), "list 2 is not done yet");
        pods.set(40, 2, 2);
        assert_eq!(s.ensure_ready("ns/a"), Ok(()));
    }

    #[test]
    fn clear_by_uid_keeps_a_newer_objects_writes() {
        let (s, _, _) = store();
        s.wrote_at("ns/a", "u1", JOBS, Some("50"));
        s.wrote_at("ns/a", "u2", PODS, Some("60"));
        s.clear("ns/a", Some("u1"));
        assert_eq!(s.ensure_ready("ns/a").map_err(|e| e.resource), Err(PODS));
        s.clear("ns/a", Some("u2"));
        assert!(s.is_empty());
        s.wrote_at("ns/a", "u3", JOBS, Some("50"));
        s.clear("ns/a", None);
        assert!(s.is_empty());
    }
}
