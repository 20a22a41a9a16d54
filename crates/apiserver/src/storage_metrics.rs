//! kube-apiserver's stored-object counts: `apiserver_storage_objects` (by `resource`, the
//! group-qualified name, e.g. `jobs.batch`) and its successor `apiserver_resource_objects` (by
//! `group` and `resource`). Upstream refreshes them from storage stats; here they are counted
//! from the store's index whenever `/metrics` is read, so they are never stale.

use kbatch_metrics::GaugeVec;
use kbatch_store::Store;

use crate::resources::RESOURCES;

pub const STORAGE_OBJECTS: GaugeVec = GaugeVec {
    name: "apiserver_storage_objects",
    help: "[DEPRECATED, consider using apiserver_resource_objects instead] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
    labels: &["resource"],
};

pub const RESOURCE_OBJECTS: GaugeVec = GaugeVec {
    name: "apiserver_resource_objects",
    help: "Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
    labels: &["group", "resource"],
};

/// `(group, resource)` of a storage name, which is the GroupResource's string form
/// (`jobs.batch`, `leases.coordination.k8s.io`, `pods`).
pub fn group_resource(storage: &str) -> (&str, &str) {
    match storage.split_once('.') {
        Some((resource, group)) => (group, resource),
        None => ("", storage),
    }
}

/// Sets both gauges for every stored resource (the two Event APIs share one storage, as
/// upstream's, and are counted once).
pub fn record(store: &Store) {
    let mut done: Vec<&str> = Vec::new();
    for r in RESOURCES {
        if done.contains(&r.storage) {
            continue;
        }
        done.push(r.storage);
        let count = store.count(&format!("/{}/", r.storage)) as f64;
        let (group, resource) = group_resource(r.storage);
        STORAGE_OBJECTS.set(&[r.storage], count);
        RESOURCE_OBJECTS.set(&[group, resource], count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_names_split_into_group_and_resource() {
        assert_eq!(group_resource("pods"), ("", "pods"));
        assert_eq!(group_resource("jobs.batch"), ("batch", "jobs"));
        assert_eq!(
            group_resource("leases.coordination.k8s.io"),
            ("coordination.k8s.io", "leases")
        );
    }
}
