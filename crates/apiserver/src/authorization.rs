//! authorization.k8s.io/v1: the access reviews, answered as kube-apiserver answers them with
//! `--authorization-mode=AlwaysAllow`. kbatch has no RBAC (no authentication on loopback,
//! one admin bearer token elsewhere), so every request it serves is allowed, and a review says
//! so: `kubectl auth can-i` and clients that check before they act get the truth.
//!
//! The reviews are create-only and never stored: a POST returns the review with its status
//! filled, 201 Created, as upstream's REST handlers for them do
//! (`pkg/registry/authorization/*/rest.go`), after the same validation.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use k8s_openapi::Metadata;
use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, LabelSelectorAttributes, LocalSubjectAccessReview, ResourceAttributes,
    SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kbatch_api::field::ErrorList;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::State;
use crate::apply;
use crate::error::{ApiError, json_response};
use crate::handlers::{self, FieldValidation};
use crate::object::rfc3339;
use crate::request::Query;
use crate::reviews::ReviewNames;
use crate::selector::LabelSelector;
use crate::strategy::decode_kind;

pub const GROUP: &str = "authorization.k8s.io";
pub const VERSION: &str = "v1";
pub const API_VERSION: &str = "authorization.k8s.io/v1";
/// The only verb a review has.
pub const VERBS: &[&str] = &["create"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewKind {
    SelfSubjectAccess,
    SelfSubjectRules,
    SubjectAccess,
    LocalSubjectAccess,
}

/// One of this group's reviews.
pub type Review = crate::reviews::Review<ReviewKind>;

/// The reviews, in upstream's discovery order (a group version's resources sorted by name).
pub static REVIEWS: &[Review] = &[
    Review {
        names: ReviewNames {
            group: GROUP,
            version: VERSION,
            plural: "localsubjectaccessreviews",
            singular: "localsubjectaccessreview",
            kind_name: "LocalSubjectAccessReview",
            namespaced: true,
        },
        kind: ReviewKind::LocalSubjectAccess,
    },
    Review {
        names: ReviewNames {
            group: GROUP,
            version: VERSION,
            plural: "selfsubjectaccessreviews",
            singular: "selfsubjectaccessreview",
            kind_name: "SelfSubjectAccessReview",
            namespaced: false,
        },
        kind: ReviewKind::SelfSubjectAccess,
    },
    Review {
        names: ReviewNames {
            group: GROUP,
            version: VERSION,
            plural: "selfsubjectrulesreviews",
            singular: "selfsubjectrulesreview",
            kind_name: "SelfSubjectRulesReview",
            namespaced: false,
        },
        kind: ReviewKind::SelfSubjectRules,
    },
    Review {
        names: ReviewNames {
            group: GROUP,
            version: VERSION,
            plural: "subjectaccessreviews",
            singular: "subjectaccessreview",
            kind_name: "SubjectAccessReview",
            namespaced: false,
        },
        kind: ReviewKind::SubjectAccess,
    },
];

/// The access reviews when `group`/`version` is theirs, else none.
pub fn reviews_of(group: &str, version: &str) -> &'static [Review] {
    crate::reviews::of(REVIEWS, group, version)
}

/// Where a review request points.
#[derive(Debug, Clone)]
pub struct ReviewTarget {
    pub review: &'static Review,
    /// The URL's namespace (the local review only).
    pub namespace: Option<String>,
}

/// The review a path below `/apis/authorization.k8s.io/v1/` names: `<plural>` for the
/// cluster-scoped reviews, `namespaces/<ns>/<plural>` for the local one. Nothing else is
/// served there (no names, no watches, no cluster-wide path for the local review).
pub fn route(rest: &[String]) -> Result<ReviewTarget, ApiError> {
    let find = |plural: &str, namespaced: bool| {
        REVIEWS
            .iter()
            .find(|r| r.plural == plural && r.namespaced == namespaced)
    };
    let found = match rest {
        [plural] => find(plural, false).map(|review| ReviewTarget {
            review,
            namespace: None,
        }),
        [ns, namespace, plural] if ns == "namespaces" => {
            find(plural, true).map(|review| ReviewTarget {
                review,
                namespace: Some(namespace.clone()),
            })
        }
        _ => None,
    };
    found.ok_or_else(ApiError::no_route)
}

