//! The REST verbs on stored objects: get, list, create, update, patch, delete, binding.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use kbatch_store::{Object, StoreError};
use serde_json::{Value, json};

use crate::State;
use crate::apply;
use crate::error::{ApiError, StatusBody, json_response, raw_json_response, status_response};
use crate::events;
use crate::list_options::{self, ReadOptions};
use crate::object::{self, meta_mut, rfc3339};
use crate::request::{Query, Target};
use crate::resources::{Kind, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::storage_metrics;
use crate::strategy::{Part, Strategy, UpdateHooks};
use crate::table;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Upstream's limit on request bodies (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// How often an unconditional write is retried after losing a race. Each lost race means another
/// write landed, so retrying makes progress (upstream's GuaranteedUpdate retries without bound);
/// with many writers on one object a small bound turned their races into 409s the client never
/// asked for. The bound only stops a store that keeps refusing.
const MAX_RETRIES: usize = 1_000;
const JOB_ORPHAN_WARNING: &str = "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning";

/// The resource whose rules and storage an object of `res` uses (events.k8s.io events are
/// stored and validated as core/v1 Events).
pub fn storage_resource(res: &'static Resource) -> &'static Resource {
    if res.kind == Kind::EventV1 {
        crate::resources::by_kind(Kind::Event)
    } else {
        res
    }
}

pub fn store_err(res: &Resource, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::AlreadyExists(_) => ApiError::already_exists(res.plural, res.group, name),
        StoreError::NotFound(_) => ApiError::not_found(res.plural, res.group, name),
        StoreError::Conflict { .. } => ApiError::modified_conflict(res.plural, res.group, name),
        StoreError::Expired { requested, oldest } => ApiError::expired(format!(
            "too old resource version: {requested} ({})",
            oldest
        )),
        StoreError::Closed => ApiError::unavailable("the server is shutting down"),
        other => ApiError::internal(other.to_string()),
    }
}

/// Parse a stored document (always valid JSON, written by this server).
pub fn parse_stored(o: &Object) -> Result<Value, ApiError> {
    parse_stored_bytes(&o.raw())
        .map_err(|e| ApiError::internal(format!("corrupt stored object {}: {e}", o.key)))
}

/// `parse_stored` of the bytes: their UTF-8 is checked once for the whole document, which is
/// cheaper than serde_json's check of every string.
pub fn parse_stored_bytes(raw: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(raw).map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// The bytes a client sees for a stored object (converted for the events.k8s.io view).
pub fn output_bytes(res: &Resource, o: &Object) -> Result<Bytes, ApiError> {
    if res.kind == Kind::EventV1 {
        let v = events::to_v1(parse_stored(o)?);
        Ok(Bytes::from(
            serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?,
        ))
    } else {
        Ok(o.raw())
    }
}

fn object_response(res: &Resource, code: StatusCode, o: &Object) -> Result<Response, ApiError> {
    Ok(raw_json_response(code, output_bytes(res, o)?))
}

fn value_response(res: &Resource, code: StatusCode, v: Value) -> Response {
    let v = if res.kind == Kind::EventV1 {
        events::to_v1(v)
    } else {
        v
    };
    json_response(code, &v)
}

/// `fieldValidation`: what to do about fields the type does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// Absent means Warn, as upstream.
    pub fn from_query(q: &Query) -> Result<FieldValidation, ApiError> {
        match q.get("fieldValidation") {
            None | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported value: {other:?}; valid values are Ignore, Warn and Strict"
            ))),
        }
    }

    /// Strict rejects unknown fields with upstream's strict decoding error; Warn returns them
    /// as warnings.
    fn check(self, res: &Resource, unknown: Vec<String>) -> Result<Vec<String>, ApiError> {
        self.check_kind(res.kind_name, res.version, unknown)
    }

    /// `check` by kind and version, for kinds that are not stored resources.
    pub(crate) fn check_kind(
        self,
        kind: &str,
        version: &str,
        unknown: Vec<String>,
    ) -> Result<Vec<String>, ApiError> {
        let texts: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        match self {
            FieldValidation::Ignore => Ok(Vec::new()),
            FieldValidation::Warn => Ok(texts),
            FieldValidation::Strict if texts.is_empty() => Ok(Vec::new()),
            FieldValidation::Strict => Err(crate::strategy::cannot_handle_kind(
                kind,
                version,
                &format!("strict decoding error: {}", texts.join(", ")),
            )),
        }
    }
}

pub(crate) fn with_warnings(mut resp: Response, texts: &[String]) -> Response {
    for t in texts {
        resp = with_warning(resp, t);
    }
    resp
}

fn with_warning(mut resp: Response, text: &str) -> Response {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    if let Ok(h) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
        resp.headers_mut().append("warning", h);
    }
    resp
}

/// Decode a request body (JSON, YAML or Kubernetes protobuf) into a JSON object (a missing
/// Content-Type means JSON).
pub fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type(headers);
    match ct.as_str() {
        "" | "application/json" | "*/*" => {}
        "application/yaml" => return decode_yaml(body),
        crate::protobuf::MEDIA_TYPE => {
            return crate::protobuf::decode_object(body).map_err(|e| {
                ApiError::bad_request(format!("error decoding request body as protobuf: {e}"))
            });
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body as JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

fn decode_yaml(body: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("error decoding request body as YAML: not UTF-8"))?;
    let v: Value = crate::yaml::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body as YAML: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(v)
}

pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// The body's apiVersion and kind must name the endpoint's type when present.
fn check_type(res: &Resource, v: &mut Value) -> Result<(), ApiError> {
    check_type_of(&res.api_version(), res.kind_name, v)
}

/// `check_type` by apiVersion and kind, for kinds that are not stored resources.
pub(crate) fn check_type_of(
    expected: &str,
    kind_name: &str,
    v: &mut Value,
) -> Result<(), ApiError> {
    let api_version = v
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = v
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !api_version.is_empty() && api_version != expected {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected})"
        )));
    }
    if !kind.is_empty() && kind != kind_name {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({kind_name})"
        )));
    }
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), json!(expected));
        o.insert("kind".into(), json!(kind_name));
    }
    Ok(())
}

