//! Upstream's field markers of the served types, the one table that the strategic merge
//! patch (`smp::schema`), server-side apply (`apply::schema`) and both OpenAPI documents read:
//! the `patchStrategy`/`patchMergeKey` struct tags and the `+listType`, `+listMapKey`,
//! `+mapType` and `+structType` comments of k8s.io/api (core/v1, batch/v1, events/v1,
//! coordination/v1, authorization/v1) and apimachinery meta/v1, as kube-apiserver v1.37
//! publishes them in its OpenAPI extensions (`x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`, `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`), for every definition in `openapi/schemas.json`.
//!
//! Keyed by definition and field rather than by path from a kind, as the tags sit on Go
//! struct fields: a type reached along several paths (Container under `containers`,
//! `initContainers`, a Job's and a CronJob's templates) is marked once. The kind-rooted trees
//! the patch and apply code walk are derived from it over the schemas' references.
//!
//! The tests check every entry against `openapi/schemas.json`; after moving to a newer
//! Kubernetes version there, compare the table with that release's published extensions.

use serde_json::{Map, Value, json};

/// A list's `+listType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum List {
    Atomic,
    Set,
    /// `listType=map`: the `+listMapKey` fields, each with the default server-side apply
    /// gives a missing key (upstream's `+default` of the key field).
    Map(&'static [(&'static str, Option<&'static str>)]),
}

/// The markers of one field of one definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    pub(crate) definition: &'static str,
    pub(crate) field: &'static str,
    /// `patchStrategy` (`merge`, `merge,retainKeys`, `replace`).
    pub(crate) patch_strategy: Option<&'static str>,
    pub(crate) patch_merge_key: Option<&'static str>,
    pub(crate) list: Option<List>,
    /// `+mapType=atomic` on a map field.
    pub(crate) atomic_map: bool,
}

const fn field(definition: &'static str, field: &'static str) -> Marker {
    Marker {
        definition,
        field,
        patch_strategy: None,
        patch_merge_key: None,
        list: None,
        atomic_map: false,
    }
}

impl Marker {
    const fn patch(mut self, strategy: &'static str, key: Option<&'static str>) -> Marker {
        self.patch_strategy = Some(strategy);
        self.patch_merge_key = key;
        self
    }

    const fn atomic_list(mut self) -> Marker {
        self.list = Some(List::Atomic);
        self
    }

    const fn set(mut self) -> Marker {
        self.list = Some(List::Set);
        self
    }

    const fn map(mut self, keys: &'static [(&'static str, Option<&'static str>)]) -> Marker {
        self.list = Some(List::Map(keys));
        self
    }

    const fn atomic_map(mut self) -> Marker {
        self.atomic_map = true;
        self
    }

