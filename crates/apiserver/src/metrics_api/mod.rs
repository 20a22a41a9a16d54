//! The resource metrics API, `metrics.k8s.io/v1beta1`, served as metrics-server serves it
//! (what `kubectl top` reads): `pods` (PodMetrics, namespaced) and `nodes` (NodeMetrics),
//! get and list, from the points a scraper takes from each node's kubelet every
//! resolution (`--metric-resolution`). Served only when the scraper runs (`kbatch up`);
//! otherwise the group is not discovered, as on a cluster without metrics-server.
//!
//! `decode`: kubelet's text into points; `storage`: the last two points and the usage;
//! `scrape`: the loop; `serve`: the HTTP reads; `table`: their Tables for `kubectl get`;
//! `format` (kbatch-api's `quantity_text`): Go's quantity text.

pub mod decode;
pub use kbatch_api::quantity_text as format;
pub mod scrape;
pub mod serve;
pub mod storage;
mod table;

use std::sync::RwLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::ApiError;

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";

/// metrics-server's default `--metric-resolution`.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(15);

/// The only verbs metrics-server's storages implement.
const VERBS: &[&str] = &["get", "list"];

/// The scraper's results and its period.
pub struct MetricsApi {
    pub resolution: Duration,
    pub storage: RwLock<storage::Storage>,
}

impl MetricsApi {
    pub fn new(resolution: Duration) -> MetricsApi {
        MetricsApi {
            resolution,
            storage: RwLock::new(storage::Storage::new(resolution)),
        }
    }
}

/// The two resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Pods,
    Nodes,
}

impl Resource {
    pub fn plural(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Nodes => "nodes",
        }
    }

    /// As metrics-server's storages name themselves (`GetSingularName`: none for pods).
    fn singular(self) -> &'static str {
        match self {
            Resource::Pods => "",
            Resource::Nodes => "node",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Resource::Pods => "PodMetrics",
            Resource::Nodes => "NodeMetrics",
        }
    }

    fn namespaced(self) -> bool {
        self == Resource::Pods
    }
}

/// In discovery order (the generic API server sorts the paths).
const RESOURCES: [Resource; 2] = [Resource::Nodes, Resource::Pods];

/// A metrics request's target.
#[derive(Debug, Clone)]
pub struct Target {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// Routes the path segments after `/apis/metrics.k8s.io/v1beta1/`.
pub fn route(rest: &[String]) -> Result<Target, ApiError> {
    let target = |resource, namespace: Option<&String>, name: Option<&String>| Target {
        resource,
        namespace: namespace.cloned(),
        name: name.cloned(),
    };
    let strs: Vec<&str> = rest.iter().map(String::as_str).collect();
    match strs.as_slice() {
        ["nodes"] | ["nodes", _] => Ok(target(Resource::Nodes, None, rest.get(1))),
        ["pods"] => Ok(target(Resource::Pods, None, None)),
        ["namespaces", _, "pods"] | ["namespaces", _, "pods", _] => {
            Ok(target(Resource::Pods, rest.get(1), rest.get(3)))
        }
        _ => Err(ApiError::no_route()),
    }
}

/// The group version's `APIResource`s.
pub fn resource_entries() -> Vec<Value> {
    RESOURCES
        .iter()
        .map(|r| {
            json!({"name": r.plural(), "singularName": r.singular(), "namespaced": r.namespaced(),
                "kind": r.kind(), "verbs": VERBS})
        })
        .collect()
}

/// The group version's aggregated discovery resources.
pub fn aggregated_entries() -> Vec<Value> {
    RESOURCES
        .iter()
        .map(|r| {
            json!({
                "resource": r.plural(),
                "responseKind": {"group": GROUP, "version": VERSION, "kind": r.kind()},
                "scope": if r.namespaced() { "Namespaced" } else { "Cluster" },
                "singularResource": r.singular(),
                "verbs": VERBS,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(path: &str) -> Vec<String> {
        path.split('/').map(str::to_string).collect()
    }

    #[test]
    fn routes_the_metrics_paths() {
        let t = route(&seg("namespaces/ns/pods/p")).unwrap();
        assert_eq!(
            (t.resource, t.namespace.as_deref(), t.name.as_deref()),
            (Resource::Pods, Some("ns"), Some("p"))
        );
        let t = route(&seg("pods")).unwrap();
        assert!(t.namespace.is_none() && t.name.is_none());
        let t = route(&seg("nodes/n1")).unwrap();
        assert_eq!(
            (t.resource, t.name.as_deref()),
            (Resource::Nodes, Some("n1"))
        );
        for bad in ["pods/p", "nodes/n/status", "namespaces/ns/nodes", "widgets"] {
            assert!(route(&seg(bad)).is_err(), "{bad}");
        }
    }
}
