//! JSON renderings of bad values in Go's field order (`json.Marshal` of the Go structs), for
//! the types whose k8s-openapi serialization orders fields differently.

use k8s_openapi::api::batch::v1::{SuccessPolicy, UncountedTerminatedPods};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use crate::field::Value;

fn js<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}

/// Appends `"key":value` to an object body being built.
fn push(out: &mut Vec<String>, key: &str, value: String) {
    out.push(format!("{}:{}", js(key), value));
}

fn object(fields: Vec<String>) -> String {
    format!("{{{}}}", fields.join(","))
}

pub fn owner_reference(r: &OwnerReference) -> String {
    let mut f = Vec::new();
    push(&mut f, "apiVersion", js(&r.api_version));
    push(&mut f, "kind", js(&r.kind));
    push(&mut f, "name", js(&r.name));
    push(&mut f, "uid", js(&r.uid));
    if let Some(c) = r.controller {
        push(&mut f, "controller", js(&c));
    }
    if let Some(b) = r.block_owner_deletion {
        push(&mut f, "blockOwnerDeletion", js(&b));
    }
    object(f)
}

pub fn owner_references(refs: &[OwnerReference]) -> Value {
    let items: Vec<String> = refs.iter().map(owner_reference).collect();
    Value(format!("[{}]", items.join(",")))
}

fn selector_body(s: &LabelSelector) -> String {
    let mut f = Vec::new();
    if let Some(ml) = &s.match_labels {
        push(&mut f, "matchLabels", js(ml));
    }
    if let Some(me) = &s.match_expressions {
        push(&mut f, "matchExpressions", js(me));
    }
    object(f)
}

/// A `*LabelSelector`: `null` when absent.
pub fn label_selector(s: Option<&LabelSelector>) -> Value {
    Value(s.map(selector_body).unwrap_or_else(|| "null".to_string()))
}

pub fn success_policy(p: &SuccessPolicy) -> Value {
    let rules: Vec<String> = p
        .rules
        .iter()
        .map(|r| {
            let mut f = Vec::new();
            if let Some(si) = &r.succeeded_indexes {
                push(&mut f, "succeededIndexes", js(si));
            }
            if let Some(sc) = r.succeeded_count {
                push(&mut f, "succeededCount", js(&sc));
            }
            object(f)
        })
        .collect();
    Value(object(vec![format!("\"rules\":[{}]", rules.join(","))]))
}

pub fn uncounted(u: Option<&UncountedTerminatedPods>) -> Value {
    let Some(u) = u else {
        return Value("null".to_string());
    };
    let mut f = Vec::new();
    if let Some(s) = &u.succeeded {
        push(&mut f, "succeeded", js(s));
    }
    if let Some(fl) = &u.failed {
        push(&mut f, "failed", js(fl));
    }
    Value(object(f))
}
