//! The request pipelines the fuzz targets drive, without libFuzzer.
//!
//! This file is also compiled into `crates/apiserver/tests/fuzz_replay.rs` (through `#[path]`), so
//! the stable test suite replays the committed corpus and regressions through exactly the code
//! the fuzzer ran. It may therefore only use crates kbatch-apiserver itself depends on.
//!
//! The pipelines mirror `handlers::create` and `handlers::update` minus the store. Where the
//! server rejects a document before the strategy runs (wrong kind, a name or namespace that does
//! not match the URL, a resourceVersion on create), the pipeline overwrites the field instead of
//! giving up: every overwritten document is one a client could have sent, and the fuzzer then
//! spends its time in defaulting and validation rather than in the cheap early checks.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue};
use kbatch_apiserver::events;
use kbatch_apiserver::handlers::{self, storage_resource};
use kbatch_apiserver::request::{self, Query};
use kbatch_apiserver::resources::{Kind, RESOURCES, Resource};
use kbatch_apiserver::selector::{FieldSelector, LabelSelector};
use kbatch_apiserver::strategy::{Part, Strategy, UpdateHooks};
use serde_json::{Map, Value, json};

/// Valid objects of every kind, in the form a client sends them. They double as corpus seeds.
pub const SEED_JOB: &str = include_str!("../corpus/api_objects/job.json");
pub const SEED_CRONJOB: &str = include_str!("../corpus/api_objects/cronjob.json");
pub const SEED_POD: &str = include_str!("../corpus/api_objects/pod.json");
pub const SEED_NAMESPACE: &str = include_str!("../corpus/api_objects/namespace.json");
pub const SEED_NODE: &str = include_str!("../corpus/api_objects/node.json");
pub const SEED_EVENT: &str = include_str!("../corpus/api_objects/event.json");
pub const SEED_LEASE: &str = include_str!("../corpus/api_objects/lease.json");
pub const SEED_CONFIGMAP: &str = include_str!("../corpus/api_objects/configmap.json");
pub const SEED_SECRET: &str = include_str!("../corpus/api_objects/secret.json");
pub const SEED_SERVICE_ACCOUNT: &str = include_str!("../corpus/api_objects/serviceaccount.json");
pub const SEED_PDB: &str = include_str!("../corpus/api_objects/poddisruptionbudget.json");
pub const SEED_PRIORITY_CLASS: &str = include_str!("../corpus/api_objects/priorityclass.json");

/// Fixed system metadata, so a replayed input takes the same path as when it was found.
const UID: &str = "6f1d2a3b-0c4e-4f5a-9b8c-7d6e5f4a3b2c";
const CREATED: &str = "2026-01-01T00:00:00Z";
const GENERATED_SUFFIX: &str = "x7k2q";

/// The seed (client form) of a resource's kind.
pub fn seed_text(res: &Resource) -> &'static str {
    match res.kind {
        Kind::Job => SEED_JOB,
        Kind::CronJob => SEED_CRONJOB,
        Kind::Pod => SEED_POD,
        Kind::Namespace => SEED_NAMESPACE,
        Kind::Node => SEED_NODE,
        Kind::Event | Kind::EventV1 => SEED_EVENT,
        Kind::Lease => SEED_LEASE,
        Kind::ConfigMap => SEED_CONFIGMAP,
        Kind::Secret => SEED_SECRET,
        Kind::ServiceAccount => SEED_SERVICE_ACCOUNT,
        Kind::PriorityClass => SEED_PRIORITY_CLASS,
        Kind::PodDisruptionBudget => SEED_PDB,
    }
}

/// The seed as a client of `res` would send it (events.k8s.io/v1 clients see the v1 shape).
pub fn client_seed(res: &Resource) -> Value {
    let v: Value = serde_json::from_str(seed_text(res)).expect("seed objects are valid JSON");
    if res.kind == Kind::EventV1 {
        events::to_v1(v)
    } else {
        v
    }
}

