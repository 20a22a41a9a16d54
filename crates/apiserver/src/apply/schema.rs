//! The structure server-side apply sees in the served types: the `+listType`,
//! `+listMapKey`, `+structType` and `+mapType` markers of k8s.io/api and apimachinery.
//!
//! These differ from the strategic-merge-patch tags in places (Job conditions are
//! `listType=atomic`; container ports are keyed by port *and* protocol). Both come from
//! `openapi::markers`, the table the OpenAPI documents publish as `x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys` and `x-kubernetes-map-type`; each kind's tree is derived from
//! it along the references of the kind's schema. Anything unmarked is treated as SSA treats an
//! unmarked field: objects are granular (each field owned separately) and lists are atomic.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use serde_json::Value;

use crate::openapi::markers::{self, List, Shape};

/// How a list is merged and owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListType {
    /// Replaced and owned as a whole (the default for unmarked lists).
    #[default]
    Atomic,
    /// `listType=set`: scalars, each owned separately (`v:<value>`).
    Set,
    /// `listType=map`: objects keyed by these fields (`k:{...}`), each with the default a
    /// missing key field takes.
    Map(&'static [(&'static str, Option<&'static str>)]),
}

#[derive(Debug, Default)]
struct Node {
    /// `structType=atomic` / `mapType=atomic`: owned as a whole.
    atomic: bool,
    /// When the value is a list.
    list: ListType,
    /// Fields of an object, or the element of a list.
    fields: BTreeMap<&'static str, Schema>,
    elem: Option<Schema>,
}

/// The SSA structure of a value. The default is an unmarked value.
#[derive(Debug, Clone, Default)]
pub struct Schema(Option<Arc<Node>>);

impl Schema {
    pub fn for_kind(kind: &str) -> Schema {
        static KINDS: LazyLock<HashMap<&'static str, Schema>> =
            LazyLock::new(|| markers::per_kind(derive, union));
        KINDS.get(kind).cloned().unwrap_or_default()
    }

    pub fn is_atomic(&self) -> bool {
        self.0.as_ref().is_some_and(|n| n.atomic)
    }

    pub fn list_type(&self) -> ListType {
        self.0.as_ref().map(|n| n.list).unwrap_or_default()
    }

    pub fn field(&self, name: &str) -> Schema {
        self.0
            .as_ref()
            .and_then(|n| n.fields.get(name).cloned())
            .unwrap_or_default()
    }

    pub fn elem(&self) -> Schema {
        self.0
            .as_ref()
            .and_then(|n| n.elem.clone())
            .unwrap_or_default()
    }
}

fn node(n: Node) -> Schema {
    let unmarked =
        !n.atomic && n.list == ListType::Atomic && n.fields.is_empty() && n.elem.is_none();
    if unmarked {
        Schema::default()
    } else {
        Schema(Some(Arc::new(n)))
    }
}

/// The tree of definition `name`, memoized; a definition met again while it is being derived
/// (no served type is recursive) is unmarked.
fn derive(name: &str, memo: &mut HashMap<String, Schema>) -> Schema {
    if let Some(s) = memo.get(name) {
        return s.clone();
    }
    memo.insert(name.to_string(), Schema::default());
    let mut fields = BTreeMap::new();
    for (field, prop) in markers::properties(name) {
        let marker = markers::lookup(name, field);
        let schema = match markers::shape(prop) {
            Shape::List(elem) => {
                let list = match marker.and_then(|m| m.list) {
                    Some(List::Set) => ListType::Set,
                    Some(List::Map(keys)) => ListType::Map(keys),
                    Some(List::Atomic) | None => ListType::Atomic,
                };
                // An atomic list's elements are never looked into.
                let elem = match (list, elem) {
                    (ListType::Atomic, _) | (_, None) => None,
                    (_, Some(d)) => Some(derive(d, memo)),
                };
                node(Node {
                    list,
                    elem,
                    ..Node::default()
                })
            }
            Shape::Struct(d) => derive(d, memo),
            Shape::Other => node(Node {
                atomic: marker.is_some_and(|m| m.atomic_map),
                ..Node::default()
            }),
        };
        if schema.0.is_some() {
            fields.insert(field, schema);
        }
    }
    let schema = node(Node {
        atomic: markers::is_atomic_struct(name),
        fields,
        ..Node::default()
    });
    memo.insert(name.to_string(), schema.clone());
    schema
}