    /// The OpenAPI extensions upstream's schemas carry for this field.
    pub(crate) fn extensions(&self) -> Map<String, Value> {
        let mut ext = Map::new();
        if let Some(s) = self.patch_strategy {
            ext.insert("x-kubernetes-patch-strategy".into(), json!(s));
        }
        if let Some(k) = self.patch_merge_key {
            ext.insert("x-kubernetes-patch-merge-key".into(), json!(k));
        }
        match self.list {
            Some(List::Atomic) => {
                ext.insert("x-kubernetes-list-type".into(), json!("atomic"));
            }
            Some(List::Set) => {
                ext.insert("x-kubernetes-list-type".into(), json!("set"));
            }
            Some(List::Map(keys)) => {
                ext.insert("x-kubernetes-list-type".into(), json!("map"));
                let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
                ext.insert("x-kubernetes-list-map-keys".into(), json!(names));
            }
            None => {}
        }
        if self.atomic_map {
            ext.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
        ext
    }
}

/// Every marked field, sorted by definition then field (looked up by binary search).
#[rustfmt::skip]
pub(crate) static FIELDS: &[Marker] = &[
    field("io.k8s.api.batch.v1.CronJobStatus", "active").atomic_list(),
    field("io.k8s.api.batch.v1.JobSchedulingConfiguration", "resourceClaims").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.batch.v1.JobStatus", "conditions").patch("merge", Some("type")).atomic_list(),
    field("io.k8s.api.batch.v1.PodFailurePolicy", "rules").atomic_list(),
    field("io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", "values").set(),
    field("io.k8s.api.batch.v1.PodFailurePolicyRule", "onPodConditions").atomic_list(),
    field("io.k8s.api.batch.v1.SuccessPolicy", "rules").atomic_list(),
    field("io.k8s.api.batch.v1.UncountedTerminatedPods", "failed").set(),
    field("io.k8s.api.batch.v1.UncountedTerminatedPods", "succeeded").set(),
    field("io.k8s.api.core.v1.Capabilities", "add").atomic_list(),
    field("io.k8s.api.core.v1.Capabilities", "drop").atomic_list(),
    field("io.k8s.api.core.v1.CephFSVolumeSource", "monitors").atomic_list(),
    field("io.k8s.api.core.v1.ConfigMapProjection", "items").atomic_list(),
    field("io.k8s.api.core.v1.ConfigMapVolumeSource", "items").atomic_list(),
    field("io.k8s.api.core.v1.Container", "args").atomic_list(),
    field("io.k8s.api.core.v1.Container", "command").atomic_list(),
    field("io.k8s.api.core.v1.Container", "env").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.Container", "envFrom").atomic_list(),
    field("io.k8s.api.core.v1.Container", "ports").patch("merge", Some("containerPort")).map(&[("containerPort", None), ("protocol", Some("TCP"))]),
    field("io.k8s.api.core.v1.Container", "resizePolicy").atomic_list(),
    field("io.k8s.api.core.v1.Container", "restartPolicyRules").atomic_list(),
    field("io.k8s.api.core.v1.Container", "volumeDevices").patch("merge", Some("devicePath")).map(&[("devicePath", None)]),
    field("io.k8s.api.core.v1.Container", "volumeMounts").patch("merge", Some("mountPath")).map(&[("mountPath", None)]),
    field("io.k8s.api.core.v1.ContainerImage", "names").atomic_list(),
    field("io.k8s.api.core.v1.ContainerRestartRuleOnExitCodes", "values").set(),
    field("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.ContainerStatus", "volumeMounts").patch("merge", Some("mountPath")).map(&[("mountPath", None)]),
    field("io.k8s.api.core.v1.DownwardAPIProjection", "items").atomic_list(),
    field("io.k8s.api.core.v1.DownwardAPIVolumeSource", "items").atomic_list(),
    field("io.k8s.api.core.v1.EphemeralContainer", "args").atomic_list(),
    field("io.k8s.api.core.v1.EphemeralContainer", "command").atomic_list(),
    field("io.k8s.api.core.v1.EphemeralContainer", "env").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.EphemeralContainer", "envFrom").atomic_list(),
    field("io.k8s.api.core.v1.EphemeralContainer", "ports").patch("merge", Some("containerPort")).map(&[("containerPort", None), ("protocol", Some("TCP"))]),
    field("io.k8s.api.core.v1.EphemeralContainer", "resizePolicy").atomic_list(),
    field("io.k8s.api.core.v1.EphemeralContainer", "restartPolicyRules").atomic_list(),
    field("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices").patch("merge", Some("devicePath")).map(&[("devicePath", None)]),
    field("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts").patch("merge", Some("mountPath")).map(&[("mountPath", None)]),
    field("io.k8s.api.core.v1.ExecAction", "command").atomic_list(),
    field("io.k8s.api.core.v1.FCVolumeSource", "targetWWNs").atomic_list(),
    field("io.k8s.api.core.v1.FCVolumeSource", "wwids").atomic_list(),
    field("io.k8s.api.core.v1.HTTPGetAction", "httpHeaders").atomic_list(),
    field("io.k8s.api.core.v1.HostAlias", "hostnames").atomic_list(),
    field("io.k8s.api.core.v1.ISCSIVolumeSource", "portals").atomic_list(),
    field("io.k8s.api.core.v1.LinuxContainerUser", "supplementalGroups").atomic_list(),
    field("io.k8s.api.core.v1.NamespaceSpec", "finalizers").atomic_list(),
    field("io.k8s.api.core.v1.NamespaceStatus", "conditions").patch("merge", Some("type")).map(&[("type", None)]),
    field("io.k8s.api.core.v1.NodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution").atomic_list(),
    field("io.k8s.api.core.v1.NodeAllocatableResourceClaimStatus", "containers").set(),
    field("io.k8s.api.core.v1.NodeAllocatableResourceClaimStatus", "mapping").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.NodeAllocatableResourceClaimStatus", "overhead").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.NodePodPreemptionPolicy", "disableResizePreemption").set(),
    field("io.k8s.api.core.v1.NodeSelector", "nodeSelectorTerms").atomic_list(),
    field("io.k8s.api.core.v1.NodeSelectorRequirement", "values").atomic_list(),
    field("io.k8s.api.core.v1.NodeSelectorTerm", "matchExpressions").atomic_list(),
    field("io.k8s.api.core.v1.NodeSelectorTerm", "matchFields").atomic_list(),
    field("io.k8s.api.core.v1.NodeSpec", "podCIDRs").patch("merge", None).set(),
    field("io.k8s.api.core.v1.NodeSpec", "taints").atomic_list(),
    field("io.k8s.api.core.v1.NodeStatus", "addresses").patch("merge", Some("type")).map(&[("type", None)]),
    field("io.k8s.api.core.v1.NodeStatus", "conditions").patch("merge", Some("type")).map(&[("type", None)]),
    field("io.k8s.api.core.v1.NodeStatus", "declaredFeatures").atomic_list(),
    field("io.k8s.api.core.v1.NodeStatus", "images").atomic_list(),
    field("io.k8s.api.core.v1.NodeStatus", "runtimeHandlers").atomic_list(),
    field("io.k8s.api.core.v1.NodeStatus", "volumesAttached").atomic_list(),
    field("io.k8s.api.core.v1.NodeStatus", "volumesInUse").atomic_list(),
    field("io.k8s.api.core.v1.PersistentVolumeClaimSpec", "accessModes").atomic_list(),
    field("io.k8s.api.core.v1.PodAffinity", "preferredDuringSchedulingIgnoredDuringExecution").atomic_list(),
    field("io.k8s.api.core.v1.PodAffinity", "requiredDuringSchedulingIgnoredDuringExecution").atomic_list(),
    field("io.k8s.api.core.v1.PodAffinityTerm", "matchLabelKeys").atomic_list(),
    field("io.k8s.api.core.v1.PodAffinityTerm", "mismatchLabelKeys").atomic_list(),
    field("io.k8s.api.core.v1.PodAffinityTerm", "namespaces").atomic_list(),
    field("io.k8s.api.core.v1.PodAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution").atomic_list(),
    field("io.k8s.api.core.v1.PodAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution").atomic_list(),
    field("io.k8s.api.core.v1.PodDNSConfig", "nameservers").atomic_list(),
    field("io.k8s.api.core.v1.PodDNSConfig", "options").atomic_list(),
    field("io.k8s.api.core.v1.PodDNSConfig", "searches").atomic_list(),
    field("io.k8s.api.core.v1.PodExtendedResourceClaimStatus", "requestMappings").atomic_list(),
    field("io.k8s.api.core.v1.PodSecurityContext", "supplementalGroups").atomic_list(),
    field("io.k8s.api.core.v1.PodSecurityContext", "sysctls").atomic_list(),
    field("io.k8s.api.core.v1.PodSpec", "containers").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "ephemeralContainers").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "evictionResponders").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "hostAliases").patch("merge", Some("ip")).map(&[("ip", None)]),
    field("io.k8s.api.core.v1.PodSpec", "imagePullSecrets").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "initContainers").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "nodeSelector").atomic_map(),
    field("io.k8s.api.core.v1.PodSpec", "readinessGates").atomic_list(),
    field("io.k8s.api.core.v1.PodSpec", "resourceClaims").patch("merge,retainKeys", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "schedulingGates").patch("merge", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodSpec", "tolerations").atomic_list(),
    field("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints").patch("merge", Some("topologyKey")).map(&[("topologyKey", None), ("whenUnsatisfiable", None)]),
    field("io.k8s.api.core.v1.PodSpec", "volumes").patch("merge,retainKeys", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodStatus", "conditions").patch("merge", Some("type")).map(&[("type", None)]),
    field("io.k8s.api.core.v1.PodStatus", "containerStatuses").atomic_list(),
    field("io.k8s.api.core.v1.PodStatus", "ephemeralContainerStatuses").atomic_list(),
    field("io.k8s.api.core.v1.PodStatus", "hostIPs").patch("merge", Some("ip")).atomic_list(),
    field("io.k8s.api.core.v1.PodStatus", "initContainerStatuses").atomic_list(),
    field("io.k8s.api.core.v1.PodStatus", "nodeAllocatableResourceClaimStatuses").patch("merge", Some("resourceClaimName")).map(&[("resourceClaimName", None)]),
    field("io.k8s.api.core.v1.PodStatus", "podIPs").patch("merge", Some("ip")).map(&[("ip", None)]),
    field("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses").patch("merge,retainKeys", Some("name")).map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodStatus", "volumeHealth").map(&[("name", None)]),
    field("io.k8s.api.core.v1.PodVolumeHealth", "healthConditions").patch("merge", Some("status")).map(&[("status", None), ("reason", None)]),
    field("io.k8s.api.core.v1.ProjectedVolumeSource", "sources").atomic_list(),
    field("io.k8s.api.core.v1.RBDVolumeSource", "monitors").atomic_list(),
    field("io.k8s.api.core.v1.ResourceRequirements", "claims").map(&[("name", None)]),
    field("io.k8s.api.core.v1.ResourceStatus", "resources").map(&[("resourceID", None)]),
    field("io.k8s.api.core.v1.SecretProjection", "items").atomic_list(),
    field("io.k8s.api.core.v1.SecretVolumeSource", "items").atomic_list(),
    field("io.k8s.api.core.v1.TopologySpreadConstraint", "matchLabelKeys").atomic_list(),
    field("io.k8s.api.core.v1.VolumeMount", "bindMountOptions").set(),
    field("io.k8s.api.scheduling.v1alpha3.WorkloadPodGroupSchedulingConstraints", "topology").atomic_list(),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", "dryRun").atomic_list(),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "matchExpressions").atomic_list(),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "values").atomic_list(),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers").patch("merge", None).set(),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "managedFields").atomic_list(),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences").patch("merge", Some("uid")).map(&[("uid", None)]),
    field("io.k8s.apimachinery.pkg.apis.meta.v1.StatusDetails", "causes").atomic_list(),
];