/// POST of a review: decoded and checked as any create (content type, apiVersion and kind,
/// `fieldValidation`, `fieldManager`, `dryRun`), validated as upstream validates it, then
/// answered. `dryRun` changes nothing: nothing is written either way.
pub fn create(
    st: &State,
    t: &ReviewTarget,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let fv = FieldValidation::from_query(q)?;
    handlers::check_field_manager(q, "CreateOptions")?;
    q.dry_run()?;
    let mut doc = handlers::decode_body(headers, body)?;
    handlers::check_type_of(API_VERSION, t.review.kind_name, &mut doc)?;
    let manager = apply::manager_name(q, &handlers::user_agent(headers));
    let now = rfc3339(st.now());
    let call = Call {
        t,
        fv,
        manager: &manager,
        now: &now,
    };
    let (out, warnings) = match t.review.kind {
        ReviewKind::SelfSubjectRules => call.rules_review(&doc)?,
        ReviewKind::SelfSubjectAccess => call.access_review(
            &doc,
            kbatch_api::validation::self_subject_access_review,
            |r: &SelfSubjectAccessReview| r.spec.resource_attributes.as_ref(),
        )?,
        ReviewKind::SubjectAccess => call.access_review(
            &doc,
            kbatch_api::validation::subject_access_review,
            |r: &SubjectAccessReview| r.spec.resource_attributes.as_ref(),
        )?,
        ReviewKind::LocalSubjectAccess => call.access_review(
            &doc,
            kbatch_api::validation::local_subject_access_review,
            |r: &LocalSubjectAccessReview| r.spec.resource_attributes.as_ref(),
        )?,
    };
    Ok(handlers::with_warnings(
        json_response(StatusCode::CREATED, &out),
        &warnings,
    ))
}

/// One review request's context.
struct Call<'a> {
    t: &'a ReviewTarget,
    fv: FieldValidation,
    manager: &'a str,
    now: &'a str,
}

impl Call<'_> {
    /// The typed review, and the warnings for fields its type does not have.
    fn decode<K: DeserializeOwned>(&self, doc: &Value) -> Result<(K, Vec<String>), ApiError> {
        let kind = self.t.review.kind_name;
        let mut unknown = Vec::new();
        let k = decode_kind(kind, VERSION, doc, &mut unknown)?;
        let warnings = self.fv.check_kind(kind, VERSION, unknown)?;
        Ok((k, warnings))
    }

    /// An access review: the request as decoded (unknown fields dropped), its managedFields
    /// recorded as for any create, validated, and its status: allowed. AlwaysAllow gives no
    /// reason and no error of its own, so `denied`, `reason` and `evaluationError` stay out
    /// unless a selector could not be read.
    fn access_review<K>(
        &self,
        doc: &Value,
        validate: fn(&K) -> ErrorList,
        attributes: fn(&K) -> Option<&ResourceAttributes>,
    ) -> Result<(Value, Vec<String>), ApiError>
    where
        K: DeserializeOwned + Serialize + Metadata<Ty = ObjectMeta>,
    {
        let (mut review, warnings): (K, _) = self.decode(doc)?;
        handlers::place_namespace(review.metadata_mut(), self.t.namespace.as_deref())?;
        let mut out =
            serde_json::to_value(&review).map_err(|e| ApiError::internal(e.to_string()))?;
        if let Some(msg) = crate::gojson::schema_of(API_VERSION, self.t.review.kind_name) {
            crate::gojson::drop_omitted(&mut out, msg);
        }
        let tracked = apply::Target::new(
            self.t.review.kind_name,
            API_VERSION,
            crate::strategy::Part::Main,
        );
        apply::track_create(&tracked, &mut out, self.manager, self.now);
        // Validated with its managedFields, which upstream's field manager set before: an
        // error about the metadata shows them.
        review.metadata_mut().managed_fields = crate::object::meta(&out)
            .and_then(|m| m.get("managedFields"))
            .and_then(|v| serde_json::from_value::<Vec<ManagedFieldsEntry>>(v.clone()).ok());
        let errs = validate(&review);
        if !errs.is_empty() {
            // Upstream names the kind of the decoded internal object, which decoding leaves
            // empty: `.authorization.k8s.io "" is invalid: ...`.
            return Err(ApiError::invalid("", GROUP, "", &errs));
        }
        let mut status = json!({"allowed": true});
        if let Some(e) = evaluation_error(attributes(&review)) {
            status["evaluationError"] = json!(e);
        }
        if let Value::Object(o) = &mut out {
            o.insert("status".into(), status);
        }
        // Go writes a zero creationTimestamp as null.
        crate::object::meta_mut(&mut out)
            .entry("creationTimestamp")
            .or_insert(Value::Null);
        Ok((out, warnings))
    }

    /// A rules review: AlwaysAllow's rules (everything, on every resource and every
    /// non-resource URL, complete) in a new review, as upstream returns it: neither the
    /// request's metadata nor its spec is echoed.
    fn rules_review(&self, doc: &Value) -> Result<(Value, Vec<String>), ApiError> {
        let (review, warnings): (SelfSubjectRulesReview, _) = self.decode(doc)?;
        if review.spec.namespace.as_deref().unwrap_or("").is_empty() {
            return Err(ApiError::bad_request("no namespace on request"));
        }
        let out = json!({
            "kind": self.t.review.kind_name,
            "apiVersion": API_VERSION,
            "metadata": {"creationTimestamp": null},
            "spec": {},
            "status": {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": false,
            },
        });
        Ok((out, warnings))
    }
}

