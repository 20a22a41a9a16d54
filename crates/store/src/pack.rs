//! Stored documents, compressed: the form the index, the watch history and the disk hold.
//!
//! A document is kept as LZ4 of its JSON without the revision (`metadata.resourceVersion` is
//! an empty string whose place is noted), compressed against a dictionary of typical objects
//! (an Event, a CronJob, a Job and a Pod as kbatch writes them, managedFields included). Kinds
//! repeat their field names and managedFields so much that a pod's 3.9 KB become ~550 bytes
//! and a Job's 2.9 KB ~470 (`cargo bench -p kbatch-store --bench pack`), at ~1-1.5 µs to pack
//! (on the writing caller's task, not the writer thread; our own compressor starts from a hash
//! table of the dictionary primed once, `compress`) and ~0.4 µs to unpack (lz4_flex). The revision is
//! spliced back in on unpacking, so a deletion re-stamps the last state without touching its
//! bytes.
//!
//! Layout: a format byte (`1`: LZ4 block with dictionary 1), the unstamped JSON length and
//! the gap's offset (u32 little-endian each), then the compressed block. The dictionary is
//! part of the disk format: a different one needs a new format byte, and this one stays.

mod compress;

use bytes::{BufMut, Bytes, BytesMut};

use crate::StoreError;
use crate::codec::Unstamped;

const FORMAT_LZ4_DICT1: u8 = 1;
const HEADER: usize = 9;
static DICTIONARY_1: &[u8] = include_bytes!("pack/dictionary-1.json");

/// A document packed on the writing caller's task, ready for the writer thread.
#[derive(Debug)]
pub(crate) struct Packed(pub(crate) Bytes);

/// Serializes and packs `value` (see [`crate::codec::unstamped`]).
pub(crate) fn pack_value(value: serde_json::Value) -> Result<Packed, StoreError> {
    Ok(Packed(pack(&crate::codec::unstamped(value)?)?))
}

/// A document as read from disk, packed: packed records are checked and kept; a plain JSON
/// record (written before documents were packed) is packed now.
pub(crate) fn from_disk(raw: &[u8]) -> Result<Bytes, StoreError> {
    if is_packed(raw) {
        // Checked once here, so that unpacking it later cannot fail.
        unpack(raw, 0)?;
        return Ok(Bytes::copy_from_slice(raw));
    }
    let value: serde_json::Value =
        serde_json::from_slice(raw).map_err(|_| StoreError::BadObject)?;
    Ok(pack_value(value)?.0)
}

/// Runs `f` with this thread's reusable buffer: the compressor's output and the decompressed
/// JSON go there first, and are copied out at their exact size (the index and the history
/// keep packed documents for long, and a buffer sized for the worst case is 4 times as big).
fn with_scratch<T>(f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|scratch| {
        let out = f(scratch);
        // A rare huge document does not pin its buffer for the thread's life.
        if scratch.capacity() > 1 << 20 {
            *scratch = Vec::new();
        }
        out
    })
}

/// Packs an unstamped document.
pub(crate) fn pack(doc: &Unstamped) -> Result<Bytes, StoreError> {
    let (json, gap) = doc.parts();
    let too_big = || StoreError::Backend(format!("document of {} bytes", json.len()));
    let len = u32::try_from(json.len()).map_err(|_| too_big())?;
    let gap = u32::try_from(gap).map_err(|_| too_big())?;
    thread_local! {
        static COMPRESSOR: std::cell::RefCell<compress::Scratch> =
            std::cell::RefCell::new(compress::Scratch::default());
    }
    with_scratch(|scratch| {
        scratch.clear();
        static PRIMED_1: std::sync::OnceLock<compress::Dictionary> = std::sync::OnceLock::new();
        let dict = PRIMED_1.get_or_init(|| compress::Dictionary::new(DICTIONARY_1));
        let done = COMPRESSOR.with_borrow_mut(|c| {
            let done = compress::compress(dict, json, c, scratch);
            c.shrink_if_above(1 << 20);
            done
        });
        if done.is_none() {
            scratch.resize(lz4_flex::block::get_maximum_output_size(json.len()), 0);
            let n = lz4_flex::block::compress_into_with_dict(json, scratch, DICTIONARY_1)
                .map_err(|e| StoreError::Backend(format!("compress: {e}")))?;
            scratch.truncate(n);
        }
        let n = scratch.len();
        let mut out = BytesMut::with_capacity(HEADER + n);
        out.put_u8(FORMAT_LZ4_DICT1);
        out.put_u32_le(len);
        out.put_u32_le(gap);
        out.put_slice(&scratch[..n]);
        Ok(out.freeze())
    })
}

