//! The in-memory index of current objects. Reads never touch the disk; the writer applies each
//! durable batch and the new revision under one write lock, so a list is always consistent with
//! the revision it reports.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{EventType, ListResult, Object, WatchEvent};

struct State {
    objects: BTreeMap<String, Arc<Object>>,
    revision: u64,
}

pub(crate) struct Index {
    state: RwLock<State>,
}

impl Index {
    pub(crate) fn new(objects: Vec<Arc<Object>>, revision: u64) -> Index {
        let objects = objects.into_iter().map(|o| (o.key.clone(), o)).collect();
        Index {
            state: RwLock::new(State { objects, revision }),
        }
    }

    // Nothing panics while holding these locks, but a poisoned lock still holds consistent
    // data (updates are applied in full before the guard drops), so recover instead of failing.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn revision(&self) -> u64 {
        self.read().revision
    }

    pub(crate) fn size(&self) -> (u64, usize) {
        let s = self.read();
        (s.revision, s.objects.len())
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<Object>> {
        self.read().objects.get(key).cloned()
    }

    /// How many objects have a key that starts with `prefix`.
    pub(crate) fn count(&self, prefix: &str) -> usize {
        self.read()
            .objects
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .count()
    }

    pub(crate) fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
    ) -> ListResult {
        let s = self.read();
        let lower = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut iter = s
            .objects
            .range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| Arc::clone(v));
        let items: Vec<Arc<Object>> = match limit {
            Some(n) => iter.by_ref().take(n).collect(),
            None => iter.by_ref().collect(),
        };
        let more = iter.next().is_some();
        ListResult {
            items,
            revision: s.revision,
            more,
        }
    }

    /// Apply a committed batch (in revision order) and publish its revision.
    pub(crate) fn apply(&self, changes: &[WatchEvent], revision: u64) {
        let mut s = self.write();
        for ev in changes {
            let obj = &ev.object;
            match ev.kind {
                EventType::Added | EventType::Modified => {
                    s.objects.insert(obj.key.clone(), Arc::clone(obj));
                }
                EventType::Deleted => {
                    s.objects.remove(&obj.key);
                }
            }
        }
        s.revision = revision;
    }
}
