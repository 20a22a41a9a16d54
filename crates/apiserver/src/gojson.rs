//! What Go's encoding/json leaves out of an API object: kube-apiserver decodes every object
//! into its Go struct and encodes it back, so a field tagged `omitempty` that holds its zero
//! value (a non-pointer `""`, `0` or `false`, an empty slice or map) is not stored and never
//! shown, whatever the client sent: `labels: {}`, `args: []`, an env var's `value: ""`, a Job
//! status's `active: 0` all vanish. kbatch's typed form (k8s-openapi) keeps them, so the
//! encoded object is pruned here with the Go type tables generated from kubectl (the same
//! tables that decode protobuf bodies). A pointer field keeps a zero value (`parallelism: 0`),
//! a field without `omitempty` keeps it (`restartCount: 0`), and structs are never dropped.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
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

/// Each struct's fields (inlined structs' fields included) sorted by JSON name, built once: an
/// object's keys come in that order too, so the two are walked side by side.
type Index = HashMap<usize, Vec<&'static Field>, BuildHasherDefault<AddressHasher>>;

/// Hashes a table's address: distinct, aligned addresses need no more than a multiply.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut all = Index::default();
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
    let mut fields = Vec::new();
    collect(msg, &mut fields);
    fields.sort_by_key(|f| f.json);
    all.insert(key(msg), fields);
    for f in msg.fields {
        if let Ty::Msg(m) = f.ty {
            add(all, m);
        }
    }
}

/// `msg`'s fields, with an inlined struct's fields in its parent's place.
fn collect(msg: &'static Msg, into: &mut Vec<&'static Field>) {
    for f in msg.fields {
        match f.ty {
            Ty::Msg(m) if f.inline => collect(m, into),
            _ => into.push(f),
        }
    }
}

/// The field named `name`: the next ones in `fields` from `*at` when keys come in order (a
/// map's do), else by binary search.
fn find(fields: &[&'static Field], at: &mut usize, name: &str) -> Option<&'static Field> {
    while let Some(f) = fields.get(*at) {
        match f.json.cmp(name) {
            std::cmp::Ordering::Less => *at += 1,
            std::cmp::Ordering::Equal => return Some(f),
            std::cmp::Ordering::Greater => {
                return match fields.binary_search_by(|f| f.json.cmp(name)) {
                    Ok(i) => fields.get(i).copied(),
                    Err(_) => None,
                };
            }
        }
    }
    fields
        .binary_search_by(|f| f.json.cmp(name))
        .ok()
        .and_then(|i| fields.get(i).copied())
}

fn prune(obj: &mut Map<String, Value>, msg: &'static Msg) {
    let Some(fields) = index().get(&key(msg)) else {
        return;
    };
    let mut at = 0;
    // Zero values are rare: they are collected and removed after the walk.
    let mut dropped = Vec::new();
    for (name, v) in obj.iter_mut() {
        let Some(f) = find(fields, &mut at, name) else {
            continue;
        };
        if !f.keep_zero && is_go_zero(f, v) {
            dropped.push(name.clone());
            continue;
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
    }
    for name in dropped {
        obj.remove(&name);
    }
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
    fn fields_are_found_in_order_and_out_of_it() {
        let pod = schema_of("v1", "Pod").expect("the Pod table");
        let meta = pod
            .fields
            .iter()
            .find_map(|f| match f.ty {
                Ty::Msg(m) if f.json == "metadata" => Some(m),
                _ => None,
            })
            .expect("metadata");
        let fields = &index()[&key(meta)];
        let mut at = 0;
        for (name, found) in [
            ("annotations", true),
            ("labels", true),
            ("name", true),
            ("generateName", true),
            ("nope", false),
            ("uid", true),
            ("annotations", true),
        ] {
            assert_eq!(
                find(fields, &mut at, name).map(|f| f.json),
                found.then_some(name),
                "{name}"
            );
        }
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