/// The header of a packed document: (unstamped length, gap offset, compressed block).
fn header(packed: &[u8]) -> Option<(usize, usize, &[u8])> {
    let (&format, rest) = packed.split_first()?;
    if format != FORMAT_LZ4_DICT1 {
        return None;
    }
    let (len, rest) = rest.split_at_checked(4)?;
    let (gap, block) = rest.split_at_checked(4)?;
    let len = usize::try_from(u32::from_le_bytes(len.try_into().ok()?)).ok()?;
    let gap = usize::try_from(u32::from_le_bytes(gap.try_into().ok()?)).ok()?;
    // LZ4 expands at most ~255-fold: a longer claimed length is damage, not a reason to
    // allocate it.
    let plausible = len <= block.len().saturating_mul(255).saturating_add(16);
    (gap <= len && plausible).then_some((len, gap, block))
}

/// Whether `packed` is in this module's format (a plain JSON document starts with `{`).
pub(crate) fn is_packed(bytes: &[u8]) -> bool {
    bytes.first() == Some(&FORMAT_LZ4_DICT1)
}

/// The JSON of a packed document, stamped with revision `rv`.
pub(crate) fn unpack(packed: &[u8], rv: u64) -> Result<Bytes, StoreError> {
    let corrupt = || StoreError::Backend("corrupt packed document".to_owned());
    let (len, gap, block) = header(packed).ok_or_else(corrupt)?;
    with_scratch(|json| {
        json.resize(len, 0);
        let n = lz4_flex::block::decompress_into_with_dict(block, json, DICTIONARY_1)
            .map_err(|_| corrupt())?;
        if n != len {
            return Err(corrupt());
        }
        let mut out = BytesMut::with_capacity(json_len(packed, rv));
        out.put_slice(&json[..gap]);
        // Writing into a BytesMut cannot fail.
        let _ = std::fmt::Write::write_fmt(&mut out, format_args!("{rv}"));
        out.put_slice(&json[gap..len]);
        Ok(out.freeze())
    })
}

/// The length of the JSON `unpack(packed, rv)` gives, without unpacking (0 if corrupt).
pub(crate) fn json_len(packed: &[u8], rv: u64) -> usize {
    let digits = rv.checked_ilog10().map_or(1, |d| d as usize + 1);
    header(packed).map_or(0, |(len, _, _)| len + digits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{stamped_bytes, unstamped};
    use serde_json::json;

    #[test]
    fn unpacking_gives_the_document_stamped_with_the_revision() {
        let docs = [
            json!({"kind": "Job"}),
            json!({"metadata": {"name": "a", "resourceVersion": "7"}, "spec": {"x": "é\u{1}"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                "labels": {"job-name": "j"}}, "spec": {"containers": [{"name": "main", "image": "busybox"}]},
                "status": {"phase": "Succeeded"}}),
        ];
        for doc in docs {
            let packed = pack(&unstamped(doc.clone()).expect("unstamped")).expect("packs");
            assert!(is_packed(&packed));
            for rv in [0, 9, 10, 12345, u64::MAX] {
                let want = stamped_bytes(doc.clone(), rv).expect("stamps");
                assert_eq!(unpack(&packed, rv).expect("unpacks"), want, "{doc} at {rv}");
                assert_eq!(json_len(&packed, rv), want.len());
            }
        }
    }

    #[test]
    fn objects_like_the_dictionarys_shrink_several_fold() {
        for line in std::str::from_utf8(DICTIONARY_1).expect("utf-8").lines() {
            let mut doc: serde_json::Value = serde_json::from_str(line).expect("json");
            // Another object of the same kind: other names, uids and times.
            doc["metadata"]["name"] = json!("another-name-x7k2p");
            doc["metadata"]["uid"] = json!("0b5e6a8e-3f1c-4c1e-9d7a-2f4b8c9d0e1f");
            doc["metadata"]["creationTimestamp"] = json!("2031-01-02T03:04:05Z");
            let doc = unstamped(doc).expect("unstamped");
            let packed = pack(&doc).expect("packs");
            let plain = doc.parts().0.len();
            assert!(packed.len() * 3 < plain, "{} of {plain}", packed.len());
        }
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let packed = pack(&unstamped(json!({"metadata": {"name": "n"}})).expect("u")).expect("p");
        assert!(unpack(b"", 1).is_err());
        assert!(unpack(b"{}", 1).is_err());
        assert!(unpack(&packed[..HEADER + 1], 1).is_err());
        let mut long = packed.to_vec();
        long[1] = 0xff;
        assert!(unpack(&long, 1).is_err());
        let mut gap = packed.to_vec();
        gap[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(unpack(&gap, 1).is_err());
        let mut block = packed.to_vec();
        for b in block[HEADER..].iter_mut() {
            *b = 0xff;
        }
        assert!(unpack(&block, 1).is_err());
        assert_eq!(json_len(b"", 5), 0);
    }
}
