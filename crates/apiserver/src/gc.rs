//! Garbage collection of dependents, as upstream's garbage collector and namespace controller
//! do for a standalone server: ownerReferences followed on delete (Orphan, Background,
//! Foreground), dependents of vanished owners deleted, terminating namespaces emptied.
//!
//! It keeps a graph of every stored object's uid and owners, fed by one watch on the whole
//! store, and acts on the objects an event touches. Every action is idempotent, so replaying a
//! change (after a restart or a re-list) is harmless.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kbatch_api::keys::{FOREGROUND_DELETION_FINALIZER, ORPHAN_FINALIZER};
use kbatch_store::{EventType, Object, StoreError};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::ServerState;
use crate::handlers::{self, DeleteOptions, Propagation};
use crate::request::Target;
use crate::resources::{self, Kind};

/// Storage keys and uids, each held once and shared by the maps that refer to it: the graph
/// has a node for every stored object.
type Shared = Arc<str>;

#[derive(Debug, Clone)]
struct OwnerRef {
    uid: Shared,
    block: bool,
}

/// An object as the collector sees it. Its namespace is the one in its key.
#[derive(Debug, Clone)]
struct Node {
    uid: Shared,
    owners: Vec<OwnerRef>,
    deleting: bool,
    finalizers: Vec<String>,
}

/// The keys of an owner's dependents: most owners have one (a single-pod Job's pod, a
/// CronJob's Job), and a one-key set allocates a table of four.
#[derive(Debug)]
enum Dependents {
    One(Shared),
    Many(HashSet<Shared>),
}

impl Dependents {
    fn insert(&mut self, key: Shared) {
        match self {
            Dependents::One(k) if *k == key => {}
            Dependents::One(k) => {
                let first = Arc::clone(k);
                *self = Dependents::Many(HashSet::from([first, key]));
            }
            Dependents::Many(keys) => {
                keys.insert(key);
            }
        }
    }

    /// Removes `key`; true when nothing is left.
    fn remove(&mut self, key: &str) -> bool {
        match self {
            Dependents::One(k) => &**k == key,
            Dependents::Many(keys) => {
                keys.remove(key);
                keys.is_empty()
            }
        }
    }

    fn keys(&self) -> Vec<String> {
        match self {
            Dependents::One(k) => vec![k.to_string()],
            Dependents::Many(keys) => keys.iter().map(|k| k.to_string()).collect(),
        }
    }
}

/// The namespace in a storage key ("" for cluster-scoped kinds and unknown keys).
fn namespace_of(key: &str) -> &str {
    if !resources::by_key(key).is_some_and(|r| r.namespaced) {
        return "";
    }
    key.trim_start_matches('/').split('/').nth(1).unwrap_or("")
}

