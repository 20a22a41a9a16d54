//! Facts about a Job's pods (phase, readiness, termination, ownership), the deletion
//! preference order, and the pods the controller creates.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodSpec,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference,
};
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::keys;

use super::indexed;

/// The env var every container of an Indexed Job's pod gets.
pub const JOB_COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

pub fn is_succeeded(pod: &Pod) -> bool {
    phase(pod) == keys::POD_SUCCEEDED
}

pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), keys::POD_SUCCEEDED | keys::POD_FAILED)
}

pub fn is_deleted(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Neither finished nor being deleted: the pods that count as `status.active`.
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && !is_deleted(pod)
}

/// Being deleted but not finished: the pods that count as `status.terminating`.
pub fn is_terminating(pod: &Pod) -> bool {
    is_deleted(pod) && !is_terminal(pod)
}

pub fn condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a kbatch_api::k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

pub fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == keys::JOB_TRACKING_FINALIZER))
}

/// Whether the pod's controller reference points at this Job (by UID, as upstream does).
pub fn is_controlled_by(pod: &Pod, job: &Job) -> bool {
    let Some(job_uid) = job.metadata.uid.as_deref() else {
        return false;
    };
    controller_ref(pod).is_some_and(|r| r.uid == job_uid && r.kind == "Job")
}

pub fn controller_ref(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Label-selector matching (matchLabels and matchExpressions), for the loop's adoption and
/// release of pods. An empty selector matches nothing, as a Job's selector must be non-empty.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let ml = selector.match_labels.as_ref();
    let me = selector.match_expressions.as_ref();
    if ml.is_none_or(|m| m.is_empty()) && me.is_none_or(|e| e.is_empty()) {
        return false;
    }
    if let Some(ml) = ml
        && !ml.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    if let Some(me) = me {
        for req in me {
            let values = req.values.as_deref().unwrap_or(&[]);
            let got = labels.get(&req.key);
            let ok = match req.operator.as_str() {
                "In" => got.is_some_and(|v| values.contains(v)),
                "NotIn" => got.is_none_or(|v| !values.contains(v)),
                "Exists" => got.is_some(),
                "DoesNotExist" => got.is_none(),
                // An operator the API server would reject: match nothing rather than guess.
                _ => false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match phase(pod) {
        keys::POD_PENDING => 0,
        "Unknown" => 1,
        keys::POD_RUNNING => 2,
        _ => 3,
    }
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    condition(pod, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

/// "a comes after b, a missing time sorting first", the tie-breaker rule of upstream's ranks.
fn after_or_missing(a: Option<Timestamp>, b: Option<Timestamp>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => a.is_none(),
        (Some(a), Some(b)) => a > b,
    }
}

/// Deletion preference (upstream `controller.ActivePods`): `Less` means "delete first".
/// Unscheduled before scheduled, Pending before Unknown before Running, not ready before ready,
/// ready more recently before ready longer, more restarts before fewer, newer before older.
pub fn active_pods_cmp(a: &Pod, b: &Pod) -> Ordering {
    let less = |x: &Pod, y: &Pod| -> bool {
        let xn = x
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("");
        let yn = y
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("");
        if xn != yn && (xn.is_empty() || yn.is_empty()) {
            return xn.is_empty();
        }
        if phase_ordinal(x) != phase_ordinal(y) {
            return phase_ordinal(x) < phase_ordinal(y);
        }
        if is_ready(x) != is_ready(y) {
            return !is_ready(x);
        }
        if is_ready(x) && is_ready(y) {
            let (rx, ry) = (ready_since(x), ready_since(y));
            if rx != ry {
                return after_or_missing(rx, ry);
            }
        }
        if max_restarts(x) != max_restarts(y) {
            return max_restarts(x) > max_restarts(y);
        }
        let cx = x.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let cy = y.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if cx != cy {
            return after_or_missing(cx, cy);
        }
        false
    };
    if less(a, b) {
        Ordering::Less
    } else if less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// What distinguishes one created pod from another of the same Job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewPodIdentity {
    pub index: Option<i32>,
    /// Failure-count annotations, for Jobs with backoffLimitPerIndex.
    pub index_failure_count: Option<i32>,
    pub index_ignored_failure_count: Option<i32>,
}

/// The pod the controller creates for `job`: the template plus the tracking finalizer and the
/// controller reference, and for Indexed Jobs the index annotation, label, hostname, env var
/// and index-carrying generateName.
pub fn new_pod(job: &Job, id: &NewPodIdentity) -> Pod {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let mut spec: PodSpec = template.spec.unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    let mut finalizers = tmeta.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == keys::JOB_TRACKING_FINALIZER) {
        finalizers.push(keys::JOB_TRACKING_FINALIZER.to_string());
    }
    let mut generate_name = format!("{job_name}-");
    if let Some(ix) = id.index {
        annotations.insert(keys::JOB_COMPLETION_INDEX_ANNOTATION.into(), ix.to_string());
        labels.insert(keys::JOB_COMPLETION_INDEX_ANNOTATION.into(), ix.to_string());
        spec.hostname = Some(format!("{job_name}-{ix}"));
        generate_name = indexed::generate_name_with_index(&job_name, ix);
        add_completion_index_env(spec.containers.iter_mut());
        if let Some(init) = spec.init_containers.as_mut() {
            add_completion_index_env(init.iter_mut());
        }
        if let Some(n) = id.index_failure_count {
            annotations.insert(
                keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION.into(),
                n.to_string(),
            );
        }
        if let Some(n) = id.index_ignored_failure_count.filter(|&n| n > 0) {
            annotations.insert(
                keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION.into(),
                n.to_string(),
            );
        }
    }
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(finalizers),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: job_name,
                uid: job.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn add_completion_index_env<'a>(containers: impl Iterator<Item = &'a mut Container>) {
    for c in containers {
        let env = c.env.get_or_insert_with(Vec::new);
        if env.iter().any(|e| e.name == JOB_COMPLETION_INDEX_ENV) {
            continue;
        }
        env.push(EnvVar {
            name: JOB_COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!(
                        "metadata.labels['{}']",
                        keys::JOB_COMPLETION_INDEX_ANNOTATION
                    ),
                }),
                ..EnvVarSource::default()
            }),
        });
    }
}
