//! The resources kbatch serves: group, version, names, scope, verbs and storage prefix.

/// What a resource's objects are, for choosing defaulting/validation and conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Namespace,
    Pod,
    Node,
    Event,
    /// events.k8s.io/v1 view of the same stored Events.
    EventV1,
    Job,
    CronJob,
    Lease,
    ConfigMap,
    Secret,
    ServiceAccount,
    PriorityClass,
    PodDisruptionBudget,
}

#[derive(Debug)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind_name: &'static str,
    pub kind: Kind,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Subresources and their verbs.
    pub subresources: &'static [(&'static str, &'static [&'static str])],
    /// First segment of the storage key; two resources sharing it are views of the same objects.
    pub storage: &'static str,
}

pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

pub static RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind_name: "Namespace",
        kind: Kind::Namespace,
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        subresources: &[("status", STATUS_VERBS)],
        storage: "namespaces",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind_name: "Pod",
        kind: Kind::Pod,
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        // In upstream's discovery order (sorted).
        subresources: &[
            ("attach", &["create", "get"]),
            ("binding", &["create"]),
            ("ephemeralcontainers", STATUS_VERBS),
            ("eviction", &["create"]),
            ("exec", &["create", "get"]),
            ("log", &["get"]),
            ("portforward", &["create", "get"]),
            ("status", STATUS_VERBS),
        ],
        storage: "pods",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind_name: "Event",
        kind: Kind::Event,
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
        storage: "events",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind_name: "Node",
        kind: Kind::Node,
        namespaced: false,
        short_names: &["no"],
        categories: &[],
        subresources: &[("status", STATUS_VERBS)],
        storage: "nodes",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind_name: "ConfigMap",
        kind: Kind::ConfigMap,
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        subresources: &[],
        storage: "configmaps",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind_name: "Secret",
        kind: Kind::Secret,
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
        storage: "secrets",
    },
    Resource {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind_name: "ServiceAccount",
        kind: Kind::ServiceAccount,
        namespaced: true,
        short_names: &["sa"],
        categories: &[],
        subresources: &[],
        storage: "serviceaccounts",
    },
    Resource {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind_name: "Job",
        kind: Kind::Job,
        namespaced: true,
        short_names: &[],
        categories: &["all"],
        subresources: &[("status", STATUS_VERBS)],
        storage: "jobs.batch",
    },
    Resource {
        group: "batch",
        version: "v1",
        plural: "cronjobs",
        singular: "cronjob",
        kind_name: "CronJob",
        kind: Kind::CronJob,
        namespaced: true,
        short_names: &["cj"],
        categories: &["all"],
        subresources: &[("status", STATUS_VERBS)],
        storage: "cronjobs.batch",
    },
    Resource {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind_name: "Event",
        kind: Kind::EventV1,
        namespaced: true,
        short_names: &["ev"],
        categories: &[],
        subresources: &[],
        storage: "events",
    },
    Resource {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind_name: "Lease",
        kind: Kind::Lease,
        namespaced: true,
        short_names: &[],
        categories: &[],
        subresources: &[],
        storage: "leases.coordination.k8s.io",
    },
    Resource {
        group: "scheduling.k8s.io",
        version: "v1",
        plural: "priorityclasses",
        singular: "priorityclass",
        kind_name: "PriorityClass",
        kind: Kind::PriorityClass,
        namespaced: false,
        short_names: &["pc"],
        categories: &[],
        subresources: &[],
        storage: "priorityclasses.scheduling.k8s.io",
    },
    Resource {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind_name: "PodDisruptionBudget",
        kind: Kind::PodDisruptionBudget,
        namespaced: true,
        short_names: &["pdb"],
        categories: &[],
        subresources: &[("status", STATUS_VERBS)],
        storage: "poddisruptionbudgets.policy",
    },
];

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.iter().any(|(s, _)| *s == sub)
    }

    /// Storage key of one object.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("/{}/{namespace}/{name}", self.storage)
        } else {
            format!("/{}/{name}", self.storage)
        }
    }

    /// Storage prefix of a list: one namespace, or all of them.
    pub fn prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("/{}/{ns}/", self.storage),
            _ => format!("/{}/", self.storage),
        }
    }
}

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource a storage key belongs to (`/jobs.batch/ns/j`: Jobs); events resolve to the
/// core/v1 view, which shares its storage with events.k8s.io.
pub fn by_key(key: &str) -> Option<&'static Resource> {
    let storage = key.trim_start_matches('/').split('/').next()?;
    RESOURCES
        .iter()
        .find(|r| r.storage == storage && r.kind != Kind::EventV1)
}

pub fn by_kind(kind: Kind) -> &'static Resource {
    // Every Kind has exactly one entry in RESOURCES.
    RESOURCES
        .iter()
        .find(|r| r.kind == kind)
        .unwrap_or(&RESOURCES[0])
}

/// Groups served under /apis, in discovery order, with their single version. The last two
/// have no stored resources: their reviews are `authentication::REVIEWS` and
/// `authorization::REVIEWS` (upstream lists authentication just before authorization).
pub const GROUPS: &[(&str, &str)] = &[
    ("batch", "v1"),
    ("events.k8s.io", "v1"),
    ("coordination.k8s.io", "v1"),
    (crate::authentication::GROUP, crate::authentication::VERSION),
    (crate::authorization::GROUP, crate::authorization::VERSION),
    ("policy", "v1"),
    ("scheduling.k8s.io", "v1"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_back_to_itself() {
        for r in RESOURCES {
            assert_eq!(by_kind(r.kind).kind, r.kind);
        }
    }

    #[test]
    fn keys_and_prefixes() {
        let jobs = find("batch", "v1", "jobs").unwrap();
        assert_eq!(jobs.key("default", "pi"), "/jobs.batch/default/pi");
        assert_eq!(jobs.prefix(Some("default")), "/jobs.batch/default/");
        assert_eq!(jobs.prefix(None), "/jobs.batch/");
        let ns = find("", "v1", "namespaces").unwrap();
        assert_eq!(ns.key("", "default"), "/namespaces/default");
        assert_eq!(ns.prefix(Some("x")), "/namespaces/");
    }
}
