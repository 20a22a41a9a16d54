//! Document stamping and the byte formats of the on-disk records.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::{EventType, StoreError};

/// Accept a JSON object whose `metadata`, when present, is an object. Checked on the caller's
/// task so that the writer thread only sees documents it can stamp.
pub(crate) fn check_object(value: &Value) -> Result<(), StoreError> {
    let obj = value.as_object().ok_or(StoreError::BadObject)?;
    match obj.get("metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(StoreError::BadObject),
    }
}

/// Set `metadata.resourceVersion` to `rv` (a string, as Kubernetes does).
pub(crate) fn stamp(value: &mut Value, rv: u64) -> Result<(), StoreError> {
    let obj = value.as_object_mut().ok_or(StoreError::BadObject)?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(StoreError::BadObject)?;
    meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
    Ok(())
}

/// Stamp and serialize a new document.
pub(crate) fn stamped_bytes(mut value: Value, rv: u64) -> Result<Bytes, StoreError> {
    stamp(&mut value, rv)?;
    serde_json::to_vec(&value)
        .map(Bytes::from)
        .map_err(|e| StoreError::Backend(format!("serialize: {e}")))
}

/// Re-stamp stored bytes (the last state of a deleted object) with another revision.
pub(crate) fn restamp(raw: &[u8], rv: u64) -> Result<Bytes, StoreError> {
    let value: Value = serde_json::from_slice(raw).map_err(|_| StoreError::BadObject)?;
    stamped_bytes(value, rv)
}

/// Object record: 8-byte big-endian revision, then the JSON bytes. Keeping the revision
/// outside the JSON lets open() load objects without parsing them.
pub(crate) fn encode_object(rv: u64, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + raw.len());
    out.extend_from_slice(&rv.to_be_bytes());
    out.extend_from_slice(raw);
    out
}

pub(crate) fn decode_object(rec: &[u8]) -> Option<(u64, Bytes)> {
    let (head, raw) = rec.split_at_checked(8)?;
    let rv = u64::from_be_bytes(head.try_into().ok()?);
    Some((rv, Bytes::copy_from_slice(raw)))
}

/// Log record (keyed by revision): kind byte, 4-byte little-endian key length, key, JSON bytes.
pub(crate) fn encode_event(kind: EventType, key: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + key.len() + raw.len());
    out.push(match kind {
        EventType::Added => 0,
        EventType::Modified => 1,
        EventType::Deleted => 2,
    });
    // Keys are far shorter than 4 GiB; saturate rather than panic, and decode will refuse it.
    out.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(raw);
    out
}

pub(crate) fn decode_event(rec: &[u8]) -> Option<(EventType, String, Bytes)> {
    let (&kind, rest) = rec.split_first()?;
    let kind = match kind {
        0 => EventType::Added,
        1 => EventType::Modified,
        2 => EventType::Deleted,
        _ => return None,
    };
    let (len, rest) = rest.split_at_checked(4)?;
    let len = usize::try_from(u32::from_le_bytes(len.try_into().ok()?)).ok()?;
    let (key, raw) = rest.split_at_checked(len)?;
    let key = std::str::from_utf8(key).ok()?.to_owned();
    Some((kind, key, Bytes::copy_from_slice(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trip() {
        let rec = encode_event(EventType::Deleted, "/jobs/ns/a", b"{}");
        let (kind, key, raw) = decode_event(&rec).expect("decodes");
        assert_eq!(kind, EventType::Deleted);
        assert_eq!(key, "/jobs/ns/a");
        assert_eq!(&raw[..], b"{}");
        assert!(decode_event(&rec[..6]).is_none());
        assert!(decode_event(&[7, 0, 0, 0, 0]).is_none());
    }

    #[test]
    fn stamping() {
        let mut v = serde_json::json!({"kind": "Job"});
        stamp(&mut v, 42).expect("stamps");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert!(check_object(&serde_json::json!({"metadata": 1})).is_err());
        assert!(check_object(&serde_json::json!([1])).is_err());
        let (rv, raw) = decode_object(&encode_object(7, b"{}")).expect("decodes");
        assert_eq!((rv, &raw[..]), (7, &b"{}"[..]));
    }
}
