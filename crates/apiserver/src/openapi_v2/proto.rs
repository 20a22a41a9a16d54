//! The gnostic `openapi.v2.Document` protobuf encoding of a Swagger 2.0 JSON document, as
//! kube-openapi's `ToProtoBinary` produces it (gnostic's `ParseDocument`, then a protobuf
//! marshal): fields in field-number order, proto3 zero scalars left out, a message that is set
//! written even when empty, named maps as repeated name/value pairs in the JSON's key order,
//! and vendor extensions (`x-…`) as `NamedAny` holding the value as YAML. Field numbers are
//! those of gnostic's `openapiv2/OpenAPIv2.proto`.
//!
//! Only what a Swagger document may hold is accepted: an unknown key is an error, as gnostic's
//! parser reports one, so that the JSON and the protobuf never describe different documents.

use serde_json::{Map, Value};

/// A protobuf writer: varints, fixed64 doubles and length-delimited fields.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    /// A proto3 string: left out when empty.
    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn message(&mut self, field: u32, f: impl FnOnce(&mut Writer) -> Result<(), String>) -> Res {
        let mut inner = Writer::default();
        f(&mut inner)?;
        self.bytes(field, &inner.buf);
        Ok(())
    }
}

type Res = Result<(), String>;

/// How one JSON member is written.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Bool,
    Int,
    Double,
    Strs,
    Msg(fn(&mut Writer, &Value) -> Res),
    Msgs(fn(&mut Writer, &Value) -> Res),
    /// An `Any` (`default`, `example`): the value as YAML.
    Any,
    Anys,
    /// The message's `vendor_extension`: every `x-` member as a `NamedAny`.
    Ext,
}

/// A message's JSON members in field-number order.
type Spec = &'static [(&'static str, u32, Kind)];

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what}: not an object"))
}

fn encode(w: &mut Writer, v: &Value, spec: Spec, what: &str) -> Res {
    let obj = object(v, what)?;
    if let Some(k) = obj
        .keys()
        .find(|k| !k.starts_with("x-") && !spec.iter().any(|(name, _, _)| name == k))
    {
        return Err(format!("{what}: unexpected member {k:?}"));
    }
    for &(name, field, kind) in spec {
        if let Kind::Ext = kind {
            for (k, val) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
                w.message(field, |w| named_any(w, k, val))?;
            }
            continue;
        }
        let Some(val) = obj.get(name) else { continue };
        let bad = || format!("{what}.{name}: unexpected value {val}");
        match kind {
            Kind::Str => w.string(field, val.as_str().ok_or_else(bad)?),
            Kind::Bool => {
                if val.as_bool().ok_or_else(bad)? {
                    w.key(field, VARINT);
                    w.varint(1);
                }
            }
            Kind::Int => {
                let n = val.as_i64().ok_or_else(bad)?;
                if n != 0 {
                    w.key(field, VARINT);
                    w.varint(n as u64);
                }
            }
            Kind::Double => {
                let n = val.as_f64().ok_or_else(bad)?;
                if n != 0.0 {
                    w.key(field, FIXED64);
                    w.buf.extend_from_slice(&n.to_le_bytes());
                }
            }
            Kind::Strs => {
                for s in val.as_array().ok_or_else(bad)? {
                    // Repeated strings keep their empty members.
                    w.bytes(field, s.as_str().ok_or_else(bad)?.as_bytes());
                }
            }
            Kind::Msg(f) => w.message(field, |w| f(w, val))?,
            Kind::Msgs(f) => {
                for item in val.as_array().ok_or_else(bad)? {
                    w.message(field, |w| f(w, item))?;
                }
            }
            Kind::Any => w.message(field, |w| any(w, val))?,
            Kind::Anys => {
                for item in val.as_array().ok_or_else(bad)? {
                    w.message(field, |w| any(w, item))?;
                }
            }
            Kind::Ext => {}
        }
    }
    Ok(())
}

/// The gnostic protobuf encoding of a Swagger 2.0 document.
pub(crate) fn document(doc: &Value) -> Result<Vec<u8>, String> {
    const SPEC: Spec = &[
        ("swagger", 1, Kind::Str),
        ("info", 2, Kind::Msg(info)),
        ("host", 3, Kind::Str),
        ("basePath", 4, Kind::Str),
        ("schemes", 5, Kind::Strs),
        ("consumes", 6, Kind::Strs),
        ("produces", 7, Kind::Strs),
        ("paths", 8, Kind::Msg(paths)),
        ("definitions", 9, Kind::Msg(definitions)),
        ("security", 12, Kind::Msgs(security_requirement)),
        ("securityDefinitions", 13, Kind::Msg(security_definitions)),
        ("", 16, Kind::Ext),
    ];
    let mut w = Writer::default();
    encode(&mut w, doc, SPEC, "document")?;
    Ok(w.buf)
}