/// What the collector reads of a stored object: its `metadata`, and nothing after it. The
/// server writes `metadata` before `spec` and `status`, so a change is read only up to the end
/// of its metadata (serde_json then reports the unread rest, which is ignored): skipping a
/// pod's spec and status was most of the collector's time per change.
fn read_meta(raw: &[u8]) -> Option<GcMeta> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};

    /// Whether a key is `metadata`, without allocating it.
    struct IsMetadata;
    impl<'de> DeserializeSeed<'de> for IsMetadata {
        type Value = bool;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl Visitor<'_> for IsMetadata {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a field name")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<bool, E> {
            Ok(v == "metadata")
        }
    }

    struct Doc<'a>(&'a mut Option<GcMeta>);
    impl<'de> Visitor<'de> for Doc<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(is_meta) = map.next_key_seed(IsMetadata)? {
                if is_meta {
                    *self.0 = Some(map.next_value()?);
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            *self.0 = Some(GcMeta::default());
            Ok(())
        }
    }

    let mut meta = None;
    let mut de = serde_json::Deserializer::from_slice(raw);
    let _ = de.deserialize_map(Doc(&mut meta));
    meta
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct GcMeta {
    uid: Option<String>,
    owner_references: Option<Vec<GcOwnerRef>>,
    deletion_timestamp: Option<IgnoredAny>,
    finalizers: Option<Vec<Option<String>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GcOwnerRef {
    uid: Option<String>,
    block_owner_deletion: Option<bool>,
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<Shared, Node>,
    by_uid: HashMap<Shared, Shared>,
    dependents: HashMap<Shared, Dependents>,
}

impl Graph {
    /// Records the stored object `raw` under `key`; false when it is not a JSON object.
    fn upsert(&mut self, key: &str, raw: &[u8]) -> bool {
        let Some(meta) = read_meta(raw) else {
            return false;
        };
        let key: Shared = match self.remove_entry(key) {
            Some((k, _)) => k,
            None => Arc::from(key),
        };
        let uid: Shared = Arc::from(meta.uid.unwrap_or_default());
        let owners: Vec<OwnerRef> = meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| {
                let uid = r.uid?;
                // The owner's own uid, when it is known, rather than another copy.
                let uid = match self.by_uid.get_key_value(uid.as_str()) {
                    Some((known, _)) => Arc::clone(known),
                    None => Arc::from(uid),
                };
                Some(OwnerRef {
                    uid,
                    block: r.block_owner_deletion.unwrap_or(false),
                })
            })
            .collect();
        for o in &owners {
            match self.dependents.get_mut(&o.uid) {
                Some(deps) => deps.insert(Arc::clone(&key)),
                None => {
                    let deps = Dependents::One(Arc::clone(&key));
                    self.dependents.insert(Arc::clone(&o.uid), deps);
                }
            }
        }
        if !uid.is_empty() {
            self.by_uid.insert(Arc::clone(&uid), Arc::clone(&key));
        }
        let node = Node {
            uid,
            owners,
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta
                .finalizers
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect(),
        };
        self.nodes.insert(key, node);
        true
    }

    fn remove(&mut self, key: &str) -> Option<Node> {
        self.remove_entry(key).map(|(_, node)| node)
    }

    fn remove_entry(&mut self, key: &str) -> Option<(Shared, Node)> {
        let (key, node) = self.nodes.remove_entry(key)?;
        if self.by_uid.get(&node.uid).is_some_and(|k| *k == key) {
            self.by_uid.remove(&node.uid);
        }
        for o in &node.owners {
            if let Some(deps) = self.dependents.get_mut(&o.uid)
                && deps.remove(&key)
            {
                self.dependents.remove(&o.uid);
            }
        }
        Some((key, node))
    }

    fn dependents_of(&self, uid: &str) -> Vec<String> {
        self.dependents
            .get(uid)
            .map(Dependents::keys)
            .unwrap_or_default()
    }

    /// The key of the object with `uid`.
    fn key_of(&self, uid: &str) -> Option<String> {
        self.by_uid.get(uid).map(|k| k.to_string())
    }

    /// An owner reference of the object at `dependent` is live when an object with that uid
    /// exists in the dependent's namespace (or is cluster-scoped): references never cross
    /// namespaces.
    fn owner_live(&self, dependent: &str, owner_uid: &str) -> bool {
        self.by_uid.get(owner_uid).is_some_and(|owner| {
            let ns = namespace_of(owner);
            ns.is_empty() || ns == namespace_of(dependent)
        })
    }
}

fn target_of(key: &str) -> Option<Target> {
    let res = resources::by_key(key)?;
    let parts: Vec<&str> = key.trim_start_matches('/').split('/').collect();
    let (namespace, name) = match (res.namespaced, parts.as_slice()) {
        (true, [_, ns, name]) => (Some(ns.to_string()), name.to_string()),
        (false, [_, name]) => (None, name.to_string()),
        _ => return None,
    };
    Some(Target {
        resource: res,
        namespace,
        name: Some(name),
        subresource: None,
        watch_path: false,
    })
}

