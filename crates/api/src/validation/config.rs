//! ConfigMap and Secret validation (`ValidateConfigMap`, `ValidateConfigMapUpdate`,
//! `ValidateSecret`, `ValidateSecretUpdate`). Go iterates the data maps in random order; the
//! per-key errors here come in key order.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::{immutable, object_meta, object_meta_update};
use crate::field::{ErrorList, FieldError, Path};
use crate::keys::{
    BASIC_AUTH_PASSWORD_KEY, BASIC_AUTH_USERNAME_KEY, DOCKER_CONFIG_JSON_KEY, DOCKER_CONFIG_KEY,
    SECRET_TYPE_BASIC_AUTH, SECRET_TYPE_DOCKER_CONFIG_JSON, SECRET_TYPE_DOCKERCFG,
    SECRET_TYPE_SERVICE_ACCOUNT_TOKEN, SECRET_TYPE_SSH_AUTH, SECRET_TYPE_TLS,
    SERVICE_ACCOUNT_NAME_KEY, SSH_AUTH_PRIVATE_KEY, TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY,
};
use crate::names;

/// `MaxSecretSize`: the bound of a Secret's data, and of a ConfigMap's data and binaryData
/// together.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";
const REDACTED: &str = "<secret contents redacted>";

fn key_errors(key: &str, path: &Path, errs: &mut ErrorList) {
    for msg in names::config_map_key(key) {
        errs.push(FieldError::invalid(path.key(key), key, msg));
    }
}

pub fn configmap_create(cm: &ConfigMap) -> ErrorList {
    let mut errs = object_meta(&cm.metadata, true, names::name_is_dns_subdomain);
    let data_path = Path::new("data");
    let binary_path = Path::new("binaryData");
    let binary = cm.binary_data.as_ref();
    let mut total = 0usize;
    for (key, value) in cm.data.iter().flatten() {
        key_errors(key, &data_path, &mut errs);
        if binary.is_some_and(|b| b.contains_key(key)) {
            errs.push(FieldError::invalid(
                data_path.key(key),
                key,
                "duplicate of key present in binaryData",
            ));
        }
        total = total.saturating_add(value.len());
    }
    for (key, value) in binary.into_iter().flatten() {
        key_errors(key, &binary_path, &mut errs);
        total = total.saturating_add(value.0.len());
    }
    if total > MAX_SECRET_SIZE {
        // Upstream's `field.NewPath("")`, which renders as `[]`: the whole object.
        errs.push(FieldError::too_long("[]", MAX_SECRET_SIZE));
    }
    errs
}

pub fn configmap_update(new: &ConfigMap, old: &ConfigMap) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    if old.immutable == Some(true) {
        if new.immutable != Some(true) {
            errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
        }
        if new.data != old.data {
            errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
        }
        if new.binary_data != old.binary_data {
            errs.push(FieldError::forbidden("binaryData", IMMUTABLE_WHEN_SET));
        }
    }
    errs.extend(configmap_create(new));
    errs
}

pub fn secret_create(secret: &Secret) -> ErrorList {
    let mut errs = object_meta(&secret.metadata, true, names::name_is_dns_subdomain);
    let data_path = Path::new("data");
    let empty = BTreeMap::new();
    let data: &BTreeMap<String, ByteString> = secret.data.as_ref().unwrap_or(&empty);
    let mut total = 0usize;
    for (key, value) in data {
        key_errors(key, &data_path, &mut errs);
        total = total.saturating_add(value.0.len());
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long(&data_path, MAX_SECRET_SIZE));
    }
    let required = |key: &str| FieldError::required(data_path.key(key), "");
    match secret.type_.as_deref().unwrap_or("") {
        SECRET_TYPE_SERVICE_ACCOUNT_TOKEN => {
            let name = secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SERVICE_ACCOUNT_NAME_KEY))
                .map_or("", String::as_str);
            if name.is_empty() {
                errs.push(FieldError::required(
                    Path::new("metadata")
                        .child("annotations")
                        .key(SERVICE_ACCOUNT_NAME_KEY),
                    "",
                ));
            }
        }
        SECRET_TYPE_DOCKERCFG | SECRET_TYPE_DOCKER_CONFIG_JSON => {
            let key = if secret.type_.as_deref() == Some(SECRET_TYPE_DOCKERCFG) {
                DOCKER_CONFIG_KEY
            } else {
                DOCKER_CONFIG_JSON_KEY
            };
            match data.get(key) {
                None => errs.push(required(key)),
                Some(bytes) => {
                    if let Some(msg) = go_json_object_error(&bytes.0) {
                        errs.push(FieldError::invalid(data_path.key(key), REDACTED, msg));
                    }
                }
            }
        }
        // Either may be empty, but one of them must be there.
        SECRET_TYPE_BASIC_AUTH
            if !data.contains_key(BASIC_AUTH_USERNAME_KEY)
                && !data.contains_key(BASIC_AUTH_PASSWORD_KEY) =>
        {
            errs.push(required(BASIC_AUTH_USERNAME_KEY));
            errs.push(required(BASIC_AUTH_PASSWORD_KEY));
        }
        SECRET_TYPE_SSH_AUTH
            if data
                .get(SSH_AUTH_PRIVATE_KEY)
                .is_none_or(|v| v.0.is_empty()) =>
        {
            errs.push(required(SSH_AUTH_PRIVATE_KEY));
        }
        SECRET_TYPE_TLS => {
            for key in [TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY] {
                if !data.contains_key(key) {
                    errs.push(required(key));
                }
            }
        }
        _ => {}
    }
    errs
}

