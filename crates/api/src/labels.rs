//! Label selectors (`metav1.LabelSelector`) applied to an object's labels, as
//! `LabelSelectorAsSelector` then `Matches` do.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector` (every `matchLabels` pair and every expression), or
/// `None` when the selector cannot be built (an unknown operator, or values where the operator
/// takes none or none where it needs some). An empty selector matches everything.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let mut matches = true;
    for (k, v) in selector.match_labels.iter().flatten() {
        matches &= labels.get(k) == Some(v);
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or(&[]);
        let got = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" if !values.is_empty() => got.is_some_and(|v| values.contains(v)),
            "NotIn" if !values.is_empty() => got.is_none_or(|v| !values.contains(v)),
            "Exists" if values.is_empty() => got.is_some(),
            "DoesNotExist" if values.is_empty() => got.is_none(),
            _ => return None,
        };
        matches &= ok;
    }
    Some(matches)
}

/// A label map from `(key, value)` pairs.
pub fn from_pairs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn selectors_match_as_upstreams() {
        let l = from_pairs(&[("app", "a"), ("tier", "web")]);
        assert_eq!(selector_matches(&sel(json!({})), &l), Some(true));
        assert_eq!(
            selector_matches(&sel(json!({"matchLabels": {"app": "a"}})), &l),
            Some(true)
        );
        assert_eq!(
            selector_matches(&sel(json!({"matchLabels": {"app": "b"}})), &l),
            Some(false)
        );
        let expr = |op: &str, values: serde_json::Value| {
            sel(json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]}))
        };
        assert_eq!(
            selector_matches(&expr("In", json!(["web", "db"])), &l),
            Some(true)
        );
        assert_eq!(
            selector_matches(&expr("NotIn", json!(["web"])), &l),
            Some(false)
        );
        assert_eq!(
            selector_matches(&expr("NotIn", json!(["web"])), &from_pairs(&[])),
            Some(true)
        );
        assert_eq!(selector_matches(&expr("Exists", json!([])), &l), Some(true));
        assert_eq!(
            selector_matches(&expr("DoesNotExist", json!([])), &l),
            Some(false)
        );
        assert_eq!(selector_matches(&expr("In", json!([])), &l), None);
        assert_eq!(selector_matches(&expr("Near", json!(["x"])), &l), None);
    }
}