/// Bring a client document into stored (core/v1 for events) form.
fn to_storage_form(res: &'static Resource, mut v: Value) -> Result<Value, ApiError> {
    check_type(res, &mut v)?;
    if res.kind == Kind::EventV1 {
        Ok(events::from_v1(v))
    } else {
        Ok(v)
    }
}

fn check_namespace(t: &Target, v: &mut Value) -> Result<(), ApiError> {
    let res = t.resource;
    let m = meta_mut(v);
    if !res.namespaced {
        m.remove("namespace");
        return Ok(());
    }
    let url_ns = t.namespace.clone().unwrap_or_default();
    match m.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            m.insert("namespace".into(), json!(url_ns));
        }
        Some(ns) if ns == url_ns => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    Ok(())
}

/// The NamespaceLifecycle admission plugin on create: the namespace must exist and not be
/// terminating (Forbidden with the `NamespaceTerminating` cause controllers look for; `name` is
/// the object's name, or its generateName before one is generated).
async fn ensure_namespace(
    st: &State,
    ns: &str,
    res: &Resource,
    name: &str,
) -> Result<(), ApiError> {
    let nsres = crate::resources::by_kind(Kind::Namespace);
    let o = st
        .store
        .get(&nsres.key("", ns))
        .ok_or_else(|| ApiError::not_found("namespaces", "", ns))?;
    // Every create passes here: parse the namespace only when it may be terminating.
    let may_be_deleting = o
        .raw()
        .windows(b"deletionTimestamp".len())
        .any(|w| w == b"deletionTimestamp");
    if may_be_deleting
        && parse_stored(&o)?
            .pointer("/metadata/deletionTimestamp")
            .is_some()
    {
        let mut e = ApiError::forbidden_named(
            res.plural,
            res.group,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        );
        if let Some(Value::Object(d)) = e.details.as_mut() {
            d.insert(
                "causes".into(),
                json!([{"reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace"}]),
            );
        }
        return Err(e);
    }
    Ok(())
}

/// `generateName` + 5 characters of upstream's alphabet, the prefix cut to fit 63.
fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut p: String = prefix.chars().take(58).collect();
    for _ in 0..5 {
        let i = rand::random_range(0..ALPHABET.len());
        p.push(ALPHABET[i] as char);
    }
    p
}

/// A Table was asked for: its apiVersion and what each row carries.
#[derive(Debug, Clone, Copy)]
pub struct TableRequest {
    pub api_version: &'static str,
    pub include: table::IncludeObject,
}

pub fn table_request(headers: &HeaderMap, q: &Query) -> Option<TableRequest> {
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    table::wants_table(accept).map(|api_version| TableRequest {
        api_version,
        include: table::include_object(q.get("includeObject")),
    })
}

pub async fn get(
    st: &State,
    t: &Target,
    name: &str,
    tr: Option<TableRequest>,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let ns = t.namespace.as_deref().unwrap_or("");
    let o = st
        .store
        .get(&sres.key(ns, name))
        .ok_or_else(|| ApiError::not_found(res.plural, res.group, name))?;
    if let Some(tr) = tr {
        let v = parse_stored(&o)?;
        let row = table::row(res.kind, &v, st.now(), tr.include);
        let t = table::table(
            tr.api_version,
            res.kind,
            vec![row],
            json!({"resourceVersion": o.rv.to_string()}),
            true,
        );
        return Ok(json_response(StatusCode::OK, &t));
    }
    object_response(res, StatusCode::OK, &o)
}

/// A resourceVersion query parameter: a decimal revision.
pub fn parse_resource_version(rv: Option<&str>) -> Result<Option<u64>, ApiError> {
    match rv {
        None => Ok(None),
        Some(rv) => rv.parse::<u64>().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "invalid resource version {rv:?}: must be an unsigned integer"
            ))
        }),
    }
}

/// etcd's answers to a list at a revision compacted away (upstream's `expired` and
/// `continueExpired`).
const LIST_EXPIRED: &str = "The resourceVersion for the provided list is too old.";
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// An opaque continue token: the list's revision and the last key returned. No revision (etcd's
/// `-1`) continues at the current state, as the token an expired one is answered with does.
fn encode_continue(rv: Option<u64>, key: &str) -> String {
    use base64::Engine;
    let rv = rv.map_or(json!(-1), |rv| json!(rv));
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"v": "meta.k8s.io/v1", "rv": rv, "start": key}).to_string())
}

fn decode_continue(token: &str) -> Result<(Option<u64>, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: illegal base64 data");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = match v.get("rv") {
        Some(rv) if rv.as_i64() == Some(-1) => None,
        Some(rv) => Some(rv.as_u64().ok_or_else(bad)?),
        None => return Err(bad()),
    };
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(bad)?
        .to_string();
    Ok((rv, start))
}

/// Selectors of a list or watch request.
pub struct Filter {
    pub kind: Kind,
    pub label: LabelSelector,
    pub field: FieldSelector,
}