/// The definitions marked `+structType=atomic` (`x-kubernetes-map-type: atomic` on the
/// definition): owned, and replaced, as a whole.
pub(crate) static ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.EvictionResponder",
    "io.k8s.api.core.v1.FileKeySelector",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
];

/// The markers of `definition`'s field `name`, if it has any.
pub(crate) fn lookup(definition: &str, name: &str) -> Option<&'static Marker> {
    FIELDS
        .binary_search_by(|m| (m.definition, m.field).cmp(&(definition, name)))
        .ok()
        .map(|i| &FIELDS[i])
}

pub(crate) fn is_atomic_struct(definition: &str) -> bool {
    ATOMIC_STRUCTS.contains(&definition)
}

/// The schemas with upstream's extensions added: each marked property gets its field's,
/// each atomic struct `x-kubernetes-map-type: atomic`.
pub(crate) fn annotate(schemas: &mut Map<String, Value>) {
    for (name, schema) in schemas.iter_mut() {
        let Value::Object(schema) = schema else {
            continue;
        };
        if is_atomic_struct(name) {
            schema.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
        let Some(Value::Object(props)) = schema.get_mut("properties") else {
            continue;
        };
        for (field, prop) in props.iter_mut() {
            if let (Some(m), Value::Object(prop)) = (lookup(name, field), prop) {
                prop.extend(m.extensions());
            }
        }
    }
}

/// The definition a schema refers to, directly or through the `allOf` wrapper a described
/// reference takes in OpenAPI v3.
pub(crate) fn reference(schema: &Value) -> Option<&str> {
    let r = schema.get("$ref").or_else(|| {
        schema
            .get("allOf")
            .and_then(|a| a.get(0))
            .and_then(|s| s.get("$ref"))
    })?;
    r.as_str()?.strip_prefix("#/components/schemas/")
}

/// What a property holds, as far as the patch and apply trees care.
pub(crate) enum Shape<'a> {
    /// A struct of this definition.
    Struct(&'a str),
    /// A list; its elements' definition when they are structs.
    List(Option<&'a str>),
    /// A map, or a value of no definition.
    Other,
}

pub(crate) fn shape(prop: &Value) -> Shape<'_> {
    if prop.get("type").and_then(Value::as_str) == Some("array") {
        return Shape::List(prop.get("items").and_then(reference));
    }
    match reference(prop) {
        Some(d) => Shape::Struct(d),
        None => Shape::Other,
    }
}

/// The properties of definition `name` in the generated schemas.
pub(crate) fn properties(name: &str) -> impl Iterator<Item = (&'static str, &'static Value)> {
    super::all_schemas()
        .get(name)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|props| props.iter().map(|(k, v)| (k.as_str(), v)))
}

