//! Document stamping and the byte formats of the on-disk records.

use serde_json::{Map, Value};

use crate::{EventType, StoreError};

/// A document serialized once, on the caller's task, with an empty `metadata.resourceVersion`
/// whose place is remembered: the writer thread only splices the revision's digits in, so the
/// one thread every write goes through copies bytes instead of serializing (and freeing) a
/// JSON tree.
#[derive(Debug)]
pub(crate) struct Unstamped {
    bytes: Vec<u8>,
    /// Offset of the closing quote of the empty resourceVersion string.
    gap: usize,
}

fn serialize_err(e: serde_json::Error) -> StoreError {
    StoreError::Backend(format!("serialize: {e}"))
}

/// Serialize `value` as `serde_json::to_vec` would after setting `metadata.resourceVersion`
/// (in its place if present, else last in `metadata`), leaving the revision out.
pub(crate) fn unstamped(mut value: Value) -> Result<Unstamped, StoreError> {
    let obj = value.as_object_mut().ok_or(StoreError::BadObject)?;
    obj.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(StoreError::BadObject)?
        .insert("resourceVersion".to_owned(), Value::String(String::new()));
    let mut out = Vec::with_capacity(2048);
    let mut gap = None;
    write_object(&mut out, obj, Level::Top, &mut gap)?;
    let gap = gap.ok_or(StoreError::BadObject)?;
    Ok(Unstamped { bytes: out, gap })
}

/// Where an object sits in the document: the resourceVersion left empty is the one of the
/// top-level object's `metadata`, nowhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Metadata,
    Inner,
}

/// Writes `obj` compactly, as serde_json does; in the top-level `metadata` the
/// resourceVersion's value is left empty and `gap` notes where.
fn write_object(
    out: &mut Vec<u8>,
    obj: &Map<String, Value>,
    level: Level,
    gap: &mut Option<usize>,
) -> Result<(), StoreError> {
    out.push(b'{');
    for (i, (k, v)) in obj.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k)?;
        out.push(b':');
        match v {
            Value::Object(meta) if level == Level::Top && k == "metadata" => {
                write_object(out, meta, Level::Metadata, gap)?
            }
            _ if level == Level::Metadata && k == "resourceVersion" => {
                out.extend_from_slice(b"\"\"");
                *gap = Some(out.len() - 1);
            }
            _ => write_value(out, v, gap)?,
        }
    }
    out.push(b'}');
    Ok(())
}

/// Writes `v` byte for byte as `serde_json::to_writer` does (compact): strings without
/// anything to escape are copied as they are, checked eight bytes at a time; the rest (escapes,
/// numbers) is serde_json's own writing. Documents are serialized on every write, and the
/// byte-at-a-time escape check was most of it.
fn write_value(out: &mut Vec<u8>, v: &Value, gap: &mut Option<usize>) -> Result<(), StoreError> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => serde_json::to_writer(&mut *out, n).map_err(serialize_err)?,
        Value::String(s) => write_str(out, s)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item, gap)?;
            }
            out.push(b']');
        }
        Value::Object(m) => write_object(out, m, Level::Inner, gap)?,
    }
    Ok(())
}

fn write_str(out: &mut Vec<u8>, s: &str) -> Result<(), StoreError> {
    if needs_escape(s.as_bytes()) {
        return serde_json::to_writer(&mut *out, s).map_err(serialize_err);
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

/// Whether serde_json would escape any byte of `b`: a control character, a quote or a backslash.
fn needs_escape(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte of `x` is zero iff the high bit of this is set there (no false negatives; a
    // false positive only sends the string to serde_json, which escapes exactly).
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        // Bytes below 0x20: x & 0xe0 is zero there.
        let control = has_zero(x & 0xe0e0_e0e0_e0e0_e0e0);
        let quote = has_zero(x ^ (ONES * u64::from(b'"')));
        let backslash = has_zero(x ^ (ONES * u64::from(b'\\')));
        if control | quote | backslash != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&c| c < 0x20 || c == b'"' || c == b'\\')
}

impl Unstamped {
    /// The JSON with an empty resourceVersion, and the offset where its digits go.
    pub(crate) fn parts(&self) -> (&[u8], usize) {
        (&self.bytes, self.gap)
    }
}

/// The stored bytes of `doc` at revision `rv` (what unpacking must give).
#[cfg(test)]
pub(crate) fn stamp(doc: &Unstamped, rv: u64) -> bytes::Bytes {
    use std::io::Write;
    // A u64 has at most 20 digits.
    let mut out = Vec::with_capacity(doc.bytes.len() + 20);
    out.extend_from_slice(&doc.bytes[..doc.gap]);
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{rv}");
    out.extend_from_slice(&doc.bytes[doc.gap..]);
    bytes::Bytes::from(out)
}

/// Stamp and serialize a document in one go.
#[cfg(test)]
pub(crate) fn stamped_bytes(value: Value, rv: u64) -> Result<bytes::Bytes, StoreError> {
    Ok(stamp(&unstamped(value)?, rv))
}

/// Object record: 8-byte big-endian revision, then the packed document (or, in records
/// written before documents were packed, its JSON). Keeping the revision outside the
/// document lets open() load objects without parsing them.
pub(crate) fn encode_object(rv: u64, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + raw.len());
    out.extend_from_slice(&rv.to_be_bytes());
    out.extend_from_slice(raw);
    out
}

pub(crate) fn decode_object(rec: &[u8]) -> Option<(u64, &[u8])> {
    let (head, raw) = rec.split_at_checked(8)?;
    let rv = u64::from_be_bytes(head.try_into().ok()?);
    Some((rv, raw))
}

/// Log record (keyed by revision): kind byte, 4-byte little-endian key length, key, packed
/// document (or JSON, as for objects).
/// The byte an event type is written as, in log records and in the commit log.
pub(crate) fn kind_byte(kind: EventType) -> u8 {
    match kind {
        EventType::Added => 0,
        EventType::Modified => 1,
        EventType::Deleted => 2,
    }
}

/// The event type of a [`kind_byte`]; None for any other byte.
pub(crate) fn kind_of_byte(b: u8) -> Option<EventType> {
    match b {
        0 => Some(EventType::Added),
        1 => Some(EventType::Modified),
        2 => Some(EventType::Deleted),
        _ => None,
    }
}

pub(crate) fn encode_event(kind: EventType, key: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + key.len() + raw.len());
    out.push(kind_byte(kind));
    // Keys are far shorter than 4 GiB; saturate rather than panic, and decode will refuse it.
    out.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(raw);
    out
}