/// Run until shutdown: list everything, act on what is pending, then follow the changes.
pub async fn run(st: Arc<ServerState>) {
    let mut shutdown = st.shutdown.subscribe();
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        let page = st.store.list("/", None, None);
        let mut graph = Graph::default();
        for o in &page.items {
            // An object that is not JSON is left out, as it would be skipped on change.
            graph.upsert(&o.key, &o.raw());
        }
        let keys: Vec<String> = graph.nodes.keys().map(|k| k.to_string()).collect();
        for k in keys {
            attend(&st, &graph, &k).await;
        }
        let mut w = match st.store.watch("/", page.revision) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "garbage collector could not watch; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            let ev = tokio::select! {
                _ = shutdown.changed() => return,
                ev = w.next() => ev,
            };
            match ev {
                None => return,
                Some(Err(StoreError::Expired { .. })) => break,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "garbage collector watch failed; re-listing");
                    break;
                }
                Some(Ok(ev)) => on_event(&st, &mut graph, ev.kind, &ev.object).await,
            }
        }
    }
}

async fn on_event(st: &ServerState, graph: &mut Graph, kind: EventType, o: &Object) {
    let mut touched: Vec<String> = Vec::new();
    match kind {
        EventType::Deleted => {
            if let Some(node) = graph.remove(&o.key) {
                touched.extend(graph.dependents_of(&node.uid));
                touched.extend(node.owners.iter().filter_map(|r| graph.key_of(&r.uid)));
                if resources::by_key(&o.key)
                    .is_some_and(|r| r.kind != Kind::Namespace && r.namespaced)
                {
                    // A terminating namespace may now be empty.
                    let ns_key = resources::by_kind(Kind::Namespace).key("", namespace_of(&o.key));
                    touched.push(ns_key);
                }
            }
        }
        EventType::Added | EventType::Modified => {
            let old_owners: Vec<Shared> = graph
                .nodes
                .get(o.key.as_str())
                .map(|n| n.owners.iter().map(|r| Arc::clone(&r.uid)).collect())
                .unwrap_or_default();
            if !graph.upsert(&o.key, &o.raw()) {
                return;
            }
            touched.push(o.key.clone());
            let new_owners = graph
                .nodes
                .get(o.key.as_str())
                .map(|n| n.owners.clone())
                .unwrap_or_default();
            for uid in old_owners.iter().chain(new_owners.iter().map(|r| &r.uid)) {
                touched.extend(graph.key_of(uid));
            }
        }
    }
    touched.sort();
    touched.dedup();
    for k in touched {
        attend(st, graph, &k).await;
    }
}

/// Do what one object needs: finish its own deletion, or delete it if its owners are gone.
async fn attend(st: &ServerState, graph: &Graph, key: &str) {
    let Some(node) = graph.nodes.get(key) else {
        return;
    };
    let Some(res) = resources::by_key(key) else {
        return;
    };
    if node.deleting {
        if res.kind == Kind::Namespace {
            finish_namespace(st, graph, key).await;
        }
        if node.finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for dep in graph.dependents_of(&node.uid) {
                edit(st, &dep, |v| remove_owner_ref(v, &node.uid)).await;
            }
            edit(st, key, |v| remove_finalizer(v, ORPHAN_FINALIZER)).await;
        }
        if node
            .finalizers
            .iter()
            .any(|f| f == FOREGROUND_DELETION_FINALIZER)
        {
            let deps = graph.dependents_of(&node.uid);
            let mut blocking = false;
            for dep in &deps {
                let Some(d) = graph.nodes.get(dep.as_str()) else {
                    continue;
                };
                if d.owners.iter().any(|r| r.uid == node.uid && r.block) {
                    blocking = true;
                }
                if !d.deleting {
                    delete(st, dep, dependent_policy(graph, d)).await;
                }
            }
            if !blocking {
                edit(st, key, |v| {
                    remove_finalizer(v, FOREGROUND_DELETION_FINALIZER)
                })
                .await;
            }
        }
        return;
    }
    // A dependent all of whose owners are gone is deleted, honouring its own GC finalizers.
    if !node.owners.is_empty() && node.owners.iter().all(|r| !graph.owner_live(key, &r.uid)) {
        delete(st, key, dependent_policy(graph, node)).await;
    }
}

/// Upstream deletes an orphaned dependent by its own finalizers: orphan, foreground, else
/// background.
fn dependent_policy(_graph: &Graph, node: &Node) -> Propagation {
    if node.finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
        Propagation::Orphan
    } else if node
        .finalizers
        .iter()
        .any(|f| f == FOREGROUND_DELETION_FINALIZER)
    {
        Propagation::Foreground
    } else {
        Propagation::Background
    }
}

