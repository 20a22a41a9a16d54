//! Pod conditions other writers than kubelet set, and upstream's `UpdatePodCondition` rule for
//! writing one: shared by everything that marks a pod as disrupted (the taint eviction
//! controller, the node's scheduler when it preempts).

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The condition a disrupted pod gets before its deletion (the API server's eviction, the taint
/// eviction controller, preemption), which a Job's pod failure policy can match.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// `pod`'s conditions with a True `DisruptionTarget` of `reason` and `message` set, as
/// upstream's `UpdatePodCondition` sets it (its transition time kept when its status is
/// unchanged; `observedGeneration` the pod's generation); None when nothing would change.
pub fn with_disruption_target(
    pod: &Pod,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Option<Vec<PodCondition>> {
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut cond = PodCondition {
        type_: DISRUPTION_TARGET.to_string(),
        status: "True".to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_transition_time: Some(Time(now)),
        observed_generation: pod.metadata.generation.filter(|g| *g != 0),
        ..PodCondition::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == DISRUPTION_TARGET) {
        None => conditions.push(cond),
        Some(old) => {
            if old.status == cond.status {
                cond.last_transition_time = old.last_transition_time.clone();
            }
            if *old == cond {
                return None;
            }
            *old = cond;
        }
    }
    Some(conditions)
}

/// Whether `pod` has a True `DisruptionTarget` of `reason`.
pub fn is_disruption_target(pod: &Pod, reason: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == DISRUPTION_TARGET
                    && c.status == "True"
                    && c.reason.as_deref() == Some(reason)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;
    use serde_json::json;

    #[test]
    fn the_condition_is_added_once_then_kept_with_its_time() {
        let now: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "generation": 3},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let conds = with_disruption_target(&pod, "R", "m", now).expect("added");
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1].type_, "DisruptionTarget");
        assert_eq!(conds[1].observed_generation, Some(3));
        pod.status.as_mut().unwrap().conditions = Some(conds);
        assert!(is_disruption_target(&pod, "R"));
        assert!(!is_disruption_target(&pod, "Other"));
        let later = now + SignedDuration::from_secs(5);
        assert!(with_disruption_target(&pod, "R", "m", later).is_none());
        // Another reason replaces it in place, its transition time kept.
        let conds = with_disruption_target(&pod, "Other", "m2", later).expect("changed");
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1].reason.as_deref(), Some("Other"));
        assert_eq!(conds[1].last_transition_time, Some(Time(now)));
    }
}
