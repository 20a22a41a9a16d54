//! Taints and tolerations, as upstream's `Toleration.ToleratesTaint` and
//! `GetMatchingTolerations` decide them: shared by the node's scheduler and admission and by
//! the taint eviction controller.

use k8s_openapi::api::core::v1::{Taint, Toleration};

pub const NO_EXECUTE: &str = "NoExecute";

/// `Toleration.ToleratesTaint`: an empty effect or key matches any; `Equal` (or no operator)
/// compares values, `Exists` matches any value. `Lt`/`Gt` need the
/// TaintTolerationComparisonOperators gate, alpha and off in 1.37, so they match nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

/// `GetMatchingTolerations`: whether every taint is tolerated and, if so, the first toleration
/// that tolerates each taint, in the taints' order (None when one is not tolerated).
pub fn matching_tolerations<'t>(
    taints: &[Taint],
    tolerations: &'t [Toleration],
) -> Option<Vec<&'t Toleration>> {
    taints
        .iter()
        .map(|taint| tolerations.iter().find(|t| tolerates(t, taint)))
        .collect()
}

/// The taints with effect NoExecute, in their order.
pub fn no_execute(taints: &[Taint]) -> Vec<Taint> {
    taints
        .iter()
        .filter(|t| t.effect == NO_EXECUTE)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taints(v: serde_json::Value) -> Vec<Taint> {
        serde_json::from_value(v).unwrap()
    }

    fn tolerations(v: serde_json::Value) -> Vec<Toleration> {
        serde_json::from_value(v).unwrap()
    }

    // Upstream's TestGetMatchingTolerations.
    #[test]
    fn matching_tolerations_table() {
        let rows = [
            ("no taints", json!([]), json!([]), Some(vec![])),
            (
                "no tolerations",
                json!([{"key": "foo", "value": "bar", "effect": "NoExecute"}]),
                json!([]),
                None,
            ),
            (
                "the one that tolerates is picked",
                json!([{"key": "foo", "value": "bar", "effect": "NoExecute"}]),
                json!([{"key": "other", "operator": "Exists"},
                       {"key": "foo", "value": "bar", "effect": "NoExecute", "tolerationSeconds": 5}]),
                Some(vec![1]),
            ),
            (
                "one taint not tolerated",
                json!([{"key": "foo", "value": "bar", "effect": "NoExecute"},
                       {"key": "baz", "effect": "NoExecute"}]),
                json!([{"key": "foo", "operator": "Exists"}]),
                None,
            ),
            (
                "one toleration for two taints",
                json!([{"key": "a", "effect": "NoExecute"}, {"key": "b", "effect": "NoExecute"}]),
                json!([{"operator": "Exists"}]),
                Some(vec![0, 0]),
            ),
        ];
        for (name, ta, to, want) in rows {
            let ta = taints(ta);
            let to = tolerations(to);
            let got = matching_tolerations(&ta, &to).map(|m| {
                m.iter()
                    .map(|t| to.iter().position(|x| std::ptr::eq(x, *t)).unwrap())
                    .collect::<Vec<_>>()
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn only_no_execute_taints_are_kept() {
        let all = taints(json!([{"key": "a", "effect": "NoSchedule"},
            {"key": "b", "effect": "NoExecute"}, {"key": "c", "effect": "PreferNoSchedule"}]));
        let kept = no_execute(&all);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].key, "b");
    }
}