fn info(w: &mut Writer, v: &Value) -> Res {
    const SPEC: Spec = &[
        ("title", 1, Kind::Str),
        ("version", 2, Kind::Str),
        ("description", 3, Kind::Str),
        ("termsOfService", 4, Kind::Str),
        ("", 7, Kind::Ext),
    ];
    encode(w, v, SPEC, "info")
}

/// A JSON object of named values as repeated `Named…` messages (name 1, value 2), the `x-`
/// members as `NamedAny` in `ext_field` when the message has one.
fn named(
    w: &mut Writer,
    v: &Value,
    field: u32,
    ext_field: Option<u32>,
    value: fn(&mut Writer, &Value) -> Res,
    what: &str,
) -> Res {
    for (k, val) in object(v, what)? {
        match ext_field {
            Some(ext) if k.starts_with("x-") => w.message(ext, |w| named_any(w, k, val))?,
            _ => w.message(field, |w| {
                w.string(1, k);
                w.message(2, |w| value(w, val))
            })?,
        }
    }
    Ok(())
}

fn paths(w: &mut Writer, v: &Value) -> Res {
    // `Paths`: vendor_extension 1, path 2. Extensions come first in field order.
    for (k, val) in object(v, "paths")?
        .iter()
        .filter(|(k, _)| k.starts_with("x-"))
    {
        w.message(1, |w| named_any(w, k, val))?;
    }
    for (k, val) in object(v, "paths")?
        .iter()
        .filter(|(k, _)| !k.starts_with("x-"))
    {
        w.message(2, |w| {
            w.string(1, k);
            w.message(2, |w| path_item(w, val))
        })?;
    }
    Ok(())
}

fn path_item(w: &mut Writer, v: &Value) -> Res {
    const SPEC: Spec = &[
        ("$ref", 1, Kind::Str),
        ("get", 2, Kind::Msg(operation)),
        ("put", 3, Kind::Msg(operation)),
        ("post", 4, Kind::Msg(operation)),
        ("delete", 5, Kind::Msg(operation)),
        ("options", 6, Kind::Msg(operation)),
        ("head", 7, Kind::Msg(operation)),
        ("patch", 8, Kind::Msg(operation)),
        ("parameters", 9, Kind::Msgs(parameters_item)),
        ("", 10, Kind::Ext),
    ];
    encode(w, v, SPEC, "path item")
}

fn operation(w: &mut Writer, v: &Value) -> Res {
    const SPEC: Spec = &[
        ("tags", 1, Kind::Strs),
        ("summary", 2, Kind::Str),
        ("description", 3, Kind::Str),
        ("operationId", 5, Kind::Str),
        ("produces", 6, Kind::Strs),
        ("consumes", 7, Kind::Strs),
        ("parameters", 8, Kind::Msgs(parameters_item)),
        ("responses", 9, Kind::Msg(responses)),
        ("schemes", 10, Kind::Strs),
        ("deprecated", 11, Kind::Bool),
        ("", 13, Kind::Ext),
    ];
    encode(w, v, SPEC, "operation")
}

