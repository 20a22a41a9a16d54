//! The informer's object cache: a writer that applies watcher events and reports each change
//! with the previous object, and cloneable listers that read it.
//!
//! The writer can be fed by hand, so controller tests can drive a cache without a server.
//!
//! The cache indexes objects by their controller's UID (and keeps the set of objects without
//! a controller), so that a controller finds its dependents without scanning the namespace:
//! with thousands of Jobs and pods a scan per sync would be quadratic.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::Resource;
use kube::core::{Selector, SelectorExt};
use kube::runtime::watcher;
use tokio::sync::watch;
use tracing::warn;

use super::{Change, InformerError};

/// (namespace, name); the namespace is empty for cluster-scoped objects.
type ObjKey = (String, String);

type Objects<K> = BTreeMap<ObjKey, Arc<K>>;

/// Keys in order, each with a value (the object, or nothing). Most controllers of a large
/// cache control one object (a single-pod Job's pod, a CronJob's Job) and a one-entry
/// `BTreeMap` allocates a whole node of eleven.
#[derive(Debug)]
enum KeySet<V> {
    One(ObjKey, V),
    Many(BTreeMap<ObjKey, V>),
}

impl<V> KeySet<V> {
    fn insert(&mut self, key: ObjKey, value: V) {
        // An empty BTreeMap allocates nothing.
        *self = match std::mem::replace(self, KeySet::Many(BTreeMap::new())) {
            KeySet::One(k, _) if k == key => KeySet::One(k, value),
            KeySet::One(k, v) => KeySet::Many(BTreeMap::from([(k, v), (key, value)])),
            KeySet::Many(mut entries) => {
                entries.insert(key, value);
                KeySet::Many(entries)
            }
        };
    }

    /// The value at `key`, to replace in place.
    fn get_mut(&mut self, key: &ObjKey) -> Option<&mut V> {
        match self {
            KeySet::One(k, v) => (k == key).then_some(v),
            KeySet::Many(entries) => entries.get_mut(key),
        }
    }

    /// Removes `key`; true when nothing is left.
    fn remove(&mut self, key: &ObjKey) -> bool {
        match self {
            KeySet::One(k, _) => k == key,
            KeySet::Many(entries) => {
                entries.remove(key);
                entries.is_empty()
            }
        }
    }

    fn iter(&self) -> KeySetIter<'_, V> {
        match self {
            KeySet::One(k, v) => KeySetIter::One(Some((k, v))),
            KeySet::Many(entries) => KeySetIter::Many(entries.iter()),
        }
    }
}

enum KeySetIter<'a, V> {
    One(Option<(&'a ObjKey, &'a V)>),
    Many(std::collections::btree_map::Iter<'a, ObjKey, V>),
}

impl<'a, V> Iterator for KeySetIter<'a, V> {
    type Item = (&'a ObjKey, &'a V);
    fn next(&mut self) -> Option<(&'a ObjKey, &'a V)> {
        match self {
            KeySetIter::One(it) => it.take(),
            KeySetIter::Many(it) => it.next(),
        }
    }
}

/// The objects and the indexes over them. The controller index and the orphans hold the
/// objects themselves (replaced with them), so a Job's sync lists its pods without looking
/// each one up again.
struct Indexed<K> {
    objects: Objects<K>,
    /// Controller UID -> the objects it controls.
    by_controller: HashMap<String, KeySet<Arc<K>>>,
    /// (namespace, controller name) -> keys of the objects whose controller has that name
    /// (the CronJob controller matches its Jobs by name, whatever the UID).
    by_controller_name: HashMap<ObjKey, KeySet<()>>,
    /// The objects that have no controller.
    orphans: BTreeMap<ObjKey, Arc<K>>,
}

/// The controller reference's UID and name.
fn controller_of<K: Resource>(obj: &K) -> Option<(&str, &str)> {
    obj.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| (r.uid.as_str(), r.name.as_str()))
}

