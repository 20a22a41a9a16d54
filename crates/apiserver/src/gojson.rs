//! What Go's encoding/json leaves out of an API object: kube-apiserver decodes every object
//! into its Go struct and encodes it back, so a field tagged `omitempty` that holds its zero
//! value (a non-pointer `""`, `0` or `false`, an empty slice or map) is not stored and never
//! shown, whatever the client sent: `labels: {}`, `args: []`, an env var's `value: ""`, a Job
//! status's `active: 0` all vanish. kbatch's typed form (k8s-openapi) keeps them, so the
//! encoded object is pruned here with the Go type tables generated from kubectl (the same
//! tables that decode protobuf bodies). A pointer field keeps a zero value (`parallelism: 0`),
//! a field without `omitempty` keeps it (`restartCount: 0`), and structs are never dropped.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::protobuf::go_types::{Card, Field, Msg, Ty, root};

/// The Go struct of `kind` in `api_version`, when kbatch has its table.
pub fn schema_of(api_version: &str, kind: &str) -> Option<&'static Msg> {
    root(api_version, kind)
}

/// Drops from `v` (an object of `msg`'s type) every field Go's `omitempty` would leave out,
/// at every depth.
pub fn drop_omitted(v: &mut Value, msg: &'static Msg) {
    if let Some(obj) = v.as_object_mut() {
        prune(obj, msg);
    }
}

/// JSON name → field, for each struct (inlined structs' fields included), built once.
type Index = HashMap<usize, HashMap<&'static str, &'static Field>>;

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut all = Index::new();
        for msg in crate::protobuf::go_types::roots() {
            add(&mut all, msg);
        }
        all
    })
}

fn key(msg: &'static Msg) -> usize {
    std::ptr::from_ref(msg) as usize
}

fn add(all: &mut Index, msg: &'static Msg) {
    if all.contains_key(&key(msg)) {
        return;
    }
    let mut fields = HashMap::new();
    collect(msg, &mut fields);
    all.insert(key(msg), fields);
    for f in msg.fields {
        if let Ty::Msg(m) = f.ty {
            add(all, m);
        }
    }
}

/// `msg`'s fields by JSON name, with an inlined struct's fields in its parent's place.
fn collect(msg: &'static Msg, into: &mut HashMap<&'static str, &'static Field>) {
    for f in msg.fields {
        match f.ty {
            Ty::Msg(m) if f.inline => collect(m, into),
            _ => {
                into.insert(f.json, f);
            }
        }
    }
}

fn prune(obj: &mut Map<String, Value>, msg: &'static Msg) {
    let Some(fields) = index().get(&key(msg)) else {
        return;
    };
    obj.retain(|name, v| {
        let Some(f) = fields.get(name.as_str()) else {
            return true;
        };
        if !f.keep_zero && is_go_zero(f, v) {
            return false;
        }
        if let Ty::Msg(m) = f.ty {
            match (f.card, v) {
                (Card::One, Value::Object(o)) => prune(o, m),
                (Card::Repeated, Value::Array(items)) => {
                    for item in items.iter_mut().filter_map(Value::as_object_mut) {
                        prune(item, m);
                    }
                }
                (Card::Map, Value::Object(entries)) => {
                    for item in entries.values_mut().filter_map(Value::as_object_mut) {
                        prune(item, m);
                    }
                }
                _ => {}
            }
        }
        true
    });
}

/// The value Go's `omitempty` drops for this field's type: empty slices and maps (and null,
/// a nil one), a zero scalar. Structs, times, quantities and int-or-strings never are.
fn is_go_zero(f: &Field, v: &Value) -> bool {
    match (f.card, v) {
        (Card::Repeated, Value::Array(a)) => a.is_empty(),
        (Card::Map, Value::Object(m)) => m.is_empty(),
        (Card::Repeated | Card::Map, Value::Null) => true,
        (Card::One, _) => match f.ty {
            Ty::String | Ty::Bytes => v.as_str() == Some("") || v.is_null(),
            Ty::Int32 | Ty::Int64 => v.as_i64() == Some(0) || v.is_null(),
            Ty::Bool => v.as_bool() == Some(false) || v.is_null(),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pruned(api_version: &str, kind: &str, mut v: Value) -> Value {
        let msg = schema_of(api_version, kind).expect("a table for the kind");
        drop_omitted(&mut v, msg);
        v
    }

    #[test]
    fn omitempty_zero_values_go_and_pointers_and_required_fields_stay() {
        let pod = pruned(
            "v1",
            "Pod",
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "", "labels": {}, "annotations": {},
                             "finalizers": [], "generation": 0},
                "spec": {"nodeSelector": {}, "volumes": [], "hostNetwork": false,
                         "terminationGracePeriodSeconds": 0, "securityContext": {},
                         "containers": [{"name": "c", "image": "", "args": [], "workingDir": "",
                             "env": [{"name": "A", "value": ""}], "resources": {},
                             "ports": [{"containerPort": 80, "hostPort": 0, "name": ""}]}]},
                "status": {"containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                                                  "image": "", "imageID": "", "started": false}]}
            }),
        );
        assert_eq!(
            pod,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p"},
                // A pointer keeps its zero; structs stay, empty or not.
                "spec": {"terminationGracePeriodSeconds": 0, "securityContext": {},
                         "containers": [{"name": "c", "env": [{"name": "A"}], "resources": {},
                             "ports": [{"containerPort": 80}]}]},
                // Fields without omitempty keep their zeros; `started` is a pointer.
                "status": {"containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                                                  "image": "", "imageID": "", "started": false}]}
            })
        );
    }

    #[test]
    fn a_job_status_drops_zero_counts_but_not_the_pointer_ones() {
        let job = pruned(
            "batch/v1",
            "Job",
            json!({"status": {"active": 0, "succeeded": 1, "failed": 0, "ready": 0,
                              "terminating": 0, "uncountedTerminatedPods": {"succeeded": []},
                              "completedIndexes": ""},
                   "spec": {"parallelism": 0, "suspend": false}}),
        );
        assert_eq!(
            job,
            json!({"status": {"succeeded": 1, "ready": 0, "terminating": 0,
                              "uncountedTerminatedPods": {}},
                   "spec": {"parallelism": 0, "suspend": false}})
        );
    }

    #[test]
    fn unknown_fields_and_kinds_are_left_alone() {
        let mut v = json!({"x": "", "metadata": {"labels": {}}});
        let before = v.clone();
        if let Some(msg) = schema_of("v1", "NoSuchKind") {
            drop_omitted(&mut v, msg);
        }
        assert_eq!(v, before);
        let cm = pruned(
            "v1",
            "ConfigMap",
            json!({"x": "", "data": {"k": ""}, "binaryData": {}}),
        );
        // A map's entries are values, not fields: an empty string in one stays.
        assert_eq!(cm, json!({"x": "", "data": {"k": ""}}));
    }
}