impl Filter {
    pub fn from_query(res: &Resource, q: &Query) -> Result<Filter, ApiError> {
        Ok(Filter {
            kind: res.kind,
            label: LabelSelector::parse(q.get("labelSelector").unwrap_or(""))?,
            field: FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), res.kind)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    pub fn matches(&self, o: &Object) -> bool {
        if self.is_empty() {
            return true;
        }
        match parse_stored_bytes(&o.raw()) {
            Ok(v) => self.label.matches(object::labels(&v)) && self.field.matches(self.kind, &v),
            Err(_) => false,
        }
    }
}

pub async fn list(
    st: &State,
    t: &Target,
    q: &Query,
    tr: Option<TableRequest>,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let filter = Filter::from_query(res, q)?;
    let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    // Part of ListOptions: decoded (and rejected when malformed) even though a list ignores it.
    q.int("timeoutSeconds")?;
    let opts = ReadOptions::from_query(q, false)?;
    // A list from "0" is served whole from upstream's watch cache, whatever the limit.
    let limit = limit.filter(|_| opts.resource_version != Some(0));
    if let Some(min) = opts.list_min_rv() {
        list_options::wait_until_fresh(&st.store, min).await?;
    }
    let prefix = sres.prefix(t.namespace.as_deref());
    let (list_rv, mut start_after) = match q.get("continue") {
        Some(tok) => {
            let (rv, key) = decode_continue(tok)?;
            (rv, Some(key))
        }
        None => (None, None),
    };
    let list_rv = list_rv.or(opts.exact_rv());
    // A continued or exact list reads the state at its revision, as etcd serves it; the
    // current state is read page by page from the index.
    let snapshot = match list_rv {
        Some(rv) if rv != st.store.revision() => {
            list_options::wait_until_fresh(&st.store, rv).await?;
            match st.store.list_at(&prefix, rv).await {
                Ok(l) => Some(l.items),
                Err(kbatch_store::StoreError::Expired { .. }) => {
                    return Err(match &start_after {
                        // etcd's answer offers a token that goes on at the current state.
                        Some(key) => {
                            let mut e = ApiError::expired(CONTINUE_EXPIRED);
                            e.list_continue = Some(encode_continue(None, key));
                            e
                        }
                        None => ApiError::expired(LIST_EXPIRED),
                    });
                }
                Err(e) => return Err(store_err(res, "", e)),
            }
        }
        _ => None,
    };
    let read_page = |after: Option<&str>, n: Option<usize>| match &snapshot {
        None => st.store.list(&prefix, after, n),
        Some(all) => {
            let from = after.map_or(0, |a| all.partition_point(|o| o.key.as_str() <= a));
            let end = n.map_or(all.len(), |n| all.len().min(from.saturating_add(n)));
            kbatch_store::ListResult {
                items: all[from..end].to_vec(),
                revision: list_rv.unwrap_or(0),
                more: end < all.len(),
            }
        }
    };
    let mut items: Vec<Arc<Object>> = Vec::new();
    let mut revision = None;
    let mut next: Option<String> = None;
    // Read in chunks so that a selective filter still fills a page.
    let chunk = limit.map(|l| l.max(64));
    'pages: loop {
        let page = read_page(start_after.as_deref(), chunk);
        revision.get_or_insert(page.revision);
        for o in page.items {
            start_after = Some(o.key.clone());
            let last = o.key.clone();
            if filter.matches(&o) {
                items.push(o);
                if limit.is_some_and(|l| items.len() >= l) {
                    // As etcd does, offer a continue token whenever any key follows.
                    if !read_page(Some(&last), Some(1)).items.is_empty() {
                        next = Some(last);
                    }
                    break 'pages;
                }
            }
        }
        if !page.more {
            break;
        }
    }
    let revision = revision.unwrap_or(0);
    let rv = list_rv.unwrap_or(revision);
    let mut out: Vec<u8> =
        Vec::with_capacity(128 + items.iter().map(|o| o.raw_len() + 1).sum::<usize>());
    let mut metadata = serde_json::Map::new();
    metadata.insert("resourceVersion".into(), json!(rv.to_string()));
    if let Some(key) = &next {
        metadata.insert("continue".into(), json!(encode_continue(Some(rv), key)));
    }
    if let Some(tr) = tr {
        let now = st.now();
        let rows = items
            .iter()
            .map(|o| parse_stored(o).map(|v| table::row(res.kind, &v, now, tr.include)))
            .collect::<Result<Vec<_>, _>>()?;
        let t = table::table(
            tr.api_version,
            res.kind,
            rows,
            Value::Object(metadata),
            true,
        );
        return Ok(json_response(StatusCode::OK, &t));
    }
    let head = json!({"kind": format!("{}List", res.kind_name), "apiVersion": res.api_version(), "metadata": metadata});
    let head = serde_json::to_vec(&head).map_err(|e| ApiError::internal(e.to_string()))?;
    // Splice the items array into the head object without re-encoding each item.
    out.extend_from_slice(&head[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&output_bytes(res, o)?);
    }
    out.extend_from_slice(b"]}");
    Ok(raw_json_response(StatusCode::OK, out))
}

pub async fn create(
    st: &State,
    t: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let fv = FieldValidation::from_query(q)?;
    check_field_manager(q, "CreateOptions")?;
    let res = t.resource;
    if res.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let v = to_storage_form(res, decode_body(headers, body)?)?;
    let manager = apply::manager_name(q, &user_agent(headers));
    let mut warnings = Vec::new();
    let resp = create_doc(st, t, q, v, fv, Some(&manager), &mut warnings).await?;
    Ok(with_warnings(resp, &warnings))
}