fn add_to<Q: std::hash::Hash + Eq, V>(
    index: &mut HashMap<Q, KeySet<V>>,
    at: Q,
    key: &ObjKey,
    value: V,
) {
    match index.entry(at) {
        Entry::Occupied(mut keys) => keys.get_mut().insert(key.clone(), value),
        Entry::Vacant(slot) => {
            slot.insert(KeySet::One(key.clone(), value));
        }
    }
}

fn remove_from<Q: std::hash::Hash + Eq, V>(
    index: &mut HashMap<Q, KeySet<V>>,
    at: &Q,
    key: &ObjKey,
) {
    if let Some(keys) = index.get_mut(at)
        && keys.remove(key)
    {
        index.remove(at);
    }
}

impl<K: Resource> Indexed<K> {
    fn new() -> Self {
        Indexed {
            objects: BTreeMap::new(),
            by_controller: HashMap::new(),
            by_controller_name: HashMap::new(),
            orphans: BTreeMap::new(),
        }
    }

    fn from_objects(objects: Objects<K>) -> Self {
        let mut indexed = Indexed::<K>::new();
        for (key, obj) in &objects {
            indexed.index(key, obj);
        }
        indexed.objects = objects;
        indexed
    }

    fn index(&mut self, key: &ObjKey, obj: &Arc<K>) {
        match controller_of(obj.as_ref()) {
            Some((uid, name)) => {
                add_to(
                    &mut self.by_controller,
                    uid.to_string(),
                    key,
                    Arc::clone(obj),
                );
                add_to(
                    &mut self.by_controller_name,
                    (key.0.clone(), name.to_string()),
                    key,
                    (),
                );
            }
            None => {
                self.orphans.insert(key.clone(), Arc::clone(obj));
            }
        }
    }

    fn unindex(&mut self, key: &ObjKey, obj: &K) {
        match controller_of(obj) {
            Some((uid, name)) => {
                remove_from(&mut self.by_controller, &uid.to_string(), key);
                remove_from(
                    &mut self.by_controller_name,
                    &(key.0.clone(), name.to_string()),
                    key,
                );
            }
            None => {
                self.orphans.remove(key);
            }
        }
    }

    fn insert(&mut self, key: ObjKey, obj: Arc<K>) -> Option<Arc<K>> {
        // Most updates (a status, a finalizer) keep the controller: the object is replaced
        // where the indexes hold it, and the indexes stay as they are.
        let controller = controller_of(obj.as_ref());
        if let Some(cur) = self.objects.get_mut(&key)
            && controller_of(cur.as_ref()) == controller
        {
            let held = match controller {
                Some((uid, _)) => self
                    .by_controller
                    .get_mut(uid)
                    .and_then(|keys| keys.get_mut(&key)),
                None => self.orphans.get_mut(&key),
            };
            if let Some(held) = held {
                *held = Arc::clone(&obj);
            }
            return Some(std::mem::replace(cur, obj));
        }
        let old = self.remove(&key);
        self.index(&key, &obj);
        self.objects.insert(key, obj);
        old
    }

    fn remove(&mut self, key: &ObjKey) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        self.unindex(key, &old);
        Some(old)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct SyncState {
    synced: bool,
    stopped: bool,
}

struct Shared<K> {
    objects: RwLock<Indexed<K>>,
    sync: watch::Sender<SyncState>,
    progress: Progress,
}

/// How far the cache has followed the server, published after the objects it describes.
#[derive(Default)]
struct Progress {
    /// The highest resourceVersion of an object the cache has taken in.
    resource_version: AtomicU64,
    /// Lists begun (counted when the watcher starts one) and the number of the last one
    /// whose objects are in the cache.
    lists_started: AtomicU64,
    lists_done: AtomicU64,
}

/// What a cache has observed, for a controller that must not act before it has seen its own
/// writes (upstream's `LastStoreSyncResourceVersion`).
///
/// kube's watcher does not hand out the resourceVersion of a list or of bookmarks, so the
/// version is that of the newest object taken in. A write whose object was deleted and whose
/// deletion was only seen through a re-list is covered by the lists: a list begun after the
/// write returned reflects it (kbatch's server lists its current state; a cluster's watch
/// cache, which serves kube's default `resourceVersion=0` lists, may be a moment behind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncProgress {
    pub resource_version: u64,
    pub lists_started: u64,
    pub lists_done: u64,
}

