//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded into the JSON
//! document the same client would have sent as `application/json`, so that everything after
//! decoding (defaulting, validation, storage) is shared with the JSON path.
//!
//! The wire format is the magic `k8s\0` followed by a `runtime.Unknown` envelope: field 1
//! TypeMeta {1: apiVersion, 2: kind}, field 2 the object message, field 3 contentEncoding,
//! field 4 contentType. The object is decoded with the tables in `schema` (generated from the
//! Go types of kubectl), following Go's JSON encoding of the decoded Go struct:
//!
//! - Go's protobuf marshalling writes every non-pointer field, zero or not; a zero scalar
//!   stays in the JSON only where the Go field is a pointer or has no `omitempty`
//!   (`Field::keep_zero`), so kubectl's `namespace: ""` or `generation: 0` vanish while a
//!   `parallelism: 0` stays.
//! - Structs are always written (Go's `omitempty` never drops a struct): `resources: {}`,
//!   `status: {}`, and a zero `metav1.Time` as `null`.
//! - Fields absent from the wire are absent from the JSON; unknown fields are skipped.
//! - Repeated fields accumulate (packed varints accepted), a struct field that occurs twice is
//!   merged as protobuf merges (its occurrences are decoded as one concatenated message), and
//!   for a scalar the last occurrence wins.

#[rustfmt::skip]
mod schema;
mod schema_types;

/// The Go type tables, for Go's JSON encoding rules outside protobuf (`crate::gojson`).
pub(crate) mod go_types {
    pub use super::schema_types::{Card, Field, Msg, Ty};

    /// The table of `kind` in `api_version`.
    pub fn root(api_version: &str, kind: &str) -> Option<&'static Msg> {
        super::schema::ROOTS
            .iter()
            .find(|(av, k, _)| *k == kind && (*av == "*" || *av == api_version))
            .map(|(_, _, m)| *m)
    }

    /// Every kind's table.
    pub fn roots() -> impl Iterator<Item = &'static Msg> {
        super::schema::ROOTS.iter().map(|(_, _, m)| *m)
    }
}

use std::borrow::Cow;

use base64::Engine;
use serde_json::{Map, Value, json};

use schema_types::{Card, Field, Msg, Ty};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The 4 bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";
/// Deeper nesting than any served type has is rejected rather than followed.
const MAX_DEPTH: usize = 64;

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    #[error("the body does not start with the protobuf prefix \"k8s\\x00\"")]
    BadMagic,
    #[error("unexpected end of data")]
    Truncated,
    #[error("varint longer than 64 bits")]
    VarintOverflow,
    #[error("invalid field number {0}")]
    InvalidFieldNumber(u64),
    #[error("unsupported wire type {0}")]
    UnsupportedWireType(u8),
    #[error("wire type {got} where {expected} was expected")]
    WrongWireType { got: u8, expected: u8 },
    #[error("messages nested more than {MAX_DEPTH} deep")]
    TooDeep,
    #[error("the envelope names no kind")]
    MissingKind,
    #[error("no kind {kind:?} is registered for version {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("unsupported content encoding {0:?}")]
    ContentEncoding(String),
    #[error("unsupported content type {0:?} in the envelope")]
    ContentType(String),
    #[error("time out of range: {0} seconds")]
    TimeOutOfRange(i64),
    #[error("invalid IntOrString type {0}")]
    IntOrStringType(i64),
    #[error("fieldsV1 is not JSON: {0}")]
    FieldsV1(String),
}

/// A decoding error with the JSON path of the field where it happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{kind}", display_path(.path))]
pub struct ProtobufError {
    /// Path segments, innermost first (pushed while unwinding).
    path: Vec<String>,
    pub kind: ErrorKind,
}

fn display_path(path: &[String]) -> String {
    if path.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    for seg in path.iter().rev() {
        if !s.is_empty() && !seg.starts_with('[') {
            s.push('.');
        }
        s.push_str(seg);
    }
    s.push_str(": ");
    s
}

impl From<ErrorKind> for ProtobufError {
    fn from(kind: ErrorKind) -> Self {
        ProtobufError {
            path: Vec::new(),
            kind,
        }
    }
}

impl ProtobufError {
    fn within(mut self, segment: impl Into<String>) -> Self {
        let segment = segment.into();
        if !segment.is_empty() {
            self.path.push(segment);
        }
        self
    }
}