/// Creates `v` (a cluster-scoped object of `res`) as the server itself, recorded in
/// managedFields under `manager`: the objects kube-apiserver creates at start.
pub(crate) async fn create_as(
    st: &State,
    res: &'static Resource,
    v: Value,
    manager: &str,
) -> Result<(), ApiError> {
    let t = Target {
        resource: res,
        namespace: None,
        name: None,
        subresource: None,
        watch_path: false,
    };
    let mut warnings = Vec::new();
    create_doc(
        st,
        &t,
        &Query::parse(None),
        v,
        FieldValidation::Ignore,
        Some(manager),
        &mut warnings,
    )
    .await
    .map(|_| ())
}

pub(crate) fn user_agent(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// `fieldManager` of a create or update must be a short printable name (422 naming the
/// options kind, `CreateOptions` or `UpdateOptions`).
pub(crate) fn check_field_manager(q: &Query, options: &str) -> Result<(), ApiError> {
    let errs = apply::validate_field_manager(q.get("fieldManager").unwrap_or(""));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(options, "meta.k8s.io", "", &errs))
    }
}

/// Create `v` (storage form). `manager` records the create in managedFields; none when
/// they are already set (an apply that creates).
async fn create_doc(
    st: &State,
    t: &Target,
    q: &Query,
    v: Value,
    fv: FieldValidation,
    manager: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let dry_run = q.dry_run()?;
    let strategy = Strategy::new(sres);
    let url_ns = t.namespace.clone().unwrap_or_default();
    let now = rfc3339(st.now());
    let tracked = apply::Target::new(sres.kind_name, &res.api_version(), Part::Main);
    let mut v = v;
    // The admission plugins kube-apiserver runs on a new object, in its order (mutating:
    // before validation, after the field manager): NamespaceLifecycle for every namespaced
    // kind, then for pods ServiceAccount and Priority.
    let admission_name = crate::priority::admission_name(&v);
    if res.namespaced {
        ensure_namespace(st, &url_ns, res, &admission_name).await?;
    }
    let mut admitted = Vec::new();
    if sres.kind == Kind::Pod {
        let name = admission_name;
        admitted.extend(crate::serviceaccount::admit_pod(st, &url_ns, &mut v, &name).await?);
        admitted.extend(crate::priority::admit_pod(st, &mut v)?);
    }
    let generate = object::meta_str(&v, "name")
        .is_none()
        .then(|| object::meta_str(&v, "generateName").map(str::to_string));
    // Only a generated name is ever tried again (with the same body).
    let retries = matches!(generate, Some(Some(_)));
    let mut body = Some(v);
    for attempt in 0..8 {
        let Some(v) = body.as_ref() else {
            break;
        };
        let mut on_unknown = |unknown: Vec<String>| {
            let found = fv.check(sres, unknown)?;
            if attempt == 0 {
                warnings.extend(found);
            }
            Ok(())
        };
        let mut fill = |m: &mut ObjectMeta| fill_create_meta(m, res.namespaced, &url_ns, &now);
        let mut track = |mut defaulted: Value| {
            if let Some(spec) = defaulted.get_mut("spec").and_then(Value::as_object_mut) {
                for k in &admitted {
                    spec.remove(*k);
                }
            }
            apply::track_create(&tracked, &mut defaulted, manager.unwrap_or(""), &now);
            meta_mut(&mut defaulted).remove("managedFields")
        };
        let track: Option<&mut dyn FnMut(Value) -> Option<Value>> = match manager {
            Some(_) => Some(&mut track),
            None => None,
        };
        let obj = strategy.create(v, &mut on_unknown, &mut fill, track)?;
        if sres.kind == Kind::PriorityClass {
            crate::priority::validate_class(st, &obj, false)?;
        }
        let name = object::name(&obj).to_string();
        if !retries {
            // Freed here, on the thread that built it: after an await the task may go on on
            // another thread, and freeing another thread's memory costs more.
            body = None;
        }
        if dry_run {
            return Ok(value_response(res, StatusCode::CREATED, obj));
        }
        let key = sres.key(t.namespace.as_deref().unwrap_or(""), &name);
        match storage_metrics::create(&st.store, key, obj).await {
            Ok(o) => return object_response(res, StatusCode::CREATED, &o),
            Err(StoreError::AlreadyExists(_)) if retries && attempt < 7 => {
                continue;
            }
            Err(StoreError::AlreadyExists(_)) if matches!(generate, Some(Some(_))) => {
                let mut e = ApiError::already_exists(res.plural, res.group, &name);
                e.message
                    .push_str(", the server was not able to generate a unique name for the object");
                if let Some(Value::Object(d)) = e.details.as_mut() {
                    d.insert("retryAfterSeconds".into(), json!(1));
                }
                return Err(e);
            }
            Err(e) => return Err(store_err(res, &name, e)),
        }
    }
    Err(ApiError::internal("name generation did not converge"))
}