fn parse_rv<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// A new empty cache: its writer and a lister.
pub fn cache<K: Resource>() -> (CacheWriter<K>, Lister<K>) {
    let shared = Arc::new(Shared {
        objects: RwLock::new(Indexed::new()),
        sync: watch::Sender::new(SyncState::default()),
        progress: Progress::default(),
    });
    (
        CacheWriter {
            shared: Arc::clone(&shared),
            relist: None,
            list_number: 0,
        },
        Lister { shared },
    )
}

/// Drops `metadata.managedFields`, as kube-controller-manager's informers do: no controller
/// reads them, and they are often the larger part of an object. An update sent without them
/// keeps the server's. The lists of Pods and Jobs are also shrunk to fit (`compact`).
fn trimmed<K: Resource + 'static>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    super::compact::compact(&mut obj);
    obj
}

fn obj_key<K: Resource>(obj: &K) -> Option<ObjKey> {
    let meta = obj.meta();
    let name = meta.name.clone()?;
    Some((meta.namespace.clone().unwrap_or_default(), name))
}

/// Applies watcher events to the cache. Dropping it marks the cache stopped.
pub struct CacheWriter<K> {
    shared: Arc<Shared<K>>,
    // Objects of a list in progress; swapped in whole when the list ends, as client-go's
    // Replace does, so readers never see half a list.
    relist: Option<Objects<K>>,
    // The number of the list in progress.
    list_number: u64,
}

impl<K> CacheWriter<K> {
    fn write(&self) -> RwLockWriteGuard<'_, Indexed<K>> {
        // Writers replace whole entries, so a poisoned lock still guards a consistent map.
        self.shared
            .objects
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: Resource + 'static> CacheWriter<K> {
    /// Applies one watcher event and returns the changes it made, in order.
    ///
    /// At the end of a (re-)list every listed object is reported as added or updated (updated
    /// even if unchanged, as client-go does: handlers compare resourceVersions), then every
    /// cached object missing from the list as deleted.
    pub fn apply(&mut self, event: watcher::Event<K>) -> Vec<Change<K>> {
        let changes = self.apply_event(event);
        // After the objects: a reader that sees the progress finds them in the cache.
        let progress = &self.shared.progress;
        for change in &changes {
            let obj = match change {
                Change::Added(o) | Change::Deleted(o) | Change::Updated { new: o, .. } => o,
            };
            progress
                .resource_version
                .fetch_max(parse_rv(&**obj), Ordering::Release);
        }
        changes
    }

