//! Validation as the upstream API server does it: each function returns the field errors in
//! upstream's order, with upstream's paths, reasons and messages. All checks are total: any
//! input yields a list, never a panic.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::field::{ErrorList, FieldError, Path, Value};
use crate::names;

mod authentication;
mod authorization;
mod config;
mod cronjob;
mod indexes;
mod job;
mod lifecycle;
mod other;
mod pod;
mod policy;
mod probe;
pub mod render;

pub use authentication::{TOKEN_REQUIRED, token_review};
pub use authorization::{
    local_subject_access_review, self_subject_access_review, subject_access_review,
};
pub use config::{
    MAX_SECRET_SIZE, configmap_create, configmap_update, secret_create, secret_update,
};
pub use cronjob::{
    cronjob_create, cronjob_status_update, cronjob_update, cronjob_warnings, schedule_and_time_zone,
};
pub use indexes::{IndexParseError, parse_index_intervals, validate_indexes_format};
pub use job::{is_condition_true, job_create, job_status_update, job_update, job_warnings};
pub use other::{
    event_create, event_update, lease_create, lease_update, namespace_create, namespace_update,
    node_create, node_update, priority_class_create, priority_class_update, service_account_create,
    service_account_update,
};
pub(crate) use pod::volume_sources;
pub use pod::{
    pod_create, pod_ephemeral_containers_update, pod_spec, pod_status_update, pod_template_spec,
    pod_update,
};
pub use policy::{
    ALWAYS_ALLOW, IF_HEALTHY_BUDGET, pdb_create, pdb_status_update, pdb_update, percent,
};

/// `IsNegativeErrorMsg`.
pub const NEGATIVE_MSG: &str = "must be greater than or equal to 0";
/// `FieldImmutableErrorMsg`.
pub const IMMUTABLE_MSG: &str = "field is immutable";
/// Upper bound of annotation keys plus values.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// A name validation function: `(name, is_prefix) -> messages`.
pub type NameFn = fn(&str, bool) -> Vec<String>;

/// `ValidateNonnegativeField`.
pub(crate) fn nonnegative(value: i64, path: &Path, errs: &mut ErrorList) {
    if value < 0 {
        errs.push(FieldError::invalid(path, value, NEGATIVE_MSG));
    }
}

/// `ValidateImmutableField`: the new value is rendered as JSON, as upstream does.
pub(crate) fn immutable<T: PartialEq + serde::Serialize>(
    new: &T,
    old: &T,
    path: &Path,
    errs: &mut ErrorList,
) {
    if new != old {
        errs.push(FieldError::new(
            crate::field::ErrorType::Invalid,
            path,
            Some(Value::json(new).0),
            IMMUTABLE_MSG,
        ));
    }
}

fn invalid_msgs(path: &Path, value: &str, msgs: Vec<String>, errs: &mut ErrorList) {
    for m in msgs {
        errs.push(FieldError::invalid(path, value, m));
    }
}

/// `ValidateDNS1123Label`.
pub(crate) fn dns_label(value: &str, path: &Path, errs: &mut ErrorList) {
    invalid_msgs(path, value, names::dns1123_label(value), errs);
}

/// `ValidateDNS1123Subdomain`.
pub(crate) fn dns_subdomain(value: &str, path: &Path, errs: &mut ErrorList) {
    invalid_msgs(path, value, names::dns1123_subdomain(value), errs);
}

/// `ValidateQualifiedName`.
pub(crate) fn qualified_name(value: &str, path: &Path, errs: &mut ErrorList) {
    invalid_msgs(path, value, names::qualified_name(value), errs);
}