/// The object's namespace is the URL's (upstream's
/// `EnsureObjectNamespaceMatchesRequestNamespace`): set when missing, a conflict refused;
/// cleared for a cluster-scoped kind (`url_ns` None).
pub(crate) fn place_namespace(m: &mut ObjectMeta, url_ns: Option<&str>) -> Result<(), ApiError> {
    let Some(url_ns) = url_ns else {
        m.namespace = None;
        return Ok(());
    };
    match m.namespace.as_deref() {
        None | Some("") => m.namespace = Some(url_ns.to_string()),
        Some(ns) if ns == url_ns => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    Ok(())
}

/// The server's part of a new object's metadata: no client resourceVersion, the namespace from
/// the URL, system fields wiped and set, a name generated from generateName.
fn fill_create_meta(
    m: &mut ObjectMeta,
    namespaced: bool,
    url_ns: &str,
    now: &str,
) -> Result<(), ApiError> {
    if m.resource_version
        .as_deref()
        .is_some_and(|rv| !rv.is_empty())
    {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    place_namespace(m, namespaced.then_some(url_ns))?;
    m.deletion_timestamp = None;
    m.deletion_grace_period_seconds = None;
    m.uid = Some(uuid::Uuid::new_v4().to_string());
    m.creation_timestamp = now
        .parse()
        .ok()
        .map(kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
    if m.name.as_deref().is_none_or(str::is_empty)
        && let Some(prefix) = m.generate_name.as_deref().filter(|p| !p.is_empty())
    {
        m.name = Some(generate_name(prefix));
    }
    Ok(())
}

/// How a new document is derived from the current one on each attempt.
pub enum Change<'a> {
    /// PUT: the client's full document.
    Replace(Value),
    /// PATCH: the patch and its content type.
    Patch {
        content_type: &'a str,
        patch: &'a [u8],
    },
}

fn apply_patch(
    content_type: &str,
    patch: &[u8],
    mut doc: Value,
    kind_name: &str,
) -> Result<Value, ApiError> {
    match content_type {
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut doc, &p).map_err(|e| {
                let mut err = ApiError::new(422, "Invalid", format!("the server rejected our request due to an error in our request: {e}"));
                err.details = Some(json!({"causes": [{"reason": "FieldValueInvalid", "message": e.to_string(), "field": "patch"}]}));
                err
            })?;
        }
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let p: Value = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request("the patch must be a JSON object"));
            }
            if content_type == "application/merge-patch+json" {
                json_patch::merge(&mut doc, &p);
            } else {
                let schema = crate::smp::Schema::for_kind(kind_name);
                doc = crate::smp::apply_owned(doc, p, &schema)?;
            }
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    Ok(doc)
}

/// Update (PUT) or patch one object, main resource or status subresource, retrying races the
/// client did not ask to detect. An apply patch creates the object when it is missing.
pub async fn update(
    st: &State,
    t: &Target,
    q: &Query,
    headers: &HeaderMap,
    change: Change<'_>,
) -> Result<Response, ApiError> {
    let fv = FieldValidation::from_query(q)?;
    match &change {
        Change::Patch { content_type, .. } => {
            apply::validate_patch_options(q, *content_type == apply::CONTENT_TYPE)?
        }
        Change::Replace(_) => check_field_manager(q, "UpdateOptions")?,
    }
    let manager = apply::manager_name(q, &user_agent(headers));
    let mut warnings = Vec::new();
    let resp = update_checked(st, t, q, change, &manager, fv, &mut warnings).await?;
    Ok(with_warnings(resp, &warnings))
}

/// A decoded apply request.
struct ApplyRequest {
    /// The applied configuration, in the endpoint's form.
    config: Value,
    force: bool,
}

