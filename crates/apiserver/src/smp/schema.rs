//! Patch strategies and merge keys of the served types.
//!
//! Upstream's strategic merge patch reads the `patchStrategy`/`patchMergeKey` struct tags of
//! the Go types (not the `+listType` markers, which drive server-side apply and sometimes
//! disagree: Job conditions are `listType=atomic` yet merge by `type` here). The table below
//! copies those tags from k8s.io/api core/v1, batch/v1, coordination/v1 and apimachinery
//! meta/v1. Only fields on the way to a `merge` list need an entry: anything not listed
//! behaves as the schema-less default (maps merge, lists are replaced), which is also what
//! upstream does for every untagged field. A few atomic lists are listed anyway to record that
//! they are atomic on purpose.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

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
    #[cfg_attr(not(test), allow(dead_code))]
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
        match kind {
            "Job" => JOB.clone(),
            "CronJob" => CRONJOB.clone(),
            "Pod" => POD.clone(),
            "Namespace" => NAMESPACE.clone(),
            "Node" => NODE.clone(),
            "Event" | "Lease" | "ConfigMap" | "Secret" => OBJECT_ONLY.clone(),
            _ => Schema::default(),
        }
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
pub(crate) fn nested(child: Schema) -> Field {
    Field {
        strategy: Strategy::Atomic,
        child,
    }
}

/// A list of objects merged by `key`.
pub(crate) fn merge_by(key: &'static str, child: Schema) -> Field {
    Field {
        strategy: Strategy::Merge(Some(key)),
        child,
    }
}

/// A list of scalars merged as a set.
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
pub(crate) fn atomic() -> Field {
    Field::default()
}

fn object_meta() -> Schema {
    Schema::object(vec![
        ("finalizers", merge_set()),
        ("ownerReferences", merge_by("uid", Schema::default())),
        ("managedFields", atomic()),
    ])
}

/// core/v1 Container; EphemeralContainerCommon carries the same tags.
fn container() -> Schema {
    Schema::object(vec![
        ("ports", merge_by("containerPort", Schema::default())),
        ("env", merge_by("name", Schema::default())),
        ("volumeMounts", merge_by("mountPath", Schema::default())),
        ("volumeDevices", merge_by("devicePath", Schema::default())),
        ("command", atomic()),
        ("args", atomic()),
        ("envFrom", atomic()),
        ("resizePolicy", atomic()),
    ])
}

fn pod_spec() -> Schema {
    let c = container();
    Schema::object(vec![
        // `patchStrategy:"merge,retainKeys"`: retainKeys only shapes patch creation.
        ("volumes", merge_by("name", Schema::default())),
        ("initContainers", merge_by("name", c.clone())),
        ("containers", merge_by("name", c.clone())),
        ("ephemeralContainers", merge_by("name", c)),
        ("imagePullSecrets", merge_by("name", Schema::default())),
        ("hostAliases", merge_by("ip", Schema::default())),
        (
            "topologySpreadConstraints",
            merge_by("topologyKey", Schema::default()),
        ),
        ("schedulingGates", merge_by("name", Schema::default())),
        ("resourceClaims", merge_by("name", Schema::default())),
        ("tolerations", atomic()),
        ("readinessGates", atomic()),
    ])
}

fn pod_status() -> Schema {
    Schema::object(vec![
        ("conditions", merge_by("type", Schema::default())),
        ("podIPs", merge_by("ip", Schema::default())),
        ("hostIPs", merge_by("ip", Schema::default())),
        ("resourceClaimStatuses", merge_by("name", Schema::default())),
        ("containerStatuses", atomic()),
        ("initContainerStatuses", atomic()),
        ("ephemeralContainerStatuses", atomic()),
    ])
}

fn pod_template_spec() -> Schema {
    Schema::object(vec![
        ("metadata", nested(object_meta())),
        ("spec", nested(pod_spec())),
    ])
}

fn job_spec() -> Schema {
    Schema::object(vec![("template", nested(pod_template_spec()))])
}

fn job_status() -> Schema {
    Schema::object(vec![
        // `+listType=atomic` but `patchStrategy:"merge" patchMergeKey:"type"`.
        ("conditions", merge_by("type", Schema::default())),
    ])
}

static OBJECT_ONLY: LazyLock<Schema> =
    LazyLock::new(|| Schema::object(vec![("metadata", nested(object_meta()))]));

static POD: LazyLock<Schema> = LazyLock::new(|| {
    Schema::object(vec![
        ("metadata", nested(object_meta())),
        ("spec", nested(pod_spec())),
        ("status", nested(pod_status())),
    ])
});

static JOB: LazyLock<Schema> = LazyLock::new(|| {
    Schema::object(vec![
        ("metadata", nested(object_meta())),
        ("spec", nested(job_spec())),
        ("status", nested(job_status())),
    ])
});

static CRONJOB: LazyLock<Schema> = LazyLock::new(|| {
    let job_template = Schema::object(vec![
        ("metadata", nested(object_meta())),
        ("spec", nested(job_spec())),
    ]);
    Schema::object(vec![
        ("metadata", nested(object_meta())),
        (
            "spec",
            nested(Schema::object(vec![("jobTemplate", nested(job_template))])),
        ),
        ("status", nested(Schema::object(vec![("active", atomic())]))),
    ])
});

static NAMESPACE: LazyLock<Schema> = LazyLock::new(|| {
    Schema::object(vec![
        ("metadata", nested(object_meta())),
        // NamespaceSpec.finalizers has no patch strategy, unlike ObjectMeta's.
        (
            "spec",
            nested(Schema::object(vec![("finalizers", atomic())])),
        ),
        (
            "status",
            nested(Schema::object(vec![(
                "conditions",
                merge_by("type", Schema::default()),
            )])),
        ),
    ])
});

static NODE: LazyLock<Schema> = LazyLock::new(|| {
    Schema::object(vec![
        ("metadata", nested(object_meta())),
        (
            "spec",
            nested(Schema::object(vec![
                ("podCIDRs", merge_set()),
                ("taints", atomic()),
            ])),
        ),
        (
            "status",
            nested(Schema::object(vec![
                ("conditions", merge_by("type", Schema::default())),
                ("addresses", merge_by("type", Schema::default())),
                ("images", atomic()),
                ("volumesInUse", atomic()),
                ("volumesAttached", atomic()),
            ])),
        ),
    ])
});
