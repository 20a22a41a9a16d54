//! The authorization.k8s.io/v1 access reviews: upstream's
//! `pkg/apis/authorization/validation` (the rules its REST handlers run before asking the
//! authorizer; SelfSubjectRulesReview has none).

use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, LabelSelectorAttributes, LocalSubjectAccessReview,
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SubjectAccessReview,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value as Json};

use super::label_selector_requirement;
use crate::field::{ErrorList, FieldError, Path, Value};

const EXACTLY_ONE: &str =
    "exactly one of nonResourceAttributes or resourceAttributes must be specified";
const BOTH: &str = "cannot be specified in combination with resourceAttributes";

/// `ValidateSelfSubjectAccessReview`.
pub fn self_subject_access_review(r: &SelfSubjectAccessReview) -> ErrorList {
    let spec = &r.spec;
    let mut errs = attributes_union(
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    );
    resource_attributes(spec.resource_attributes.as_ref(), &mut errs);
    if !meta_is_empty(&r.metadata, false) {
        errs.push(metadata_error(&r.metadata, "must be empty"));
    }
    errs
}

/// `ValidateSubjectAccessReview`.
pub fn subject_access_review(r: &SubjectAccessReview) -> ErrorList {
    let mut errs = subject_access_review_spec(&r.spec);
    if !meta_is_empty(&r.metadata, false) {
        errs.push(metadata_error(&r.metadata, "must be empty"));
    }
    errs
}

/// `ValidateLocalSubjectAccessReview`: the namespace is the request's (the handler sets it
/// from the URL) and the only metadata allowed; resource attributes must name it.
pub fn local_subject_access_review(r: &LocalSubjectAccessReview) -> ErrorList {
    let mut errs = subject_access_review_spec(&r.spec);
    if !meta_is_empty(&r.metadata, true) {
        errs.push(metadata_error(
            &r.metadata,
            "must be empty except for namespace",
        ));
    }
    let namespace = r.metadata.namespace.as_deref().unwrap_or("");
    if let Some(attrs) = &r.spec.resource_attributes {
        let asked = attrs.namespace.as_deref().unwrap_or("");
        if asked != namespace {
            errs.push(FieldError::invalid(
                "spec.resourceAttributes.namespace",
                asked,
                "must match metadata.namespace",
            ));
        }
    }
    if let Some(n) = &r.spec.non_resource_attributes {
        errs.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            internal_non_resource(n),
            "disallowed on this kind of request",
        ));
    }
    errs
}

/// `ValidateSubjectAccessReviewSpec`: the attributes union, then a subject.
fn subject_access_review_spec(
    spec: &k8s_openapi::api::authorization::v1::SubjectAccessReviewSpec,
) -> ErrorList {
    let mut errs = attributes_union(
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    );
    let user = spec.user.as_deref().unwrap_or("");
    if user.is_empty() && spec.groups.as_ref().is_none_or(Vec::is_empty) {
        errs.push(FieldError::invalid(
            "spec.user",
            user,
            "at least one of user or group must be specified",
        ));
    }
    resource_attributes(spec.resource_attributes.as_ref(), &mut errs);
    errs
}

/// Exactly one of the two attribute sets. The bad value is `nonResourceAttributes` in both
/// cases, as upstream passes it: `null` when neither is set.
fn attributes_union(
    resource: Option<&ResourceAttributes>,
    non_resource: Option<&NonResourceAttributes>,
) -> ErrorList {
    match (resource, non_resource) {
        (Some(_), Some(n)) => vec![FieldError::invalid(
            "spec.nonResourceAttributes",
            internal_non_resource(n),
            BOTH,
        )],
        (None, None) => vec![FieldError::invalid(
            "spec.resourceAttributes",
            Value("null".into()),
            EXACTLY_ONE,
        )],
        _ => Vec::new(),
    }
}

/// Upstream validates the internal type, which has no json tags: Go's JSON of it names the
/// fields as Go does, and writes both.
fn internal_non_resource(n: &NonResourceAttributes) -> Value {
    Value(format!(
        "{{\"Path\":{},\"Verb\":{}}}",
        Json::from(n.path.as_deref().unwrap_or("")),
        Json::from(n.verb.as_deref().unwrap_or(""))
    ))
}

/// `validateResourceAttributes`: the field and label selectors, when set.
fn resource_attributes(attrs: Option<&ResourceAttributes>, errs: &mut ErrorList) {
    let Some(attrs) = attrs else {
        return;
    };
    let path = Path::new("spec").child("resourceAttributes");
    if let Some(sel) = &attrs.field_selector {
        field_selector_attributes(sel, &path.child("fieldSelector"), errs);
    }
    if let Some(sel) = &attrs.label_selector {
        label_selector_attributes(sel, &path.child("labelSelector"), errs);
    }
}

