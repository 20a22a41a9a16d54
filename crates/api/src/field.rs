//! Kubernetes field errors (`k8s.io/apimachinery/pkg/util/validation/field`): the error type,
//! its wire reason, and the message text exactly as upstream renders it.

use std::fmt;

/// The kind of a field error; `reason()` is the value that goes into `details.causes[].reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorType {
    Required,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Duplicate,
    NotFound,
    Internal,
}

impl ErrorType {
    /// The cause reason on the wire (`metav1.CauseType`).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Internal => "InternalError",
        }
    }

    /// The human prefix of the message body (`ErrorType.String()`).
    pub fn text(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotFound => "Not found",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// One field error. `value` is the already-rendered bad value (Go rendering: ints plain,
/// strings quoted like `%q`, other values as JSON), or `None` when upstream omits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: String,
    pub value: Option<String>,
    pub detail: String,
}

impl FieldError {
    pub fn new(
        kind: ErrorType,
        field: impl Into<String>,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, None, detail)
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::Invalid, field, Some(value.into().0), detail)
    }

    /// `Invalid` with the value left out (upstream's `field.OmitValueType`).
    pub fn invalid_no_value(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, None, detail)
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, None, detail)
    }

    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::Duplicate, field, Some(value.into().0), "")
    }

    pub fn not_found(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::NotFound, field, Some(value.into().0), "")
    }

    pub fn internal(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, field, None, detail)
    }

    /// `Unsupported value: "x": supported values: "A", "B"`.
    pub fn not_supported<S: AsRef<str>>(
        field: impl Into<String>,
        value: impl Into<Value>,
        supported: &[S],
    ) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| quote(s.as_ref())).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, Some(value.into().0), detail)
    }

    /// `Too long: may not be more than N bytes`.
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        Self::new(
            ErrorType::TooLong,
            field,
            None,
            format!("may not be more than {max_bytes} bytes"),
        )
    }

    /// `Too many: N: must have at most M items`.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        Self::new(
            ErrorType::TooMany,
            field,
            Some(actual.to_string()),
            format!("must have at most {max} items"),
        )
    }

    /// The cause message: the error without its field prefix, e.g. `Invalid value: -1: must be ...`.
    pub fn body(&self) -> String {
        let mut s = self.kind.text().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    /// The full text, `<field>: <body>`, as in the Status `message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.body())
        } else {
            write!(f, "{}: {}", self.field, self.body())
        }
    }
}

impl std::error::Error for FieldError {}

/// A list of field errors, in the order upstream reports them.
pub type ErrorList = Vec<FieldError>;

/// Upstream's aggregate text: one error alone, or `[e1, e2]` with exact duplicates dropped.
pub fn aggregate_message(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let s = e.to_string();
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// A bad value rendered as upstream renders it in a field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value(pub String);

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value(v.to_string())
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value(v.to_string())
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value(v.to_string())
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value(v.to_string())
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value(v.to_string())
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value(quote(v))
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value(quote(v))
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value(quote(&v))
    }
}
impl From<&serde_json::Value> for Value {
    /// Non-scalar values render as JSON (upstream since 1.34); strings are quoted like `%q`.
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::String(s) => Value(quote(s)),
            other => Value(other.to_string()),
        }
    }
}

impl Value {
    /// Any serializable value rendered as JSON (maps, lists, structs, `null`).
    pub fn json<T: serde::Serialize + ?Sized>(v: &T) -> Value {
        Value(serde_json::to_string(v).unwrap_or_else(|_| "null".to_string()))
    }
}

/// Go's `%q` for a string: double-quoted with Go escapes.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A field path builder: `Path::new("spec").child("template").index(0).key("app")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{}", self.0, name))
        }
    }
    pub fn index(&self, i: usize) -> Self {
        Path(format!("{}[{}]", self.0, i))
    }
    pub fn key(&self, k: &str) -> Self {
        Path(format!("{}[{}]", self.0, k))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Path> for String {
    fn from(p: Path) -> String {
        p.0
    }
}
impl From<&Path> for String {
    fn from(p: &Path) -> String {
        p.0.clone()
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_upstream() {
        let e = FieldError::invalid(
            "spec.parallelism",
            -1i64,
            "must be greater than or equal to 0",
        );
        assert_eq!(
            e.to_string(),
            "spec.parallelism: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(e.kind.reason(), "FieldValueInvalid");
        let e = FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            "Always",
            &["OnFailure", "Never"],
        );
        assert_eq!(
            e.body(),
            "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
        );
        let e = FieldError::required("metadata.name", "name or generateName is required");
        assert_eq!(
            e.to_string(),
            "metadata.name: Required value: name or generateName is required"
        );
    }

    #[test]
    fn aggregate_drops_exact_duplicates() {
        let a = FieldError::invalid("x", 1i64, "bad");
        let b = FieldError::required("y", "");
        assert_eq!(
            aggregate_message(std::slice::from_ref(&a)),
            "x: Invalid value: 1: bad"
        );
        assert_eq!(
            aggregate_message(&[a.clone(), a.clone(), b]),
            "[x: Invalid value: 1: bad, y: Required value]"
        );
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(
            Value::from(&serde_json::json!({"k": "v"})).0,
            "{\"k\":\"v\"}"
        );
    }
}
