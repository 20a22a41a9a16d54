//! kube-apiserver's storage metrics. Stored-object counts: `apiserver_storage_objects` (by
//! `resource`, the group-qualified name, e.g. `jobs.batch`) and its successor
//! `apiserver_resource_objects` (by `group` and `resource`); upstream refreshes them from
//! storage stats, here they are counted from the store's index whenever `/metrics` is read, so
//! they are never stale. Storage requests: `etcd_requests_total`,
//! `etcd_request_duration_seconds` and `etcd_request_errors_total` by `operation`, `group` and
//! `resource`, for the writes (`create`, `update`, `delete`), each timed to its commit. Reads
//! are served from the store's in-memory index, as upstream serves them from its watch cache,
//! and are not storage requests.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use kbatch_metrics::{CounterVec, GaugeVec, HistogramVec};
use kbatch_store::{Object, Store, StoreError};
use serde_json::Value;

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

const REQUEST_LABELS: &[&str] = &["operation", "group", "resource"];

pub const ETCD_REQUEST_DURATION: HistogramVec = HistogramVec {
    name: "etcd_request_duration_seconds",
    help: "Etcd request latency in seconds for each operation and object type.",
    labels: REQUEST_LABELS,
    buckets: crate::request_metrics::latency_buckets,
};

pub const ETCD_REQUESTS_TOTAL: CounterVec = CounterVec {
    name: "etcd_requests_total",
    help: "Etcd request counts for each operation and object type.",
    labels: REQUEST_LABELS,
};

pub const ETCD_REQUEST_ERRORS_TOTAL: CounterVec = CounterVec {
    name: "etcd_request_errors_total",
    help: "Etcd failed request counts for each operation and object type.",
    labels: REQUEST_LABELS,
};

/// `Store::create`, recorded as a storage request.
pub async fn create(store: &Store, key: String, value: Value) -> Result<Arc<Object>, StoreError> {
    let storage = storage_of(&key);
    recorded("create", storage, store.create(key, value)).await
}

/// `Store::update`, recorded as a storage request.
pub async fn update(
    store: &Store,
    key: String,
    value: Value,
    expected_rv: Option<u64>,
) -> Result<Arc<Object>, StoreError> {
    let storage = storage_of(&key);
    recorded("update", storage, store.update(key, value, expected_rv)).await
}

/// `Store::delete`, recorded as a storage request.
pub async fn delete(
    store: &Store,
    key: String,
    expected_rv: Option<u64>,
) -> Result<Arc<Object>, StoreError> {
    let storage = storage_of(&key);
    recorded("delete", storage, store.delete(key, expected_rv)).await
}

/// The storage name a key is under (`/jobs.batch/ns/j` is under `jobs.batch`), empty for a
/// key of no served resource.
fn storage_of(key: &str) -> &'static str {
    crate::resources::by_key(key).map_or("", |r| r.storage)
}

/// Runs `write` and records it as the storage request `operation` on `storage`. As upstream
/// counts a transaction whose comparison failed as a success (the caller then reports a
/// conflict or an existing name), only the store's own failures are errors.
async fn recorded(
    operation: &'static str,
    storage: &'static str,
    write: impl Future<Output = Result<Arc<Object>, StoreError>>,
) -> Result<Arc<Object>, StoreError> {
    let started = Instant::now();
    let result = write.await;
    let (group, resource) = group_resource(storage);
    let labels = [operation, group, resource];
    ETCD_REQUEST_DURATION.observe(&labels, started.elapsed().as_secs_f64());
    ETCD_REQUESTS_TOTAL.inc(&labels);
    if matches!(result, Err(StoreError::Backend(_) | StoreError::Closed)) {
        ETCD_REQUEST_ERRORS_TOTAL.inc(&labels);
    }
    result
}

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
    fn keys_are_under_their_resources_storage() {
        assert_eq!(storage_of("/pods/default/p"), "pods");
        assert_eq!(storage_of("/jobs.batch/default/j"), "jobs.batch");
        assert_eq!(storage_of("/namespaces/default"), "namespaces");
        assert_eq!(storage_of("/jobsets/default/j"), "");
        assert_eq!(storage_of("no-slash"), "");
    }

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
