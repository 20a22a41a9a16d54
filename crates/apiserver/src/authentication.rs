//! authentication.k8s.io/v1: SelfSubjectReview (who is asking: `kubectl auth whoami`) and
//! TokenReview (whose is this token), answered as kube-apiserver answers them
//! (`pkg/registry/authentication/{selfsubjectreview,tokenreview}`).
//!
//! kbatch has no users of its own. Who a request is comes from one place,
//! `ServerState::user`: on plain HTTP (loopback, no authentication) everyone is the user
//! kube-apiserver's old insecure port gave every request; over HTTPS the instance's bearer
//! token is the only credential, and its holder is a static-token admin.
//!
//! Both reviews are create-only and never stored: a POST returns the answer, 201 Created.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview, UserInfo};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::State;
use crate::apply;
use crate::error::{ApiError, json_response};
use crate::handlers::{self, FieldValidation};
use crate::object::rfc3339;
use crate::request::Query;
use crate::reviews::ReviewNames;
use crate::strategy::decode_kind;

pub const GROUP: &str = "authentication.k8s.io";
pub const VERSION: &str = "v1";
pub const API_VERSION: &str = "authentication.k8s.io/v1";
/// The only verb a review has.
pub const VERBS: &[&str] = &["create"];

/// A user as kube-apiserver's authenticators describe one (kbatch's have no `extra`).
#[derive(Debug, PartialEq, Eq)]
pub struct User {
    pub name: &'static str,
    /// Empty when the authenticator gives none.
    pub uid: &'static str,
    pub groups: &'static [&'static str],
}

/// The user of kube-apiserver's old insecure port (`user.DefaultInfo{Name:
/// "system:unsecured", Groups: [system:masters, system:authenticated]}`): every request
/// served over plain HTTP.
pub static UNSECURED: User = User {
    name: "system:unsecured",
    uid: "",
    groups: &["system:masters", "system:authenticated"],
};

/// The holder of the instance's bearer token, as a static token file line
/// `<token>,kbatch-admin,kbatch-admin,"system:masters"` gives it, with the
/// `system:authenticated` group upstream adds to every authenticated user.
pub static ADMIN: User = User {
    name: "kbatch-admin",
    uid: "kbatch-admin",
    groups: &["system:masters", "system:authenticated"],
};

/// The bearer-token authenticator's error for a token that authenticates no one
/// (`bearertoken.invalidToken`).
pub const INVALID_BEARER_TOKEN: &str = "invalid bearer token";

impl User {
    /// The user as an `authentication.k8s.io/v1` UserInfo (empty fields are omitted on
    /// encoding, as Go's `omitempty` omits them).
    pub fn info(&self) -> UserInfo {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        UserInfo {
            username: non_empty(self.name),
            uid: non_empty(self.uid),
            groups: (!self.groups.is_empty())
                .then(|| self.groups.iter().map(|g| g.to_string()).collect()),
            extra: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewKind {
    SelfSubject,
    Token,
}

/// One of this group's reviews.
pub type Review = crate::reviews::Review<ReviewKind>;

/// The reviews, in upstream's discovery order (sorted by name).
pub static REVIEWS: &[Review] = &[
    Review {
        names: ReviewNames {
            group: GROUP,
            version: VERSION,
            plural: "selfsubjectreviews",
            singular: "selfsubjectreview",
            kind_name: "SelfSubjectReview",
            namespaced: false,
        },
        kind: ReviewKind::SelfSubject,
    },
    Review {
        names: ReviewNames {
            group: GROUP,
            version: VERSION,
            plural: "tokenreviews",
            singular: "tokenreview",
            kind_name: "TokenReview",
            namespaced: false,
        },
        kind: ReviewKind::Token,
    },
];

/// The reviews when `group`/`version` is theirs, else none.
pub fn reviews_of(group: &str, version: &str) -> &'static [Review] {
    crate::reviews::of(REVIEWS, group, version)
}

/// The review a path below `/apis/authentication.k8s.io/v1/` names: `<plural>`, nothing
/// more (no names, no namespaces, no watches).
pub fn route(rest: &[String]) -> Result<&'static Review, ApiError> {
    match rest {
        [plural] => REVIEWS.iter().find(|r| r.plural == plural),
        _ => None,
    }
    .ok_or_else(ApiError::no_route)
}

/// POST of a review: decoded and checked as any create (content type, apiVersion and kind,
/// `fieldValidation`, `fieldManager`, `dryRun`), then answered. `dryRun` changes nothing:
/// nothing is written either way.
pub fn create(
    st: &State,
    review: &'static Review,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let fv = FieldValidation::from_query(q)?;
    handlers::check_field_manager(q, "CreateOptions")?;
    q.dry_run()?;
    let mut doc = handlers::decode_body(headers, body)?;
    handlers::check_type_of(API_VERSION, review.kind_name, &mut doc)?;
    let now = rfc3339(st.now());
    let (out, warnings) = match review.kind {
        ReviewKind::SelfSubject => {
            // Only its type matters: the answer is a new review.
            let (_, warnings): (SelfSubjectReview, _) = decode(review, fv, &doc)?;
            let user = st
                .user(headers)
                .ok_or_else(|| ApiError::bad_request("no user present on request"))?;
            (self_subject_review(user, &now), warnings)
        }
        ReviewKind::Token => {
            let (tr, warnings): (TokenReview, _) = decode(review, fv, &doc)?;
            let manager = apply::manager_name(q, &handlers::user_agent(headers));
            (token_review(st, tr, &manager, &now)?, warnings)
        }
    };
    Ok(handlers::with_warnings(
        json_response(StatusCode::CREATED, &out),
        &warnings,
    ))
}

/// The typed review, and the warnings for fields its type does not have.
fn decode<K: DeserializeOwned>(
    review: &Review,
    fv: FieldValidation,
    doc: &Value,
) -> Result<(K, Vec<String>), ApiError> {
    let mut unknown = Vec::new();
    let k = decode_kind(review.kind_name, VERSION, doc, &mut unknown)?;
    let warnings = fv.check_kind(review.kind_name, VERSION, unknown)?;
    Ok((k, warnings))
}

/// Upstream's answer: a new review created now, with the requester's user info.
fn self_subject_review(user: &User, now: &str) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": API_VERSION,
        "metadata": {"creationTimestamp": now},
        "status": {"userInfo": user.info()},
    })
}

