//! The metrics API's reads, answered as metrics-server's `podMetrics` and `nodeMetrics`
//! storages answer them: the objects they are about come from the store (pods only while
//! Running, as metrics-server's pod informer takes them), filtered by `labelSelector` and
//! by `fieldSelector` on the object metadata; an object without usage yet is left out of a
//! list and not found on a get. Lists are sorted by namespace and name.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::{Map, Value};

use super::format;
use super::storage::{TimeInfo, Usage};
use super::{GROUP, MetricsApi, Resource, Target};
use crate::ServerState;
use crate::error::{ApiError, raw_json_response};
use crate::handlers::TableRequest;
use crate::request::Query;
use crate::resources::{self, Kind};
use crate::selector::{FieldSelector, LabelSelector};

const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// A pod's containers' usage or a node's.
enum Measured {
    Containers(Vec<(String, Usage)>),
    Node(Usage),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Meta<'a> {
    pub(super) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    /// When the metric was served.
    creation_timestamp: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a Map<String, Value>>,
}

#[derive(Serialize)]
struct ResourceUsage {
    cpu: String,
    memory: String,
}

impl From<Usage> for ResourceUsage {
    fn from(u: Usage) -> Self {
        ResourceUsage {
            cpu: format::cpu(u.cpu_nanocores),
            memory: format::memory(u.memory_bytes),
        }
    }
}

#[derive(Serialize)]
struct ContainerMetrics {
    name: String,
    usage: ResourceUsage,
}

/// A PodMetrics or NodeMetrics: `kind`/`apiVersion` only on its own, not as a list item.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Metrics<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    pub(super) metadata: Meta<'a>,
    /// Null when no container's usage could be computed (Go's zero time).
    timestamp: Option<String>,
    pub(super) window: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    containers: Option<Vec<ContainerMetrics>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<ResourceUsage>,
    /// The node's usage or the sum of the containers' (a Table's cells).
    #[serde(skip)]
    pub(super) total: Usage,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List<'a> {
    kind: String,
    api_version: &'static str,
    metadata: Map<String, Value>,
    items: Vec<Metrics<'a>>,
}

/// One object the metrics are about: its namespace, name, labels.
struct Subject {
    namespace: Option<String>,
    name: String,
    labels: Option<Map<String, Value>>,
}

fn time_fields(t: Option<TimeInfo>) -> (Option<String>, String) {
    match t {
        Some(t) => (
            Some(crate::object::rfc3339(
                jiff::Timestamp::from_nanosecond(i128::from(t.timestamp))
                    .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            )),
            kbatch_cron::format_go_duration(t.window),
        ),
        None => (None, kbatch_cron::format_go_duration(0)),
    }
}

/// Serves one request to the metrics API.
pub fn serve(
    st: &ServerState,
    api: &MetricsApi,
    method: &Method,
    t: &Target,
    q: &Query,
    tr: Option<TableRequest>,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let now = crate::object::rfc3339(st.now());
    let storage = api
        .storage
        .read()
        .map_err(|_| ApiError::internal("metrics storage unavailable"))?;
    let metrics_of = |s: &Subject| -> Option<(Option<TimeInfo>, Measured)> {
        match t.resource {
            Resource::Pods => {
                let u = storage.pod(s.namespace.as_deref().unwrap_or(""), &s.name)?;
                Some((u.time, Measured::Containers(u.containers)))
            }
            Resource::Nodes => {
                let (ti, u) = storage.node(&s.name)?;
                Some((Some(ti), Measured::Node(u)))
            }
        }
    };
    let body = match &t.name {
        Some(name) => {
            let s = subject(st, t, name)?;
            let Some(m) = metrics_of(&s) else {
                // Named as metrics-server names it: `podmetrics` and `nodemetrics`, a pod
                // as namespace/name.
                return Err(match t.resource {
                    Resource::Pods => {
                        let ns = t.namespace.as_deref().unwrap_or("");
                        ApiError::not_found("podmetrics", GROUP, &format!("{ns}/{name}"))
                    }
                    Resource::Nodes => ApiError::not_found("nodemetrics", GROUP, name),
                });
            };
            let m = item(t.resource, &s, &now, m, true);
            match &tr {
                Some(tr) => serde_json::to_vec(&super::table::table(tr, std::slice::from_ref(&m))),
                None => serde_json::to_vec(&m),
            }
        }
        None => {
            if q.bool("watch")? {
                let mut e = ApiError::method_not_allowed(format!(
                    "watch is not supported on resources of kind \"{}.{GROUP}\"",
                    t.resource.plural()
                ));
                e.details = Some(serde_json::json!({"group": GROUP, "kind": t.resource.plural()}));
                return Err(e);
            }
            let subjects = subjects(st, t, q)?;
            let items: Vec<Metrics> = subjects
                .iter()
                .filter_map(|s| metrics_of(s).map(|m| item(t.resource, s, &now, m, false)))
                .collect();
            match &tr {
                Some(tr) => serde_json::to_vec(&super::table::table(tr, &items)),
                None => serde_json::to_vec(&List {
                    kind: format!("{}List", t.resource.kind()),
                    api_version: API_VERSION,
                    metadata: Map::new(),
                    items,
                }),
            }
        }
    }
    .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(raw_json_response(StatusCode::OK, body))
}

