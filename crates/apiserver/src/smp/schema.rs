//! Patch strategies and merge keys of the served types.
//!
//! Upstream's strategic merge patch reads the `patchStrategy`/`patchMergeKey` struct tags of
//! the Go types (not the `+listType` markers, which drive server-side apply and sometimes
//! disagree: Job conditions are `listType=atomic` yet merge by `type` here). The tags are in
//! `openapi::markers`, the table the OpenAPI documents publish them from, so that a client
//! computing a patch from `/openapi/v2` and this server applying it agree; each kind's tree
//! is derived from it along the references of the kind's schema. Only fields on the way to a
//! `merge` list are kept: anything else behaves as the schema-less default (maps merge, lists
//! are replaced), which is also what upstream does for every untagged field.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use crate::openapi::markers::{self, Shape};

/// How a list field is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Strategy {
    /// No patch strategy: a patch list replaces the list.
    #[default]
    Atomic,
    /// `patchStrategy:"merge"`: maps merged by the key, scalars merged as a set (no key).
    Merge(Option<&'static str>),
    /// `patchStrategy:"replace"`: the patch value replaces the field, maps included. None of
    /// the served types uses it; upstream's test type does.
    Replace,
}

/// One field's patch metadata and the schema of its value (of its elements, for lists).
#[derive(Debug, Clone, Default)]
pub(crate) struct Field {
    pub(crate) strategy: Strategy,
    pub(crate) child: Schema,
}

