//! Small helpers over JSON objects' metadata.

use serde_json::{Map, Value};

pub fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata").and_then(Value::as_object)
}

/// The metadata map, created if missing (a non-object document becomes an empty object).
pub fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    if let Value::Object(o) = v {
        let m = o
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !m.is_object() {
            *m = Value::Object(Map::new());
        }
        if let Value::Object(mm) = m {
            return mm;
        }
    }
    unreachable!("metadata was just made an object")
}

pub fn meta_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    meta(v)
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub fn name(v: &Value) -> &str {
    meta_str(v, "name").unwrap_or("")
}

pub fn labels(v: &Value) -> Option<&Map<String, Value>> {
    meta(v)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

pub fn finalizers(v: &Value) -> Vec<String> {
    meta(v)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(v: &mut Value, f: &[String]) {
    let m = meta_mut(v);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert(
            "finalizers".into(),
            Value::Array(f.iter().map(|s| Value::String(s.clone())).collect()),
        );
    }
}

/// The revision a client put in `metadata.resourceVersion`, if any.
pub fn resource_version(v: &Value) -> Option<&str> {
    meta_str(v, "resourceVersion")
}

/// RFC 3339 with whole seconds, as Kubernetes `metav1.Time` serializes.
pub fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Two stored documents equal apart from their resourceVersion (a no-op update). Compared in
/// place: cloning both documents to strip the field cost more than the comparison.
pub fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter().all(|(k, av)| match b.get(k) {
            None => false,
            Some(bv) if k == "metadata" => same_meta_ignoring_rv(av, bv),
            Some(bv) => av == bv,
        })
}

fn same_meta_ignoring_rv(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    const RV: &str = "resourceVersion";
    let others = |m: &Map<String, Value>| m.len() - usize::from(m.contains_key(RV));
    others(a) == others(b)
        && a.iter()
            .filter(|(k, _)| k.as_str() != RV)
            .all(|(k, av)| b.get(k) == Some(av))
}

#[cfg(test)]
mod tests {
    use super::same_ignoring_rv;
    use serde_json::json;

    #[test]
    fn no_op_updates_ignore_only_the_resource_version() {
        let a = json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "1", "labels": {"a": "b"}}, "spec": {"x": 1}});
        let b = json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "9", "name": "p"}, "spec": {"x": 1}, "kind": "Pod"});
        assert!(same_ignoring_rv(&a, &b));
        let no_rv = json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}});
        assert!(same_ignoring_rv(&a, &no_rv) && same_ignoring_rv(&no_rv, &a));
        let relabelled = json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "1", "labels": {"a": "c"}}, "spec": {"x": 1}});
        assert!(!same_ignoring_rv(&a, &relabelled));
        let renamed_key = json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "1", "label": {"a": "b"}}, "spec": {"x": 1}});
        assert!(!same_ignoring_rv(&a, &renamed_key));
        let more = json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "uid": "u"}, "spec": {"x": 1}});
        assert!(!same_ignoring_rv(&a, &more) && !same_ignoring_rv(&more, &a));
        let status = json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}, "status": {}});
        assert!(!same_ignoring_rv(&a, &status) && !same_ignoring_rv(&status, &a));
        assert!(same_ignoring_rv(&json!(1), &json!(1)) && !same_ignoring_rv(&json!(1), &json!(2)));
    }
}