/// One tree for a kind served from several definitions (the core/v1 Event and its
/// events.k8s.io view): the fields of each, the first one's where both have a field.
fn union(schemas: Vec<Schema>) -> Schema {
    let mut fields = BTreeMap::new();
    for s in schemas.iter().rev() {
        if let Some(n) = &s.0 {
            fields.extend(n.fields.iter().map(|(k, v)| (*k, v.clone())));
        }
    }
    node(Node {
        fields,
        ..Node::default()
    })
}

/// The value a key field takes when a map-list item omits it.
pub fn key_default(default: Option<&'static str>) -> Option<Value> {
    default.map(|d| Value::String(d.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(s: &Schema) -> Vec<&'static str> {
        match s.list_type() {
            ListType::Map(k) => k.iter().map(|(k, _)| *k).collect(),
            _ => Vec::new(),
        }
    }

    /// What the hand-kept table had, now derived from the markers along the schemas.
    #[test]
    fn the_derived_trees_keep_the_served_kinds_markers() {
        let pod = Schema::for_kind("Pod");
        let spec = pod.field("spec");
        assert_eq!(keys(&spec.field("containers")), ["name"]);
        let ports = spec.field("containers").elem().field("ports");
        assert_eq!(
            ports.list_type(),
            ListType::Map(&[("containerPort", None), ("protocol", Some("TCP"))])
        );
        assert!(spec.field("nodeSelector").is_atomic());
        assert!(spec.field("imagePullSecrets").elem().is_atomic());
        let affinity = spec.field("affinity").field("nodeAffinity");
        assert!(
            affinity
                .field("requiredDuringSchedulingIgnoredDuringExecution")
                .is_atomic()
        );
        assert_eq!(
            keys(&spec.field("topologySpreadConstraints")),
            ["topologyKey", "whenUnsatisfiable"]
        );
        assert!(
            spec.field("topologySpreadConstraints")
                .elem()
                .field("labelSelector")
                .is_atomic()
        );
        assert_eq!(spec.field("tolerations").list_type(), ListType::Atomic);
        assert_eq!(keys(&pod.field("status").field("conditions")), ["type"]);
        let meta = pod.field("metadata");
        assert_eq!(meta.field("finalizers").list_type(), ListType::Set);
        assert!(meta.field("ownerReferences").elem().is_atomic());

        let job = Schema::for_kind("Job");
        assert!(job.field("spec").field("selector").is_atomic());
        assert_eq!(
            job.field("status").field("conditions").list_type(),
            ListType::Atomic
        );
        let uncounted = job.field("status").field("uncountedTerminatedPods");
        assert_eq!(uncounted.field("failed").list_type(), ListType::Set);
        let template = Schema::for_kind("CronJob")
            .field("spec")
            .field("jobTemplate")
            .field("spec")
            .field("template");
        assert_eq!(keys(&template.field("spec").field("volumes")), ["name"]);

        let event = Schema::for_kind("Event");
        for f in ["involvedObject", "regarding", "related"] {
            assert!(event.field(f).is_atomic(), "{f}");
        }
        let node = Schema::for_kind("Node");
        assert_eq!(
            node.field("spec").field("podCIDRs").list_type(),
            ListType::Set
        );
        assert_eq!(keys(&node.field("status").field("addresses")), ["type"]);
        assert!(Schema::for_kind("Widget").0.is_none());
    }

    /// Markers upstream has that the hand-kept table this replaced lacked.
    #[test]
    fn markers_the_old_table_lacked() {
        let pod = Schema::for_kind("Pod");
        assert_eq!(keys(&pod.field("status").field("podIPs")), ["ip"]);
        let env = pod.field("spec").field("containers").elem().field("env");
        assert!(
            env.elem()
                .field("valueFrom")
                .field("fileKeyRef")
                .is_atomic()
        );
        let volumes = pod.field("spec").field("volumes").elem();
        assert!(volumes.field("cephfs").field("secretRef").is_atomic());
        let rule = Schema::for_kind("Job")
            .field("spec")
            .field("podFailurePolicy")
            .field("rules");
        // An atomic list: its elements' markers do not apply.
        assert_eq!(rule.list_type(), ListType::Atomic);
        let mounts = pod
            .field("spec")
            .field("containers")
            .elem()
            .field("volumeMounts");
        assert_eq!(
            mounts.elem().field("bindMountOptions").list_type(),
            ListType::Set
        );
    }
}