    fn apply_event(&mut self, event: watcher::Event<K>) -> Vec<Change<K>> {
        let event = match event {
            watcher::Event::InitApply(obj) => watcher::Event::InitApply(trimmed(obj)),
            watcher::Event::Apply(obj) => watcher::Event::Apply(trimmed(obj)),
            watcher::Event::Delete(obj) => watcher::Event::Delete(trimmed(obj)),
            other => other,
        };
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                self.list_number = self
                    .shared
                    .progress
                    .lists_started
                    .fetch_add(1, Ordering::AcqRel)
                    + 1;
                Vec::new()
            }
            watcher::Event::InitApply(obj) => {
                let Some(key) = obj_key(&obj) else {
                    warn!("listed object without a name: ignored");
                    return Vec::new();
                };
                match &mut self.relist {
                    Some(buffer) => {
                        buffer.insert(key, Arc::new(obj));
                        Vec::new()
                    }
                    // Not expected from kube's watcher; treat as a plain upsert.
                    None => vec![self.upsert(key, obj)],
                }
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let changes = self.replace(listed);
                self.shared
                    .progress
                    .lists_done
                    .fetch_max(self.list_number, Ordering::Release);
                self.shared.sync.send_modify(|s| s.synced = true);
                changes
            }
            watcher::Event::Apply(obj) => {
                let Some(key) = obj_key(&obj) else {
                    warn!("watched object without a name: ignored");
                    return Vec::new();
                };
                vec![self.upsert(key, obj)]
            }
            watcher::Event::Delete(obj) => {
                let Some(key) = obj_key(&obj) else {
                    warn!("deleted object without a name: ignored");
                    return Vec::new();
                };
                self.write().remove(&key);
                // The object of the delete event is the final state, newer than the cached one.
                vec![Change::Deleted(Arc::new(obj))]
            }
        }
    }

    fn upsert(&mut self, key: ObjKey, obj: K) -> Change<K> {
        let new = Arc::new(obj);
        let old = self.write().insert(key, Arc::clone(&new));
        match old {
            Some(old) => Change::Updated { old, new },
            None => Change::Added(new),
        }
    }

    fn replace(&mut self, listed: Objects<K>) -> Vec<Change<K>> {
        let mut old_objects = {
            let fresh = Indexed::from_objects(listed.clone());
            let mut objects = self.write();
            std::mem::replace(&mut *objects, fresh).objects
        };
        let mut changes = Vec::with_capacity(listed.len());
        for (key, new) in listed {
            changes.push(match old_objects.remove(&key) {
                Some(old) => Change::Updated { old, new },
                None => Change::Added(new),
            });
        }
        // Left over: gone while the watch was down.
        changes.extend(old_objects.into_values().map(Change::Deleted));
        changes
    }
}

impl<K> Drop for CacheWriter<K> {
    fn drop(&mut self) {
        self.shared.sync.send_modify(|s| s.stopped = true);
    }
}

