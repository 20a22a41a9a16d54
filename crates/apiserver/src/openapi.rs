//! OpenAPI v3 documents for the served group-versions: the root index and one document per
//! group-version, with the operations, their `x-kubernetes-group-version-kind` and the query
//! parameters clients look for (kubectl's validation needs `fieldValidation` on PATCH), and
//! the schemas of the kinds (for `kubectl explain`), with upstream's patch, list and map
//! extensions (`markers`). The schemas come from the k8s-openapi types, generated into
//! `openapi/schemas.json` by `scripts/gen-openapi-schemas.sh`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::{GROUPS, RESOURCES, Resource};

pub(crate) mod markers;

/// Every served group-version as its OpenAPI path key (`api/v1`, `apis/batch/v1`).
pub(crate) fn group_versions() -> Vec<(String, &'static str, &'static str)> {
    let mut out = vec![("api/v1".to_string(), "", "v1")];
    out.extend(
        GROUPS
            .iter()
            .map(|(g, v)| (format!("apis/{g}/{v}"), *g, *v)),
    );
    out
}

/// FNV-1a: a stable content hash for the `?hash=` cache key (and `/openapi/v2`'s ETag).
pub(crate) fn hash(bytes: &[u8]) -> String {
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
pub(crate) fn all_schemas() -> &'static Map<String, Value> {
    static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        // Generated and checked in: a parse failure is a build defect, caught by the tests.
        serde_json::from_str(include_str!("../openapi/schemas.json")).unwrap_or_default()
    })
}

/// The generated schemas with upstream's patch, list and map extensions (`markers`), which
/// schemars does not know.
pub(crate) fn annotated_schemas() -> &'static Map<String, Value> {
    static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut all = all_schemas().clone();
        markers::annotate(&mut all);
        all
    })
}

/// The Go package of a group as upstream names definitions and tags (`core`, `batch`,
/// `events` for events.k8s.io).
pub(crate) fn package(group: &str) -> &str {
    match group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    }
}

/// Upstream's definition name of a served kind: `io.k8s.api.<group's first label>.<v>.<Kind>`.
pub(crate) fn definition_name(r: &Resource) -> String {
    format!(
        "io.k8s.api.{}.{}.{}",
        package(r.group),
        r.version,
        r.kind_name
    )
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
    let all = annotated_schemas();
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

/// A query parameter of an operation.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    /// The JSON type (`string`, `boolean`).
    pub(crate) ty: &'static str,
}

/// One operation of a served path, in neither version's form: `/openapi/v3` and
/// `/openapi/v2` render the same list.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// The HTTP method in lower case, as the path item's key.
    pub(crate) method: &'static str,
    /// `x-kubernetes-action`.
    pub(crate) action: &'static str,
    pub(crate) id: String,
    pub(crate) description: String,
    pub(crate) gvk: Value,
    pub(crate) params: Vec<Param>,
}

/// A served path and its operations.
#[derive(Debug, Clone)]
pub(crate) struct PathItem {
    pub(crate) path: String,
    pub(crate) kind: &'static str,
    /// The kind's definition name (the access reviews have no schema here).
    pub(crate) definition: String,
    pub(crate) namespaced: bool,
    pub(crate) named: bool,
    pub(crate) ops: Vec<Operation>,
}

fn param(name: &'static str, description: &'static str) -> Param {
    Param {
        name,
        description,
        ty: if name == "force" { "boolean" } else { "string" },
    }
}

fn gvk(r: &Resource) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind_name})
}

/// Where an operation is served: the group-version, the kind, and whether the path names a
/// namespace.
struct At<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    namespaced: bool,
}

/// An operation on resource `r`'s path (`namespaced`: the path names a namespace).
fn op(
    r: &Resource,
    namespaced: bool,
    (method, action, verb): (&'static str, &'static str, &str),
    sub: &str,
    write: bool,
) -> Operation {
    let at = At {
        group: r.group,
        version: r.version,
        kind: r.kind_name,
        namespaced,
    };
    op_for(gvk(r), &at, method, action, verb, sub, write)
}

/// Upstream's operationId: the verb, the group (`Core` for the legacy one) and version, then
/// `Namespaced` on a namespace's path, the kind and what the path adds (a subresource,
/// `ForAllNamespaces`): `readCoreV1NamespacedPodStatus`, `deleteBatchV1CollectionNamespacedJob`.
fn operation_id(at: &At<'_>, verb: &str, sub: &str) -> String {
    let (verb, collection) = match verb {
        "deletecollection" => ("delete", "Collection"),
        v => (v, ""),
    };
    let group: String = if at.group.is_empty() {
        "Core".to_string()
    } else {
        at.group
            .trim_end_matches(".k8s.io")
            .split('.')
            .map(capitalize)
            .collect()
    };
    let ns = if at.namespaced { "Namespaced" } else { "" };
    format!(
        "{verb}{group}{}{collection}{ns}{}{sub}",
        capitalize(at.version),
        at.kind
    )
}

/// `op` for a kind by name (the access reviews are not stored resources).
fn op_for(
    gvk: Value,
    at: &At<'_>,
    method: &'static str,
    action: &'static str,
    verb: &str,
    sub: &str,
    write: bool,
) -> Operation {
    let mut params = vec![param(
        "pretty",
        "If 'true', then the output is pretty printed.",
    )];
    if write {
        params.push(param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ));
        params.push(param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."));
        params.push(param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
        ));
    }
    if verb == "patch" {
        params.push(param(
            "force",
            "Force is going to \"force\" Apply requests.",
        ));
    }
    Operation {
        method,
        action,
        id: operation_id(at, verb, sub),
        description: format!("{action} {}", at.kind),
        gvk,
        params,
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// The served resources of one group-version.
fn served(group: &str, version: &str) -> Vec<&'static Resource> {
    RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect()
}