pub(crate) fn decode_event(rec: &[u8]) -> Option<(EventType, String, &[u8])> {
    let (&kind, rest) = rec.split_first()?;
    let kind = kind_of_byte(kind)?;
    let (len, rest) = rest.split_at_checked(4)?;
    let len = usize::try_from(u32::from_le_bytes(len.try_into().ok()?)).ok()?;
    let (key, raw) = rest.split_at_checked(len)?;
    let key = std::str::from_utf8(key).ok()?.to_owned();
    Some((kind, key, raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_written_byte_for_byte_as_serde_json_writes_them() {
        // The dictionary's objects, one per line, as kbatch stores them.
        let mut cases: Vec<Value> = include_bytes!("pack/dictionary-1.json")
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("a dictionary object"))
            .collect();
        assert!(cases.len() >= 4);
        cases.extend([
            json!(null),
            json!([
                true,
                false,
                null,
                0,
                -1,
                1.5,
                -2.25e-7,
                1e300,
                u64::MAX,
                i64::MIN
            ]),
            json!({"": "", "a\"b": "c\\d", "ctl": "\u{0}\u{1f}\t\n", "del": "\u{7f}",
                "uni": "é—日本\u{1F600}", "long": "x".repeat(100), "nested": [[{}], {"k": []}]}),
        ]);
        // A byte that needs escaping at every position of strings of every length up to 24.
        for len in 0..24 {
            for at in 0..len {
                for bad in ['"', '\\', '\u{0}', '\u{1f}', '\u{7f}', ' ', 'é'] {
                    let s: String = (0..len).map(|i| if i == at { bad } else { 'a' }).collect();
                    cases.push(Value::String(s));
                }
            }
        }
        for v in cases {
            let mut ours = Vec::new();
            write_value(&mut ours, &v, &mut None).expect("writes");
            let theirs = serde_json::to_vec(&v).expect("serializes");
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs)
            );
        }
    }

    #[test]
    fn event_round_trip() {
        let rec = encode_event(EventType::Deleted, "/jobs/ns/a", b"{}");
        let (kind, key, raw) = decode_event(&rec).expect("decodes");
        assert_eq!(kind, EventType::Deleted);
        assert_eq!(key, "/jobs/ns/a");
        assert_eq!(raw, b"{}");
        assert!(decode_event(&rec[..6]).is_none());
        assert!(decode_event(&[7, 0, 0, 0, 0]).is_none());
    }

    /// What the splice must equal: the document with the revision set, serialized whole.
    fn reference(mut v: Value, rv: u64) -> Vec<u8> {
        let obj = v.as_object_mut().expect("an object");
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        meta.as_object_mut()
            .expect("metadata is an object")
            .insert("resourceVersion".into(), Value::String(rv.to_string()));
        serde_json::to_vec(&v).expect("serializes")
    }

    #[test]
    fn stamping_splices_the_revision_where_serializing_would_put_it() {
        let docs = [
            serde_json::json!({"kind": "Job"}),
            serde_json::json!({"metadata": {}}),
            serde_json::json!({"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "7", "uid": "u"}, "spec": {"x": [1, "resourceVersion"]}}),
            serde_json::json!({"metadata": {"name": "q\"uote\u{1}", "labels": {"resourceVersion": "1"}}, "status": null}),
            serde_json::json!({"a": {"metadata": {"resourceVersion": "9"}}, "metadata": {"resourceVersion": 3}}),
        ];
        for doc in docs {
            for rv in [0, 1, 42, u64::MAX] {
                let got = stamped_bytes(doc.clone(), rv).expect("stamps");
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&reference(doc.clone(), rv)),
                    "{doc}"
                );
            }
        }
        assert!(unstamped(serde_json::json!({"metadata": 1})).is_err());
        assert!(unstamped(serde_json::json!([1])).is_err());
        let rec = encode_object(7, b"{}");
        let (rv, raw) = decode_object(&rec).expect("decodes");
        assert_eq!((rv, raw), (7, &b"{}"[..]));
    }
}
