//! Server-side apply and field management (`metadata.managedFields`), after upstream's
//! `k8s.io/apimachinery/pkg/util/managedfields` on structured-merge-diff v4:
//!
//! - every write records which manager set which fields (`track_create`, `track_update`:
//!   the manager of an Update takes the fields it added or changed, away from everyone else);
//! - `application/apply-patch+yaml` merges an applied configuration into the live object
//!   (`apply`): the applier owns exactly the fields of its configuration, fields it applied
//!   before and no longer applies are removed unless someone else owns them, and changing a
//!   field another manager owns is a conflict (409) unless forced.
//!
//! The handlers run the result through the usual decoding, defaulting, update rules and
//! validation; this module only decides the document and its managedFields.

mod fieldset;
mod managed;
mod schema;
#[cfg(test)]
mod tests;
mod typed;

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::request::Query;
use crate::strategy::Part;
pub use fieldset::{FieldSet, PathElement};
pub use managed::{Entry, Managed, Operation};
pub use schema::Schema;

/// The content type of an apply patch.
pub const CONTENT_TYPE: &str = "application/apply-patch+yaml";
/// Upstream's limit on a field manager's name.
const FIELD_MANAGER_MAX_LENGTH: usize = 128;
/// Manager that takes the existing fields of an object first applied to without any
/// managedFields, so that the applier conflicts with what was there.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
/// Upstream's cap on Update entries (older ones are merged into `ancient-changes`).
const MAX_UPDATE_MANAGERS: usize = 10;
/// Recursion limit for documents built in code (parsed JSON is limited to 128 levels).
pub(crate) const MAX_DEPTH: usize = 200;

/// Where a write lands: the kind's structure, the API version the client used, the
/// subresource, and the fields the strategy resets there (nobody owns those).
pub struct Target {
    kind: &'static str,
    api_version: String,
    subresource: String,
    schema: Schema,
    reset: Reset,
}

/// The fields a strategy resets, as upstream's reset-fields filters: either a set of paths
/// (with everything below them), or everything but the paths below one prefix.
enum Reset {
    Except(FieldSet),
    AllBut(Vec<PathElement>),
}

/// An access review's Go zero value (`empty_object`): an empty spec, a status not allowed.
fn review(kind: &'static str, meta: &Value) -> (&'static str, bool, Value) {
    (
        kind,
        true,
        json!({"metadata": meta, "spec": {}, "status": {"allowed": false}}),
    )
}

fn field(name: &str) -> PathElement {
    PathElement::Field(name.to_string())
}

impl Target {
    /// A write to `kind` through `part` (the main resource or one of its subresources).
    pub fn new(kind: &'static str, api_version: &str, part: Part) -> Target {
        let mut set = FieldSet::new();
        let has_status = matches!(kind, "Job" | "CronJob" | "Pod" | "Namespace" | "Node");
        let reset = match part {
            // The pod strategy's filter for this subresource keeps only what lies below
            // spec.ephemeralContainers.
            Part::EphemeralContainers => {
                Reset::AllBut(vec![field("spec"), field("ephemeralContainers")])
            }
            Part::Status if has_status => {
                set.insert(&[field("spec")]);
                if kind == "Pod" {
                    set.insert(&[field("metadata"), field("deletionTimestamp")]);
                    set.insert(&[field("metadata"), field("ownerReferences")]);
                }
                Reset::Except(set)
            }
            Part::Main if has_status => {
                set.insert(&[field("status")]);
                Reset::Except(set)
            }
            Part::Main | Part::Status => Reset::Except(set),
        };
        Target {
            kind,
            api_version: api_version.to_string(),
            subresource: part.subresource().to_string(),
            schema: Schema::for_kind(kind),
            reset,
        }
    }