/// The paths of one group-version and their operations.
pub(crate) fn path_items(group: &str, version: &str) -> Vec<PathItem> {
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut items = Vec::new();
    for r in served(group, version) {
        let base = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        let item = |path: String, named: bool, namespaced: bool, ops: Vec<Operation>| PathItem {
            path,
            kind: r.kind_name,
            definition: definition_name(r),
            namespaced,
            named,
            ops,
        };
        items.push(item(
            base.clone(),
            false,
            r.namespaced,
            vec![
                op(r, r.namespaced, ("get", "list", "list"), "", false),
                op(r, r.namespaced, ("post", "post", "create"), "", true),
                op(
                    r,
                    r.namespaced,
                    ("delete", "deletecollection", "deletecollection"),
                    "",
                    false,
                ),
            ],
        ));
        items.push(item(
            format!("{base}/{{name}}"),
            true,
            r.namespaced,
            vec![
                op(r, r.namespaced, ("get", "get", "read"), "", false),
                op(r, r.namespaced, ("put", "put", "replace"), "", true),
                op(r, r.namespaced, ("patch", "patch", "patch"), "", true),
                op(r, r.namespaced, ("delete", "delete", "delete"), "", false),
            ],
        ));
        // The subresources written like the object itself (upstream's get/put/patch of
        // status and ephemeralcontainers), in discovery order.
        for (sub, _) in r
            .subresources
            .iter()
            .filter(|(sub, _)| matches!(*sub, "ephemeralcontainers" | "status"))
        {
            let suffix = capitalize(sub);
            items.push(item(
                format!("{base}/{{name}}/{sub}"),
                true,
                r.namespaced,
                vec![
                    op(r, r.namespaced, ("get", "get", "read"), &suffix, false),
                    op(r, r.namespaced, ("put", "put", "replace"), &suffix, true),
                    op(r, r.namespaced, ("patch", "patch", "patch"), &suffix, true),
                ],
            ));
        }
        if r.namespaced {
            items.push(item(
                format!("{prefix}/{}", r.plural),
                false,
                false,
                vec![op(
                    r,
                    false,
                    ("get", "list", "list"),
                    "ForAllNamespaces",
                    false,
                )],
            ));
        }
    }
    // The access reviews: a create each, as upstream lists them. Their schemas are not in
    // `schemas.json`: nothing needs them (`kubectl auth can-i` sends no manifest; `kubectl
    // create -f` of a review finds no PATCH operation to learn that the server validates
    // fields, and validates on the client with the `/openapi/v2` schemas, where a kind they
    // do not describe sends kubectl looking for a CRD, which fails unless given
    // `--validate=false`). The authentication reviews likewise.
    let access = crate::authorization::reviews_of(group, version)
        .iter()
        .map(|r| (r.plural, r.kind_name, r.namespaced));
    let authn = crate::authentication::reviews_of(group, version)
        .iter()
        .map(|r| (r.plural, r.kind_name, r.namespaced));
    for (plural, kind_name, namespaced) in access.chain(authn) {
        let path = if namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{plural}")
        } else {
            format!("{prefix}/{plural}")
        };
        let gvk = json!({"group": group, "version": version, "kind": kind_name});
        items.push(PathItem {
            path,
            kind: kind_name,
            definition: format!("io.k8s.api.{}.{version}.{kind_name}", package(group)),
            namespaced,
            named: false,
            ops: vec![op_for(
                gvk,
                &At {
                    group,
                    version,
                    kind: kind_name,
                    namespaced,
                },
                "post",
                "post",
                "create",
                "",
                true,
            )],
        });
    }
    items
}

/// An operation in OpenAPI v3 form.
fn v3_operation(o: &Operation) -> Value {
    let params: Vec<Value> = o
        .params
        .iter()
        .map(|p| {
            json!({"name": p.name, "in": "query", "description": p.description, "required": false, "schema": {"type": p.ty, "uniqueItems": true}})
        })
        .collect();
    json!({
        "description": o.description,
        "operationId": o.id,
        "parameters": params,
        "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": o.action,
        "x-kubernetes-group-version-kind": o.gvk,
    })
}

fn document(group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    for item in path_items(group, version) {
        let ops: Map<String, Value> = item
            .ops
            .iter()
            .map(|o| (o.method.to_string(), v3_operation(o)))
            .collect();
        paths.insert(item.path, Value::Object(ops));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", crate::discovery::MAJOR, crate::discovery::MINOR)},
        "paths": paths,
        "components": {"schemas": schemas_for(&served(group, version))},
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
            "apis/authentication.k8s.io/v1",
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
        let d = for_path("apis/authentication.k8s.io/v1").unwrap();
        let paths: Vec<&String> = d["paths"].as_object().unwrap().keys().collect();
        assert_eq!(
            paths,
            [
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                "/apis/authentication.k8s.io/v1/tokenreviews"
            ]
        );
        assert_eq!(
            d["paths"]["/apis/authentication.k8s.io/v1/tokenreviews"]["post"]["x-kubernetes-group-version-kind"],
            json!({"group": "authentication.k8s.io", "version": "v1", "kind": "TokenReview"})
        );
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
