//! API errors rendered as Kubernetes `Status` objects, worded as upstream words them.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kbatch_api::field::{FieldError, aggregate_message};
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
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
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
        d.insert("kind".into(), json!(kind));
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

    /// The `Status` object, keys in upstream order.
    pub fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), json!("Failure"));
        if !self.message.is_empty() {
            m.insert("message".into(), json!(self.message));
        }
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
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
        json_response(code, &self.to_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_upstream() {
        let s = ApiError::not_found("jobs", "batch", "nope").to_status();
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"jobs.batch \"nope\" not found","reason":"NotFound","details":{"name":"nope","group":"batch","kind":"jobs"},"code":404}"#
        );
    }

    #[test]
    fn invalid_lists_causes_and_dedups_message() {
        let e = FieldError::required(
            "spec.template.spec.restartPolicy",
            "valid values: \"OnFailure\", \"Never\"",
        );
        let s = ApiError::invalid("Job", "batch", "pi", &[e.clone(), e]).to_status();
        assert_eq!(
            s["message"],
            "Job.batch \"pi\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        );
        assert_eq!(s["details"]["causes"].as_array().map(|c| c.len()), Some(2));
        assert_eq!(s["details"]["kind"], "Job");
        assert_eq!(s["code"], 422);
    }
}