/// Read access to the cache. Cloning gives another handle to the same cache.
pub struct Lister<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: Resource> Lister<K> {
    fn read(&self) -> RwLockReadGuard<'_, Indexed<K>> {
        self.shared
            .objects
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cached object; `namespace` is empty for cluster-scoped kinds.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.read()
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The cached object with a `namespace/name` (or `name`) key.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        let (ns, name) = crate::runtime::key::split_key(key).ok()?;
        self.get(ns, name)
    }

    /// Every cached object, ordered by namespace and name.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    /// The cached objects of `namespace` whose controller reference has `uid`, by name.
    pub fn list_controlled_by(&self, namespace: &str, uid: &str) -> Vec<Arc<K>> {
        let store = self.read();
        store
            .by_controller
            .get(uid)
            .into_iter()
            .flat_map(KeySet::iter)
            .filter(|(key, _)| key.0 == namespace)
            .map(|(_, obj)| Arc::clone(obj))
            .collect()
    }

    /// The cached objects of `namespace` whose controller reference names `name` (any kind,
    /// any UID), by name.
    pub fn list_controlled_by_name(&self, namespace: &str, name: &str) -> Vec<Arc<K>> {
        let store = self.read();
        store
            .by_controller_name
            .get(&(namespace.to_string(), name.to_string()))
            .into_iter()
            .flat_map(KeySet::iter)
            .filter_map(|(key, _)| store.objects.get(key).cloned())
            .collect()
    }

    /// The cached objects of `namespace` whose controller reference has `uid`, together
    /// with the objects of `namespace` that have no controller: every object a controller
    /// may own or adopt. Ordered by name.
    pub fn list_controlled_or_orphaned(&self, namespace: &str, uid: &str) -> Vec<Arc<K>> {
        let store = self.read();
        let controlled = store
            .by_controller
            .get(uid)
            .into_iter()
            .flat_map(KeySet::iter)
            .filter(|(key, _)| key.0 == namespace);
        let orphans = store
            .orphans
            .range((namespace.to_string(), String::new())..)
            .take_while(|(key, _)| key.0 == namespace);
        let mut found: Vec<(&ObjKey, &Arc<K>)> = controlled.collect();
        let sorted = found.len();
        found.extend(orphans);
        // Each part is in key order already.
        if sorted > 0 && found.len() > sorted {
            found.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        found.into_iter().map(|(_, obj)| Arc::clone(obj)).collect()
    }

    /// The cached objects of one namespace, ordered by name.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.select(Some(namespace), |_| true)
    }

    /// The cached objects (of `namespace`, or of all namespaces) whose labels match `selector`.
    /// An empty selector matches everything.
    pub fn list_selected(&self, namespace: Option<&str>, selector: &Selector) -> Vec<Arc<K>> {
        let no_labels = BTreeMap::new();
        self.select(namespace, |obj| {
            selector.matches(obj.meta().labels.as_ref().unwrap_or(&no_labels))
        })
    }

    fn select(&self, namespace: Option<&str>, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        let store = self.read();
        let objects = &store.objects;
        match namespace {
            Some(ns) => objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((obj_ns, _), _)| obj_ns == ns)
                .filter(|(_, obj)| keep(obj))
                .map(|(_, obj)| Arc::clone(obj))
                .collect(),
            None => objects.values().filter(|obj| keep(obj)).cloned().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the first list has been applied.
    pub fn has_synced(&self) -> bool {
        self.shared.sync.borrow().synced
    }

    /// How far the cache has followed the server (see [`SyncProgress`]).
    pub fn progress(&self) -> SyncProgress {
        let p = &self.shared.progress;
        SyncProgress {
            resource_version: p.resource_version.load(Ordering::Acquire),
            lists_started: p.lists_started.load(Ordering::Acquire),
            lists_done: p.lists_done.load(Ordering::Acquire),
        }
    }

    /// Waits until the first list has been applied. Fails if the informer stops before.
    pub async fn wait_until_synced(&self) -> Result<(), InformerError> {
        let mut rx = self.shared.sync.subscribe();
        // The sender lives in `shared`, which this lister keeps alive: the wait cannot fail.
        let state = rx
            .wait_for(|s| s.synced || s.stopped)
            .await
            .map(|s| *s)
            .unwrap_or(SyncState {
                synced: false,
                stopped: true,
            });
        if state.synced {
            Ok(())
        } else {
            Err(InformerError::Stopped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;
    use kube::core::Expression;

    #[test]
    fn key_sets_stay_ordered_from_one_key_to_many_and_back() {
        let k = |n: &str| ("ns".to_string(), n.to_string());
        let entries = |set: &KeySet<u32>| {
            set.iter()
                .map(|(k, v)| format!("{}={v}", k.1))
                .collect::<Vec<_>>()
        };
        let mut set = KeySet::One(k("b"), 1);
        set.insert(k("b"), 2);
        assert!(matches!(set, KeySet::One(_, 2)));
        set.insert(k("c"), 3);
        set.insert(k("a"), 4);
        assert_eq!(entries(&set), ["a=4", "b=2", "c=3"]);
        if let Some(v) = set.get_mut(&k("c")) {
            *v = 5;
        }
        assert!(set.get_mut(&k("x")).is_none());
        assert!(!set.remove(&k("b")));
        assert!(!set.remove(&k("x")));
        assert_eq!(entries(&set), ["a=4", "c=5"]);
        assert!(!set.remove(&k("a")));
        assert!(set.remove(&k("c")));
        let mut one = KeySet::One(k("a"), 1);
        assert!(one.get_mut(&k("b")).is_none());
        assert!(!one.remove(&k("b")));
        assert!(one.remove(&k("a")));
    }

    fn pod(ns: &str, name: &str, rv: &str, labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A change as (kind, name, old rv, new rv), for compact assertions.
    fn describe(c: &Change<Pod>) -> (&'static str, String, String, String) {
        let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        let rv = |p: &Pod| p.metadata.resource_version.clone().unwrap_or_default();
        match c {
            Change::Added(p) => ("add", name(p), String::new(), rv(p)),
            Change::Updated { old, new } => ("update", name(new), rv(old), rv(new)),
            Change::Deleted(p) => ("delete", name(p), rv(p), String::new()),
        }
    }

    fn describe_all(cs: &[Change<Pod>]) -> Vec<(&'static str, String, String, String)> {
        cs.iter().map(describe).collect()
    }

    fn row(
        kind: &'static str,
        name: &str,
        old: &str,
        new: &str,
    ) -> (&'static str, String, String, String) {
        (kind, name.into(), old.into(), new.into())
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn owned(mut p: Pod, uid: &str, controller: bool) -> Pod {
        p.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: "j".into(),
                uid: uid.into(),
                controller: Some(controller),
                ..Default::default()
            },
        ]);
        p
    }

    /// The progress counts lists begun and done and follows the newest version taken in,
    /// from watch events and lists alike; an older version never moves it back.
    #[test]
    fn progress_follows_lists_and_events() {
        let (mut w, l) = cache::<Pod>();
        let at = |rv, started, done| SyncProgress {
            resource_version: rv,
            lists_started: started,
            lists_done: done,
        };
        assert_eq!(l.progress(), at(0, 0, 0));
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a", "p1", "7", &[])));
        w.apply(watcher::Event::InitApply(pod("a", "p2", "5", &[])));
        assert_eq!(
            l.progress(),
            at(0, 1, 0),
            "nothing is in the cache mid-list"
        );
        w.apply(watcher::Event::InitDone);
        assert_eq!(l.progress(), at(7, 1, 1));
        w.apply(watcher::Event::Apply(pod("a", "p1", "9", &[])));
        assert_eq!(l.progress(), at(9, 1, 1));
        w.apply(watcher::Event::Delete(pod("a", "p2", "12", &[])));
        assert_eq!(l.progress(), at(12, 1, 1));
        // A re-list that misses a deletion reports the last cached state as deleted.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a", "p3", "3", &[])));
        w.apply(watcher::Event::InitDone);
        assert_eq!(l.progress(), at(12, 2, 2));
        w.apply(watcher::Event::Apply(pod("a", "p3", "not-a-number", &[])));
        assert_eq!(l.progress(), at(12, 2, 2));
    }

    /// The controller index follows adds, updates that change the owner, deletes and relists.
    #[test]
    fn controlled_or_orphaned_follows_every_change() {
        let (mut w, l) = cache::<Pod>();
        w.apply(watcher::Event::Apply(owned(
            pod("a", "p1", "1", &[]),
            "u1",
            true,
        )));
        w.apply(watcher::Event::Apply(owned(
            pod("a", "p2", "1", &[]),
            "u2",
            true,
        )));
        w.apply(watcher::Event::Apply(pod("a", "p3", "1", &[])));
        // An owner that is not the controller leaves the pod an orphan.
        w.apply(watcher::Event::Apply(owned(
            pod("a", "p4", "1", &[]),
            "u1",
            false,
        )));
        w.apply(watcher::Event::Apply(owned(
            pod("b", "p5", "1", &[]),
            "u1",
            true,
        )));
        w.apply(watcher::Event::Apply(pod("b", "p6", "1", &[])));
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u1")),
            ["p1", "p3", "p4"]
        );
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u2")),
            ["p2", "p3", "p4"]
        );
        assert_eq!(
            names(&l.list_controlled_or_orphaned("b", "u1")),
            ["p5", "p6"]
        );
        assert_eq!(
            names(&l.list_controlled_or_orphaned("c", "u1")),
            Vec::<String>::new()
        );
        // An update that keeps the controller (a status, a finalizer): listed as before, new
        // version.
        w.apply(watcher::Event::Apply(owned(
            pod("b", "p5", "7", &[]),
            "u1",
            true,
        )));
        let listed = l.list_controlled_or_orphaned("b", "u1");
        assert_eq!(names(&listed), ["p5", "p6"]);
        assert_eq!(listed[0].metadata.resource_version.as_deref(), Some("7"));
        let listed = l.list_controlled_by("b", "u1");
        assert_eq!(listed[0].metadata.resource_version.as_deref(), Some("7"));
        // So does an orphan's.
        w.apply(watcher::Event::Apply(pod("b", "p6", "8", &[])));
        let listed = l.list_controlled_or_orphaned("b", "u1");
        assert_eq!(listed[1].metadata.resource_version.as_deref(), Some("8"));
        // Orphans only, and controlled only, come out in name order too.
        w.apply(watcher::Event::Apply(pod("c", "q2", "1", &[])));
        w.apply(watcher::Event::Apply(pod("c", "q1", "1", &[])));
        assert_eq!(
            names(&l.list_controlled_or_orphaned("c", "u1")),
            ["q1", "q2"]
        );
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u2")),
            ["p2", "p3", "p4"]
        );

        // Released by u2 (owner reference removed), adopted by u1, deleted.
        w.apply(watcher::Event::Apply(pod("a", "p2", "2", &[])));
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u2")),
            ["p2", "p3", "p4"]
        );
        w.apply(watcher::Event::Apply(owned(
            pod("a", "p3", "2", &[]),
            "u1",
            true,
        )));
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u2")),
            ["p2", "p4"]
        );
        w.apply(watcher::Event::Delete(owned(
            pod("a", "p1", "3", &[]),
            "u1",
            true,
        )));
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u1")),
            ["p2", "p3", "p4"]
        );

        // A relist rebuilds the index from the listed objects only.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(owned(
            pod("a", "p9", "4", &[]),
            "u1",
            true,
        )));
        w.apply(watcher::Event::InitDone);
        assert_eq!(names(&l.list_controlled_or_orphaned("a", "u1")), ["p9"]);
        assert_eq!(names(&l.list_controlled_by_name("a", "j")), ["p9"]);
        assert_eq!(
            names(&l.list_controlled_or_orphaned("a", "u2")),
            Vec::<String>::new()
        );
    }

    #[tokio::test]
    async fn initial_list_adds_everything_then_syncs() {
        let (mut w, l) = cache::<Pod>();
        assert!(!l.has_synced());
        assert!(w.apply(watcher::Event::Init).is_empty());
        assert!(
            w.apply(watcher::Event::InitApply(pod("a", "p1", "1", &[])))
                .is_empty()
        );
        assert!(
            w.apply(watcher::Event::InitApply(pod("a", "p2", "2", &[])))
                .is_empty()
        );
        // Nothing visible until the list is complete.
        assert!(l.is_empty());
        assert!(!l.has_synced());
        let changes = w.apply(watcher::Event::InitDone);
        assert_eq!(
            describe_all(&changes),
            [row("add", "p1", "", "1"), row("add", "p2", "", "2")]
        );
        assert!(l.has_synced());
        l.wait_until_synced().await.expect("synced");
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn watch_events_report_the_previous_object() {
        let (mut w, l) = cache::<Pod>();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitDone);
        let c = w.apply(watcher::Event::Apply(pod("a", "p", "1", &[("x", "1")])));
        assert_eq!(describe_all(&c), [row("add", "p", "", "1")]);
        let c = w.apply(watcher::Event::Apply(pod("a", "p", "2", &[("x", "2")])));
        assert_eq!(describe_all(&c), [row("update", "p", "1", "2")]);
        match &c[0] {
            Change::Updated { old, new } => {
                let label = |p: &Pod| p.metadata.labels.as_ref().and_then(|l| l.get("x").cloned());
                assert_eq!(label(old).as_deref(), Some("1"));
                assert_eq!(label(new).as_deref(), Some("2"));
            }
            other => panic!("expected an update, got {:?}", describe(other)),
        }
        assert_eq!(
            l.get("a", "p")
                .and_then(|p| p.metadata.resource_version.clone()),
            Some("2".into())
        );
        let c = w.apply(watcher::Event::Delete(pod("a", "p", "3", &[])));
        assert_eq!(describe_all(&c), [row("delete", "p", "3", "")]);
        assert!(l.get("a", "p").is_none());
    }

    #[test]
    fn relist_updates_known_adds_new_and_deletes_missing() {
        let (mut w, l) = cache::<Pod>();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a", "kept", "1", &[])));
        w.apply(watcher::Event::InitApply(pod("a", "gone", "2", &[])));
        w.apply(watcher::Event::InitApply(pod("a", "same", "3", &[])));
        w.apply(watcher::Event::InitDone);

        // A re-list, as after a 410: the old objects stay visible until it completes.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(pod("a", "kept", "7", &[])));
        w.apply(watcher::Event::InitApply(pod("a", "same", "3", &[])));
        w.apply(watcher::Event::InitApply(pod("a", "new", "8", &[])));
        assert_eq!(names(&l.list()), ["gone", "kept", "same"]);
        let c = w.apply(watcher::Event::InitDone);
        assert_eq!(
            describe_all(&c),
            [
                row("update", "kept", "1", "7"),
                row("add", "new", "", "8"),
                row("update", "same", "3", "3"),
                row("delete", "gone", "2", ""),
            ]
        );
        assert_eq!(names(&l.list()), ["kept", "new", "same"]);
    }

    #[test]
    fn lists_by_namespace_and_selector() {
        let (mut w, l) = cache::<Pod>();
        w.apply(watcher::Event::Init);
        for p in [
            pod("a", "a1", "1", &[("app", "x")]),
            pod("a", "a2", "2", &[("app", "y")]),
            pod("ab", "ab1", "3", &[("app", "x")]),
            pod("b", "b1", "4", &[("app", "x"), ("tier", "db")]),
        ] {
            w.apply(watcher::Event::InitApply(p));
        }
        w.apply(watcher::Event::InitDone);
        assert_eq!(names(&l.list()), ["a1", "a2", "ab1", "b1"]);
        assert_eq!(names(&l.list_namespace("a")), ["a1", "a2"]);
        assert!(l.list_namespace("c").is_empty());

        let app_x: Selector = [("app", "x")].into_iter().collect();
        assert_eq!(names(&l.list_selected(None, &app_x)), ["a1", "ab1", "b1"]);
        assert_eq!(names(&l.list_selected(Some("a"), &app_x)), ["a1"]);
        let tier: Selector = Expression::Exists("tier".into()).into();
        assert_eq!(names(&l.list_selected(None, &tier)), ["b1"]);
        let everything = Selector::default();
        assert_eq!(l.list_selected(Some("ab"), &everything).len(), 1);

        assert!(l.get_by_key("b/b1").is_some());
        assert!(l.get_by_key("b/nope").is_none());
        assert!(l.get_by_key("a/b/c").is_none());
    }

    #[tokio::test]
    async fn wait_fails_if_the_writer_stops_before_sync() {
        let (w, l) = cache::<Pod>();
        let waiter = tokio::spawn({
            let l = l.clone();
            async move { l.wait_until_synced().await }
        });
        tokio::task::yield_now().await;
        drop(w);
        let r = waiter.await.expect("waiter");
        assert!(matches!(r, Err(InformerError::Stopped)));
    }

    #[tokio::test]
    async fn synced_stays_synced_after_stop() {
        let (mut w, l) = cache::<Pod>();
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitDone);
        drop(w);
        assert!(l.has_synced());
        l.wait_until_synced().await.expect("synced");
    }
}
