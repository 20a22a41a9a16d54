//! policy/v1 PodDisruptionBudget validation (`pkg/apis/policy/validation`): the spec on create
//! and update (its name needs only fit a path segment), the status on status updates.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{NEGATIVE_MSG, label_selector, object_meta, object_meta_update};
use crate::field::{ErrorList, FieldError, Path, Value};
use crate::names;

/// `spec.unhealthyPodEvictionPolicy` values.
pub const IF_HEALTHY_BUDGET: &str = "IfHealthyBudget";
pub const ALWAYS_ALLOW: &str = "AlwaysAllow";

fn int_or_percent_value(v: &IntOrString) -> Value {
    match v {
        IntOrString::Int(i) => Value::from(i64::from(*i)),
        IntOrString::String(s) => Value::from(s.as_str()),
    }
}

/// The percentage a `"N%"` value gives, if it is one.
pub fn percent(v: &IntOrString) -> Option<i64> {
    match v {
        IntOrString::String(s) => s.strip_suffix('%')?.parse().ok(),
        IntOrString::Int(_) => None,
    }
}

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`.
fn positive_int_or_percent(v: &IntOrString, path: &Path, errs: &mut ErrorList) {
    match v {
        IntOrString::String(s) => {
            let valid = s
                .strip_suffix('%')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            if !valid {
                errs.push(FieldError::invalid(
                    path.as_str(),
                    int_or_percent_value(v),
                    names::regex_error(
                        "a valid percent string must be a numeric string followed by an ending '%'",
                        "[0-9]+%",
                        &["1%", "93%"],
                    ),
                ));
            }
        }
        IntOrString::Int(i) if *i < 0 => {
            errs.push(FieldError::invalid(
                path.as_str(),
                i64::from(*i),
                NEGATIVE_MSG,
            ));
        }
        IntOrString::Int(_) => {}
    }
    if percent(v).is_some_and(|p| p > 100) {
        errs.push(FieldError::invalid(
            path.as_str(),
            int_or_percent_value(v),
            "must not be greater than 100%",
        ));
    }
}

/// `ValidatePodDisruptionBudgetSpec`.
fn spec(spec: &PodDisruptionBudgetSpec, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        errs.push(FieldError::invalid(
            path.as_str(),
            Value::json(spec),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    if let Some(v) = &spec.min_available {
        positive_int_or_percent(v, &path.child("minAvailable"), &mut errs);
    }
    if let Some(v) = &spec.max_unavailable {
        positive_int_or_percent(v, &path.child("maxUnavailable"), &mut errs);
    }
    errs.extend(label_selector(
        spec.selector.as_ref(),
        &path.child("selector"),
    ));
    if let Some(p) = spec.unhealthy_pod_eviction_policy.as_deref()
        && p != IF_HEALTHY_BUDGET
        && p != ALWAYS_ALLOW
    {
        errs.push(FieldError::not_supported(
            path.child("unhealthyPodEvictionPolicy").as_str(),
            p,
            &[ALWAYS_ALLOW, IF_HEALTHY_BUDGET],
        ));
    }
    errs
}

/// PodDisruptionBudget create: the spec, then the generic metadata check.
pub fn pdb_create(pdb: &PodDisruptionBudget) -> ErrorList {
    let mut errs = spec(
        pdb.spec
            .as_ref()
            .unwrap_or(&PodDisruptionBudgetSpec::default()),
        &Path::new("spec"),
    );
    errs.extend(object_meta(&pdb.metadata, true, names::path_segment_name));
    errs
}

/// PodDisruptionBudget update: the spec may change (since 1.15).
pub fn pdb_update(new: &PodDisruptionBudget, old: &PodDisruptionBudget) -> ErrorList {
    let mut errs = spec(
        new.spec
            .as_ref()
            .unwrap_or(&PodDisruptionBudgetSpec::default()),
        &Path::new("spec"),
    );
    errs.extend(object_meta_update(&new.metadata, &old.metadata));
    errs
}

/// `ValidatePodDisruptionBudgetStatusUpdate`: counts not negative, conditions well formed.
pub fn pdb_status_update(new: &PodDisruptionBudget, old: &PodDisruptionBudget) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    let Some(status) = &new.status else {
        return errs;
    };
    let path = Path::new("status");
    for (name, v) in [
        ("disruptionsAllowed", status.disruptions_allowed),
        ("currentHealthy", status.current_healthy),
        ("desiredHealthy", status.desired_healthy),
        ("expectedPods", status.expected_pods),
    ] {
        let v = v.unwrap_or(0);
        if v < 0 {
            errs.push(FieldError::invalid(
                path.child(name).as_str(),
                i64::from(v),
                NEGATIVE_MSG,
            ));
        }
    }
    for (i, c) in status.conditions.iter().flatten().enumerate() {
        condition(c, &path.child("conditions").index(i), &mut errs);
    }
    errs
}

/// metav1 `ValidateCondition`'s checks a controller could get wrong.
fn condition(c: &Condition, path: &Path, errs: &mut ErrorList) {
    for msg in names::qualified_name(&c.type_) {
        errs.push(FieldError::invalid(
            path.child("type").as_str(),
            c.type_.as_str(),
            msg,
        ));
    }
    if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
        errs.push(FieldError::not_supported(
            path.child("status").as_str(),
            c.status.as_str(),
            &["False", "True", "Unknown"],
        ));
    }
    if c.reason.is_empty() {
        errs.push(FieldError::required(
            path.child("reason").as_str(),
            "reason must be specified",
        ));
    }
    if c.observed_generation.is_some_and(|g| g < 0) {
        errs.push(FieldError::invalid(
            path.child("observedGeneration").as_str(),
            c.observed_generation.unwrap_or(0),
            NEGATIVE_MSG,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "n"}, "spec": spec}))
            .unwrap()
    }

    fn messages(errs: &ErrorList) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect()
    }

    // Upstream's TestValidateMinAvailablePodDisruptionBudgetSpec and
    // TestValidatePodDisruptionBudgetSpec.
    #[test]
    fn spec_rules() {
        let ok =
            |spec: serde_json::Value| assert!(pdb_create(&pdb(spec.clone())).is_empty(), "{spec}");
        ok(json!({"minAvailable": 0}));
        ok(json!({"minAvailable": 10}));
        ok(json!({"minAvailable": "1%"}));
        ok(json!({"maxUnavailable": "100%"}));
        ok(
            json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        );
        let bad = |spec: serde_json::Value| messages(&pdb_create(&pdb(spec)));
        assert_eq!(
            bad(json!({"minAvailable": -1})),
            ["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            bad(json!({"maxUnavailable": "120%"})),
            ["spec.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%"]
        );
        assert_eq!(
            bad(json!({"minAvailable": "1.1%"})),
            [
                "spec.minAvailable: Invalid value: \"1.1%\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
            ]
        );
        let both = bad(json!({"minAvailable": 1, "maxUnavailable": 1}));
        assert_eq!(both.len(), 1);
        assert!(
            both[0].starts_with("spec: Invalid value: ")
                && both[0].ends_with(": minAvailable and maxUnavailable cannot be both set"),
            "{both:?}"
        );
        assert_eq!(
            bad(json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"})),
            [
                "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Sometimes\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
            ]
        );
        assert_eq!(
            bad(json!({"selector": {"matchLabels": {"a b": "c"}}})).len(),
            1
        );
    }

    #[test]
    fn names_need_only_fit_a_path_segment() {
        let named = |name: &str| {
            let mut p = pdb(json!({"minAvailable": 1}));
            p.metadata.name = Some(name.into());
            messages(&pdb_create(&p))
        };
        assert!(named("Upper_Case").is_empty());
        assert_eq!(
            named(".."),
            ["metadata.name: Invalid value: \"..\": may not be '..'"]
        );
        assert_eq!(
            named("a%b"),
            ["metadata.name: Invalid value: \"a%b\": may not contain '%'"]
        );
    }

    #[test]
    fn status_counts_are_not_negative() {
        let old = pdb(json!({"minAvailable": 1}));
        let mut new = old.clone();
        new.status = serde_json::from_value(json!({"disruptionsAllowed": -1,
            "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0,
            "conditions": [{"type": "DisruptionAllowed", "status": "Maybe", "reason": "",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap();
        assert_eq!(
            messages(&pdb_status_update(&new, &old)),
            [
                "status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0",
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
                "status.conditions[0].reason: Required value: reason must be specified",
            ]
        );
    }
}