/// A token review: the request as decoded, its managedFields recorded as for any create
/// (upstream returns the request object with its status filled), the token required, then
/// authenticated as upstream's bearer-token authenticator would read it from an
/// `Authorization` header.
fn token_review(
    st: &State,
    mut review: TokenReview,
    manager: &str,
    now: &str,
) -> Result<Value, ApiError> {
    let schema = crate::gojson::schema_of(API_VERSION, "TokenReview");
    let mut out = serde_json::to_value(&review).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(msg) = schema {
        crate::gojson::drop_omitted(&mut out, msg);
    }
    let tracked = apply::Target::new("TokenReview", API_VERSION, crate::strategy::Part::Main);
    apply::track_create(&tracked, &mut out, manager, now);
    kbatch_api::validation::token_review(&review).map_err(ApiError::bad_request)?;

    let token = review.spec.token.as_str();
    let audiences = review.spec.audiences.as_deref().unwrap_or(&[]);
    let (user, error) = match bearer_token(token) {
        // An empty bearer token is no credential, and no error either.
        None => (None, None),
        // The admin's token is not bound to audiences: upstream restricts such a token to
        // the server's API audiences (`--api-audiences`, by default the service account
        // issuer), and kbatch issues no service account tokens, so it has none. Asked for
        // any audience, the token authenticates no one.
        Some(_) if !audiences.is_empty() => (None, Some(INVALID_BEARER_TOKEN)),
        Some(token) => match st.token_user(token) {
            Some(user) => (Some(user), None),
            None => (None, Some(INVALID_BEARER_TOKEN)),
        },
    };
    // The request's status is where the answer goes, as upstream fills it in place.
    let status = review.status.get_or_insert_default();
    status.authenticated = Some(user.is_some());
    if let Some(e) = error {
        status.error = Some(e.to_string());
    }
    if let Some(user) = user {
        status.user = Some(user.info());
        // Without API audiences the authenticator reports none.
        status.audiences = None;
    }
    // UserInfo is a struct Go always writes, `{}` when empty.
    status.user.get_or_insert_default();
    let status =
        serde_json::to_value(&review.status).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Value::Object(o) = &mut out {
        o.insert("status".into(), status);
    }
    // Once more for the status (what was pruned before stays pruned).
    if let Some(msg) = schema {
        crate::gojson::drop_omitted(&mut out, msg);
    }
    // Go writes a zero creationTimestamp as null.
    crate::object::meta_mut(&mut out)
        .entry("creationTimestamp")
        .or_insert(Value::Null);
    Ok(out)
}

/// The token upstream's bearer-token authenticator reads from `Authorization: Bearer
/// <token>`: the header trimmed, then split at spaces, the second part. None when there is
/// none or it is empty (a token that ends in whitespace loses it; one with a space keeps
/// what comes before).
fn bearer_token(token: &str) -> Option<&str> {
    let token = token.trim_end();
    if token.is_empty() {
        return None;
    }
    token.split(' ').next().filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(path: &str) -> Vec<String> {
        path.split('/').map(str::to_string).collect()
    }

    #[test]
    fn routes_the_reviews_only() {
        assert_eq!(
            route(&segs("selfsubjectreviews")).unwrap().kind_name,
            "SelfSubjectReview"
        );
        assert_eq!(
            route(&segs("tokenreviews")).unwrap().kind_name,
            "TokenReview"
        );
        for bad in [
            "namespaces/ns/tokenreviews",
            "tokenreviews/x",
            "selfsubjectaccessreviews",
        ] {
            assert!(route(&segs(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn user_info_omits_what_is_empty() {
        assert_eq!(
            serde_json::to_value(UNSECURED.info()).unwrap(),
            json!({"username": "system:unsecured", "groups": ["system:masters", "system:authenticated"]})
        );
        assert_eq!(
            serde_json::to_value(ADMIN.info()).unwrap(),
            json!({"username": "kbatch-admin", "uid": "kbatch-admin",
                "groups": ["system:masters", "system:authenticated"]})
        );
    }

    #[test]
    fn bearer_tokens_are_read_as_upstream_reads_the_header() {
        assert_eq!(bearer_token("abc"), Some("abc"));
        assert_eq!(bearer_token("abc \t"), Some("abc"));
        assert_eq!(bearer_token("abc def"), Some("abc"));
        assert_eq!(bearer_token(" abc"), None);
        assert_eq!(bearer_token("  "), None);
        assert_eq!(bearer_token(""), None);
    }
}
