//! Registry strategies (`pkg/registry/.../strategy.go`): what the server changes on an object
//! between defaulting and validation, on create, update and `/status` update.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, Job, JobStatus};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

use crate::keys;
use crate::quantity;

/// Job create: clear status, generation 1, generate the selector and pod-template labels
/// unless `manualSelector` is true, then (our addition, matching what upstream shows on read
/// after re-defaulting) copy the template labels to an unlabelled Job.
pub fn job_prepare_for_create(job: &mut Job) {
    if let Some(spec) = job.spec.as_mut()
        && let Some(pod) = spec.template.spec.as_mut()
    {
        drop_disabled_probe_fields(pod, None);
    }
    job.status = Some(JobStatus::default());
    job.metadata.generation = Some(1);
    let manual = job.spec.as_ref().and_then(|s| s.manual_selector) == Some(true);
    if !manual {
        generate_selector(job);
    }
    let tlabels = job
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone());
    // A label value validation will reject anyway (a name over 63 characters) is not copied,
    // so that only upstream's `spec.template.labels` errors are reported.
    if let Some(l) = tlabels
        && job.metadata.labels.as_ref().is_none_or(|j| j.is_empty())
        && l.values().all(|v| crate::names::label_value(v).is_empty())
    {
        job.metadata.labels = Some(l);
    }
}

/// The pod spec of a CronJob's job template.
fn cronjob_pod_spec(cj: &mut CronJob) -> Option<&mut PodSpec> {
    cj.spec.job_template.spec.as_mut()?.template.spec.as_mut()
}

/// upstream's `dropDisabledFields` for 1.37's alpha probe fields, whose feature gates are off
/// by default: a probe's `grpc.mode` (`GRPCContainerProbeTLS`) and `httpGet.protocol`
/// (`H2CContainerProbe`) are removed from a new or updated spec, each unless the old spec
/// already uses it (so that an update never drops what was stored).
pub fn drop_disabled_probe_fields(spec: &mut PodSpec, old: Option<&PodSpec>) {
    let old_probes = || old.into_iter().flat_map(probes);
    let mode_in_use = old_probes().any(|p| p.grpc.as_ref().is_some_and(|g| g.mode.is_some()));
    let protocol_in_use =
        old_probes().any(|p| p.http_get.as_ref().is_some_and(|h| h.protocol.is_some()));
    let containers = spec.containers.iter_mut();
    for c in containers.chain(spec.init_containers.iter_mut().flatten()) {
        for probe in [
            &mut c.liveness_probe,
            &mut c.readiness_probe,
            &mut c.startup_probe,
        ]
        .into_iter()
        .flatten()
        {
            if !mode_in_use && let Some(g) = probe.grpc.as_mut() {
                g.mode = None;
            }
            if !protocol_in_use && let Some(h) = probe.http_get.as_mut() {
                h.protocol = None;
            }
        }
    }
}

/// The probes of a spec's containers and init containers.
fn probes(spec: &PodSpec) -> impl Iterator<Item = &k8s_openapi::api::core::v1::Probe> {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| [&c.liveness_probe, &c.readiness_probe, &c.startup_probe])
        .flatten()
}

/// `generateSelector`: existing labels and selector keys are never overwritten; conflicts are
/// left for validation to report.
fn generate_selector(job: &mut Job) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let spec = job.spec.get_or_insert_with(Default::default);
    let labels = spec
        .template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    for key in [keys::LEGACY_JOB_NAME_LABEL, keys::JOB_NAME_LABEL] {
        labels
            .entry(key.to_string())
            .or_insert_with(|| name.clone());
    }
    for key in [
        keys::LEGACY_CONTROLLER_UID_LABEL,
        keys::CONTROLLER_UID_LABEL,
    ] {
        labels.entry(key.to_string()).or_insert_with(|| uid.clone());
    }
    let selector = spec.selector.get_or_insert_with(LabelSelector::default);
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .entry(keys::CONTROLLER_UID_LABEL.to_string())
        .or_insert(uid);
}