    /// Upstream's compare of the live and new objects, without the reset fields.
    fn compare(&self, live: &Value, new: &Value) -> Result<typed::Comparison, String> {
        match &self.reset {
            Reset::Except(set) => typed::compare(live, new, &self.schema, set),
            Reset::AllBut(prefix) => {
                let c = typed::compare(live, new, &self.schema, &FieldSet::new())?;
                Ok(typed::Comparison {
                    removed: c.removed.at_or_below(prefix),
                    modified: c.modified.at_or_below(prefix),
                    added: c.added.at_or_below(prefix),
                })
            }
        }
    }

    /// `set` without the reset fields.
    fn without_reset(&self, set: &FieldSet) -> FieldSet {
        match &self.reset {
            Reset::Except(reset) => set.recursive_difference(reset),
            Reset::AllBut(prefix) => set.at_or_below(prefix),
        }
    }

    fn entry(&self, manager: &str, operation: Operation) -> Entry {
        Entry {
            manager: manager.to_string(),
            operation,
            api_version: self.api_version.clone(),
            time: None,
            subresource: self.subresource.clone(),
            set: FieldSet::new(),
        }
    }

    /// The object a create compares against: the kind's Go zero value as upstream encodes it
    /// (non-pointer structs present, so that e.g. `spec` is not itself "added").
    fn empty_object(&self) -> &'static Value {
        static EMPTY: LazyLock<Vec<(&'static str, bool, Value)>> = LazyLock::new(|| {
            let meta = json!({"creationTimestamp": null});
            let template = json!({"metadata": meta, "spec": {"containers": null}});
            vec![
                (
                    "Job",
                    true,
                    json!({"metadata": meta, "spec": {"template": template}, "status": {}}),
                ),
                (
                    "CronJob",
                    true,
                    json!({"metadata": meta, "spec": {"schedule": "", "jobTemplate":
                    {"metadata": meta, "spec": {"template": template}}}, "status": {}}),
                ),
                (
                    "Pod",
                    true,
                    json!({"metadata": meta, "spec": {"containers": null}, "status": {}}),
                ),
                (
                    "Namespace",
                    true,
                    json!({"metadata": meta, "spec": {}, "status": {}}),
                ),
                (
                    "Node",
                    true,
                    json!({"metadata": meta, "spec": {}, "status": {}}),
                ),
                ("Lease", true, json!({"metadata": meta, "spec": {}})),
                (
                    "Event",
                    true,
                    json!({"metadata": meta, "involvedObject": {}, "source": {},
                    "reportingComponent": "", "reportingInstance": ""}),
                ),
                // The events.k8s.io view has no non-pointer structs of its own.
                ("Event", false, json!({"metadata": meta})),
                // The access reviews (authorization.k8s.io), never stored but tracked as
                // upstream tracks every create.
                review("SelfSubjectAccessReview", &meta),
                review("SubjectAccessReview", &meta),
                review("LocalSubjectAccessReview", &meta),
                // TokenReview (authentication.k8s.io) likewise; its status's user is a struct.
                (
                    "TokenReview",
                    true,
                    json!({"metadata": meta, "spec": {}, "status": {"user": {}}}),
                ),
                ("", false, json!({"metadata": meta})),
            ]
        });
        let core_view = self.api_version == "v1" || self.kind != "Event";
        EMPTY
            .iter()
            .find(|(k, core, _)| *k == self.kind && *core == core_view)
            .or_else(|| EMPTY.last())
            .map(|(_, _, v)| v)
            .unwrap_or(&Value::Null)
    }
}

/// Identity and metadata fields no manager owns (upstream's strip set; a member only, so
/// `metadata` itself is dropped but not what lies below it).
fn strip_set() -> &'static FieldSet {
    static STRIP: LazyLock<FieldSet> = LazyLock::new(build_strip_set);
    &STRIP
}

fn build_strip_set() -> FieldSet {
    let mut s = FieldSet::new();
    s.insert(&[field("apiVersion")]);
    s.insert(&[field("kind")]);
    s.insert(&[field("metadata")]);
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[field("metadata"), field(f)]);
    }
    s
}

