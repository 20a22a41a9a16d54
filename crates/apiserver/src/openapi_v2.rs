//! `/openapi/v2`: one Swagger 2.0 document for every served group-version, as kube-apiserver
//! serves it, in JSON or in gnostic's protobuf encoding (what kubectl asks for: `kubectl
//! explain --output=plaintext-openapiv2`, and client-side `kubectl apply`, which computes its
//! strategic merge patch from the `x-kubernetes-patch-strategy`/`-merge-key` extensions found
//! here). The operations are those of the OpenAPI v3 documents (`openapi::path_items`), the
//! definitions their schemas in v2 form, with upstream's extensions (`openapi::markers`).
//!
//! Built once with its protobuf encoding and an ETag; served with kube-openapi's content
//! negotiation and `http.ServeContent`'s conditional requests.

mod proto;

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::openapi::{self, Operation, PathItem};

const JSON: &str = "application/json";
/// The protobuf media type upstream answers with, whichever of the two it was asked for.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The older spelling, which client-go still sends.
pub const PROTOBUF_DEPRECATED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

const DEFS: &str = "#/definitions/";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// The document and its encodings, built once: it depends on nothing but the build.
struct Served {
    json: Vec<u8>,
    protobuf: Vec<u8>,
    /// Quoted, as sent in `ETag`.
    etag: String,
    /// When it was built, to the second, and as `Last-Modified` writes it.
    modified: jiff::Timestamp,
    last_modified: String,
}

fn served() -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| {
        let doc = document();
        let json = serde_json::to_vec(doc).unwrap_or_default();
        let protobuf = proto::document(doc).unwrap_or_else(|e| {
            // A build defect (the tests encode the document): serve an empty message.
            tracing::error!(error = %e, "encoding the OpenAPI v2 document as protobuf");
            Vec::new()
        });
        let now = jiff::Timestamp::now();
        let modified = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
        let last_modified = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&modified)
            .unwrap_or_default();
        Served {
            etag: format!("\"{}\"", openapi::hash(&json)),
            json,
            protobuf,
            modified,
            last_modified,
        }
    })
}

/// The Swagger 2.0 document.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build)
}

fn build() -> Value {
    let mut definitions: Map<String, Value> = openapi::annotated_schemas()
        .iter()
        .map(|(name, s)| (name.clone(), schema(s)))
        .collect();
    // Upstream's v2 form of the two scalar types schemars describes by extension only.
    if let Some(Value::Object(s)) =
        definitions.get_mut("io.k8s.apimachinery.pkg.util.intstr.IntOrString")
    {
        s.insert("format".into(), json!("int-or-string"));
    }
    for r in crate::resources::RESOURCES {
        let name = openapi::definition_name(r);
        let gvk = |kind: &str| json!([{"group": r.group, "kind": kind, "version": r.version}]);
        if let Some(Value::Object(s)) = definitions.get_mut(&name) {
            s.insert("x-kubernetes-group-version-kind".into(), gvk(r.kind_name));
        }
        // k8s-openapi has no schemas for the list kinds; the list operations return them.
        let list = format!("{}List", r.kind_name);
        definitions.insert(
            format!("{name}List"),
            json!({
                "description": format!("{list} is a list of {}.", r.kind_name),
                "properties": {
                    "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"},
                    "items": {"description": format!("items is the list of {}.", r.kind_name), "items": {"$ref": format!("{DEFS}{name}")}, "type": "array"},
                    "kind": {"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"},
                    "metadata": {"$ref": format!("{DEFS}{META}.ListMeta"), "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"},
                },
                "required": ["items"],
                "type": "object",
                "x-kubernetes-group-version-kind": gvk(&list),
            }),
        );
    }
    definitions.insert(
        format!("{META}.Patch"),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );

    let mut paths = Map::new();
    for (_, group, version) in openapi::group_versions() {
        for item in openapi::path_items(group, version) {
            paths.insert(item.path.clone(), path_item(&item, &definitions));
        }
    }
    json!({
        "definitions": definitions,
        "info": {"title": "Kubernetes", "version": crate::discovery::version()["gitVersion"]},
        "paths": paths,
        "security": [{"BearerToken": []}],
        "securityDefinitions": {"BearerToken": {
            "description": "Bearer Token authentication",
            "in": "header",
            "name": "authorization",
            "type": "apiKey",
        }},
        "swagger": "2.0",
    })
}