async fn update_checked(
    st: &State,
    t: &Target,
    q: &Query,
    change: Change<'_>,
    manager: &str,
    fv: FieldValidation,
    warnings: &mut Vec<String>,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let name = t.name.clone().unwrap_or_default();
    let ns = t.namespace.clone().unwrap_or_default();
    let Some(part) = Part::of(res, t.subresource.as_deref()) else {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    };
    let dry_run = q.dry_run()?;
    let applying = match &change {
        Change::Patch {
            content_type,
            patch,
        } if *content_type == apply::CONTENT_TYPE => {
            let config = apply::decode_config(patch)?;
            apply::check_config_type(&config, &res.api_version(), res.kind_name)?;
            Some(ApplyRequest {
                config,
                force: q.bool("force")?,
            })
        }
        _ => None,
    };
    let now = rfc3339(st.now());
    let tracked = apply::Target::new(sres.kind_name, &res.api_version(), part);
    let key = sres.key(&ns, &name);
    let strategy = Strategy::new(sres);
    for _ in 0..MAX_RETRIES {
        let Some(cur) = st.store.get(&key) else {
            // An apply creates what is missing (not through a subresource, as upstream).
            if let Some(a) = applying.as_ref().filter(|_| part == Part::Main) {
                let applied = apply::apply(&tracked, None, &a.config, manager, a.force, &now)?;
                let mut doc = to_storage_form(res, applied)?;
                if object::meta_str(&doc, "name").is_none() {
                    meta_mut(&mut doc).insert("name".into(), json!(name));
                }
                check_name(&doc, &name)?;
                match create_doc(st, t, q, doc, fv, None, warnings).await {
                    // Lost a race with a create: apply to that object.
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    other => return other,
                }
            }
            return Err(ApiError::not_found(res.plural, res.group, &name));
        };
        let old = parse_stored(&cur)?;
        let shown = || {
            if res.kind == Kind::EventV1 {
                events::to_v1(old.clone())
            } else {
                old.clone()
            }
        };
        let client_doc = match (&change, &applying) {
            (_, Some(a)) => {
                apply::apply(&tracked, Some(&shown()), &a.config, manager, a.force, &now)?
            }
            (Change::Replace(v), None) => v.clone(),
            (
                Change::Patch {
                    content_type,
                    patch,
                },
                None,
            ) => apply_patch(content_type, patch, shown(), res.kind_name)?,
        };
        let mut new = to_storage_form(res, client_doc)?;
        let body_name = object::meta_str(&new, "name").unwrap_or("").to_string();
        if body_name.is_empty() {
            meta_mut(&mut new).insert("name".into(), json!(name));
        } else {
            check_name(&new, &name)?;
        }
        check_namespace(t, &mut new)?;
        // A resourceVersion in the document is a precondition; none means last write wins.
        let doc_rv = match object::resource_version(&new) {
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resourceVersion {rv:?}: must be an unsigned integer"
                ))
            })?),
            None => None,
        };
        // A patch was applied to the current object, whose resourceVersion it carries unless
        // the patch set one: that one is not the client's precondition. (A client that did
        // set the current one is caught on the retry, where it no longer matches.)
        let precondition = match &change {
            Change::Patch { .. } if doc_rv == Some(cur.rv) => None,
            _ => doc_rv,
        };
        if let Some(rv) = precondition
            && rv != cur.rv
        {
            return Err(ApiError::modified_conflict(res.plural, res.group, &name));
        }
        let mut on_unknown = |unknown: Vec<String>| {
            warnings.clear();
            warnings.extend(fv.check(sres, unknown)?);
            Ok(())
        };
        let mut fill = |m: &mut ObjectMeta, o: &ObjectMeta| fill_update_meta(m, o, res, &name);
        // An apply recorded its managers while merging; every other write is an Update.
        let mut track =
            |prepared: &mut Value| apply::track_update(&tracked, &old, prepared, manager, &now);
        let track: Option<&mut dyn FnMut(&mut Value)> = match applying {
            None => Some(&mut track),
            Some(_) => None,
        };
        let hooks = UpdateHooks {
            on_unknown: &mut on_unknown,
            fill: &mut fill,
            track,
        };
        let new = strategy.update(new, &old, part, hooks)?;
        if sres.kind == Kind::PriorityClass {
            crate::priority::validate_class(st, &new, true)?;
        }
        if object::same_ignoring_rv(&new, &old) {
            return object_response(res, StatusCode::OK, &cur);
        }
        if dry_run {
            // Nothing is stored, so the object keeps the resourceVersion it was sent with (a
            // patched object the stored one's), as upstream's dry-run storage returns it.
            let mut new = new;
            if let Some(rv) = doc_rv {
                meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
            }
            return Ok(value_response(res, StatusCode::OK, new));
        }
        // The last finalizer of an object being deleted is gone: the update completes the delete.
        let deleting = new.pointer("/metadata/deletionTimestamp").is_some();
        let grace = new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let removing = deleting && grace == 0 && object::finalizers(&new).is_empty();
        // Freed before the store's reply, on the thread that built them: the task may resume
        // on another thread, and freeing another thread's memory costs more.
        drop(old);
        let result = if removing {
            drop(new);
            storage_metrics::delete(&st.store, key.clone(), Some(cur.rv)).await
        } else {
            storage_metrics::update(&st.store, key.clone(), new, Some(cur.rv)).await
        };
        match result {
            Ok(o) => return object_response(res, StatusCode::OK, &o),
            Err(StoreError::Conflict { .. }) if precondition.is_none() => continue,
            Err(e) => return Err(store_err(res, &name, e)),
        }
    }
    Err(ApiError::modified_conflict(res.plural, res.group, &name))
}

/// The server's part of an updated object's metadata (upstream's `BeforeUpdate` and
/// `FillObjectMetaSystemFields`): a UID, if given, must be the object's; the UID, creation
/// time and generation stay the stored ones; a deletion in progress stays; the
/// resourceVersion is the store's to stamp.
pub fn fill_update_meta(
    m: &mut ObjectMeta,
    old: &ObjectMeta,
    res: &Resource,
    name: &str,
) -> Result<(), ApiError> {
    if let (Some(a), Some(b)) = (m.uid.as_deref(), old.uid.as_deref())
        && !a.is_empty()
        && a != b
    {
        return Err(ApiError::conflict(
            res.plural,
            res.group,
            name,
            &format!("Precondition failed: UID in precondition: {a}, UID in object meta: {b}"),
        ));
    }
    m.uid.clone_from(&old.uid);
    m.creation_timestamp.clone_from(&old.creation_timestamp);
    m.generation = old.generation;
    if old.deletion_timestamp.is_some() {
        m.deletion_timestamp.clone_from(&old.deletion_timestamp);
    }
    if m.deletion_grace_period_seconds.is_none() {
        m.deletion_grace_period_seconds = old.deletion_grace_period_seconds;
    }
    m.resource_version = None;
    Ok(())
}

fn check_name(v: &Value, name: &str) -> Result<(), ApiError> {
    let body_name = object::meta_str(v, "name").unwrap_or("");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub orphan_dependents: Option<bool>,
    pub grace_period: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

fn invalid_delete_options(field: &str, body: String) -> ApiError {
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!("DeleteOptions.meta.k8s.io \"\" is invalid: {field}: {body}"),
    );
    let reason = if body.starts_with("Unsupported") {
        "FieldValueNotSupported"
    } else {
        "FieldValueInvalid"
    };
    e.details = Some(
        json!({"group": "meta.k8s.io", "kind": "DeleteOptions", "causes": [{"reason": reason, "message": body, "field": field}]}),
    );
    e
}

/// DeleteOptions from the body (JSON) and the query string; the query wins where both speak.
pub fn delete_options(
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let parsed = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        decode_body(headers, body)?
    };
    delete_options_of(&parsed, q)
}

