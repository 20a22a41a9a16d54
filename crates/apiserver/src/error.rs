//! API errors rendered as Kubernetes `Status` objects, worded as upstream words them.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kbatch_api::field::{FieldError, aggregate_message};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value, json};

/// `<plural>.<group>` (core: `<plural>`), as in upstream messages.
pub fn qualified_resource(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// The Status's `metadata.continue` (a list's expired continue token offers one to go on
    /// with, inconsistently).
    pub list_continue: Option<String>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            list_continue: None,
        }
    }

    fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        // Empty, as upstream's `omitempty` leaves it out: the access reviews' validation
        // errors name no kind.
        if !kind.is_empty() {
            d.insert("kind".into(), json!(kind));
        }
        self.details = Some(Value::Object(d));
        self
    }

    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified_resource(plural, group)),
        )
        .with_details(name, group, plural)
    }

    pub fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{name}\" already exists",
                qualified_resource(plural, group)
            ),
        )
        .with_details(name, group, plural)
    }

    pub fn conflict(plural: &str, group: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified_resource(plural, group)
            ),
        )
        .with_details(name, group, plural)
    }

    pub fn modified_conflict(plural: &str, group: &str, name: &str) -> Self {
        Self::conflict(
            plural,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per field error; `kind` is the Kind (`Job`), not the resource.
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field}))
            .collect();
        let mut err = Self::new(
            422,
            "Invalid",
            format!(
                "{qualified} \"{name}\" is invalid: {}",
                aggregate_message(errors)
            ),
        )
        .with_details(name, group, kind);
        if let Some(Value::Object(d)) = err.details.as_mut() {
            d.insert("causes".into(), Value::Array(causes));
        }
        err
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf; got {content_type}"
            ),
        )
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// `NewForbidden`: `<resource> "<name>" is forbidden: <why>`, with the details.
    pub fn forbidden_named(plural: &str, group: &str, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified_resource(plural, group)
            ),
        )
        .with_details(name, group, plural)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The route matched nothing: upstream's plain 404 Status.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_empty_details()
    }

    fn with_empty_details(mut self) -> Self {
        self.details = Some(json!({}));
        self
    }

    fn status_body(&self) -> StatusBody<'_> {
        StatusBody {
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details: self.details.as_ref(),
            code: Some(self.code),
            list_continue: self.list_continue.as_deref(),
        }
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        serde_json::to_value(self.status_body()).unwrap_or_else(|_| json!({}))
    }

    /// The `Status` object's JSON, keys in upstream's (Go field) order.
    pub fn to_status_bytes(&self) -> Vec<u8> {
        self.status_body().to_bytes()
    }
}

/// A `Status` written in the order of upstream's Go fields, which JSON maps (sorted) do not
/// keep. Empty strings and a missing code are left out, as Go's `omitempty` leaves them.
pub struct StatusBody<'a> {
    pub status: &'static str,
    pub message: &'a str,
    pub reason: &'a str,
    pub details: Option<&'a Value>,
    pub code: Option<u16>,
    /// `metadata.continue`, when there is one.
    pub list_continue: Option<&'a str>,
}

impl StatusBody<'_> {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }
}

/// A `Status` response.
pub fn status_response(http: StatusCode, body: &StatusBody) -> Response {
    raw_json_response(http, body.to_bytes())
}

impl Serialize for StatusBody<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("kind", "Status")?;
        m.serialize_entry("apiVersion", "v1")?;
        let mut meta = Map::new();
        if let Some(c) = self.list_continue {
            meta.insert("continue".into(), Value::String(c.to_string()));
        }
        m.serialize_entry("metadata", &meta)?;
        m.serialize_entry("status", self.status)?;
        if !self.message.is_empty() {
            m.serialize_entry("message", self.message)?;
        }
        if !self.reason.is_empty() {
            m.serialize_entry("reason", self.reason)?;
        }
        if let Some(d) = self.details {
            m.serialize_entry(
                "details",
                &Ordered(
                    d,
                    &[
                        "name",
                        "group",
                        "kind",
                        "uid",
                        "causes",
                        "retryAfterSeconds",
                    ],
                ),
            )?;
        }
        if let Some(code) = self.code {
            m.serialize_entry("code", &code)?;
        }
        m.end()
    }
}

/// A JSON object with `order`'s keys first, in that order, then the rest; the items of a
/// `causes` list as `StatusCause` orders them.
struct Ordered<'a>(&'a Value, &'static [&'static str]);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let Value::Object(obj) = self.0 else {
            return self.0.serialize(ser);
        };
        let mut m = ser.serialize_map(Some(obj.len()))?;
        let known = self.1.iter().filter_map(|k| obj.get_key_value(*k));
        let rest = obj.iter().filter(|(k, _)| !self.1.contains(&k.as_str()));
        for (k, v) in known.chain(rest) {
            match (k.as_str(), v) {
                ("causes", Value::Array(causes)) => {
                    let causes: Vec<Ordered> = causes
                        .iter()
                        .map(|c| Ordered(c, &["reason", "message", "field"]))
                        .collect();
                    m.serialize_entry(k, &causes)?;
                }
                _ => m.serialize_entry(k, v)?,
            }
        }
        m.end()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    raw_json_response(code, bytes)
}

pub fn raw_json_response(code: StatusCode, bytes: impl Into<axum::body::Body>) -> Response {
    let mut resp = (code, bytes.into()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        raw_json_response(code, self.to_status_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_upstream() {
        let s = ApiError::not_found("jobs", "batch", "nope").to_status_bytes();
        assert_eq!(
            String::from_utf8(s).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"jobs.batch \"nope\" not found","reason":"NotFound","details":{"name":"nope","group":"batch","kind":"jobs"},"code":404}"#
        );
    }

    #[test]
    fn invalid_lists_causes_and_dedups_message() {
        let e = FieldError::required(
            "spec.template.spec.restartPolicy",
            "valid values: \"OnFailure\", \"Never\"",
        );
        let s = ApiError::invalid("Job", "batch", "pi", &[e.clone(), e.clone()]).to_status();
        assert_eq!(
            s["message"],
            "Job.batch \"pi\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        );
        assert_eq!(s["details"]["causes"].as_array().map(|c| c.len()), Some(2));
        assert_eq!(s["details"]["kind"], "Job");
        assert_eq!(s["code"], 422);
        // Causes in upstream's field order too.
        let bytes = ApiError::invalid("Job", "batch", "pi", &[e]).to_status_bytes();
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains(r#""details":{"name":"pi","group":"batch","kind":"Job","causes":[{"reason":"FieldValueRequired","message":"#),
            "{text}"
        );
        assert!(
            text.ends_with(r#","field":"spec.template.spec.restartPolicy"}]},"code":422}"#),
            "{text}"
        );
    }
}