/// Each resource's seed after a successful create: what an update finds in the store.
/// Computed once, since the fuzzer calls the update pipeline millions of times.
pub fn stored_seeds() -> &'static [Value] {
    static SEEDS: OnceLock<Vec<Value>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        RESOURCES
            .iter()
            .map(|res| {
                let mut v = create(res, client_seed(res)).unwrap_or_else(|e| {
                    panic!("seed for {} does not pass create: {e}", res.plural)
                });
                meta_mut(&mut v).insert("resourceVersion".into(), json!("7"));
                v
            })
            .collect()
    })
}

/// `object::meta_mut` (private to the server): the metadata map, created if missing.
fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(o) = v else { unreachable!() };
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    let Value::Object(mm) = m else { unreachable!() };
    mm
}

fn meta_str<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `handlers::to_storage_form` with the type fields forced to the endpoint's type.
fn to_storage_form(res: &Resource, mut v: Value) -> Value {
    meta_mut(&mut v);
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), json!(res.api_version()));
        o.insert("kind".into(), json!(res.kind_name));
    }
    if res.kind == Kind::EventV1 {
        events::from_v1(v)
    } else {
        v
    }
}

/// `handlers::check_namespace`, taking the URL's namespace from the document itself.
fn set_namespace(res: &Resource, v: &mut Value, default: &str) {
    let m = meta_mut(v);
    if !res.namespaced {
        m.remove("namespace");
        return;
    }
    if m.get("namespace")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        m.insert("namespace".into(), json!(default));
    }
}

/// The create pipeline: decode, default, system metadata, prepare, validate.
pub fn create(res: &'static Resource, doc: Value) -> Result<Value, String> {
    let strategy = Strategy::new(storage_resource(res));
    let doc = to_storage_form(res, doc);
    // Unknown fields only matter under fieldValidation=Strict, which stops before validation.
    let (mut v, _unknown) = strategy
        .decode_and_default(doc)
        .map_err(|e| e.message.clone())?;
    set_namespace(res, &mut v, "default");
    let generate = meta_str(&v, "name").is_empty();
    let generate_name = meta_str(&v, "generateName").to_string();
    let m = meta_mut(&mut v);
    for k in [
        "creationTimestamp",
        "uid",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "resourceVersion",
    ] {
        m.remove(k);
    }
    m.insert("uid".into(), json!(UID));
    m.insert("creationTimestamp".into(), json!(CREATED));
    if generate && !generate_name.is_empty() {
        m.insert(
            "name".into(),
            json!(format!("{generate_name}{GENERATED_SUFFIX}")),
        );
    }
    strategy
        .prepare_and_validate_create(v)
        .map_err(|e| e.message.clone())
}

/// The update pipeline for the main resource or the status subresource, against `old` as stored.
pub fn update(
    res: &'static Resource,
    old: &Value,
    doc: Value,
    part: Part,
) -> Result<Value, String> {
    let strategy = Strategy::new(storage_resource(res));
    let mut new = to_storage_form(res, doc);
    let name = meta_str(old, "name").to_string();
    meta_mut(&mut new).insert("name".into(), json!(name));
    let ns = meta_str(old, "namespace").to_string();
    meta_mut(&mut new).insert("namespace".into(), json!(ns));
    set_namespace(res, &mut new, &ns);
    // Unknown fields only matter under fieldValidation=Strict; managedFields are not fuzzed.
    let hooks = UpdateHooks {
        on_unknown: &mut |_| Ok(()),
        fill: &mut |m, o| handlers::fill_update_meta(m, o, res, &name),
        track: None,
    };
    strategy
        .update(new, old, part, hooks)
        .map_err(|e| e.message.clone())
}

/// Every document an input stands for, for one resource: the input as a whole object (POST or
/// PUT), the seed merge-patched with it, or the seed JSON-patched with it (PATCH).
fn documents(res: &Resource, input: &Value) -> Vec<Value> {
    let mut docs = Vec::new();
    match input {
        Value::Object(_) => {
            docs.push(input.clone());
            let mut merged = client_seed(res);
            json_patch::merge(&mut merged, input);
            docs.push(merged);
        }
        Value::Array(_) => {
            if let Ok(p) = serde_json::from_value::<json_patch::Patch>(input.clone()) {
                let mut patched = client_seed(res);
                if json_patch::patch(&mut patched, &p).is_ok() {
                    docs.push(patched);
                }
            }
        }
        _ => {}
    }
    docs
}