/// DeleteOptions from an already decoded body (`{}` for none) and the query, which wins.
pub fn delete_options_of(parsed: &Value, q: &Query) -> Result<DeleteOptions, ApiError> {
    let mut o = DeleteOptions::default();
    let mut policy = parsed
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(p) = q.get("propagationPolicy") {
        policy = Some(p.to_string());
    }
    o.orphan_dependents = parsed.get("orphanDependents").and_then(Value::as_bool);
    if q.get("orphanDependents").is_some() {
        o.orphan_dependents = Some(q.bool("orphanDependents")?);
    }
    o.grace_period = parsed.get("gracePeriodSeconds").and_then(Value::as_i64);
    if let Some(g) = q.int("gracePeriodSeconds")? {
        o.grace_period = Some(g);
    }
    o.uid = parsed
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    o.resource_version = parsed
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    let body_dry_run = parsed
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"));
    o.dry_run = q.dry_run()? || body_dry_run;
    o.propagation = match policy.as_deref() {
        None => None,
        Some("Orphan") => Some(Propagation::Orphan),
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some(other) => {
            return Err(invalid_delete_options(
                "propagationPolicy",
                format!(
                    "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
    };
    if o.propagation.is_some() && o.orphan_dependents.is_some() {
        let p = policy.unwrap_or_default();
        return Err(invalid_delete_options(
            "propagationPolicy",
            format!(
                "Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
            ),
        ));
    }
    Ok(o)
}

/// Delete one object: preconditions, GC finalizers from the propagation policy, graceful
/// deletion for pods, and immediate removal when nothing holds the object.
pub async fn delete(st: &State, t: &Target, opts: &DeleteOptions) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let name = t.name.clone().unwrap_or_default();
    if res.kind == Kind::PriorityClass {
        crate::priority::check_delete(&name)?;
    }
    let key = sres.key(t.namespace.as_deref().unwrap_or(""), &name);
    for _ in 0..MAX_RETRIES {
        let cur = st
            .store
            .get(&key)
            .ok_or_else(|| ApiError::not_found(res.plural, res.group, &name))?;
        let mut v = parse_stored(&cur)?;
        let uid = object::meta_str(&v, "uid").unwrap_or("").to_string();
        if let Some(want) = &opts.uid
            && *want != uid
        {
            return Err(ApiError::conflict(res.plural, res.group, &name, &format!(
                "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ))
            .with_kind_message(res));
        }
        if let Some(want) = &opts.resource_version
            && *want != cur.rv.to_string()
        {
            return Err(ApiError::conflict(res.plural, res.group, &name, &format!(
                "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({}). The object might have been modified",
                cur.rv
            ))
            .with_kind_message(res));
        }
        let mut warning = None;
        let mut finalizers = object::finalizers(&v);
        let had = |f: &str, fs: &[String]| fs.iter().any(|x| x == f);
        let policy = match (opts.orphan_dependents, opts.propagation) {
            (Some(true), _) => Some(Propagation::Orphan),
            (Some(false), _) => Some(Propagation::Background),
            (None, Some(p)) => Some(p),
            (None, None) if had(kbatch_api::keys::ORPHAN_FINALIZER, &finalizers) => None,
            (None, None) if had(kbatch_api::keys::FOREGROUND_DELETION_FINALIZER, &finalizers) => {
                None
            }
            (None, None) if res.kind == Kind::Job => {
                warning = Some(JOB_ORPHAN_WARNING);
                Some(Propagation::Orphan)
            }
            (None, None) => Some(Propagation::Background),
        };
        let orphan = kbatch_api::keys::ORPHAN_FINALIZER.to_string();
        let fg = kbatch_api::keys::FOREGROUND_DELETION_FINALIZER.to_string();
        match policy {
            Some(Propagation::Orphan) => {
                finalizers.retain(|f| *f != fg);
                if !finalizers.contains(&orphan) {
                    finalizers.push(orphan);
                }
            }
            Some(Propagation::Foreground) => {
                finalizers.retain(|f| *f != orphan);
                if !finalizers.contains(&fg) {
                    finalizers.push(fg);
                }
            }
            Some(Propagation::Background) => finalizers.retain(|f| *f != orphan && *f != fg),
            None => {}
        }
        // Pods are deleted gracefully: they stay, marked, until their node confirms.
        let grace = if res.kind == Kind::Pod {
            pod_grace(&v, opts.grace_period)
        } else {
            0
        };
        let now = st.now();
        let existing_ts = object::meta_str(&v, "deletionTimestamp").map(str::to_string);
        let existing_grace = v
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        // A namespace is held by its spec finalizers until its contents are gone.
        let held_by_spec = res.kind == Kind::Namespace
            && v.pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if held_by_spec && let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("phase".into(), json!("Terminating"));
        }
        let remove_now = finalizers.is_empty() && grace == 0 && !held_by_spec;
        let result = if remove_now {
            if opts.dry_run {
                return deleted_response(res, &v, &uid);
            }
            storage_metrics::delete(&st.store, key.clone(), Some(cur.rv)).await
        } else {
            object::set_finalizers(&mut v, &finalizers);
            let m = meta_mut(&mut v);
            let deadline = now
                .saturating_add(jiff::SignedDuration::from_secs(grace))
                .unwrap_or(now);
            // A repeated delete may shorten a grace period, never lengthen it.
            let shorten = existing_grace.is_none_or(|g| grace < g);
            if existing_ts.is_none() || shorten {
                m.insert("deletionTimestamp".into(), json!(rfc3339(deadline)));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if existing_ts.is_none()
                && let Some(g) = m
                    .get("generation")
                    .and_then(Value::as_i64)
                    .filter(|g| *g > 0)
            {
                m.insert("generation".into(), json!(g + 1));
            }
            if opts.dry_run {
                return Ok(value_response(res, StatusCode::OK, v));
            }
            storage_metrics::update(&st.store, key.clone(), v, Some(cur.rv)).await
        };
        match result {
            Ok(o) => {
                let resp = if remove_now && !returns_deleted_object(res.kind) {
                    deleted_response(res, &parse_stored(&o)?, &uid)?
                } else {
                    object_response(res, StatusCode::OK, &o)?
                };
                return Ok(match warning {
                    Some(w) => with_warning(resp, w),
                    None => resp,
                });
            }
            Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound(_))
                if opts.resource_version.is_none() =>
            {
                continue;
            }
            Err(e) => return Err(store_err(res, &name, e)),
        }
    }
    Err(ApiError::modified_conflict(res.plural, res.group, &name))
}

fn returns_deleted_object(kind: Kind) -> bool {
    matches!(kind, Kind::Pod | Kind::Namespace)
}

fn deleted_response(res: &Resource, v: &Value, uid: &str) -> Result<Response, ApiError> {
    if returns_deleted_object(res.kind) {
        return Ok(value_response(res, StatusCode::OK, v.clone()));
    }
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(object::name(v)));
    if !res.group.is_empty() {
        details.insert("group".into(), json!(res.group));
    }
    details.insert("kind".into(), json!(res.plural));
    details.insert("uid".into(), json!(uid));
    let details = Value::Object(details);
    Ok(status_response(
        StatusCode::OK,
        &StatusBody {
            status: "Success",
            message: "",
            reason: "",
            details: Some(&details),
            code: None,
            list_continue: None,
        },
    ))
}

/// Upstream's pod grace: the request's, else the spec's (default 30); 0 for unscheduled or
/// finished pods; negative becomes 1.
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let unscheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if unscheduled || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    let g = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    if g < 0 { 1 } else { g }
}

pub async fn delete_collection(
    st: &State,
    t: &Target,
    q: &Query,
    opts: &DeleteOptions,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let sres = storage_resource(res);
    let filter = Filter::from_query(res, q)?;
    let page = st
        .store
        .list(&sres.prefix(t.namespace.as_deref()), None, None);
    let mut deleted = Vec::new();
    for o in page.items.iter().filter(|o| filter.matches(o)) {
        let v = parse_stored(o)?;
        let mut one = t.clone();
        one.name = Some(object::name(&v).to_string());
        one.namespace = object::meta_str(&v, "namespace").map(str::to_string);
        match delete(st, &one, opts).await {
            Ok(_) => deleted.push(v),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let items: Vec<Value> = deleted
        .into_iter()
        .map(|v| {
            if res.kind == Kind::EventV1 {
                events::to_v1(v)
            } else {
                v
            }
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": format!("{}List", res.kind_name), "apiVersion": res.api_version(), "metadata": {"resourceVersion": st.store.revision().to_string()}, "items": items}),
    ))
}

/// POST pods/NAME/binding: assign the pod to a node, once.
pub async fn bind(
    st: &State,
    t: &Target,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let res = t.resource;
    let name = t.name.clone().unwrap_or_default();
    let binding = decode_body(headers, body)?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "Binding",
            "",
            &name,
            &[kbatch_api::field::FieldError::required("target.name", "")],
        ));
    }
    let key = res.key(t.namespace.as_deref().unwrap_or(""), &name);
    for _ in 0..MAX_RETRIES {
        let cur = st
            .store
            .get(&key)
            .ok_or_else(|| ApiError::not_found(res.plural, res.group, &name))?;
        let mut v = parse_stored(&cur)?;
        if v.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                "pods/binding",
                "",
                &name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        if let Some(existing) = v
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            return Err(ApiError::conflict(
                "pods/binding",
                "",
                &name,
                &format!("pod {name} is already assigned to node \"{existing}\""),
            ));
        }
        if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("nodeName".into(), json!(node));
        }
        if let Some(ann) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            let m = meta_mut(&mut v);
            let target = m.entry("annotations").or_insert_with(|| json!({}));
            if let Some(t) = target.as_object_mut() {
                for (k, val) in ann {
                    t.insert(k.clone(), val.clone());
                }
            }
        }
        set_pod_scheduled(&mut v, &rfc3339(st.now()));
        match storage_metrics::update(&st.store, key.clone(), v, Some(cur.rv)).await {
            Ok(_) => return Ok(created_success()),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(store_err(res, &name, e)),
        }
    }
    Err(ApiError::modified_conflict(res.plural, res.group, &name))
}

/// What upstream's create handler answers when a subresource's create returns a bare
/// success Status (a binding, an eviction): the Status with code 201.
pub fn created_success() -> Response {
    status_response(
        StatusCode::CREATED,
        &StatusBody {
            status: "Success",
            message: "",
            reason: "",
            details: None,
            code: Some(201),
            list_continue: None,
        },
    )
}

fn set_pod_scheduled(pod: &mut Value, now: &str) {
    let Some(obj) = pod.as_object_mut() else {
        return;
    };
    let status = obj.entry("status").or_insert_with(|| json!({}));
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    let Some(conds) = conds.as_array_mut() else {
        return;
    };
    let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    match conds
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        Some(c) => *c = cond,
        None => conds.push(cond),
    }
}

impl ApiError {
    /// Delete preconditions word the resource by Kind (`Job.batch`), as `rest.BeforeDelete` does.
    fn with_kind_message(mut self, res: &Resource) -> Self {
        let by_resource = crate::error::qualified_resource(res.plural, res.group);
        let by_kind = if res.group.is_empty() {
            res.kind_name.to_string()
        } else {
            format!("{}.{}", res.kind_name, res.group)
        };
        self.message = self.message.replacen(&by_resource, &by_kind, 1);
        self
    }
}