/// Upstream's `BuildEvaluationError` with an authorizer that reports no error: a field or
/// label selector that could not be turned into requirements is noted (in part or in whole),
/// though the decision stands.
fn evaluation_error(attrs: Option<&ResourceAttributes>) -> Option<String> {
    let attrs = attrs?;
    let mut notes = Vec::new();
    let mut note = |what: &str, outcome: Option<Parsed>| match outcome {
        Some(Parsed::Partly) => notes.push(format!(
            "spec.resourceAttributes.{what} partially ignored due to parse error"
        )),
        Some(Parsed::Not) => notes.push(format!(
            "spec.resourceAttributes.{what} ignored due to parse error"
        )),
        None => {}
    };
    note(
        "fieldSelector",
        attrs
            .field_selector
            .as_ref()
            .and_then(field_selector_problem),
    );
    note(
        "labelSelector",
        attrs
            .label_selector
            .as_ref()
            .and_then(label_selector_problem),
    );
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// How much of a selector with a problem was still read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parsed {
    Partly,
    Not,
}

/// Requirements, when given, replace the raw selector; each one that cannot be read is
/// dropped (requirements only narrow a request, so fewer is safe).
fn outcome(read: usize, failed: bool) -> Option<Parsed> {
    match (failed, read) {
        (false, _) => None,
        (true, 0) => Some(Parsed::Not),
        (true, _) => Some(Parsed::Partly),
    }
}

/// `fields.ParseSelector` of the raw selector, or upstream's conversion of the requirements:
/// one value each, `In` (as `=`) or `NotIn` (as `!=`) only.
fn field_selector_problem(sel: &FieldSelectorAttributes) -> Option<Parsed> {
    let requirements = sel.requirements.as_deref().unwrap_or(&[]);
    if requirements.is_empty() {
        let raw = sel.raw_selector.as_deref().unwrap_or("");
        return (!raw.is_empty() && !field_selector_parses(raw)).then_some(Parsed::Not);
    }
    let read = requirements
        .iter()
        .filter(|r| {
            matches!(r.operator.as_str(), "In" | "NotIn")
                && r.values.as_ref().is_some_and(|v| v.len() == 1)
        })
        .count();
    outcome(read, read < requirements.len())
}

/// `labels.Parse` of the raw selector (the server's own parser), or upstream's conversion of
/// the requirements into `labels.NewRequirement`s.
fn label_selector_problem(sel: &LabelSelectorAttributes) -> Option<Parsed> {
    let requirements = sel.requirements.as_deref().unwrap_or(&[]);
    if requirements.is_empty() {
        let raw = sel.raw_selector.as_deref().unwrap_or("");
        return (!raw.is_empty() && LabelSelector::parse(raw).is_err()).then_some(Parsed::Not);
    }
    let read = requirements
        .iter()
        .filter(|r| {
            let values = r.values.as_deref().unwrap_or(&[]);
            let count_ok = match r.operator.as_str() {
                "In" | "NotIn" => !values.is_empty(),
                "Exists" | "DoesNotExist" => values.is_empty(),
                _ => false,
            };
            count_ok
                && kbatch_api::names::qualified_name(&r.key).is_empty()
                && values
                    .iter()
                    .all(|v| kbatch_api::names::label_value(v).is_empty())
        })
        .count();
    outcome(read, read < requirements.len())
}

