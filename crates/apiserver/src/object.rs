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

/// Two stored documents equal apart from their resourceVersion (a no-op update).
pub fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}