/// The request bodies an input stands for: a JSON document (any JSON value, since a JSON
/// patch is an array), and whatever the server's YAML and protobuf body decoders make of it.
fn bodies(data: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        out.push(v);
    }
    for media_type in ["application/yaml", "application/vnd.kubernetes.protobuf"] {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(media_type));
        if let Ok(v) = handlers::decode_body(&headers, data)
            && !out.contains(&v)
        {
            out.push(v);
        }
    }
    out
}

/// `api_objects`: the input as a JSON, YAML or protobuf document, through create and both kinds of
/// update for every served resource.
pub fn api_objects(data: &[u8]) {
    let inputs = bodies(data);
    for (res, old) in RESOURCES.iter().zip(stored_seeds()) {
        for doc in inputs.iter().flat_map(|input| documents(res, input)) {
            if let Ok(created) = create(res, doc.clone()) {
                // What was just stored must be updatable with itself.
                let _ = update(res, &created, created.clone(), Part::Main);
            }
            let _ = update(res, old, doc.clone(), Part::Main);
            if res.has_subresource("status") {
                let _ = update(res, old, doc, Part::Status);
            }
        }
    }
}

/// `selectors_and_paths`: the input as a label selector, a field selector for every kind, a
/// request path, a query string and a Job index list.
pub fn selectors_and_paths(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = LabelSelector::parse(s) {
        let _ = sel.is_empty();
        for obj in stored_seeds() {
            let _ = sel.matches(obj.pointer("/metadata/labels").and_then(Value::as_object));
        }
        let _ = sel.matches(None);
    }
    for (res, obj) in RESOURCES.iter().zip(stored_seeds()) {
        if let Ok(sel) = FieldSelector::parse(s, res.kind) {
            let _ = sel.pinned_name();
            let _ = sel.matches(res.kind, obj);
            let _ = sel.matches(res.kind, &json!({}));
        }
    }
    let _ = request::route(s);
    let q = Query::parse(Some(s));
    for k in ["watch", "allowWatchBookmarks", "sendInitialEvents"] {
        let _ = q.bool(k);
    }
    for k in ["limit", "timeoutSeconds", "gracePeriodSeconds"] {
        let _ = q.int(k);
    }
    let _ = q.dry_run();
    for completions in [0, 1, 3, 100_000, i32::MAX, -1, i32::MIN] {
        let _ = kbatch_api::validation::parse_index_intervals(s, completions);
        let _ = kbatch_api::validation::validate_indexes_format(s, completions);
    }
}

/// Splits a cron input: the schedule, then after the first newline an optional time zone name.
pub fn cron_parts(data: &[u8]) -> Option<(&str, Option<&str>)> {
    let s = std::str::from_utf8(data).ok()?;
    Some(match s.split_once('\n') {
        Some((spec, tz)) => (spec, Some(tz)),
        None => (s, None),
    })
}

/// `cron`, as the API sees it: the schedule and zone in a CronJob, created and updated.
pub fn cron(data: &[u8]) {
    let Some((spec, tz)) = cron_parts(data) else {
        return;
    };
    let Some(i) = RESOURCES.iter().position(|r| r.kind == Kind::CronJob) else {
        return;
    };
    let res = &RESOURCES[i];
    let mut doc = client_seed(res);
    doc["spec"]["schedule"] = json!(spec);
    match tz {
        Some(tz) => doc["spec"]["timeZone"] = json!(tz),
        None => {
            if let Some(spec) = doc["spec"].as_object_mut() {
                spec.remove("timeZone");
            }
        }
    }
    let _ = create(res, doc.clone());
    let _ = update(res, &stored_seeds()[i], doc, Part::Main);
}
