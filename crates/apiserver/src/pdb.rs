//! What a PodDisruptionBudget says to an eviction (upstream `EvictionREST`'s budget part):
//! which budgets cover the pod, whether an unready pod may go without using the budget, and
//! `checkAndDecrement`, which takes one allowed disruption and records the pod in
//! `status.disruptedPods` for the disruption controller. Pure functions of the stored
//! documents; the eviction does the reads and writes.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::error::ApiError;
use kbatch_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::labels::selector_matches;
use kbatch_api::pdb::update_disruption_allowed_condition;
use kbatch_api::validation::ALWAYS_ALLOW;

/// Upstream's `MaxDisruptedPodSize`.
const MAX_DISRUPTED_PODS: usize = 2000;
/// `policyv1.DisruptionBudgetCause`.
const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";
const CANNOT_EVICT: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Whether the budget covers a pod with these labels: a null selector or one that cannot be
/// built covers none, an empty one every pod of the namespace.
pub fn covers(budget: &Value, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = budget.pointer("/spec/selector").filter(|s| !s.is_null()) else {
        return false;
    };
    let Ok(selector) = serde_json::from_value::<LabelSelector>(selector.clone()) else {
        return false;
    };
    selector_matches(&selector, labels) == Some(true)
}

fn int_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn name_of(budget: &Value) -> &str {
    budget
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// An unready pod leaves without using the budget when the budget says so
/// (`unhealthyPodEvictionPolicy: AlwaysAllow`) or, by default, when the budget is met anyway
/// (enough healthy pods, and some are needed).
pub fn unready_pod_may_go(budget: &Value) -> bool {
    let policy = budget
        .pointer("/spec/unhealthyPodEvictionPolicy")
        .and_then(Value::as_str);
    if policy == Some(ALWAYS_ALLOW) {
        return true;
    }
    let desired = int_at(budget, "/status/desiredHealthy");
    int_at(budget, "/status/currentHealthy") >= desired && desired > 0
}

/// The 429 whose cause says the budget is not yet processed (`createTooManyRequestsError`).
pub fn still_processing(name: &str) -> ApiError {
    let mut e = ApiError::new(429, "TooManyRequests", CANNOT_EVICT);
    e.details = Some(json!({
        "causes": [{"reason": DISRUPTION_BUDGET_CAUSE,
            "message": format!("The disruption budget {name} is still being processed by the server.")}],
        "retryAfterSeconds": 10,
    }));
    e
}

/// The 500 Status when several budgets cover the pod.
pub fn several_budgets() -> ApiError {
    ApiError::new(
        500,
        "",
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
    )
}

/// `checkAndDecrement`: the budget with one disruption fewer allowed and the pod recorded
/// (at `now`) as disrupted; `None` for a dry run, which writes nothing. Refused with
/// upstream's errors when the budget is not processed, allows nothing, or is inconsistent.
pub fn check_and_decrement(
    budget: &Value,
    pod: &str,
    now: Timestamp,
    dry_run: bool,
) -> Result<Option<Value>, ApiError> {
    let name = name_of(budget);
    if int_at(budget, "/status/observedGeneration") < int_at(budget, "/metadata/generation") {
        return Err(still_processing(name));
    }
    let allowed = int_at(budget, "/status/disruptionsAllowed");
    let forbidden =
        |why: &str| ApiError::forbidden_named("poddisruptionbudget", "policy", name, why);
    if allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    let disrupted = budget
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    let allowed_i32 = i32::try_from(allowed).unwrap_or(i32::MAX);
    if allowed == 0 {
        let mut e = ApiError::new(429, "TooManyRequests", CANNOT_EVICT);
        e.details = Some(json!({
            "causes": [{"reason": DISRUPTION_BUDGET_CAUSE,
                "message": format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    int_at(budget, "/status/desiredHealthy"),
                    int_at(budget, "/status/currentHealthy"),
                )}],
        }));
        return Err(e);
    }
    if dry_run {
        return Ok(None);
    }
    let mut typed: PodDisruptionBudget = serde_json::from_value(budget.clone())
        .map_err(|e| ApiError::internal(format!("a stored PodDisruptionBudget: {e}")))?;
    let status = typed.status.get_or_insert_with(Default::default);
    status.disruptions_allowed = Some(allowed_i32 - 1);
    if allowed_i32 - 1 == 0 {
        update_disruption_allowed_condition(status, now);
    }
    status
        .disrupted_pods
        .get_or_insert_with(Default::default)
        .insert(pod.to_string(), Time(now));
    serde_json::to_value(&typed)
        .map(Some)
        .map_err(|e| ApiError::internal(format!("encoding a PodDisruptionBudget: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_api::labels::from_pairs as labels;

    fn budget(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "b", "namespace": "ns", "generation": 1},
            "spec": spec, "status": status})
    }

    #[test]
    fn which_budgets_cover_a_pod() {
        let l = labels(&[("app", "a")]);
        assert!(covers(&budget(json!({"selector": {}}), json!({})), &l));
        assert!(!covers(&budget(json!({}), json!({})), &l));
        assert!(covers(
            &budget(
                json!({"selector": {"matchLabels": {"app": "a"}}}),
                json!({})
            ),
            &l
        ));
        assert!(!covers(
            &budget(
                json!({"selector": {"matchLabels": {"app": "b"}}}),
                json!({})
            ),
            &l
        ));
    }

    // Upstream's TestEviction table, the budget part.
    #[test]
    fn check_and_decrement_as_upstream() {
        let ok = budget(
            json!({"minAvailable": 1, "selector": {}}),
            json!({"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2,
                "desiredHealthy": 1, "expectedPods": 2,
                "conditions": [{"type": "DisruptionAllowed", "status": "True",
                    "reason": "SufficientPods", "message": "", "observedGeneration": 1,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let now: Timestamp = "2026-11-27T12:00:00Z".parse().unwrap();
        let updated = check_and_decrement(&ok, "p", now, false).unwrap().unwrap();
        assert_eq!(updated["status"]["disruptionsAllowed"], 0);
        assert_eq!(
            updated["status"]["disruptedPods"],
            json!({"p": "2026-11-27T12:00:00Z"})
        );
        let c = &updated["status"]["conditions"][0];
        assert_eq!(
            (
                c["status"].as_str(),
                c["reason"].as_str(),
                c["lastTransitionTime"].as_str()
            ),
            (
                Some("False"),
                Some("InsufficientPods"),
                Some("2026-11-27T12:00:00Z")
            )
        );
        // A dry run checks and writes nothing.
        assert_eq!(check_and_decrement(&ok, "p", now, true).unwrap(), None);

        // None left.
        let e = check_and_decrement(&updated, "q", now, false).unwrap_err();
        assert_eq!((e.code, e.reason), (429, "TooManyRequests"));
        assert_eq!(
            e.message,
            "Cannot evict pod as it would violate the pod's disruption budget."
        );
        assert_eq!(
            e.details,
            Some(json!({"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget b needs 1 healthy pods and has 2 currently"}]}))
        );
        // Not processed yet.
        let mut fresh = ok.clone();
        fresh["metadata"]["generation"] = json!(2);
        let e = check_and_decrement(&fresh, "p", now, false).unwrap_err();
        assert_eq!(e.code, 429);
        assert_eq!(
            e.details,
            Some(json!({"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget b is still being processed by the server."}],
                "retryAfterSeconds": 10}))
        );
        // Inconsistent.
        let mut negative = ok.clone();
        negative["status"]["disruptionsAllowed"] = json!(-1);
        let e = check_and_decrement(&negative, "p", now, false).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "poddisruptionbudget.policy \"b\" is forbidden: pdb disruptions allowed is negative"
        );
    }

    #[test]
    fn unready_pods_leave_without_the_budget_when_it_is_met_or_allowed() {
        let with = |policy: Value, current: i64, desired: i64| {
            budget(
                json!({"selector": {}, "unhealthyPodEvictionPolicy": policy}),
                json!({"currentHealthy": current, "desiredHealthy": desired}),
            )
        };
        assert!(unready_pod_may_go(&with(json!(null), 2, 2)));
        assert!(!unready_pod_may_go(&with(json!(null), 1, 2)));
        assert!(!unready_pod_may_go(&with(json!("IfHealthyBudget"), 0, 0)));
        assert!(unready_pod_may_go(&with(json!("AlwaysAllow"), 0, 2)));
    }
}
