//! A PodDisruptionBudget's `DisruptionAllowed` condition, as upstream's policy helpers write it:
//! shared by the disruption controller, which computes the budget, and the API server's
//! eviction, which takes from it.

use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
pub const SUFFICIENT_PODS: &str = "SufficientPods";
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
pub const SYNC_FAILED: &str = "SyncFailed";

/// `apimeta.SetStatusCondition` for `DisruptionAllowed`: a changed status moves the transition
/// time to `now`.
pub fn set_disruption_allowed(
    conditions: &mut Vec<Condition>,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    match conditions
        .iter_mut()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    {
        Some(c) => {
            if c.status != status {
                c.status = status.to_string();
                c.last_transition_time = Time(now);
            }
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: DISRUPTION_ALLOWED.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation,
            last_transition_time: Time(now),
        }),
    }
}

/// `UpdateDisruptionAllowedCondition`.
pub fn update_disruption_allowed_condition(status: &mut PodDisruptionBudgetStatus, now: Timestamp) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let (s, reason) = if status.disruptions_allowed.unwrap_or(0) > 0 {
        ("True", SUFFICIENT_PODS)
    } else {
        ("False", INSUFFICIENT_PODS)
    };
    set_disruption_allowed(conditions, s, reason, "", status.observed_generation, now);
}