/// Job update through the main resource: status changes are dropped; the generation is
/// bumped iff the spec changed. The caller has already set generation to old's.
pub fn job_prepare_for_update(new: &mut Job, old: &Job) {
    if let Some(pod) = new.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        let old_pod = old.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        drop_disabled_probe_fields(pod, old_pod);
    }
    new.status = old.status.clone();
    if new.spec != old.spec {
        new.metadata.generation = Some(old.metadata.generation.unwrap_or(0).saturating_add(1));
    }
}

/// Job `/status` update: spec changes are dropped.
pub fn job_status_prepare_for_update(new: &mut Job, old: &Job) {
    new.spec = old.spec.clone();
}

/// CronJob create: clear status, generation 1.
pub fn cronjob_prepare_for_create(cj: &mut CronJob) {
    if let Some(pod) = cronjob_pod_spec(cj) {
        drop_disabled_probe_fields(pod, None);
    }
    cj.status = Some(Default::default());
    cj.metadata.generation = Some(1);
}

/// CronJob update: status from old, generation bump iff the spec changed.
pub fn cronjob_prepare_for_update(new: &mut CronJob, old: &CronJob) {
    let old_pod = old
        .spec
        .job_template
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref());
    if let Some(pod) = cronjob_pod_spec(new) {
        drop_disabled_probe_fields(pod, old_pod);
    }
    new.status = old.status.clone();
    if new.spec != old.spec {
        new.metadata.generation = Some(old.metadata.generation.unwrap_or(0).saturating_add(1));
    }
}

/// CronJob `/status` update: spec from old.
pub fn cronjob_status_prepare_for_update(new: &mut CronJob, old: &CronJob) {
    new.spec = old.spec.clone();
}

/// Pod create: status `{phase: Pending, qosClass}`, generation 1; a pod with scheduling
/// gates starts with `PodScheduled` False, reason `SchedulingGated` (upstream's
/// `applySchedulingGatedCondition`), since now.
pub fn pod_prepare_for_create(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        drop_disabled_probe_fields(spec, None);
    }
    let spec = pod.spec.as_ref();
    let qos = spec.map(qos_class).unwrap_or(keys::QOS_BEST_EFFORT);
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let conditions = gated.then(|| {
        let now = jiff::Timestamp::now();
        let now = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
        vec![PodCondition {
            type_: keys::POD_SCHEDULED.to_string(),
            status: "False".to_string(),
            reason: Some(keys::REASON_SCHEDULING_GATED.to_string()),
            message: Some(keys::MESSAGE_SCHEDULING_GATED.to_string()),
            last_transition_time: Some(Time(now)),
            ..Default::default()
        }]
    });
    pod.status = Some(PodStatus {
        phase: Some(keys::POD_PENDING.to_string()),
        qos_class: Some(qos.to_string()),
        conditions,
        ..Default::default()
    });
    pod.metadata.generation = Some(1);
}

/// Pod update: status from old; generation bump iff the spec changed.
pub fn pod_prepare_for_update(new: &mut Pod, old: &Pod) {
    if let Some(spec) = new.spec.as_mut() {
        drop_disabled_probe_fields(spec, old.spec.as_ref());
    }
    new.status = old.status.clone();
    // The Priority admission plugin set these on create; an update that leaves them out keeps
    // them (changing them is then refused by validation, as upstream).
    if let (Some(n), Some(o)) = (new.spec.as_mut(), old.spec.as_ref()) {
        if n.priority.is_none() {
            n.priority = o.priority;
        }
        if n.preemption_policy.is_none() {
            n.preemption_policy = o.preemption_policy.clone();
        }
    }
    if new.spec != old.spec {
        new.metadata.generation = Some(old.metadata.generation.unwrap_or(0).saturating_add(1));
    }
}

