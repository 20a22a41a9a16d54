//! The structure server-side apply sees in the served types: the `+listType`,
//! `+listMapKey`, `+structType` and `+mapType` markers of k8s.io/api and apimachinery.
//!
//! These differ from the strategic-merge-patch tags in `smp::schema` in places (Job
//! conditions are `listType=atomic`; container ports are keyed by port *and* protocol), so
//! they are listed here on their own. Anything not listed is treated as SSA treats an
//! unmarked field: objects are granular (each field owned separately) and lists are atomic.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

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
        match kind {
            "Job" => JOB.clone(),
            "CronJob" => CRONJOB.clone(),
            "Pod" => POD.clone(),
            "Namespace" => NAMESPACE.clone(),
            "Node" => NODE.clone(),
            "Event" => EVENT.clone(),
            // Their data maps have no `mapType`: each key is owned on its own.
            "Lease" | "ConfigMap" | "Secret" => OBJECT.clone(),
            _ => Schema::default(),
        }
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

fn object(fields: Vec<(&'static str, Schema)>) -> Schema {
    Schema(Some(Arc::new(Node {
        fields: fields.into_iter().collect(),
        ..Node::default()
    })))
}

fn atomic() -> Schema {
    Schema(Some(Arc::new(Node {
        atomic: true,
        ..Node::default()
    })))
}

fn set() -> Schema {
    Schema(Some(Arc::new(Node {
        list: ListType::Set,
        ..Node::default()
    })))
}

fn map_list(keys: &'static [(&'static str, Option<&'static str>)], elem: Schema) -> Schema {
    Schema(Some(Arc::new(Node {
        list: ListType::Map(keys),
        elem: Some(elem),
        ..Node::default()
    })))
}

fn by_name(elem: Schema) -> Schema {
    map_list(&[("name", None)], elem)
}

fn by_type() -> Schema {
    map_list(&[("type", None)], Schema::default())
}

fn object_meta() -> Schema {
    object(vec![
        ("finalizers", set()),
        // OwnerReference is `structType=atomic`.
        ("ownerReferences", map_list(&[("uid", None)], atomic())),
    ])
}

fn env_var() -> Schema {
    // The selectors are `structType=atomic`.
    object(vec![(
        "valueFrom",
        object(vec![
            ("configMapKeyRef", atomic()),
            ("secretKeyRef", atomic()),
            ("fieldRef", atomic()),
            ("resourceFieldRef", atomic()),
        ]),
    )])
}

fn container() -> Schema {
    object(vec![
        (
            "ports",
            map_list(
                &[("containerPort", None), ("protocol", Some("TCP"))],
                Schema::default(),
            ),
        ),
        ("env", by_name(env_var())),
        (
            "volumeMounts",
            map_list(&[("mountPath", None)], Schema::default()),
        ),
        (
            "volumeDevices",
            map_list(&[("devicePath", None)], Schema::default()),
        ),
        (
            "resources",
            object(vec![("claims", by_name(Schema::default()))]),
        ),
    ])
}

fn pod_spec() -> Schema {
    let c = container();
    object(vec![
        ("volumes", by_name(Schema::default())),
        ("initContainers", by_name(c.clone())),
        ("containers", by_name(c.clone())),
        ("ephemeralContainers", by_name(c)),
        ("imagePullSecrets", by_name(atomic())),
        ("hostAliases", map_list(&[("ip", None)], Schema::default())),
        (
            "topologySpreadConstraints",
            map_list(
                &[("topologyKey", None), ("whenUnsatisfiable", None)],
                object(vec![("labelSelector", atomic())]),
            ),
        ),
        ("schedulingGates", by_name(Schema::default())),
        ("resourceClaims", by_name(Schema::default())),
        ("nodeSelector", atomic()),
        (
            "affinity",
            object(vec![(
                "nodeAffinity",
                object(vec![(
                    "requiredDuringSchedulingIgnoredDuringExecution",
                    atomic(),
                )]),
            )]),
        ),
    ])
}

fn pod_status() -> Schema {
    object(vec![
        ("conditions", by_type()),
        ("resourceClaimStatuses", by_name(Schema::default())),
    ])
}

fn pod_template() -> Schema {
    object(vec![("metadata", object_meta()), ("spec", pod_spec())])
}

fn job_spec() -> Schema {
    object(vec![("selector", atomic()), ("template", pod_template())])
}

fn job_status() -> Schema {
    object(vec![(
        "uncountedTerminatedPods",
        object(vec![("succeeded", set()), ("failed", set())]),
    )])
}

static OBJECT: LazyLock<Schema> = LazyLock::new(|| object(vec![("metadata", object_meta())]));

static JOB: LazyLock<Schema> = LazyLock::new(|| {
    object(vec![
        ("metadata", object_meta()),
        ("spec", job_spec()),
        ("status", job_status()),
    ])
});

static CRONJOB: LazyLock<Schema> = LazyLock::new(|| {
    let template = object(vec![("metadata", object_meta()), ("spec", job_spec())]);
    object(vec![
        ("metadata", object_meta()),
        ("spec", object(vec![("jobTemplate", template)])),
    ])
});

static POD: LazyLock<Schema> = LazyLock::new(|| {
    object(vec![
        ("metadata", object_meta()),
        ("spec", pod_spec()),
        ("status", pod_status()),
    ])
});

static NAMESPACE: LazyLock<Schema> = LazyLock::new(|| {
    object(vec![
        ("metadata", object_meta()),
        ("status", object(vec![("conditions", by_type())])),
    ])
});

static NODE: LazyLock<Schema> = LazyLock::new(|| {
    object(vec![
        ("metadata", object_meta()),
        ("spec", object(vec![("podCIDRs", set())])),
        (
            "status",
            object(vec![("conditions", by_type()), ("addresses", by_type())]),
        ),
    ])
});

static EVENT: LazyLock<Schema> = LazyLock::new(|| {
    // ObjectReference is `structType=atomic` (core/v1 `involvedObject`, `related`; the
    // events.k8s.io view names them `regarding`, `related`).
    object(vec![
        ("metadata", object_meta()),
        ("involvedObject", atomic()),
        ("regarding", atomic()),
        ("related", atomic()),
    ])
});

/// The value a key field takes when a map-list item omits it.
pub fn key_default(default: Option<&'static str>) -> Option<Value> {
    default.map(|d| Value::String(d.to_string()))
}