/// The definitions of the served kinds named `kind` (both Events: the core/v1 one and the
/// events.k8s.io view share the kind).
/// One tree per served kind: `derive` builds a definition's tree (sharing `memo` between
/// calls), `union` joins the trees of a kind served under several group-versions (Event).
pub(crate) fn per_kind<S, M: Default>(
    derive: impl Fn(&str, &mut M) -> S,
    union: impl Fn(Vec<S>) -> S,
) -> std::collections::HashMap<&'static str, S> {
    let mut memo = M::default();
    crate::resources::RESOURCES
        .iter()
        .map(|r| {
            let defs = kind_definitions(r.kind_name);
            let trees = defs.iter().map(|d| derive(d, &mut memo)).collect();
            (r.kind_name, union(trees))
        })
        .collect()
}

pub(crate) fn kind_definitions(kind: &str) -> Vec<String> {
    crate::resources::RESOURCES
        .iter()
        .filter(|r| r.kind_name == kind)
        .map(super::definition_name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_names_real_fields() {
        assert!(
            FIELDS
                .windows(2)
                .all(|w| (w[0].definition, w[0].field) < (w[1].definition, w[1].field)),
            "FIELDS must stay sorted for the binary search"
        );
        let all = super::super::all_schemas();
        for m in FIELDS {
            let prop = &all[m.definition]["properties"][m.field];
            assert!(
                prop.is_object(),
                "{}.{} is not in schemas.json",
                m.definition,
                m.field
            );
            let is_list = prop["type"] == "array";
            assert_eq!(m.list.is_some(), is_list, "{}.{}", m.definition, m.field);
            if let Some(List::Map(keys)) = m.list {
                let elem = prop["items"]
                    .get("$ref")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let elem = elem.trim_start_matches("#/components/schemas/");
                for (k, _) in keys {
                    assert!(
                        all[elem]["properties"][*k].is_object(),
                        "{elem} has no key {k}"
                    );
                }
            }
        }
        for d in ATOMIC_STRUCTS {
            assert!(all.contains_key(*d), "{d}");
        }
    }

    #[test]
    fn upstreams_tags_of_the_pod_spec() {
        let c = lookup("io.k8s.api.core.v1.PodSpec", "containers").unwrap();
        assert_eq!(
            (c.patch_strategy, c.patch_merge_key),
            (Some("merge"), Some("name"))
        );
        let v = lookup("io.k8s.api.core.v1.PodSpec", "volumes").unwrap();
        assert_eq!(v.patch_strategy, Some("merge,retainKeys"));
        assert_eq!(
            lookup("io.k8s.api.core.v1.Container", "ports")
                .unwrap()
                .list,
            Some(List::Map(&[
                ("containerPort", None),
                ("protocol", Some("TCP"))
            ]))
        );
        assert!(lookup("io.k8s.api.core.v1.PodSpec", "nodeName").is_none());
    }
}