/// Decode a whole request body (magic, envelope, object) into a JSON object with the
/// envelope's apiVersion and kind.
pub fn decode_object(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ErrorKind::BadMagic)?;
    let mut r = Reader::new(rest);
    let (mut api_version, mut kind) = (String::new(), String::new());
    let mut raw: &[u8] = &[];
    let (mut encoding, mut content_type) = (String::new(), String::new());
    while !r.done() {
        let (num, wire) = r.key()?;
        match num {
            1 => {
                let mut tm = Reader::new(r.len_delimited(wire)?);
                while !tm.done() {
                    let (num, wire) = tm.key()?;
                    match num {
                        1 => api_version = string(tm.len_delimited(wire)?),
                        2 => kind = string(tm.len_delimited(wire)?),
                        _ => tm.skip(wire)?,
                    }
                }
            }
            2 => raw = r.len_delimited(wire)?,
            3 => encoding = string(r.len_delimited(wire)?),
            4 => content_type = string(r.len_delimited(wire)?),
            _ => r.skip(wire)?,
        }
    }
    if !encoding.is_empty() {
        return Err(ErrorKind::ContentEncoding(encoding).into());
    }
    if !content_type.is_empty() && content_type != MEDIA_TYPE {
        return Err(ErrorKind::ContentType(content_type).into());
    }
    if kind.is_empty() {
        return Err(ErrorKind::MissingKind.into());
    }
    let msg = schema::ROOTS
        .iter()
        .find(|(av, k, _)| *k == kind && (*av == "*" || *av == api_version))
        .map(|(_, _, m)| *m)
        .ok_or_else(|| ErrorKind::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let object = decode_message(msg, raw, 0)?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    out.extend(object);
    Ok(Value::Object(out))
}

/// What has been read for one field of a message so far.
enum Slot<'a> {
    Absent,
    Value(Value),
    /// Occurrences of a struct field, decoded together at the end (protobuf merge).
    Parts(Vec<&'a [u8]>),
    List(Vec<Value>),
    Map(Map<String, Value>),
}

fn decode_message(
    msg: &'static Msg,
    data: &[u8],
    depth: usize,
) -> Result<Map<String, Value>, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ErrorKind::TooDeep.into());
    }
    let mut slots: Vec<Slot<'_>> = msg.fields.iter().map(|_| Slot::Absent).collect();
    let mut r = Reader::new(data);
    while !r.done() {
        let (num, wire) = r.key()?;
        let found = msg
            .fields
            .iter()
            .zip(slots.iter_mut())
            .find(|(f, _)| f.num == num);
        match found {
            Some((f, slot)) => {
                read_field(f, wire, &mut r, slot, depth).map_err(|e| e.within(segment(f)))?
            }
            None => r.skip(wire)?,
        }
    }
    let mut out = Map::new();
    for (f, slot) in msg.fields.iter().zip(slots) {
        let v = match slot {
            Slot::Absent => continue,
            Slot::Value(v) => v,
            Slot::List(l) => Value::Array(l),
            Slot::Map(m) => Value::Object(m),
            Slot::Parts(parts) => {
                let data: Cow<'_, [u8]> = match parts.as_slice() {
                    [one] => Cow::Borrowed(one),
                    many => Cow::Owned(many.concat()),
                };
                decode_struct(f.ty, &data, depth).map_err(|e| e.within(segment(f)))?
            }
        };
        match (f.inline, v) {
            (true, Value::Object(m)) => out.extend(m),
            (_, v) => {
                out.insert(f.json.to_string(), v);
            }
        }
    }
    Ok(out)
}

fn segment(f: &Field) -> &'static str {
    f.json
}

fn read_field<'a>(
    f: &Field,
    wire: u8,
    r: &mut Reader<'a>,
    slot: &mut Slot<'a>,
    depth: usize,
) -> Result<(), ProtobufError> {
    match f.card {
        Card::One if is_struct(f.ty) => {
            let data = r.len_delimited(wire)?;
            match slot {
                Slot::Parts(parts) => parts.push(data),
                _ => *slot = Slot::Parts(vec![data]),
            }
        }
        Card::One => {
            let v = read_scalar(f.ty, wire, r)?;
            *slot = if f.keep_zero || !is_zero(&v) {
                Slot::Value(v)
            } else {
                Slot::Absent
            };
        }
        Card::Repeated => {
            if !matches!(slot, Slot::List(_)) {
                *slot = Slot::List(Vec::new());
            }
            let Slot::List(list) = slot else {
                return Ok(());
            };
            if f.ty.is_varint() && wire == 2 {
                let mut packed = Reader::new(r.len_delimited(wire)?);
                while !packed.done() {
                    let v = packed.varint()?;
                    list.push(varint_value(f.ty, v));
                }
            } else {
                let index = list.len();
                let v =
                    read_value(f.ty, wire, r, depth).map_err(|e| e.within(format!("[{index}]")))?;
                list.push(v);
            }
        }
        Card::Map => {
            if !matches!(slot, Slot::Map(_)) {
                *slot = Slot::Map(Map::new());
            }
            let Slot::Map(map) = slot else {
                return Ok(());
            };
            let mut entry = Reader::new(r.len_delimited(wire)?);
            let mut key = String::new();
            let mut value = None;
            while !entry.done() {
                let (num, wire) = entry.key()?;
                match num {
                    1 => key = string(entry.len_delimited(wire)?),
                    2 => value = Some(read_value(f.ty, wire, &mut entry, depth)),
                    _ => entry.skip(wire)?,
                }
            }
            let value = match value {
                Some(v) => v,
                None => zero_value(f.ty, depth),
            }
            .map_err(|e| e.within(format!("[{key}]")))?;
            map.insert(key, value);
        }
    }
    Ok(())
}