/// The manager of a non-apply write: `fieldManager`, else the User-Agent up to its first
/// `/` (printable characters only, at most 128 bytes), as upstream's `prefixFromUserAgent`.
pub fn manager_name(q: &Query, user_agent: &str) -> String {
    if let Some(m) = q.get("fieldManager") {
        return m.to_string();
    }
    let prefix = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// Upstream's `ValidatePatchOptions` (422 on PatchOptions): apply needs a field manager,
/// `force` belongs to apply only, a manager name is short and printable.
pub fn validate_patch_options(q: &Query, apply: bool) -> Result<(), ApiError> {
    use kbatch_api::field::FieldError;
    let mut errs = Vec::new();
    let manager = q.get("fieldManager").unwrap_or("");
    if apply {
        if manager.is_empty() {
            errs.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
    } else if q.get("force").is_some() {
        errs.push(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    errs.extend(validate_field_manager(manager));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("PatchOptions", "meta.k8s.io", "", &errs))
    }
}

/// `ValidateFieldManager`, for creates and updates as well.
pub fn validate_field_manager(manager: &str) -> Vec<kbatch_api::field::FieldError> {
    use kbatch_api::field::FieldError;
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(FieldError::too_long(
            "fieldManager",
            FIELD_MANAGER_MAX_LENGTH,
        ));
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() {
            errs.push(FieldError::invalid(
                "fieldManager",
                manager,
                format!("invalid character {} (at position {i})", go_rune(c)),
            ));
        }
    }
    errs
}

/// Go's `%#U`: `U+0007`.
fn go_rune(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

fn managed_fields(v: &Value) -> Option<&Value> {
    v.get("metadata").and_then(|m| m.get("managedFields"))
}

fn set_managed_fields(v: &mut Value, managed: &Managed) {
    let m = crate::object::meta_mut(v);
    match managed.encode() {
        Some(mf) => m.insert("managedFields".into(), mf),
        None => m.remove("managedFields"),
    };
}

/// The managers a create or update starts from: the request's own managedFields when it
/// sets valid ones (or resets them), else the live object's. Subresource writes always
/// keep the live object's. Undecodable managedFields count as none.
fn starting_managers(target: &Target, live: Option<&Value>, new: &Value) -> Managed {
    let from_live = || Managed::decode(live.and_then(managed_fields)).unwrap_or_default();
    if !target.subresource.is_empty() {
        return from_live();
    }
    let requested = managed_fields(new);
    if managed::is_reset(requested) {
        return Managed::default();
    }
    match Managed::decode(requested) {
        Ok(m) if !m.is_empty() => m,
        _ => from_live(),
    }
}

/// Record `manager`'s Update of `live` into `new` in `managed` (upstream's Updater.Update
/// behind the managedFields updater and the metadata stripper). Returns whether anything
/// changed.
fn record_update(
    target: &Target,
    live: &Value,
    new: &Value,
    managed: &mut Managed,
    manager: &str,
    now: &str,
) -> Result<bool, String> {
    let cmp = target.compare(live, new)?;
    if cmp.is_same() {
        return Ok(false);
    }
    record(target, cmp, managed, manager, now);
    managed.cap_updaters(MAX_UPDATE_MANAGERS);
    Ok(true)
}

/// The Update operation on the entries it concerns: the fields it added or changed move to
/// `manager`, removed fields leave everyone.
fn record(
    target: &Target,
    cmp: typed::Comparison,
    managed: &mut Managed,
    manager: &str,
    now: &str,
) {
    let typed::Comparison {
        removed,
        modified,
        added: mut changed,
    } = cmp;
    changed.union(&modified);
    // The manager's own earlier entry is one of "the others" here: upstream updates as a
    // temporary manager and merges afterwards.
    for e in &mut managed.0 {
        e.set.subtract(&changed);
        e.set.subtract(&removed);
    }
    let mut mine = changed;
    mine.subtract(&removed);
    mine.subtract(strip_set());
    managed.drop_empty();
    if mine.is_empty() {
        return;
    }
    let fresh = target.entry(manager, Operation::Update);
    match managed.0.iter_mut().find(|e| e.same_manager(&fresh)) {
        Some(e) => {
            e.set.union(&mine);
            e.time = Some(now.to_string());
        }
        None => managed.0.push(Entry {
            set: mine,
            time: Some(now.to_string()),
            ..fresh
        }),
    }
}

/// Set `new`'s managedFields for a create by `manager`.
pub fn track_create(target: &Target, new: &mut Value, manager: &str, now: &str) {
    let mut managed = starting_managers(target, None, new);
    strip_managed_fields(new);
    let empty = target.empty_object();
    // Upstream keeps whatever it had when the computation fails (it cannot here, short of
    // a malformed keyed list, which validation rejects anyway).
    let _ = record_update(target, empty, new, &mut managed, manager, now);
    set_managed_fields(new, &managed);
}

/// Set `new`'s managedFields for an update of `live` by `manager`.
///
/// Controllers write status often, so the common case is kept cheap: only the live entries
/// that mention a changed path (and the manager's own) are decoded and re-encoded; the
/// others are copied as they are.
pub fn track_update(target: &Target, live: &Value, new: &mut Value, manager: &str, now: &str) {
    let requested = managed_fields(new);
    let live_mf = managed_fields(live);
    if target.subresource.is_empty()
        && (managed::is_reset(requested) || requested.is_some_and(|r| Some(r) != live_mf))
    {
        // The client set managedFields itself: decode them all.
        let mut managed = starting_managers(target, Some(live), new);
        let _ = record_update(target, live, new, &mut managed, manager, now);
        set_managed_fields(new, &managed);
        return;
    }
    let keep_live = |new: &mut Value| {
        let m = crate::object::meta_mut(new);
        match live_mf {
            Some(mf) => m.insert("managedFields".into(), mf.clone()),
            None => m.remove("managedFields"),
        };
    };
    let cmp = match target.compare(live, new) {
        Ok(c) if !c.is_same() => c,
        // Unchanged (or not comparable, where upstream keeps the live entries too).
        _ => return keep_live(new),
    };
    let mut changed = cmp.modified.clone();
    changed.union(&cmp.added);
    let me = target.entry(manager, Operation::Update);
    let mut managed = Managed::default();
    let mut untouched = Vec::new();
    let live_entries = live_mf
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (i, v) in live_entries.iter().enumerate() {
        let touched = managed::same_manager_raw(v, &me)
            || v.get("fieldsV1")
                .is_none_or(|f| changed.touches_fields_v1(f) || cmp.removed.touches_fields_v1(f));
        if !touched {
            untouched.push(v.clone());
            continue;
        }
        match Entry::from_json(i, v) {
            Ok(e) => managed.0.push(e),
            // Undecodable live entries count as none, as upstream.
            Err(_) => {
                managed = Managed::default();
                untouched.clear();
                break;
            }
        }
    }
    record(target, cmp, &mut managed, manager, now);
    let updaters = managed
        .0
        .iter()
        .filter(|e| e.operation == Operation::Update)
        .count()
        + untouched
            .iter()
            .filter(|v| v["operation"] == "Update")
            .count();
    if updaters > MAX_UPDATE_MANAGERS {
        let offset = managed.0.len();
        for (i, v) in untouched.drain(..).enumerate() {
            if let Ok(e) = Entry::from_json(offset + i, &v) {
                managed.0.push(e);
            }
        }
        managed.cap_updaters(MAX_UPDATE_MANAGERS);
    }
    let m = crate::object::meta_mut(new);
    match managed::encode_with(&managed, untouched) {
        Some(mf) => m.insert("managedFields".into(), mf),
        None => m.remove("managedFields"),
    };
}

fn strip_managed_fields(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

/// Apply `config` for `manager` to `live` (none: the object is created): the new document
/// with its managedFields (the live one when only ownership changed). `config` must
/// already be checked for apiVersion and kind.
pub fn apply(
    target: &Target,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, ApiError> {
    if managed_fields(config).is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let applied_set = typed::field_set(config, &target.schema).map_err(|errs| {
        let why = match errs.as_slice() {
            [one] => one.clone(),
            many => format!("errors:\n  {}", many.join("\n  ")),
        };
        typed_error(target, config, &why)
    })?;
    let mut managed = match live {
        None => Managed::default(),
        Some(l) => Managed::decode(managed_fields(l))
            .map_err(|e| ApiError::internal(format!("failed to decode managed fields: {e}")))?,
    };
    let mut live_doc = live
        .cloned()
        .unwrap_or_else(|| target.empty_object().clone());
    strip_managed_fields(&mut live_doc);
    if managed.is_empty() && live.is_some() {
        let empty = target.empty_object();
        record_update(
            target,
            empty,
            &live_doc,
            &mut managed,
            BEFORE_FIRST_APPLY,
            now,
        )
        .map_err(|e| typed_error(target, &live_doc, &e))?;
    }

    let mut merged = typed::merge(Some(&live_doc), config, &target.schema);
    let new_set = target.without_reset(&applied_set);
    let me = target.entry(manager, Operation::Apply);
    let previous = managed
        .0
        .iter()
        .position(|e| e.same_manager(&me))
        .map(|i| managed.0.remove(i));
    if let Some(prev) = &previous {
        let mut keep = new_set.clone();
        for e in &managed.0 {
            keep.union(&e.set);
        }
        typed::prune(&mut merged, &prev.set, &keep, &target.schema);
    }

    let cmp = target
        .compare(&live_doc, &merged)
        .map_err(|e| typed_error(target, &merged, &e))?;
    let mut changed = cmp.modified.clone();
    changed.union(&cmp.added);
    let conflicts: Vec<(&Entry, FieldSet)> = managed
        .0
        .iter()
        .map(|e| (e, e.set.intersection(&changed)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !force && !conflicts.is_empty() {
        // kubectl moving from client-side to server-side apply may take over what its
        // last-applied annotation says it set (upstream's lastAppliedManager).
        let Some(allowed) = (manager == KUBECTL)
            .then(|| last_applied_fields(target, &live_doc))
            .flatten()
        else {
            return Err(conflict_error(conflicts));
        };
        let remaining: Vec<(&Entry, FieldSet)> = conflicts
            .into_iter()
            .map(|(e, c)| (e, c.difference(&allowed)))
            .filter(|(_, c)| !c.is_empty())
            .collect();
        if !remaining.is_empty() {
            return Err(conflict_error(remaining));
        }
    }
    for e in &mut managed.0 {
        e.set = e.set.difference(&changed).difference(&cmp.removed);
    }
    let unchanged = cmp.is_same();
    let mut mine = me;
    mine.set = new_set.difference(strip_set());
    mine.time = if unchanged {
        previous.and_then(|p| p.time)
    } else {
        Some(now.to_string())
    };
    managed.0.push(mine);
    managed.drop_empty();

    let mut object = if unchanged { live_doc } else { merged };
    set_managed_fields(&mut object, &managed);
    if manager == KUBECTL {
        sync_last_applied(&mut object, config);
    }
    Ok(object)
}

/// The field manager `kubectl apply --server-side` uses, which upstream lets take over from
/// client-side apply.
const KUBECTL: &str = "kubectl";
/// Client-side apply's record of what it applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn last_applied_text(v: &Value) -> Option<&str> {
    v.pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The fields the last-applied annotation set that still hold its values in `live`.
fn last_applied_fields(target: &Target, live: &Value) -> Option<FieldSet> {
    let applied: Value = serde_json::from_str(last_applied_text(live)?).ok()?;
    if !applied.is_object()
        || applied.get("apiVersion").and_then(Value::as_str) != Some(&target.api_version)
    {
        return None;
    }
    let set = typed::field_set(&applied, &target.schema).ok()?;
    let cmp = typed::compare(&applied, live, &target.schema, &FieldSet::new()).ok()?;
    Some(
        set.difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// Keep an existing last-applied annotation in step with what kubectl now applies
/// server-side, so that a later client-side apply still works (upstream's
/// lastAppliedUpdater): the applied configuration without the annotation, as Go encodes an
/// unstructured object (keys sorted).
fn sync_last_applied(object: &mut Value, config: &Value) {
    if last_applied_text(object).is_none() {
        return;
    }
    let mut applied = config.clone();
    if let Some(a) = applied
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    let text = sorted(applied).to_string();
    if let Some(a) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.insert(LAST_APPLIED.into(), Value::String(text));
    }
}

/// A value with every object's keys in sorted order.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Upstream's error for an object that does not fit the schema (500, as upstream).
fn typed_error(target: &Target, v: &Value, why: &str) -> ApiError {
    let ns = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (group, version) = match target.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", target.api_version.as_str()),
    };
    ApiError::internal(format!(
        "failed to create typed patch object ({ns}/{name}; {group}/{version}, Kind={}): {why}",
        target.kind
    ))
}

/// 409 with upstream's message and one `FieldManagerConflict` cause per path.
fn conflict_error(mut conflicts: Vec<(&Entry, FieldSet)>) -> ApiError {
    conflicts.sort_by_key(|(e, _)| e.identifier());
    let mut causes = Vec::new();
    let mut listed: Vec<(String, Vec<String>)> = Vec::new();
    for (e, set) in &conflicts {
        let who = e.describe();
        let paths: Vec<String> = set
            .paths()
            .iter()
            .map(|p| fieldset::path_string(p))
            .collect();
        for p in &paths {
            causes.push(json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {who}"),
                "field": p,
            }));
        }
        listed.push((who, paths));
    }
    let single = match listed.as_slice() {
        [(who, paths)] if paths.len() == 1 => paths.first().map(|p| (who, p)),
        _ => None,
    };
    let message = if let Some((who, path)) = single {
        format!("Apply failed with 1 conflict: conflict with {who}: {path}")
    } else {
        let mut lines = Vec::new();
        for (who, paths) in &listed {
            lines.push(format!("conflicts with {who}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            causes.len(),
            lines.join("\n")
        )
    };
    let mut err = ApiError::new(409, "Conflict", message);
    let mut details = Map::new();
    details.insert("causes".into(), Value::Array(causes));
    err.details = Some(Value::Object(details));
    err
}

/// Decode an apply body: YAML (which includes JSON) holding an object.
pub fn decode_config(body: &[u8]) -> Result<Value, ApiError> {
    let bad =
        |e: &dyn std::fmt::Display| ApiError::bad_request(format!("error decoding YAML: {e}"));
    let text = std::str::from_utf8(body).map_err(|e| bad(&e))?;
    let v: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        crate::yaml::from_str(text).map_err(|e| bad(&e))?
    };
    match v {
        Value::Object(_) => Ok(v),
        Value::Null => Ok(Value::Object(Map::new())),
        _ => Err(bad(&"the applied configuration must be an object")),
    }
}

/// The applied configuration must name the endpoint's type: upstream checks the version
/// (400) and finds no type for another kind.
pub fn check_config_type(config: &Value, api_version: &str, kind: &str) -> Result<(), ApiError> {
    let got = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if got != api_version {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {got}, expected: {api_version}"
        )));
    }
    let got_kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if got_kind != kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the apply patch ({got_kind}) does not match the expected kind ({kind})"
        )));
    }
    Ok(())
}