/// `ValidateLabels`: keys are qualified names, values label values; the path has no key.
pub fn labels(labels: Option<&BTreeMap<String, String>>, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    for (k, v) in labels.into_iter().flatten() {
        qualified_name(k, path, &mut errs);
        invalid_msgs(path, v, names::label_value(v), &mut errs);
    }
    errs
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitive), total size bounded.
pub fn annotations(annotations: Option<&BTreeMap<String, String>>, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations.into_iter().flatten() {
        invalid_msgs(path, k, names::qualified_name(&k.to_lowercase()), &mut errs);
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

/// Splits `group/version` (or a bare version) as `schema.ParseGroupVersion` would.
fn split_api_version(api_version: &str) -> Option<(&str, &str)> {
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [""] => Some(("", "")),
        [v] => Some(("", v)),
        [g, v] => Some((g, v)),
        _ => None,
    }
}

/// `ValidateOwnerReferences` (paths carry no index, as upstream).
pub fn owner_references(
    refs: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    path: &Path,
) -> ErrorList {
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in refs.into_iter().flatten() {
        // FromAPIVersionAndKind: an unparsable apiVersion yields an empty version.
        let (group, version) = split_api_version(&r.api_version).unwrap_or(("", ""));
        if version.is_empty() {
            errs.push(FieldError::invalid(
                path.child("apiVersion"),
                &r.api_version,
                "version must not be empty",
            ));
        }
        if r.kind.is_empty() {
            errs.push(FieldError::invalid(
                path.child("kind"),
                &r.kind,
                "kind must not be empty",
            ));
        }
        if r.name.is_empty() {
            errs.push(FieldError::invalid(
                path.child("name"),
                &r.name,
                "name must not be empty",
            ));
        }
        if r.uid.is_empty() {
            errs.push(FieldError::invalid(
                path.child("uid"),
                &r.uid,
                "uid must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && r.kind == "Event" {
            errs.push(FieldError::invalid(
                path,
                Value(render::owner_reference(r)),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.controller == Some(true) {
            let cur = format!("{}/{}", r.kind, r.name);
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    render::owner_references(refs.map(|v| v.as_slice()).unwrap_or(&[])),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {cur}"
                    ),
                )),
                None => first_controller = Some(cur),
            }
        }
    }
    errs
}

const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// `ValidateFinalizers` plus the core rule that unqualified names must be standard ones.
pub fn finalizers(finalizers: Option<&Vec<String>>, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    let list = finalizers.map(|v| v.as_slice()).unwrap_or(&[]);
    for f in list {
        qualified_name(f, path, &mut errs);
    }
    let orphan = list.iter().any(|f| f == crate::keys::ORPHAN_FINALIZER);
    let fg = list
        .iter()
        .any(|f| f == crate::keys::FOREGROUND_DELETION_FINALIZER);
    if orphan && fg {
        errs.push(FieldError::invalid(
            path,
            Value::json(list),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    for (i, f) in list.iter().enumerate() {
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f.as_str()) {
            errs.push(FieldError::invalid(
                path.index(i),
                f,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    errs
}

/// `ValidateObjectMeta` (core flavour) for a create.
pub fn object_meta(meta: &ObjectMeta, requires_namespace: bool, name_fn: NameFn) -> ErrorList {
    let path = Path::new("metadata");
    let mut errs = Vec::new();
    let generate_name = meta.generate_name.as_deref().unwrap_or("");
    if !generate_name.is_empty() {
        invalid_msgs(
            &path.child("generateName"),
            generate_name,
            name_fn(generate_name, true),
            &mut errs,
        );
    }
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            path.child("name"),
            "name or generateName is required",
        ));
    } else {
        invalid_msgs(&path.child("name"), name, name_fn(name, false), &mut errs);
    }
    let ns = meta.namespace.as_deref().unwrap_or("");
    if requires_namespace {
        if ns.is_empty() {
            errs.push(FieldError::required(path.child("namespace"), ""));
        } else {
            invalid_msgs(
                &path.child("namespace"),
                ns,
                names::name_is_dns_label(ns, false),
                &mut errs,
            );
        }
    } else if !ns.is_empty() {
        errs.push(FieldError::forbidden(
            path.child("namespace"),
            "not allowed on this type",
        ));
    }
    nonnegative(
        meta.generation.unwrap_or(0),
        &path.child("generation"),
        &mut errs,
    );
    errs.extend(labels(meta.labels.as_ref(), &path.child("labels")));
    errs.extend(annotations(
        meta.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(owner_references(
        meta.owner_references.as_ref(),
        &path.child("ownerReferences"),
    ));
    errs.extend(finalizers(
        meta.finalizers.as_ref(),
        &path.child("finalizers"),
    ));
    errs
}

/// `ValidateObjectMetaUpdate`. The "resourceVersion must be specified" rule is left out: every
/// kind served here allows unconditional updates, for which the server supplies the version.
pub fn object_meta_update(new: &ObjectMeta, old: &ObjectMeta) -> ErrorList {
    let path = Path::new("metadata");
    let mut errs = Vec::new();
    if old.deletion_timestamp.is_some() {
        let old_f = old.finalizers.as_deref().unwrap_or(&[]);
        let mut extra: Vec<&String> = new
            .finalizers
            .iter()
            .flatten()
            .filter(|f| !old_f.contains(f))
            .collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let list: Vec<String> = extra.iter().map(|s| crate::field::quote(s)).collect();
            errs.push(FieldError::forbidden(
                path.child("finalizers"),
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    list.join(", ")
                ),
            ));
        }
    }
    let new_gen = new.generation.unwrap_or(0);
    if new_gen < old.generation.unwrap_or(0) {
        errs.push(FieldError::invalid(
            path.child("generation"),
            new_gen,
            "must not be decremented",
        ));
    }
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    immutable(&s(&new.name), &s(&old.name), &path.child("name"), &mut errs);
    immutable(
        &s(&new.namespace),
        &s(&old.namespace),
        &path.child("namespace"),
        &mut errs,
    );
    immutable(&s(&new.uid), &s(&old.uid), &path.child("uid"), &mut errs);
    immutable(
        &new.creation_timestamp,
        &old.creation_timestamp,
        &path.child("creationTimestamp"),
        &mut errs,
    );
    immutable(
        &new.deletion_timestamp,
        &old.deletion_timestamp,
        &path.child("deletionTimestamp"),
        &mut errs,
    );
    immutable(
        &new.deletion_grace_period_seconds,
        &old.deletion_grace_period_seconds,
        &path.child("deletionGracePeriodSeconds"),
        &mut errs,
    );
    errs.extend(labels(new.labels.as_ref(), &path.child("labels")));
    errs.extend(annotations(
        new.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(owner_references(
        new.owner_references.as_ref(),
        &path.child("ownerReferences"),
    ));
    errs
}

/// `ValidateLabelSelector`.
pub fn label_selector(selector: Option<&LabelSelector>, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    let Some(sel) = selector else {
        return errs;
    };
    errs.extend(labels(
        sel.match_labels.as_ref(),
        &path.child("matchLabels"),
    ));
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let p = path.child("matchExpressions").index(i);
        label_selector_requirement(req, false, &p, &mut errs);
    }
    errs
}

/// `ValidateLabelSelectorRequirement`; `allow_unknown_operator` is upstream's
/// `AllowUnknownOperatorInRequirement` (the access reviews set it).
pub(crate) fn label_selector_requirement(
    req: &LabelSelectorRequirement,
    allow_unknown_operator: bool,
    p: &Path,
    errs: &mut ErrorList,
) {
    let values = req.values.as_deref().unwrap_or(&[]);
    match req.operator.as_str() {
        "In" | "NotIn" => {
            if values.is_empty() {
                errs.push(FieldError::required(
                    p.child("values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ));
            }
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                errs.push(FieldError::forbidden(
                    p.child("values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
        }
        _ if allow_unknown_operator => {}
        other => errs.push(FieldError::invalid(
            p.child("operator"),
            other,
            "not a valid selector operator",
        )),
    }
    qualified_name(&req.key, &p.child("key"), errs);
    for (j, v) in values.iter().enumerate() {
        invalid_msgs(&p.child("values").index(j), v, names::label_value(v), errs);
    }
}

/// `LabelSelectorAsSelector(sel).Matches(labels)`: `None` when the selector does not convert
/// (upstream then skips the match check). A nil selector matches nothing, an empty one
/// everything.
pub fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let Some(sel) = selector else {
        return Some(false);
    };
    // Conversion also validates every key and value, as labels.Parse does.
    let labels_valid = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| names::qualified_name(k).is_empty() && names::label_value(v).is_empty());
    let expressions_valid = sel.match_expressions.iter().flatten().all(|req| {
        names::qualified_name(&req.key).is_empty()
            && req
                .values
                .iter()
                .flatten()
                .all(|v| names::label_value(v).is_empty())
    });
    if !labels_valid || !expressions_valid {
        return None;
    }
    crate::labels::selector_matches(sel, labels)
}

/// `ValidateHasLabel` under `<path>.labels[<key>]`: the bad value is the whole labels map.
pub(crate) fn has_label(
    meta: &ObjectMeta,
    path: &Path,
    key: &str,
    expected: &str,
    errs: &mut ErrorList,
) {
    let p = path.child("labels").key(key);
    match meta.labels.as_ref().and_then(|l| l.get(key)) {
        None => errs.push(FieldError::required(p, format!("must be '{expected}'"))),
        Some(v) if v != expected => errs.push(FieldError::invalid(
            p,
            Value::json(&meta.labels),
            format!("must be '{expected}'"),
        )),
        Some(_) => {}
    }
}