fn is_struct(ty: Ty) -> bool {
    !matches!(
        ty,
        Ty::String | Ty::Bytes | Ty::Int32 | Ty::Int64 | Ty::Bool
    )
}

/// One value of a field (an element of a repeated field, a map value).
fn read_value(ty: Ty, wire: u8, r: &mut Reader<'_>, depth: usize) -> Result<Value, ProtobufError> {
    if is_struct(ty) {
        let data = r.len_delimited(wire)?;
        decode_struct(ty, data, depth)
    } else {
        Ok(read_scalar(ty, wire, r)?)
    }
}

/// The value Go has for a map entry without a value.
fn zero_value(ty: Ty, depth: usize) -> Result<Value, ProtobufError> {
    match ty {
        Ty::String | Ty::Bytes => Ok(json!("")),
        Ty::Int32 | Ty::Int64 => Ok(json!(0)),
        Ty::Bool => Ok(json!(false)),
        _ => decode_struct(ty, &[], depth),
    }
}

fn read_scalar(ty: Ty, wire: u8, r: &mut Reader<'_>) -> Result<Value, ErrorKind> {
    match ty {
        Ty::String => Ok(Value::String(string(r.len_delimited(wire)?))),
        Ty::Bytes => Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(r.len_delimited(wire)?),
        )),
        _ => {
            if wire != 0 {
                return Err(ErrorKind::WrongWireType {
                    got: wire,
                    expected: 0,
                });
            }
            Ok(varint_value(ty, r.varint()?))
        }
    }
}

/// A varint as Go's generated code reads it: int32 truncates, bool is non-zero.
fn varint_value(ty: Ty, v: u64) -> Value {
    match ty {
        Ty::Bool => Value::Bool(v != 0),
        Ty::Int32 => json!(v as i32),
        _ => json!(v as i64),
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        _ => false,
    }
}

/// Go marshals invalid UTF-8 in strings as U+FFFD, as this does.
fn string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn decode_struct(ty: Ty, data: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    match ty {
        Ty::Msg(m) => Ok(Value::Object(decode_message(m, data, depth + 1)?)),
        Ty::Time => Ok(time(data, false)?),
        Ty::MicroTime => Ok(time(data, true)?),
        Ty::Quantity => Ok(quantity(data)?),
        Ty::IntOrString => Ok(int_or_string(data)?),
        Ty::FieldsV1 => Ok(fields_v1(data)?),
        Ty::StringList => Ok(string_list(data)?),
        Ty::String | Ty::Bytes | Ty::Int32 | Ty::Int64 | Ty::Bool => {
            let mut r = Reader::new(data);
            Ok(read_scalar(ty, 2, &mut r)?)
        }
    }
}

/// metav1.Time / MicroTime: {1: seconds, 2: nanos}. Empty data is Go's zero time (`null`);
/// Time keeps whole seconds only, as Go's unmarshalling does.
fn time(data: &[u8], micro: bool) -> Result<Value, ErrorKind> {
    if data.is_empty() {
        return Ok(Value::Null);
    }
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut r = Reader::new(data);
    while !r.done() {
        let (num, wire) = r.key()?;
        match num {
            1 => seconds = r.varint_field(wire)? as i64,
            2 => nanos = i64::from(r.varint_field(wire)? as i32),
            _ => r.skip(wire)?,
        }
    }
    if !micro {
        nanos = 0;
    }
    // Go's RFC 3339 marshalling accepts years 0 to 9999.
    const MIN: i64 = -62_167_219_200; // 0000-01-01T00:00:00Z
    const MAX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let total = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    let secs = total.div_euclid(1_000_000_000);
    let subsec = total.rem_euclid(1_000_000_000);
    let in_range = i64::try_from(secs).ok().filter(|s| (MIN..=MAX).contains(s));
    let ts = in_range
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .ok_or(ErrorKind::TimeOutOfRange(seconds))?;
    let base = ts.strftime("%Y-%m-%dT%H:%M:%S");
    Ok(Value::String(if micro {
        format!("{base}.{:06}Z", subsec / 1000)
    } else {
        format!("{base}Z")
    }))
}