/// `ParametersItem`: a `Parameter` (1) or a `JsonReference` (2).
fn parameters_item(w: &mut Writer, v: &Value) -> Res {
    if v.get("$ref").is_some() {
        const SPEC: Spec = &[("$ref", 1, Kind::Str), ("description", 2, Kind::Str)];
        return w.message(2, |w| encode(w, v, SPEC, "parameter reference"));
    }
    // `Parameter`: a body parameter (1) or a non-body one (2) by location.
    w.message(1, |w| match v.get("in").and_then(Value::as_str) {
        Some("body") => {
            const SPEC: Spec = &[
                ("description", 1, Kind::Str),
                ("name", 2, Kind::Str),
                ("in", 3, Kind::Str),
                ("required", 4, Kind::Bool),
                ("schema", 5, Kind::Msg(schema)),
                ("", 6, Kind::Ext),
            ];
            w.message(1, |w| encode(w, v, SPEC, "body parameter"))
        }
        // `NonBodyParameter`: header 1, formData 2, query 3, path 4. The members this
        // server's parameters use; the sub-schemas' numbers differ by location.
        Some("query") => {
            const SPEC: Spec = &[
                ("required", 1, Kind::Bool),
                ("in", 2, Kind::Str),
                ("description", 3, Kind::Str),
                ("name", 4, Kind::Str),
                ("allowEmptyValue", 5, Kind::Bool),
                ("type", 6, Kind::Str),
                ("format", 7, Kind::Str),
                ("collectionFormat", 9, Kind::Str),
                ("default", 10, Kind::Any),
                ("uniqueItems", 20, Kind::Bool),
                ("enum", 21, Kind::Anys),
                ("", 23, Kind::Ext),
            ];
            w.message(2, |w| {
                w.message(3, |w| encode(w, v, SPEC, "query parameter"))
            })
        }
        Some("path") => {
            const SPEC: Spec = &[
                ("required", 1, Kind::Bool),
                ("in", 2, Kind::Str),
                ("description", 3, Kind::Str),
                ("name", 4, Kind::Str),
                ("type", 5, Kind::Str),
                ("format", 6, Kind::Str),
                ("collectionFormat", 8, Kind::Str),
                ("default", 9, Kind::Any),
                ("uniqueItems", 19, Kind::Bool),
                ("enum", 20, Kind::Anys),
                ("", 22, Kind::Ext),
            ];
            w.message(2, |w| {
                w.message(4, |w| encode(w, v, SPEC, "path parameter"))
            })
        }
        other => Err(format!("parameter in {other:?}: not supported")),
    })
}

/// `Responses`: response_code 1 (`NamedResponseValue`), vendor_extension 2.
fn responses(w: &mut Writer, v: &Value) -> Res {
    named(w, v, 1, Some(2), response_value, "responses")
}

/// `ResponseValue`: a `Response` (1) or a `JsonReference` (2).
fn response_value(w: &mut Writer, v: &Value) -> Res {
    const SPEC: Spec = &[
        ("description", 1, Kind::Str),
        ("schema", 2, Kind::Msg(schema_item)),
        ("", 5, Kind::Ext),
    ];
    if v.get("$ref").is_some() {
        const REF: Spec = &[("$ref", 1, Kind::Str), ("description", 2, Kind::Str)];
        return w.message(2, |w| encode(w, v, REF, "response reference"));
    }
    w.message(1, |w| encode(w, v, SPEC, "response"))
}

/// `SchemaItem`: a `Schema` (1).
fn schema_item(w: &mut Writer, v: &Value) -> Res {
    w.message(1, |w| schema(w, v))
}

fn definitions(w: &mut Writer, v: &Value) -> Res {
    named(w, v, 1, None, schema, "definitions")
}

fn schema(w: &mut Writer, v: &Value) -> Res {
    const SPEC: Spec = &[
        ("$ref", 1, Kind::Str),
        ("format", 2, Kind::Str),
        ("title", 3, Kind::Str),
        ("description", 4, Kind::Str),
        ("default", 5, Kind::Any),
        ("multipleOf", 6, Kind::Double),
        ("maximum", 7, Kind::Double),
        ("exclusiveMaximum", 8, Kind::Bool),
        ("minimum", 9, Kind::Double),
        ("exclusiveMinimum", 10, Kind::Bool),
        ("maxLength", 11, Kind::Int),
        ("minLength", 12, Kind::Int),
        ("pattern", 13, Kind::Str),
        ("maxItems", 14, Kind::Int),
        ("minItems", 15, Kind::Int),
        ("uniqueItems", 16, Kind::Bool),
        ("maxProperties", 17, Kind::Int),
        ("minProperties", 18, Kind::Int),
        ("required", 19, Kind::Strs),
        ("enum", 20, Kind::Anys),
        ("additionalProperties", 21, Kind::Msg(additional_properties)),
        ("type", 22, Kind::Msg(type_item)),
        ("items", 23, Kind::Msg(items_item)),
        ("allOf", 24, Kind::Msgs(schema)),
        ("properties", 25, Kind::Msg(properties)),
        ("discriminator", 26, Kind::Str),
        ("readOnly", 27, Kind::Bool),
        ("example", 30, Kind::Any),
        ("", 31, Kind::Ext),
    ];
    encode(w, v, SPEC, "schema")
}

/// `AdditionalPropertiesItem`: a `Schema` (1) or a boolean (2, written even when false: a
/// oneof member that is set).
fn additional_properties(w: &mut Writer, v: &Value) -> Res {
    match v {
        Value::Bool(b) => {
            w.key(2, VARINT);
            w.varint(u64::from(*b));
            Ok(())
        }
        _ => w.message(1, |w| schema(w, v)),
    }
}