/// A selector is given either raw or as requirements, not both, not neither.
fn raw_or_requirements(raw: &str, requirements: usize, path: &Path, errs: &mut ErrorList) {
    if !raw.is_empty() && requirements > 0 {
        errs.push(FieldError::invalid(
            path.child("rawSelector"),
            raw,
            "may not specified at the same time as requirements",
        ));
    }
    if raw.is_empty() && requirements == 0 {
        errs.push(FieldError::required(
            path.child("requirements"),
            format!("when {path} is specified, requirements or rawSelector is required"),
        ));
    }
}

/// `validateFieldSelectorAttributes`, requirements checked by
/// `ValidateFieldSelectorRequirement` with unknown operators allowed (a newer client may know
/// operators this server does not; requirements only narrow a request).
fn field_selector_attributes(sel: &FieldSelectorAttributes, path: &Path, errs: &mut ErrorList) {
    let requirements = sel.requirements.as_deref().unwrap_or(&[]);
    raw_or_requirements(
        sel.raw_selector.as_deref().unwrap_or(""),
        requirements.len(),
        path,
        errs,
    );
    for (i, req) in requirements.iter().enumerate() {
        let p = path.child("requirements").index(i);
        if req.key.is_empty() {
            errs.push(FieldError::required(p.child("key"), "must be specified"));
        }
        let values = req.values.as_deref().unwrap_or(&[]);
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                p.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                p.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            _ => {}
        }
    }
}

/// `validateLabelSelectorAttributes`, requirements checked as a label selector's match
/// expressions, unknown operators allowed.
fn label_selector_attributes(sel: &LabelSelectorAttributes, path: &Path, errs: &mut ErrorList) {
    let requirements = sel.requirements.as_deref().unwrap_or(&[]);
    raw_or_requirements(
        sel.raw_selector.as_deref().unwrap_or(""),
        requirements.len(),
        path,
        errs,
    );
    for (i, req) in requirements.iter().enumerate() {
        label_selector_requirement(req, true, &path.child("requirements").index(i), errs);
    }
}

/// Whether the metadata is Go's zero ObjectMeta but for managedFields (and the namespace when
/// `but_namespace`); empty and absent lists and maps are alike, as in upstream's semantic
/// equality.
fn meta_is_empty(m: &ObjectMeta, but_namespace: bool) -> bool {
    let blank = |s: &Option<String>| s.as_deref().is_none_or(str::is_empty);
    blank(&m.name)
        && blank(&m.generate_name)
        && (but_namespace || blank(&m.namespace))
        && blank(&m.self_link)
        && blank(&m.uid)
        && blank(&m.resource_version)
        && m.generation.is_none_or(|g| g == 0)
        && m.creation_timestamp.is_none()
        && m.deletion_timestamp.is_none()
        && m.deletion_grace_period_seconds.is_none()
        && m.labels.as_ref().is_none_or(|l| l.is_empty())
        && m.annotations.as_ref().is_none_or(|a| a.is_empty())
        && m.owner_references.as_ref().is_none_or(Vec::is_empty)
        && m.finalizers.as_ref().is_none_or(Vec::is_empty)
}

/// `metadata: Invalid value: <ObjectMeta>: <detail>`, the metadata as Go's JSON writes it.
fn metadata_error(m: &ObjectMeta, detail: &str) -> FieldError {
    FieldError::invalid("metadata", Value(go_object_meta(m)), detail)
}