/// Pod `/ephemeralcontainers` update (upstream's `dropNonEphemeralContainerUpdates`): of the
/// new object only `spec.ephemeralContainers` and the metadata `ResetObjectMetaForStatus`
/// leaves alone are kept; the rest of the spec, the status, labels, annotations,
/// finalizers, ownerReferences, deletionTimestamp and generation are the stored ones. The
/// generation is then bumped iff the spec changed, as on a main update.
pub fn pod_ephemeral_containers_prepare_for_update(new: &mut Pod, old: &Pod) {
    let ephemeral = new
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.take());
    let mut spec = old.spec.clone().unwrap_or_default();
    spec.ephemeral_containers = ephemeral;
    new.spec = Some(spec);
    new.status = old.status.clone();
    let (m, o) = (&mut new.metadata, &old.metadata);
    m.deletion_timestamp = o.deletion_timestamp.clone();
    m.generation = o.generation;
    m.self_link = o.self_link.clone();
    m.labels = o.labels.clone();
    m.annotations = o.annotations.clone();
    m.finalizers = o.finalizers.clone();
    m.owner_references = o.owner_references.clone();
    if new.spec != old.spec {
        new.metadata.generation = Some(old.metadata.generation.unwrap_or(0).saturating_add(1));
    }
}

/// Pod `/status` update: spec and ownerReferences from old, deletionTimestamp old's (upstream
/// clears it here and its generic update then restores old's: the net effect, in one place, so
/// that a node can report the status of a pod being deleted), qosClass and observedGeneration
/// kept when not supplied.
pub fn pod_status_prepare_for_update(new: &mut Pod, old: &Pod) {
    new.spec = old.spec.clone();
    new.metadata.deletion_timestamp = old.metadata.deletion_timestamp.clone();
    new.metadata.owner_references = old.metadata.owner_references.clone();
    let old_status = old.status.clone().unwrap_or_default();
    let status = new.status.get_or_insert_with(Default::default);
    if status.qos_class.as_deref().unwrap_or("").is_empty() {
        status.qos_class = old_status.qos_class.clone();
    }
    if status.observed_generation.unwrap_or(0) == 0 {
        status.observed_generation = old_status.observed_generation;
    }
    for c in status.conditions.iter_mut().flatten() {
        if c.observed_generation.unwrap_or(0) == 0
            && let Some(oc) = old_status
                .conditions
                .iter()
                .flatten()
                .find(|o| o.type_ == c.type_)
        {
            c.observed_generation = oc.observed_generation;
        }
    }
}

/// Namespace create: status phase Active.
pub fn namespace_prepare_for_create(ns: &mut k8s_openapi::api::core::v1::Namespace) {
    ns.status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
        phase: Some("Active".to_string()),
        ..Default::default()
    });
    // Upstream requires the `kubernetes` finalizer on create: it holds a deleted namespace
    // until its contents are gone.
    let finalizers = ns
        .spec
        .get_or_insert_with(Default::default)
        .finalizers
        .get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == "kubernetes") {
        finalizers.push("kubernetes".to_string());
    }
}

/// Namespace update: status changes go through `/status` (or finalization) only.
pub fn namespace_prepare_for_update(
    new: &mut k8s_openapi::api::core::v1::Namespace,
    old: &k8s_openapi::api::core::v1::Namespace,
) {
    new.status = old.status.clone();
}

/// Namespace `/status` update: spec from old.
pub fn namespace_status_prepare_for_update(
    new: &mut k8s_openapi::api::core::v1::Namespace,
    old: &k8s_openapi::api::core::v1::Namespace,
) {
    new.spec = old.spec.clone();
}

/// Node create: a client-supplied status is kept (the node agent reports it), as upstream.
pub fn node_prepare_for_create(_node: &mut k8s_openapi::api::core::v1::Node) {}

/// Node update: status from old.
pub fn node_prepare_for_update(
    new: &mut k8s_openapi::api::core::v1::Node,
    old: &k8s_openapi::api::core::v1::Node,
) {
    new.status = old.status.clone();
}

/// Node `/status` update: spec from old.
pub fn node_status_prepare_for_update(
    new: &mut k8s_openapi::api::core::v1::Node,
    old: &k8s_openapi::api::core::v1::Node,
) {
    new.spec = old.spec.clone();
}

