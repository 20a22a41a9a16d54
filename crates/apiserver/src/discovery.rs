//! Discovery documents: /version, /api, /apis, and the per-group-version resource lists.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::{GROUPS, RESOURCES, Resource};

/// The Kubernetes release whose API kbatch serves.
pub const MAJOR: &str = "1";
pub const MINOR: &str = "37";

pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = GROUPS.iter().map(|(g, v)| group_entry(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(group: &str) -> Result<Value, ApiError> {
    let (g, v) = GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .ok_or_else(ApiError::no_route)?;
    let mut e = group_entry(g, v);
    if let Some(o) = e.as_object_mut() {
        o.insert("kind".into(), json!("APIGroup"));
        o.insert("apiVersion".into(), json!("v1"));
    }
    Ok(e)
}

fn resource_entries(r: &Resource) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind_name,
        "verbs": crate::resources::ALL_VERBS,
    });
    if let Some(o) = main.as_object_mut() {
        if !r.short_names.is_empty() {
            o.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            o.insert("categories".into(), json!(r.categories));
        }
    }
    let mut out = vec![main];
    for (sub, verbs) in r.subresources {
        let kind = if *sub == "binding" {
            "Binding"
        } else {
            r.kind_name
        };
        out.push(json!({"name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs}));
    }
    out
}

pub fn api_resource_list(group: &str, version: &str) -> Result<Value, ApiError> {
    let served = group.is_empty() && version == "v1"
        || GROUPS.iter().any(|(g, v)| *g == group && *v == version);
    if !served {
        return Err(ApiError::no_route());
    }
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(resource_entries)
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