/// Patch metadata of an object: field name to strategy, merge key and nested schema. The
/// default value is the schema-less one, used for unknown kinds and unknown fields.
#[derive(Debug, Clone, Default)]
pub struct Schema(Option<Arc<BTreeMap<&'static str, Field>>>);

impl Schema {
    /// The schema for one of the served kinds (`Job`, `CronJob`, `Pod`, `Namespace`, `Node`,
    /// `Event`, `Lease`, `ConfigMap`, `Secret`); any other kind gets the schema-less fallback.
    pub fn for_kind(kind: &str) -> Schema {
        static KINDS: LazyLock<HashMap<&'static str, Schema>> =
            LazyLock::new(|| markers::per_kind(derive, union));
        KINDS.get(kind).cloned().unwrap_or_default()
    }

    fn is_schemaless(&self) -> bool {
        self.0.is_none()
    }

    /// No metadata at all: maps merge, lists are replaced.
    pub fn schemaless() -> Schema {
        Schema::default()
    }

    /// The metadata of field `name`; fields the table does not know are schema-less.
    pub(crate) fn field(&self, name: &str) -> Field {
        self.0
            .as_ref()
            .and_then(|m| m.get(name).cloned())
            .unwrap_or_default()
    }

    pub(crate) fn object(fields: Vec<(&'static str, Field)>) -> Schema {
        Schema(Some(Arc::new(fields.into_iter().collect())))
    }
}

/// A nested object (or map) field.
#[cfg(test)]
pub(crate) fn nested(child: Schema) -> Field {
    Field {
        strategy: Strategy::Atomic,
        child,
    }
}

/// A list of objects merged by `key`.
#[cfg(test)]
pub(crate) fn merge_by(key: &'static str, child: Schema) -> Field {
    Field {
        strategy: Strategy::Merge(Some(key)),
        child,
    }
}

/// A list of scalars merged as a set.
#[cfg(test)]
pub(crate) fn merge_set() -> Field {
    Field {
        strategy: Strategy::Merge(None),
        child: Schema::default(),
    }
}

/// A field whose patch value replaces it whole.
#[cfg(test)]
pub(crate) fn replace() -> Field {
    Field {
        strategy: Strategy::Replace,
        child: Schema::default(),
    }
}

/// A list without a patch strategy.
#[cfg(test)]
pub(crate) fn atomic() -> Field {
    Field::default()
}

/// The tree of definition `name`: its fields with a patch strategy or with one below them.
/// Memoized per definition; a definition met again while it is being derived (no served type
/// is recursive) is schema-less.
fn derive(name: &str, memo: &mut HashMap<String, Schema>) -> Schema {
    if let Some(s) = memo.get(name) {
        return s.clone();
    }
    memo.insert(name.to_string(), Schema::default());
    let mut fields = Vec::new();
    for (field, prop) in markers::properties(name) {
        let marker = markers::lookup(name, field);
        let strategy = match marker.and_then(|m| m.patch_strategy) {
            Some("replace") => Strategy::Replace,
            // `merge,retainKeys`: retainKeys only shapes patch creation; the server honours a
            // `$retainKeys` directive wherever it finds one.
            Some(s) if s.split(',').any(|p| p == "merge") => {
                Strategy::Merge(marker.and_then(|m| m.patch_merge_key))
            }
            _ => Strategy::Atomic,
        };
        let child = match markers::shape(prop) {
            Shape::Struct(d) | Shape::List(Some(d)) => derive(d, memo),
            Shape::List(None) | Shape::Other => Schema::default(),
        };
        if strategy != Strategy::Atomic || !child.is_schemaless() {
            fields.push((field, Field { strategy, child }));
        }
    }
    let schema = if fields.is_empty() {
        Schema::default()
    } else {
        Schema::object(fields)
    };
    memo.insert(name.to_string(), schema.clone());
    schema
}

/// One tree for a kind served from several definitions (the core/v1 Event and its
/// events.k8s.io view): the fields of each, the first one's where both have a field.
fn union(schemas: Vec<Schema>) -> Schema {
    let mut fields: BTreeMap<&'static str, Field> = BTreeMap::new();
    for s in schemas.iter().rev() {
        if let Some(m) = &s.0 {
            fields.extend(m.iter().map(|(k, v)| (*k, v.clone())));
        }
    }
    if fields.is_empty() {
        Schema::default()
    } else {
        Schema(Some(Arc::new(fields)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Tags upstream has that the hand-kept table this replaced lacked: the server must merge
    /// these lists as a client computing its patch from `/openapi/v2` expects.
    #[test]
    fn lists_tagged_since_v1_33_merge_by_their_keys() {
        let pod = json!({
            "spec": {"evictionResponders": [{"name": "a", "priority": 1}]},
            "status": {"nodeAllocatableResourceClaimStatuses": [
                {"resourceClaimName": "c1", "containers": ["x"]}
            ]},
        });
        let patch = json!({
            "spec": {"evictionResponders": [{"name": "b", "priority": 2}]},
            "status": {"nodeAllocatableResourceClaimStatuses": [
                {"resourceClaimName": "c2", "containers": ["y"]}
            ]},
        });
        let got = crate::smp::apply(&pod, &patch, &Schema::for_kind("Pod")).unwrap();
        assert_eq!(
            got["spec"]["evictionResponders"].as_array().unwrap().len(),
            2
        );
        assert_eq!(
            got["status"]["nodeAllocatableResourceClaimStatuses"]
                .as_array()
                .unwrap()
                .len(),
            2
        );

        let job = json!({"spec": {"scheduling": {"resourceClaims": [{"name": "a"}]}}});
        let patch = json!({"spec": {"scheduling": {"resourceClaims": [{"name": "b"}]}}});
        let got = crate::smp::apply(&job, &patch, &Schema::for_kind("Job")).unwrap();
        // Merged, in upstream's order (the patch's items first without `$setElementOrder`).
        assert_eq!(
            got["spec"]["scheduling"]["resourceClaims"],
            json!([{"name": "b"}, {"name": "a"}])
        );
    }

    /// What the hand-kept table had, now derived from the markers along the schemas.
    #[test]
    fn the_derived_trees_keep_the_served_kinds_tags() {
        let pod = Schema::for_kind("Pod");
        let spec = pod.field("spec").child;
        assert_eq!(
            spec.field("containers").strategy,
            Strategy::Merge(Some("name"))
        );
        assert_eq!(
            spec.field("volumes").strategy,
            Strategy::Merge(Some("name"))
        );
        let container = spec.field("initContainers").child;
        assert_eq!(
            container.field("ports").strategy,
            Strategy::Merge(Some("containerPort"))
        );
        assert_eq!(container.field("command").strategy, Strategy::Atomic);
        let meta = pod.field("metadata").child;
        assert_eq!(meta.field("finalizers").strategy, Strategy::Merge(None));
        assert_eq!(
            meta.field("ownerReferences").strategy,
            Strategy::Merge(Some("uid"))
        );
        assert_eq!(
            pod.field("status").child.field("hostIPs").strategy,
            Strategy::Merge(Some("ip"))
        );

        let cronjob = Schema::for_kind("CronJob");
        let template = cronjob.field("spec").child.field("jobTemplate").child;
        let pod_spec = template
            .field("spec")
            .child
            .field("template")
            .child
            .field("spec");
        assert_eq!(
            pod_spec
                .child
                .field("containers")
                .child
                .field("env")
                .strategy,
            Strategy::Merge(Some("name"))
        );
        assert_eq!(
            Schema::for_kind("Job")
                .field("status")
                .child
                .field("conditions")
                .strategy,
            Strategy::Merge(Some("type"))
        );
        let node = Schema::for_kind("Node");
        assert_eq!(
            node.field("spec").child.field("podCIDRs").strategy,
            Strategy::Merge(None)
        );
        assert_eq!(
            node.field("spec").child.field("taints").strategy,
            Strategy::Atomic
        );
        let ns = Schema::for_kind("Namespace");
        assert_eq!(
            ns.field("spec").child.field("finalizers").strategy,
            Strategy::Atomic
        );
        assert_eq!(
            ns.field("status").child.field("conditions").strategy,
            Strategy::Merge(Some("type"))
        );
        for kind in ["Event", "Lease", "ConfigMap", "Secret"] {
            let meta = Schema::for_kind(kind).field("metadata").child;
            assert_eq!(
                meta.field("finalizers").strategy,
                Strategy::Merge(None),
                "{kind}"
            );
        }
        assert!(Schema::for_kind("Widget").is_schemaless());
    }
}