/// Whether `fields.ParseSelector` accepts `raw`: terms split at unescaped commas, each with an
/// operator (`!=`, `==`, `=`, the first found), and a value whose backslash escapes are
/// `\\`, `\,` or `\=` and which has no bare `,` or `=`. Any field name is accepted here;
/// whether the resource has it is the authorizer's question.
fn field_selector_parses(raw: &str) -> bool {
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in raw.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&raw[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&raw[start..]);
    terms.into_iter().filter(|t| !t.is_empty()).all(|term| {
        let split = term.char_indices().find_map(|(i, _)| {
            ["!=", "==", "="]
                .iter()
                .find(|op| term[i..].starts_with(**op))
                .map(|op| &term[i + op.len()..])
        });
        split.is_some_and(value_unescapes)
    })
}

/// `fields.UnescapeValue` succeeds.
fn value_unescapes(value: &str) -> bool {
    let mut escaped = false;
    for c in value.chars() {
        match c {
            '\\' | ',' | '=' if escaped => escaped = false,
            _ if escaped => return false,
            '\\' => escaped = true,
            ',' | '=' => return false,
            _ => {}
        }
    }
    !escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldSelectorRequirement, LabelSelectorRequirement,
    };

    fn segs(path: &str) -> Vec<String> {
        path.split('/').map(str::to_string).collect()
    }

    #[test]
    fn routes_reviews_by_scope() {
        let t = route(&segs("selfsubjectaccessreviews")).unwrap();
        assert_eq!(t.review.kind_name, "SelfSubjectAccessReview");
        assert!(t.namespace.is_none());
        let t = route(&segs("namespaces/ns/localsubjectaccessreviews")).unwrap();
        assert_eq!(t.review.kind_name, "LocalSubjectAccessReview");
        assert_eq!(t.namespace.as_deref(), Some("ns"));
        for bad in [
            "localsubjectaccessreviews",
            "namespaces/ns/selfsubjectaccessreviews",
            "selfsubjectaccessreviews/x",
            "widgets",
        ] {
            assert!(route(&segs(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_parse_as_upstream() {
        for ok in [
            "spec.nodeName=n",
            "a==b,c!=d",
            "a=",
            "a=x\\,y\\=z\\\\",
            "",
            ",a=b,",
        ] {
            assert!(field_selector_parses(ok), "{ok}");
        }
        for bad in ["a", "a=b=c", "a=b\\", "a=\\x", "a=b,c"] {
            assert!(!field_selector_parses(bad), "{bad}");
        }
    }

    #[test]
    fn unreadable_selectors_are_noted() {
        let attrs = |field: Option<FieldSelectorAttributes>,
                     label: Option<LabelSelectorAttributes>| {
            ResourceAttributes {
                field_selector: field,
                label_selector: label,
                ..Default::default()
            }
        };
        assert_eq!(evaluation_error(None), None);
        assert_eq!(evaluation_error(Some(&attrs(None, None))), None);
        let raw = |s: &str| FieldSelectorAttributes {
            raw_selector: Some(s.into()),
            requirements: None,
        };
        assert_eq!(
            evaluation_error(Some(&attrs(Some(raw("spec.nodeName=n")), None))),
            None
        );
        let field_req = |op: &str, values: &[&str]| FieldSelectorRequirement {
            key: "spec.nodeName".into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let partly = FieldSelectorAttributes {
            raw_selector: None,
            requirements: Some(vec![field_req("In", &["a"]), field_req("Exists", &[])]),
        };
        let label = LabelSelectorAttributes {
            raw_selector: None,
            requirements: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "Matches".into(),
                values: None,
            }]),
        };
        assert_eq!(
            evaluation_error(Some(&attrs(Some(partly), Some(label)))).as_deref(),
            Some(
                "spec.resourceAttributes.fieldSelector partially ignored due to parse error; spec.resourceAttributes.labelSelector ignored due to parse error"
            )
        );
        assert_eq!(
            evaluation_error(Some(&attrs(Some(raw("nonsense")), None))).as_deref(),
            Some("spec.resourceAttributes.fieldSelector ignored due to parse error")
        );
    }
}