async fn delete(st: &ServerState, key: &str, policy: Propagation) {
    let Some(t) = target_of(key) else { return };
    let opts = DeleteOptions {
        propagation: Some(policy),
        ..DeleteOptions::default()
    };
    match handlers::delete(st, &t, &opts).await {
        Ok(_) => tracing::debug!(key, ?policy, "garbage collector deleted a dependent"),
        Err(e) if e.code == 404 => {}
        Err(e) => tracing::warn!(key, error = %e, "garbage collector could not delete"),
    }
}

/// Terminating namespace: delete its contents; once empty, drop its finalizer so it goes.
async fn finish_namespace(st: &ServerState, graph: &Graph, key: &str) {
    let Some(name) = key.rsplit('/').next() else {
        return;
    };
    let mut remaining = false;
    for (k, n) in &graph.nodes {
        // Cluster-scoped objects have no namespace in their key.
        if namespace_of(k) == name {
            remaining = true;
            if !n.deleting {
                delete(st, k, Propagation::Background).await;
            }
        }
    }
    if !remaining {
        edit(st, key, |v| {
            if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("finalizers");
            }
            true
        })
        .await;
    }
}

fn remove_owner_ref(v: &mut Value, uid: &str) -> bool {
    let Some(refs) = v
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = refs.len();
    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
    let changed = refs.len() != before;
    if refs.is_empty()
        && let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.remove("ownerReferences");
    }
    changed
}

fn remove_finalizer(v: &mut Value, name: &str) -> bool {
    let mut f = crate::object::finalizers(v);
    let before = f.len();
    f.retain(|x| x != name);
    if f.len() == before {
        return false;
    }
    crate::object::set_finalizers(v, &f);
    true
}