/// resource.Quantity: {1: string}; the zero Quantity is "0".
fn quantity(data: &[u8]) -> Result<Value, ErrorKind> {
    let mut s = None;
    let mut r = Reader::new(data);
    while !r.done() {
        let (num, wire) = r.key()?;
        match num {
            1 => s = Some(string(r.len_delimited(wire)?)),
            _ => r.skip(wire)?,
        }
    }
    Ok(Value::String(s.unwrap_or_else(|| "0".to_string())))
}

/// intstr.IntOrString: {1: type (0 int, 1 string), 2: intVal, 3: strVal}.
fn int_or_string(data: &[u8]) -> Result<Value, ErrorKind> {
    let (mut ty, mut int_val, mut str_val) = (0i64, 0i32, String::new());
    let mut r = Reader::new(data);
    while !r.done() {
        let (num, wire) = r.key()?;
        match num {
            1 => ty = r.varint_field(wire)? as i64,
            2 => int_val = r.varint_field(wire)? as i32,
            3 => str_val = string(r.len_delimited(wire)?),
            _ => r.skip(wire)?,
        }
    }
    match ty {
        0 => Ok(json!(int_val)),
        1 => Ok(Value::String(str_val)),
        other => Err(ErrorKind::IntOrStringType(other)),
    }
}

/// metav1.FieldsV1: {1: Raw}, the JSON of the field set.
fn fields_v1(data: &[u8]) -> Result<Value, ErrorKind> {
    let mut raw: Option<&[u8]> = None;
    let mut r = Reader::new(data);
    while !r.done() {
        let (num, wire) = r.key()?;
        match num {
            1 => raw = Some(r.len_delimited(wire)?),
            _ => r.skip(wire)?,
        }
    }
    match raw {
        None | Some([]) => Ok(Value::Null),
        Some(raw) => serde_json::from_slice(raw).map_err(|e| ErrorKind::FieldsV1(e.to_string())),
    }
}

/// A named `[]string` message {1: repeated string}. Go's generated code starts each map value
/// as an empty slice, so an empty one is `[]`, not `null`.
fn string_list(data: &[u8]) -> Result<Value, ErrorKind> {
    let mut items = Vec::new();
    let mut r = Reader::new(data);
    while !r.done() {
        let (num, wire) = r.key()?;
        match num {
            1 => items.push(Value::String(string(r.len_delimited(wire)?))),
            _ => r.skip(wire)?,
        }
    }
    Ok(Value::Array(items))
}

/// A cursor over protobuf wire data; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, ErrorKind> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or(ErrorKind::Truncated)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(ErrorKind::VarintOverflow);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(ErrorKind::VarintOverflow)
    }

    fn key(&mut self) -> Result<(u32, u8), ErrorKind> {
        let k = self.varint()?;
        let num = k >> 3;
        let wire = (k & 7) as u8;
        match u32::try_from(num) {
            Ok(n) if (1..(1 << 29)).contains(&n) => Ok((n, wire)),
            _ => Err(ErrorKind::InvalidFieldNumber(num)),
        }
    }

    fn varint_field(&mut self, wire: u8) -> Result<u64, ErrorKind> {
        if wire != 0 {
            return Err(ErrorKind::WrongWireType {
                got: wire,
                expected: 0,
            });
        }
        self.varint()
    }

    fn len_delimited(&mut self, wire: u8) -> Result<&'a [u8], ErrorKind> {
        if wire != 2 {
            return Err(ErrorKind::WrongWireType {
                got: wire,
                expected: 2,
            });
        }
        let len = usize::try_from(self.varint()?).map_err(|_| ErrorKind::Truncated)?;
        self.take(len)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], ErrorKind> {
        let end = self.pos.checked_add(len).ok_or(ErrorKind::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(ErrorKind::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn skip(&mut self, wire: u8) -> Result<(), ErrorKind> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.take(8).map(drop),
            2 => self.len_delimited(wire).map(drop),
            5 => self.take(4).map(drop),
            other => Err(ErrorKind::UnsupportedWireType(other)),
        }
    }
}

#[cfg(test)]
mod tests;