/// A v3 schema in v2 form: references point into `#/definitions/`, and a described
/// reference, which v3 wraps in `allOf`, is a `$ref` beside its description as upstream's v2
/// writes it; `x-kubernetes-int-or-string` (v3 only) becomes the string type v2 gives it.
fn schema(s: &Value) -> Value {
    let Value::Object(m) = s else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        match (k.as_str(), v) {
            ("$ref", Value::String(r)) => {
                let name = r.strip_prefix("#/components/schemas/").unwrap_or(r);
                out.insert(k.clone(), json!(format!("{DEFS}{name}")));
            }
            ("allOf", Value::Array(a)) if a.len() == 1 && a[0].get("$ref").is_some() => {
                if let Value::Object(inner) = schema(&a[0]) {
                    out.extend(inner);
                }
            }
            ("allOf", Value::Array(a)) => {
                out.insert(k.clone(), Value::Array(a.iter().map(schema).collect()));
            }
            ("properties", Value::Object(props)) => {
                let props = props.iter().map(|(n, p)| (n.clone(), schema(p))).collect();
                out.insert(k.clone(), Value::Object(props));
            }
            ("items" | "additionalProperties", Value::Object(_)) => {
                out.insert(k.clone(), schema(v));
            }
            ("x-kubernetes-int-or-string", _) => {
                out.entry("type").or_insert_with(|| json!("string"));
            }
            ("nullable", _) => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

fn reference(definitions: &Map<String, Value>, name: &str) -> Option<Value> {
    definitions
        .contains_key(name)
        .then(|| json!({"$ref": format!("{DEFS}{name}")}))
}

/// The content types a PATCH takes, as upstream lists them for a built-in kind.
const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

fn path_item(item: &PathItem, definitions: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for o in &item.ops {
        out.insert(o.method.to_string(), operation(item, o, definitions));
    }
    // Path parameters are declared on the path, as upstream declares them.
    let mut params = Vec::new();
    if item.named {
        params.push(json!({"description": format!("name of the {}", item.kind), "in": "path", "name": "name", "required": true, "type": "string", "uniqueItems": true}));
    }
    if item.namespaced {
        params.push(json!({"description": "object name and auth scope, such as for teams and projects", "in": "path", "name": "namespace", "required": true, "type": "string", "uniqueItems": true}));
    }
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    Value::Object(out)
}

fn operation(item: &PathItem, o: &Operation, definitions: &Map<String, Value>) -> Value {
    let kind = reference(definitions, &item.definition);
    let status = reference(definitions, &format!("{META}.Status"));
    let body = |schema: Option<Value>, required: bool| {
        schema.map(|s| json!({"in": "body", "name": "body", "required": required, "schema": s}))
    };
    let body = match o.method {
        "post" | "put" => body(kind.clone(), true),
        "patch" => body(reference(definitions, &format!("{META}.Patch")), true),
        "delete" => body(
            reference(definitions, &format!("{META}.DeleteOptions")),
            false,
        ),
        _ => None,
    };
    let mut params: Vec<Value> = body.into_iter().collect();
    params.extend(o.params.iter().map(|p| {
        json!({"description": p.description, "in": "query", "name": p.name, "type": p.ty, "uniqueItems": true})
    }));

    let response = |description: &str, schema: &Option<Value>| {
        let mut r = json!({"description": description});
        if let (Some(s), Value::Object(m)) = (schema, &mut r) {
            m.insert("schema".into(), s.clone());
        }
        r
    };
    let mut responses = Map::new();
    match o.action {
        "list" => {
            let list = reference(definitions, &format!("{}List", item.definition));
            responses.insert("200".into(), response("OK", &list));
        }
        "delete" | "deletecollection" => {
            responses.insert("200".into(), response("OK", &status));
            if o.action == "delete" {
                responses.insert("202".into(), response("Accepted", &status));
            }
        }
        _ => {
            responses.insert("200".into(), response("OK", &kind));
            if matches!(o.method, "post" | "put" | "patch") {
                responses.insert("201".into(), response("Created", &kind));
            }
            if o.method == "post" {
                responses.insert("202".into(), response("Accepted", &kind));
            }
        }
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));

    let consumes: Vec<&str> = if o.method == "patch" {
        PATCH_TYPES.to_vec()
    } else {
        vec!["*/*"]
    };
    // What this server writes: JSON, and for a collection read a JSON watch stream.
    let produces: Vec<&str> = if o.action == "list" {
        vec![JSON, "application/json;stream=watch"]
    } else {
        vec![JSON]
    };
    let group = o.gvk["group"].as_str().unwrap_or("");
    let version = o.gvk["version"].as_str().unwrap_or("");
    json!({
        "consumes": consumes,
        "description": o.description,
        "operationId": o.id,
        "parameters": params,
        "produces": produces,
        "responses": responses,
        "tags": [format!("{}_{version}", openapi::package(group))],
        "x-kubernetes-action": o.action,
        "x-kubernetes-group-version-kind": o.gvk,
    })
}

/// The representations, as kube-openapi's handler lists them (first match wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Protobuf,
}