/// Read-modify-write of one stored object with its revision as precondition; completes the
/// deletion of an object whose last finalizer went (a namespace: when its spec finalizers
/// are gone too).
async fn edit(st: &ServerState, key: &str, change: impl Fn(&mut Value) -> bool) {
    for _ in 0..8 {
        let Some(cur) = st.store.get(key) else { return };
        let Ok(mut v) = handlers::parse_stored_bytes(&cur.raw()) else {
            return;
        };
        if !change(&mut v) {
            return;
        }
        let deleting = v.pointer("/metadata/deletionTimestamp").is_some();
        let grace = v
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let spec_finalizers = v
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let result = if deleting
            && grace == 0
            && crate::object::finalizers(&v).is_empty()
            && !spec_finalizers
        {
            crate::storage_metrics::delete(&st.store, key.to_string(), Some(cur.rv)).await
        } else {
            crate::storage_metrics::update(&st.store, key.to_string(), v, Some(cur.rv)).await
        };
        match result {
            Ok(_) | Err(StoreError::NotFound(_)) => return,
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => {
                tracing::warn!(key, error = %e, "garbage collector write failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_from_keys() {
        let t = target_of("/jobs.batch/default/pi").unwrap();
        assert_eq!(t.resource.kind, Kind::Job);
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.name.as_deref(), Some("pi"));
        let t = target_of("/namespaces/x").unwrap();
        assert_eq!(t.resource.kind, Kind::Namespace);
        assert_eq!(
            target_of("/events/ns/e").unwrap().resource.kind,
            Kind::Event
        );
        assert!(target_of("/nothing/x").is_none());
    }

    #[test]
    fn metadata_is_read_wherever_it_is_and_nothing_after_it() {
        let owners = |m: &GcMeta| -> Vec<String> {
            m.owner_references
                .iter()
                .flatten()
                .filter_map(|r| r.uid.clone())
                .collect()
        };
        let meta = r#"{"uid":"P","ownerReferences":[{"uid":"J","blockOwnerDeletion":true}],"finalizers":["f"],"deletionTimestamp":"2024-01-01T00:00:00Z"}"#;
        // First, with what follows it unreadable: it is not read.
        let first = format!(r#"{{"metadata":{meta},"spec":{{"containers":[oops"#);
        // Last, after fields with escapes and nesting.
        let last =
            format!(r#"{{"kind":"Pod","sp\u0065c":{{"a":[1,{{"b":"\""}}]}},"metadata":{meta}}}"#);
        for doc in [first, last] {
            let m = read_meta(doc.as_bytes()).expect(&doc);
            assert_eq!(m.uid.as_deref(), Some("P"), "{doc}");
            assert_eq!(owners(&m), vec!["J".to_string()]);
            assert!(m.deletion_timestamp.is_some());
            assert_eq!(m.finalizers, Some(vec![Some("f".to_string())]));
        }
        let none = read_meta(br#"{"kind":"Pod"}"#).expect("an object without metadata");
        assert!(none.uid.is_none() && none.owner_references.is_none());
        assert!(read_meta(b"[1]").is_none());
        assert!(read_meta(br#"{"metadata":"x"}"#).is_none());
        assert!(read_meta(br#"{"kind":"Pod","spec":{"#).is_none());
    }

    #[test]
    fn graph_tracks_owners_across_namespaces() {
        let mut g = Graph::default();
        g.upsert(
            "/jobs.batch/a/pi",
            &serde_json::to_vec(&json!({"metadata": {"uid": "J", "namespace": "a"}}))
                .expect("JSON"),
        );
        g.upsert(
            "/pods/a/p",
            &serde_json::to_vec(&json!({"metadata": {"uid": "P", "namespace": "a", "ownerReferences": [{"uid": "J", "blockOwnerDeletion": true}]}})).expect("JSON"),
        );
        g.upsert(
            "/pods/b/q",
            &serde_json::to_vec(&json!({"metadata": {"uid": "Q", "namespace": "b", "ownerReferences": [{"uid": "J"}]}})).expect("JSON"),
        );
        assert_eq!(g.dependents_of("J").len(), 2);
        assert!(g.owner_live("/pods/a/p", "J"));
        assert!(
            !g.owner_live("/pods/b/q", "J"),
            "owner references do not cross namespaces"
        );
        // A cluster-scoped owner is live for dependents in any namespace.
        g.upsert(
            "/nodes/n1",
            &serde_json::to_vec(&json!({"metadata": {"uid": "N"}})).expect("JSON"),
        );
        assert!(g.owner_live("/pods/b/q", "N"));
        g.remove("/jobs.batch/a/pi");
        assert!(!g.owner_live("/pods/a/p", "J"));
        g.remove("/pods/a/p");
        assert_eq!(g.dependents_of("J"), vec!["/pods/b/q".to_string()]);
        // An update replaces the node's owners; the last dependent gone leaves no entry.
        g.upsert(
            "/pods/b/q",
            &serde_json::to_vec(&json!({"metadata": {"uid": "Q", "namespace": "b", "ownerReferences": [{"uid": "N"}]}})).expect("JSON"),
        );
        assert!(g.dependents_of("J").is_empty());
        assert!(!g.dependents.contains_key("J"));
        assert_eq!(g.dependents_of("N"), vec!["/pods/b/q".to_string()]);
        assert_eq!(g.key_of("Q").as_deref(), Some("/pods/b/q"));
        assert_eq!(namespace_of("/pods/b/q"), "b");
        assert_eq!(namespace_of("/nodes/n1"), "");
        assert_eq!(namespace_of("/namespaces/b"), "");
    }

    #[test]
    fn owner_ref_and_finalizer_edits() {
        let mut v = json!({"metadata": {"finalizers": ["orphan", "x/y"], "ownerReferences": [{"uid": "J"}, {"uid": "K"}]}});
        assert!(remove_owner_ref(&mut v, "J"));
        assert!(!remove_owner_ref(&mut v, "J"));
        assert!(remove_owner_ref(&mut v, "K"));
        assert!(v.pointer("/metadata/ownerReferences").is_none());
        assert!(remove_finalizer(&mut v, "orphan"));
        assert_eq!(crate::object::finalizers(&v), vec!["x/y".to_string()]);
    }
}