/// ObjectMeta as Go's encoding/json writes it: fields in Go order, `creationTimestamp` always
/// (a zero time is `null`), managedFields entries in their Go order.
fn go_object_meta(m: &ObjectMeta) -> String {
    const META: &[&str] = &[
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    const ENTRY: &[&str] = &[
        "manager",
        "operation",
        "apiVersion",
        "time",
        "fieldsType",
        "fieldsV1",
        "subresource",
    ];
    let Ok(Json::Object(mut fields)) = serde_json::to_value(m) else {
        return "null".into();
    };
    fields.entry("creationTimestamp").or_insert(Json::Null);
    let parts: Vec<String> = META
        .iter()
        .filter_map(|k| {
            let v = fields.get(*k)?;
            let text = match (*k, v) {
                ("managedFields", Json::Array(list)) => {
                    let entries: Vec<String> = list
                        .iter()
                        .map(|e| match e {
                            Json::Object(e) => in_order(e, ENTRY),
                            other => other.to_string(),
                        })
                        .collect();
                    format!("[{}]", entries.join(","))
                }
                _ => v.to_string(),
            };
            Some(format!("{}:{text}", Json::from(*k)))
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// A JSON object with `order`'s keys in that order (absent ones skipped).
fn in_order(m: &Map<String, Json>, order: &[&str]) -> String {
    let parts: Vec<String> = order
        .iter()
        .filter_map(|k| m.get(*k).map(|v| format!("{}:{v}", Json::from(*k))))
        .collect();
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authorization::v1::{
        SelfSubjectAccessReviewSpec, SubjectAccessReviewSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldSelectorRequirement, LabelSelectorRequirement,
    };

    fn ssar(spec: SelfSubjectAccessReviewSpec) -> SelfSubjectAccessReview {
        SelfSubjectAccessReview {
            spec,
            ..Default::default()
        }
    }

    fn texts(errs: &ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn exactly_one_kind_of_attributes() {
        let pods = ResourceAttributes {
            verb: Some("create".into()),
            resource: Some("pods".into()),
            ..Default::default()
        };
        let healthz = NonResourceAttributes {
            path: Some("/healthz".into()),
            verb: Some("get".into()),
        };
        assert!(
            self_subject_access_review(&ssar(SelfSubjectAccessReviewSpec {
                resource_attributes: Some(pods.clone()),
                ..Default::default()
            }))
            .is_empty()
        );
        assert!(
            self_subject_access_review(&ssar(SelfSubjectAccessReviewSpec {
                non_resource_attributes: Some(healthz.clone()),
                ..Default::default()
            }))
            .is_empty()
        );
        let neither = self_subject_access_review(&ssar(Default::default()));
        assert_eq!(
            texts(&neither),
            [
                "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"
            ]
        );
        let both = self_subject_access_review(&ssar(SelfSubjectAccessReviewSpec {
            resource_attributes: Some(pods),
            non_resource_attributes: Some(healthz),
        }));
        assert_eq!(
            texts(&both),
            [
                r#"spec.nonResourceAttributes: Invalid value: {"Path":"/healthz","Verb":"get"}: cannot be specified in combination with resourceAttributes"#
            ]
        );
    }

    #[test]
    fn metadata_must_be_empty() {
        let mut r = ssar(SelfSubjectAccessReviewSpec {
            non_resource_attributes: Some(NonResourceAttributes::default()),
            ..Default::default()
        });
        r.metadata.labels = Some(Default::default());
        assert!(self_subject_access_review(&r).is_empty());
        r.metadata.name = Some("x".into());
        assert_eq!(
            texts(&self_subject_access_review(&r)),
            [
                r#"metadata: Invalid value: {"name":"x","creationTimestamp":null,"labels":{}}: must be empty"#
            ]
        );
    }

    #[test]
    fn subject_access_reviews_need_a_subject() {
        let r = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                resource_attributes: Some(Default::default()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            texts(&subject_access_review(&r)),
            [r#"spec.user: Invalid value: "": at least one of user or group must be specified"#]
        );
        let local = LocalSubjectAccessReview {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: SubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some("other".into()),
                    ..Default::default()
                }),
                groups: Some(vec!["g".into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            texts(&local_subject_access_review(&local)),
            [
                r#"spec.resourceAttributes.namespace: Invalid value: "other": must match metadata.namespace"#
            ]
        );
    }

    #[test]
    fn selectors_are_raw_or_requirements() {
        let attrs = |field: FieldSelectorAttributes, label: LabelSelectorAttributes| {
            ssar(SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    field_selector: Some(field),
                    label_selector: Some(label),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let errs = self_subject_access_review(&attrs(
            FieldSelectorAttributes::default(),
            LabelSelectorAttributes {
                raw_selector: Some("a=b".into()),
                requirements: Some(vec![LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "In".into(),
                    values: Some(vec!["b".into()]),
                }]),
            },
        ));
        assert_eq!(
            texts(&errs),
            [
                "spec.resourceAttributes.fieldSelector.requirements: Required value: when spec.resourceAttributes.fieldSelector is specified, requirements or rawSelector is required",
                r#"spec.resourceAttributes.labelSelector.rawSelector: Invalid value: "a=b": may not specified at the same time as requirements"#,
            ]
        );
        // Unknown operators pass (newer clients); malformed requirements do not.
        let errs = self_subject_access_review(&attrs(
            FieldSelectorAttributes {
                requirements: Some(vec![
                    FieldSelectorRequirement {
                        key: "spec.nodeName".into(),
                        operator: "Matches".into(),
                        values: None,
                    },
                    FieldSelectorRequirement {
                        key: String::new(),
                        operator: "In".into(),
                        values: None,
                    },
                ]),
                ..Default::default()
            },
            LabelSelectorAttributes {
                requirements: Some(vec![LabelSelectorRequirement {
                    key: "()foo".into(),
                    operator: "Fancy".into(),
                    values: None,
                }]),
                ..Default::default()
            },
        ));
        assert_eq!(
            texts(&errs),
            [
                "spec.resourceAttributes.fieldSelector.requirements[1].key: Required value: must be specified",
                "spec.resourceAttributes.fieldSelector.requirements[1].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                r#"spec.resourceAttributes.labelSelector.requirements[0].key: Invalid value: "()foo": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
            ]
        );
    }
}