const ACCEPTED: &[(&str, &str, Format)] = &[
    ("application", "json", Format::Json),
    (
        "application",
        "com.github.proto-openapi.spec.v2@v1.0+protobuf",
        Format::Protobuf,
    ),
    (
        "application",
        "com.github.proto-openapi.spec.v2.v1.0+protobuf",
        Format::Protobuf,
    ),
];

/// The representation `accept` asks for, as goautoneg ranks it: clauses by quality, then
/// specific types before wildcards, each tried against the served ones in order. A missing
/// header is `*/*`.
fn negotiate(accept: &str) -> Option<Format> {
    let accept = if accept.trim().is_empty() {
        "*/*"
    } else {
        accept
    };
    let mut clauses: Vec<(f64, &str, &str)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let range = parts.next()?.trim();
            if range.is_empty() {
                return None;
            }
            let (ty, sub) = range.split_once('/').unwrap_or((range, "*"));
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            Some((q, ty.trim(), sub.trim()))
        })
        .collect();
    clauses.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then((a.1 == "*").cmp(&(b.1 == "*")))
            .then((a.2 == "*").cmp(&(b.2 == "*")))
    });
    clauses.iter().find_map(|(_, ty, sub)| {
        ACCEPTED
            .iter()
            .find(|(t, s, _)| (ty == t || *ty == "*") && (sub == s || *sub == "*"))
            .map(|(_, _, f)| *f)
    })
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether an `If-Match`/`If-None-Match` list names `etag` (`*` names any): weak comparison
/// for `If-None-Match`, strong for `If-Match`, as Go's `net/http`.
fn etag_listed(list: &str, etag: &str, weak: bool) -> bool {
    list.split(',').map(str::trim).any(|tag| {
        tag == "*"
            || match tag.strip_prefix("W/") {
                Some(t) => weak && t == etag,
                None => tag == etag,
            }
    })
}

fn http_date(s: &str) -> Option<jiff::Timestamp> {
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(s.trim())
        .ok()
}

/// The answer to a request for `/openapi/v2`.
pub fn serve(method: &Method, headers: &HeaderMap) -> Response {
    let accept = header_str(headers, header::ACCEPT).unwrap_or("");
    let mut resp = Response::new(Body::empty());
    resp.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    let Some(format) = negotiate(accept) else {
        *resp.status_mut() = StatusCode::NOT_ACCEPTABLE;
        return resp;
    };
    let s = served();
    let (content_type, body) = match format {
        Format::Json => (JSON, &s.json),
        Format::Protobuf => (PROTOBUF, &s.protobuf),
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&s.etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&s.last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }

    // Go's `checkPreconditions`, as `http.ServeContent` runs it.
    let read = method == Method::GET || method == Method::HEAD;
    let if_match = header_str(headers, header::IF_MATCH);
    let failed = match if_match {
        Some(list) => !etag_listed(list, &s.etag, false),
        None => header_str(headers, header::IF_UNMODIFIED_SINCE)
            .and_then(http_date)
            .is_some_and(|t| s.modified > t),
    };
    if failed {
        *resp.status_mut() = StatusCode::PRECONDITION_FAILED;
        return resp;
    }
    let not_modified = match header_str(headers, header::IF_NONE_MATCH) {
        Some(list) if etag_listed(list, &s.etag, true) => {
            if !read {
                *resp.status_mut() = StatusCode::PRECONDITION_FAILED;
                return resp;
            }
            true
        }
        Some(_) => false,
        None => {
            read && header_str(headers, header::IF_MODIFIED_SINCE)
                .and_then(http_date)
                .is_some_and(|t| s.modified <= t)
        }
    };
    if not_modified {
        // As Go's `writeNotModified`: no body headers, and no Last-Modified beside an ETag.
        let h = resp.headers_mut();
        h.remove(header::CONTENT_TYPE);
        h.remove(header::LAST_MODIFIED);
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        return resp;
    }
    *resp.body_mut() = Body::from(body.as_slice());
    resp
}

#[cfg(test)]
mod tests;
