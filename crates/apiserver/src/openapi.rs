//! OpenAPI v3 documents for the served group-versions: the root index and one document per
//! group-version, with the operations, their `x-kubernetes-group-version-kind` and the query
//! parameters clients look for (kubectl's validation needs `fieldValidation` on PATCH).

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::{GROUPS, RESOURCES, Resource};

/// Every served group-version as its OpenAPI path key (`api/v1`, `apis/batch/v1`).
fn group_versions() -> Vec<(String, &'static str, &'static str)> {
    let mut out = vec![("api/v1".to_string(), "", "v1")];
    out.extend(
        GROUPS
            .iter()
            .map(|(g, v)| (format!("apis/{g}/{v}"), *g, *v)),
    );
    out
}

/// FNV-1a: a stable content hash for the `?hash=` cache key.
fn hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016X}")
}

pub fn root() -> Value {
    let mut paths = Map::new();
    for (key, g, v) in group_versions() {
        let doc = document(g, v);
        let h = hash(doc.to_string().as_bytes());
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={h}")}),
        );
    }
    json!({"paths": paths})
}

/// The document for `/openapi/v3/<key>`.
pub fn for_path(key: &str) -> Result<Value, ApiError> {
    group_versions()
        .into_iter()
        .find(|(k, _, _)| k == key)
        .map(|(_, g, v)| document(g, v))
        .ok_or_else(ApiError::no_route)
}

fn param(name: &str, location: &str, description: &str) -> Value {
    let required = location == "path";
    json!({"name": name, "in": location, "description": description, "required": required, "schema": {"type": "string", "uniqueItems": true}})
}

fn gvk(r: &Resource) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind_name})
}

fn op(r: &Resource, action: &str, verb: &str, sub: &str, write: bool) -> Value {
    let mut params = vec![param(
        "pretty",
        "query",
        "If 'true', then the output is pretty printed.",
    )];
    if write {
        params.push(param(
            "dryRun",
            "query",
            "When present, indicates that modifications should not be persisted.",
        ));
        params.push(param("fieldManager", "query", "fieldManager is a name associated with the actor or entity that is making these changes."));
        params.push(param(
            "fieldValidation",
            "query",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
        ));
    }
    if verb == "patch" {
        params.push(param(
            "force",
            "query",
            "Force is going to \"force\" Apply requests.",
        ));
    }
    let id = format!("{verb}{}{}{}", capitalize(r.version), r.kind_name, sub);
    json!({
        "description": format!("{action} {}", r.kind_name),
        "operationId": id,
        "parameters": params,
        "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(r),
    })
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn document(group: &str, version: &str) -> Value {
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let base = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        paths.insert(
            base.clone(),
            json!({
                "get": op(r, "list", "list", "", false),
                "post": op(r, "post", "create", "", true),
                "delete": op(r, "deletecollection", "deletecollection", "", false),
            }),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": op(r, "get", "read", "", false),
                "put": op(r, "put", "replace", "", true),
                "patch": op(r, "patch", "patch", "", true),
                "delete": op(r, "delete", "delete", "", false),
            }),
        );
        if r.has_subresource("status") {
            paths.insert(
                format!("{base}/{{name}}/status"),
                json!({
                    "get": op(r, "get", "read", "Status", false),
                    "put": op(r, "put", "replace", "Status", true),
                    "patch": op(r, "patch", "patch", "Status", true),
                }),
            );
        }
        if r.namespaced {
            paths.insert(
                format!("{prefix}/{}", r.plural),
                json!({"get": op(r, "list", "list", "ForAllNamespaces", false)}),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", crate::discovery::MAJOR, crate::discovery::MINOR)},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_lists_every_group_version() {
        let r = root();
        for key in [
            "api/v1",
            "apis/batch/v1",
            "apis/events.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
        ] {
            let url = r["paths"][key]["serverRelativeURL"].as_str().unwrap();
            assert!(
                url.starts_with(&format!("/openapi/v3/{key}?hash=")),
                "{url}"
            );
        }
    }

    #[test]
    fn patch_operations_carry_gvk_and_field_validation() {
        let d = for_path("apis/batch/v1").unwrap();
        let patch = &d["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "batch", "version": "v1", "kind": "Job"})
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        let ns = for_path("api/v1").unwrap();
        assert!(ns["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(for_path("apis/nope/v1").is_err());
    }
}