/// `TypeItem`: repeated string 1.
fn type_item(w: &mut Writer, v: &Value) -> Res {
    match v {
        Value::String(s) => w.bytes(1, s.as_bytes()),
        Value::Array(types) => {
            for t in types {
                w.bytes(1, t.as_str().ok_or("type: not a string")?.as_bytes());
            }
        }
        _ => return Err(format!("type: unexpected value {v}")),
    }
    Ok(())
}

/// `ItemsItem`: repeated `Schema` 1.
fn items_item(w: &mut Writer, v: &Value) -> Res {
    match v {
        Value::Array(items) => {
            for s in items {
                w.message(1, |w| schema(w, s))?;
            }
            Ok(())
        }
        _ => w.message(1, |w| schema(w, v)),
    }
}

/// `Properties`: repeated `NamedSchema` 1.
fn properties(w: &mut Writer, v: &Value) -> Res {
    named(w, v, 1, None, schema, "properties")
}

/// `SecurityRequirement`: repeated `NamedStringArray` 1, each value a `StringArray`.
fn security_requirement(w: &mut Writer, v: &Value) -> Res {
    named(
        w,
        v,
        1,
        None,
        |w, scopes| {
            for s in scopes.as_array().ok_or("security scopes: not a list")? {
                w.bytes(
                    1,
                    s.as_str().ok_or("security scope: not a string")?.as_bytes(),
                );
            }
            Ok(())
        },
        "security requirement",
    )
}

/// `SecurityDefinitions`: repeated `NamedSecurityDefinitionsItem` 1, each value a oneof of
/// which this server uses the API key one (2).
fn security_definitions(w: &mut Writer, v: &Value) -> Res {
    named(
        w,
        v,
        1,
        None,
        |w, item| {
            const SPEC: Spec = &[
                ("type", 1, Kind::Str),
                ("name", 2, Kind::Str),
                ("in", 3, Kind::Str),
                ("description", 4, Kind::Str),
                ("", 5, Kind::Ext),
            ];
            match item.get("type").and_then(Value::as_str) {
                Some("apiKey") => w.message(2, |w| encode(w, item, SPEC, "api key security")),
                other => Err(format!("security definition type {other:?}: not supported")),
            }
        },
        "security definitions",
    )
}

/// `NamedAny`: name 1, value 2 (an `Any` holding YAML).
fn named_any(w: &mut Writer, name: &str, v: &Value) -> Res {
    w.string(1, name);
    w.message(2, |w| any(w, v))
}

/// `Any`: the value as YAML in field 2, as gnostic keeps a value it has no type for.
fn any(w: &mut Writer, v: &Value) -> Res {
    w.string(2, &yaml(v));
    Ok(())
}

/// A value as block YAML, the way gnostic renders it (a scalar, a list of scalars, a list of
/// flat maps, a flat map), each line ending in a newline. Deeper values are written in flow
/// style, which is YAML too.
pub(crate) fn yaml(v: &Value) -> String {
    match v {
        Value::Array(items) if !items.is_empty() => {
            let mut out = String::new();
            for item in items {
                match item {
                    Value::Object(m) if !m.is_empty() && m.values().all(is_scalar) => {
                        let mut first = true;
                        for (k, val) in m {
                            out.push_str(if first { "- " } else { "  " });
                            first = false;
                            out.push_str(&format!(
                                "{}: {}\n",
                                scalar(&Value::from(k.as_str())),
                                scalar(val)
                            ));
                        }
                    }
                    _ => out.push_str(&format!("- {}\n", flow(item))),
                }
            }
            out
        }
        Value::Object(m) if !m.is_empty() => m
            .iter()
            .map(|(k, val)| format!("{}: {}\n", scalar(&Value::from(k.as_str())), flow(val)))
            .collect(),
        _ => format!("{}\n", flow(v)),
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

/// A scalar, or a collection in flow style (JSON, with YAML-safe strings).
fn flow(v: &Value) -> String {
    match v {
        Value::Array(_) | Value::Object(_) => v.to_string(),
        _ => scalar(v),
    }
}

/// A scalar: a string plain where YAML reads it back as that string, double-quoted (JSON
/// escapes, valid YAML) otherwise.
fn scalar(v: &Value) -> String {
    let Value::String(s) = v else {
        return v.to_string();
    };
    let plain = !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | ','))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null"
        );
    if plain {
        s.clone()
    } else {
        Value::String(s.clone()).to_string()
    }
}
