//! OpenAPI v3 documents for the served group-versions: the root index and one document per
//! group-version, with the operations, their `x-kubernetes-group-version-kind` and the query
//! parameters clients look for (kubectl's validation needs `fieldValidation` on PATCH), and
//! the schemas of the kinds (for `kubectl explain`). The schemas come from the k8s-openapi
//! types, generated into `openapi/schemas.json` by `scripts/gen-openapi-schemas.sh`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

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

/// Every group-version's document with its path key and content hash, built once: they
/// depend on nothing but the build.
fn documents() -> &'static [(String, Value, String)] {
    static DOCS: OnceLock<Vec<(String, Value, String)>> = OnceLock::new();
    DOCS.get_or_init(|| {
        group_versions()
            .into_iter()
            .map(|(key, g, v)| {
                let doc = document(g, v);
                let h = hash(doc.to_string().as_bytes());
                (key, doc, h)
            })
            .collect()
    })
}

pub fn root() -> Value {
    let mut paths = Map::new();
    for (key, _, h) in documents() {
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={h}")}),
        );
    }
    json!({"paths": paths})
}

/// The document for `/openapi/v3/<key>`.
pub fn for_path(key: &str) -> Result<&'static Value, ApiError> {
    documents()
        .iter()
        .find(|(k, _, _)| k == key)
        .map(|(_, doc, _)| doc)
        .ok_or_else(ApiError::no_route)
}

/// The generated schemas, keyed by upstream definition name.
fn all_schemas() -> &'static Map<String, Value> {
    static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        // Generated and checked in: a parse failure is a build defect, caught by the tests.
        serde_json::from_str(include_str!("../openapi/schemas.json")).unwrap_or_default()
    })
}

/// Upstream's definition name of a served kind: `io.k8s.api.<group's first label>.<v>.<Kind>`.
fn definition_name(r: &Resource) -> String {
    let package = match r.group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    format!("io.k8s.api.{package}.{}.{}", r.version, r.kind_name)
}

/// Names of the definitions `schema` refers to.
fn refs(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str)
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                out.push(name.to_string());
            }
            m.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// The schemas of the kinds of one group-version and everything they reference; each kind
/// carries its `x-kubernetes-group-version-kind`, which is how kubectl finds it.
fn schemas_for(resources: &[&Resource]) -> Map<String, Value> {
    let all = all_schemas();
    let mut todo: Vec<String> = resources.iter().map(|r| definition_name(r)).collect();
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if let Some(schema) = all.get(&name)
            && seen.insert(name)
        {
            refs(schema, &mut todo);
        }
    }
    let mut out: Map<String, Value> = seen
        .into_iter()
        .filter_map(|name| all.get(&name).map(|s| (name, s.clone())))
        .collect();
    for r in resources {
        if let Some(Value::Object(schema)) = out.get_mut(&definition_name(r)) {
            schema.insert("x-kubernetes-group-version-kind".into(), json!([gvk(r)]));
        }
    }
    out
}

fn param(name: &str, location: &str, description: &str) -> Value {
    let required = location == "path";
    json!({"name": name, "in": location, "description": description, "required": required, "schema": {"type": "string", "uniqueItems": true}})
}

fn gvk(r: &Resource) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind_name})
}

fn op(r: &Resource, action: &str, verb: &str, sub: &str, write: bool) -> Value {
    op_for(gvk(r), r.version, r.kind_name, action, verb, sub, write)
}

/// `op` for a kind by name (the access reviews are not stored resources).
fn op_for(
    gvk: Value,
    version: &str,
    kind: &str,
    action: &str,
    verb: &str,
    sub: &str,
    write: bool,
) -> Value {
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
    let id = format!("{verb}{}{kind}{sub}", capitalize(version));
    json!({
        "description": format!("{action} {kind}"),
        "operationId": id,
        "parameters": params,
        "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
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
    let served: Vec<&Resource> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    for r in served.iter().copied() {
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
    // The access reviews: a create each, as upstream lists them. Their schemas are not in
    // `schemas.json`: nothing needs them (`kubectl auth can-i` sends no manifest; `kubectl
    // create -f` of a review finds no PATCH operation to learn that the server validates
    // fields, and wants the `/openapi/v2` schemas, which this server does not serve, unless
    // given `--validate=false`).
    for r in crate::authorization::reviews_of(group, version) {
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": r.kind_name});
        paths.insert(
            path,
            json!({"post": op_for(gvk, version, r.kind_name, "post", "create", "", true)}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", crate::discovery::MAJOR, crate::discovery::MINOR)},
        "paths": paths,
        "components": {"schemas": schemas_for(&served)},
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
            "apis/authorization.k8s.io/v1",
        ] {
            let url = r["paths"][key]["serverRelativeURL"].as_str().unwrap();
            assert!(
                url.starts_with(&format!("/openapi/v3/{key}?hash=")),
                "{url}"
            );
        }
    }

    #[test]
    fn reviews_are_created_with_field_validation() {
        let d = for_path("apis/authorization.k8s.io/v1").unwrap();
        let post = &d["paths"]["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"]["post"];
        assert_eq!(
            post["x-kubernetes-group-version-kind"],
            json!({"group": "authorization.k8s.io", "version": "v1", "kind": "SelfSubjectAccessReview"})
        );
        assert!(
            post["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        let local =
            "/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews";
        assert!(d["paths"][local]["post"].is_object());
        assert_eq!(d["paths"].as_object().unwrap().len(), 4);
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

    /// What `kubectl explain` needs: each kind's schema found by its GVK, and every
    /// reference resolvable inside the same document.
    #[test]
    fn documents_carry_the_kinds_and_their_references() {
        assert!(all_schemas().len() > 100, "schemas.json did not parse");
        for (key, kinds) in [
            ("apis/batch/v1", &["Job", "CronJob"][..]),
            (
                "api/v1",
                &["Pod", "Namespace", "Node", "Event", "ConfigMap", "Secret"][..],
            ),
            ("apis/events.k8s.io/v1", &["Event"][..]),
            ("apis/coordination.k8s.io/v1", &["Lease"][..]),
        ] {
            let doc = for_path(key).unwrap();
            let schemas = doc["components"]["schemas"].as_object().unwrap();
            for kind in kinds {
                let found = schemas.values().filter(|s| {
                    s["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|g| g.iter().any(|g| g["kind"] == *kind))
                });
                assert_eq!(found.count(), 1, "{key} {kind}");
            }
            let mut names = Vec::new();
            refs(doc, &mut names);
            for name in names {
                assert!(schemas.contains_key(&name), "{key}: dangling $ref {name}");
            }
        }
        let batch = for_path("apis/batch/v1").unwrap();
        let spec = &batch["components"]["schemas"]["io.k8s.api.batch.v1.JobSpec"];
        assert_eq!(spec["properties"]["backoffLimit"]["type"], "integer");
        assert!(
            batch["components"]["schemas"]
                .get("io.k8s.api.core.v1.PodSpec")
                .is_some()
        );
    }
}