/// Secret update: a new object without a type keeps the old one's (decoding defaults it to
/// `Opaque` first, so this only matters to callers that skip defaulting).
pub fn secret_prepare_for_update(
    new: &mut k8s_openapi::api::core::v1::Secret,
    old: &k8s_openapi::api::core::v1::Secret,
) {
    if new.type_.as_deref().unwrap_or("").is_empty() {
        new.type_ = old.type_.clone();
    }
}

/// `qos.GetPodQOS` over CPU and memory of all containers and init containers.
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let mut requests: BTreeMap<&str, f64> = BTreeMap::new();
    let mut limits: BTreeMap<&str, f64> = BTreeMap::new();
    let mut guaranteed = true;
    let positive = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        quantity::parse(&q.0)
            .ok()
            .map(|q| q.value)
            .filter(|v| *v > 0.0)
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let res = c.resources.clone().unwrap_or_default();
        for (name, q) in res.requests.iter().flatten() {
            let key = match name.as_str() {
                "cpu" => "cpu",
                "memory" => "memory",
                _ => continue,
            };
            if let Some(v) = positive(q) {
                *requests.entry(key).or_insert(0.0) += v;
            }
        }
        let mut found = 0;
        for (name, q) in res.limits.iter().flatten() {
            let key = match name.as_str() {
                "cpu" => "cpu",
                "memory" => "memory",
                _ => continue,
            };
            if let Some(v) = positive(q) {
                found += 1;
                *limits.entry(key).or_insert(0.0) += v;
            }
        }
        if found < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return keys::QOS_BEST_EFFORT;
    }
    if guaranteed {
        for (name, req) in &requests {
            if limits.get(name) != Some(req) {
                guaranteed = false;
                break;
            }
        }
    }
    if guaranteed && requests.len() == limits.len() {
        keys::QOS_GUARANTEED
    } else {
        keys::QOS_BURSTABLE
    }
}

/// PriorityClass create: generation 1 (its strategy's `PrepareForCreate`).
pub fn priority_class_prepare_for_create(pc: &mut k8s_openapi::api::scheduling::v1::PriorityClass) {
    pc.metadata.generation = Some(1);
}

/// ServiceAccount create and update: each listed secret is kept by name only
/// (`cleanSecretReferences`).
pub fn service_account_clean_secret_references(
    sa: &mut k8s_openapi::api::core::v1::ServiceAccount,
) {
    for secret in sa.secrets.iter_mut().flatten() {
        *secret = k8s_openapi::api::core::v1::ObjectReference {
            name: secret.name.take(),
            ..Default::default()
        };
    }
}

/// [`service_account_clean_secret_references`] on update.
pub fn service_account_prepare_for_update(
    new: &mut k8s_openapi::api::core::v1::ServiceAccount,
    _old: &k8s_openapi::api::core::v1::ServiceAccount,
) {
    service_account_clean_secret_references(new);
}

/// PodDisruptionBudget create: no status, generation 1.
pub fn pdb_prepare_for_create(pdb: &mut k8s_openapi::api::policy::v1::PodDisruptionBudget) {
    pdb.status = None;
    pdb.metadata.generation = Some(1);
}

/// PodDisruptionBudget update: status from old; generation bump iff the spec changed.
pub fn pdb_prepare_for_update(
    new: &mut k8s_openapi::api::policy::v1::PodDisruptionBudget,
    old: &k8s_openapi::api::policy::v1::PodDisruptionBudget,
) {
    new.status = old.status.clone();
    if new.spec != old.spec {
        new.metadata.generation = Some(old.metadata.generation.unwrap_or(0).saturating_add(1));
    }
}

/// PodDisruptionBudget status update: spec from old.
pub fn pdb_status_prepare_for_update(
    new: &mut k8s_openapi::api::policy::v1::PodDisruptionBudget,
    old: &k8s_openapi::api::policy::v1::PodDisruptionBudget,
) {
    new.spec = old.spec.clone();
}
