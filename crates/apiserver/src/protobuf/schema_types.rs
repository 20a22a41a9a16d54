//! The shape of the generated message tables (`schema.rs`).

/// One Go struct of the API: its protobuf fields in Go field order (the order of JSON keys).
#[derive(Debug)]
pub struct Msg {
    pub fields: &'static [Field],
}

#[derive(Debug)]
pub struct Field {
    /// Protobuf field number.
    pub num: u32,
    /// JSON name (empty for an inlined field).
    pub json: &'static str,
    pub ty: Ty,
    pub card: Card,
    /// A present zero scalar ("", 0, false) stays in the JSON: the Go field is a
    /// pointer or its json tag has no `omitempty`. Structs are never dropped (Go's
    /// `omitempty` does not apply to them).
    pub keep_zero: bool,
    /// An embedded struct whose fields appear directly in the parent's JSON object.
    pub inline: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    One,
    Repeated,
    /// `map<string, ty>`: entries are messages {1: key, 2: value}.
    Map,
}

#[derive(Debug, Clone, Copy)]
pub enum Ty {
    String,
    Int32,
    Int64,
    Bool,
    /// Go `[]byte`: length-delimited on the wire, base64 in JSON.
    Bytes,
    /// metav1.Time {seconds, nanos}: RFC 3339 to the second, null when zero.
    Time,
    /// metav1.MicroTime: RFC 3339 with microseconds, null when zero.
    MicroTime,
    /// resource.Quantity {string}: its string.
    Quantity,
    /// intstr.IntOrString {type, intVal, strVal}: a number or a string.
    IntOrString,
    /// metav1.FieldsV1 {Raw}: the embedded JSON.
    FieldsV1,
    /// A named `[]string` as a map value (authorization's ExtraValue): a message
    /// {1: repeated string}, a JSON list.
    StringList,
    Msg(&'static Msg),
}

impl Ty {
    /// Encoded as a varint (wire type 0) rather than length-delimited (wire type 2).
    pub fn is_varint(self) -> bool {
        matches!(self, Ty::Int32 | Ty::Int64 | Ty::Bool)
    }
}