/// One PodMetrics or NodeMetrics (`own`: a response of its own, not a list's item).
fn item<'a>(
    resource: Resource,
    s: &'a Subject,
    now: &'a str,
    (time, measured): (Option<TimeInfo>, Measured),
    own: bool,
) -> Metrics<'a> {
    let (timestamp, window) = time_fields(time);
    let (containers, usage, total) = match measured {
        Measured::Containers(c) => {
            // Summed as Quantity.Add sums them (saturating where Go would lose precision).
            let total = c.iter().fold(
                Usage {
                    cpu_nanocores: 0,
                    memory_bytes: 0,
                },
                |t, (_, u)| Usage {
                    cpu_nanocores: t.cpu_nanocores.saturating_add(u.cpu_nanocores),
                    memory_bytes: t.memory_bytes.saturating_add(u.memory_bytes),
                },
            );
            let c = c
                .into_iter()
                .map(|(name, usage)| ContainerMetrics {
                    name,
                    usage: usage.into(),
                })
                .collect();
            (Some(c), None, total)
        }
        Measured::Node(u) => (None, Some(u.into()), u),
    };
    Metrics {
        kind: own.then_some(resource.kind()),
        api_version: own.then_some(API_VERSION),
        metadata: Meta {
            name: &s.name,
            namespace: s.namespace.as_deref(),
            creation_timestamp: now,
            labels: s.labels.as_ref().filter(|l| !l.is_empty()),
        },
        timestamp,
        window,
        containers,
        usage,
        total,
    }
}

/// The named pod or node, with the listers' NotFound when it is not there (a pod that is not
/// Running is not in metrics-server's pod informer).
fn subject(st: &ServerState, t: &Target, name: &str) -> Result<Subject, ApiError> {
    let (res, ns) = stored(t);
    let not_found = || match t.resource {
        Resource::Pods => ApiError::not_found("pods", "", name),
        // The node lister's resource is singular.
        Resource::Nodes => ApiError::not_found("node", "", name),
    };
    let obj = st
        .store
        .get(&res.key(ns.unwrap_or(""), name))
        .ok_or_else(not_found)?;
    let v = crate::handlers::parse_stored(&obj)?;
    if t.resource == Resource::Pods && !running(&v) {
        return Err(not_found());
    }
    Ok(to_subject(v))
}

/// The pods or nodes a list is about, sorted as the API sorts them.
fn subjects(st: &ServerState, t: &Target, q: &Query) -> Result<Vec<Subject>, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))?;
    let fields = FieldSelector::parse_object_meta(q.get("fieldSelector").unwrap_or(""))?;
    let (res, ns) = stored(t);
    let listed = st.store.list(&res.prefix(ns), None, None);
    let mut out = Vec::new();
    for o in &listed.items {
        let v = crate::handlers::parse_stored(o)?;
        if t.resource == Resource::Pods && !running(&v) {
            continue;
        }
        if !labels.matches(crate::object::labels(&v)) || !fields.matches(res.kind, &v) {
            continue;
        }
        out.push(to_subject(v));
    }
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(out)
}

fn stored(t: &Target) -> (&'static resources::Resource, Option<&str>) {
    match t.resource {
        Resource::Pods => (resources::by_kind(Kind::Pod), t.namespace.as_deref()),
        Resource::Nodes => (resources::by_kind(Kind::Node), None),
    }
}

fn running(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

fn to_subject(mut v: Value) -> Subject {
    let meta = crate::object::meta_mut(&mut v);
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    let (namespace, name) = (text("namespace"), text("name").unwrap_or_default());
    let labels = match meta.remove("labels") {
        Some(Value::Object(m)) => Some(m),
        _ => None,
    };
    Subject {
        namespace,
        name,
        labels,
    }
}