pub fn secret_update(new: &Secret, old: &Secret) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    immutable(
        &new.type_.as_deref().unwrap_or(""),
        &old.type_.as_deref().unwrap_or(""),
        &Path::new("type"),
        &mut errs,
    );
    if old.immutable == Some(true) {
        if new.immutable != Some(true) {
            errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
        }
        // stringData needs no check: it is already merged into data.
        if new.data != old.data {
            errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
        }
    }
    errs.extend(secret_create(new));
    errs
}

/// The error Go's `json.Unmarshal` into a `map[string]interface{}` reports for `bytes`, or
/// `None` when it succeeds (an object or `null`). The wording of Go's syntax errors is
/// followed for the common cases: empty or truncated input, a wrong first character, text
/// after the value, and a value of another type.
fn go_json_object_error(bytes: &[u8]) -> Option<String> {
    let err = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(_) | serde_json::Value::Null) => return None,
        Ok(other) => {
            let ty = match other {
                serde_json::Value::Array(_) => "array",
                serde_json::Value::String(_) => "string",
                serde_json::Value::Bool(_) => "bool",
                _ => "number",
            };
            return Some(format!(
                "json: cannot unmarshal {ty} into Go value of type map[string]interface {{}}"
            ));
        }
        Err(e) => e,
    };
    if err.is_eof() {
        return Some("unexpected end of JSON input".to_string());
    }
    let offset = byte_offset(bytes, err.line(), err.column());
    let c = bytes.get(offset).copied().unwrap_or(b' ');
    let context = if err.to_string().starts_with("trailing characters") {
        "after top-level value"
    } else {
        "looking for beginning of value"
    };
    Some(format!("invalid character {} {context}", go_quote_char(c)))
}

/// The 0-based byte offset of serde_json's 1-based line and column (the column of the
/// offending byte).
fn byte_offset(bytes: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0usize;
    for _ in 1..line {
        match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(i) => start += i + 1,
            None => break,
        }
    }
    start + column.saturating_sub(1)
}

/// Go's `quoteChar` in encoding/json's scanner errors.
fn go_quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        c if c.is_ascii_graphic() || c == b' ' => format!("'{}'", c as char),
        b'\n' => "'\\n'".to_string(),
        b'\r' => "'\\r'".to_string(),
        b'\t' => "'\\t'".to_string(),
        c if c < 0x80 => format!("'\\x{c:02x}'"),
        // Go quotes the byte as the rune of that value.
        c => format!("'{}'", char::from(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_json_errors() {
        assert_eq!(go_json_object_error(b"{}"), None);
        assert_eq!(go_json_object_error(b"null"), None);
        assert_eq!(
            go_json_object_error(b"").as_deref(),
            Some("unexpected end of JSON input")
        );
        assert_eq!(
            go_json_object_error(b"{\"a\":").as_deref(),
            Some("unexpected end of JSON input")
        );
        assert_eq!(
            go_json_object_error(b"x").as_deref(),
            Some("invalid character 'x' looking for beginning of value")
        );
        assert_eq!(
            go_json_object_error(b"{} x").as_deref(),
            Some("invalid character 'x' after top-level value")
        );
        assert_eq!(
            go_json_object_error(b"[1]").as_deref(),
            Some("json: cannot unmarshal array into Go value of type map[string]interface {}")
        );
    }
}
