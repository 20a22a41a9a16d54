//! An LZ4 block compressor against a fixed dictionary, whose hash table is primed once.
//!
//! lz4_flex's `compress_into_with_dict` builds a fresh hash table and hashes the whole
//! dictionary on every call: for a ~3 KB document against the 10 KB dictionary that was two
//! thirds of the packing. Here the table of the dictionary is built once, each call starts
//! from a copy of it, and the output is a plain LZ4 block that any LZ4 decoder given the same
//! dictionary reads (`unpack` uses lz4_flex's).
//!
//! The compressor is the greedy one of LZ4's reference "fast" mode: 4-byte sequences hashed
//! into a table of the last position seen, a candidate checked byte by byte, the match
//! extended forwards and backwards. It keeps the block format's end rules: no match starts in
//! the last 12 bytes and the last 5 bytes are literals.

const HASH_LOG: u32 = 12;
const TABLE: usize = 1 << HASH_LOG;
const MIN_MATCH: usize = 4;
/// No match starts within this many bytes of the end.
const MF_LIMIT: usize = 12;
/// The last bytes of a block are always literals.
const LAST_LITERALS: usize = 5;
/// The longest offset a match can have (16 bits).
const MAX_DISTANCE: usize = 65_535;

type Table = [u32; TABLE];

/// A dictionary and the hash table of its positions.
pub(crate) struct Dictionary {
    bytes: &'static [u8],
    table: Box<Table>,
}

impl Dictionary {
    pub(crate) fn new(bytes: &'static [u8]) -> Dictionary {
        // Only the last window of a dictionary can be referred to.
        let bytes = &bytes[bytes.len().saturating_sub(MAX_DISTANCE)..];
        let mut table = Box::new([0u32; TABLE]);
        // Every third position, as the reference primes a dictionary: with every position the
        // last of the dictionary's four objects claims most sequences, and a Job packed 20%
        // larger.
        for p in (0..bytes.len().saturating_sub(MIN_MATCH - 1)).step_by(3) {
            // In range: the dictionary is shorter than the window, which fits in u32.
            table[hash(read_u32(bytes, p))] = p as u32;
        }
        Dictionary { bytes, table }
    }
}

fn hash(seq: u32) -> usize {
    (seq.wrapping_mul(2_654_435_761) >> (32 - HASH_LOG)) as usize
}

/// The 4 bytes at `i` (callers keep `i + 4 <= b.len()`).
fn read_u32(b: &[u8], i: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[i..i + 4]);
    u32::from_le_bytes(w)
}

/// How many bytes `a` and `b` share from their start (at most `b.len()`), eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    while n + 8 <= b.len() && n + 8 <= a.len() {
        let mut x = [0u8; 8];
        let mut y = [0u8; 8];
        x.copy_from_slice(&a[n..n + 8]);
        y.copy_from_slice(&b[n..n + 8]);
        let diff = u64::from_le_bytes(x) ^ u64::from_le_bytes(y);
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while n < b.len() && n < a.len() && a[n] == b[n] {
        n += 1;
    }
    n
}

fn write_length(out: &mut Vec<u8>, mut n: usize) {
    while n >= 255 {
        out.push(255);
        n -= 255;
    }
    out.push(n as u8);
}

fn literals(out: &mut Vec<u8>, lits: &[u8], match_nibble: u8) {
    let ll = lits.len();
    out.push(((ll.min(15) as u8) << 4) | match_nibble);
    if ll >= 15 {
        write_length(out, ll - 15);
    }
    out.extend_from_slice(lits);
}

fn sequence(out: &mut Vec<u8>, lits: &[u8], offset: usize, match_len: usize) {
    let ml = match_len - MIN_MATCH;
    literals(out, lits, ml.min(15) as u8);
    // Offsets are at most MAX_DISTANCE, which fits in 16 bits.
    out.extend_from_slice(&(offset as u16).to_le_bytes());
    if ml >= 15 {
        write_length(out, ml - 15);
    }
}

/// Reusable per-thread state: the dictionary followed by the input (the dictionary is copied
/// in once), and the working table.
#[derive(Default)]
pub(crate) struct Scratch {
    window: Vec<u8>,
    /// The address of the dictionary `window` starts with, if it does.
    holds: Option<usize>,
    table: Option<Box<Table>>,
}

impl Scratch {
    /// A rare huge document does not pin its window for the thread's life.
    pub(crate) fn shrink_if_above(&mut self, bytes: usize) {
        if self.window.capacity() > bytes {
            self.window = Vec::new();
            self.holds = None;
        }
    }
}

/// Appends to `out` the LZ4 block of `input`, whose matches may reach back into `dict`.
/// `None` for an input too long for 32-bit positions (the caller compresses it another way).
pub(crate) fn compress(
    dict: &Dictionary,
    input: &[u8],
    scratch: &mut Scratch,
    out: &mut Vec<u8>,
) -> Option<()> {
    let start = dict.bytes.len();
    let n = start + input.len();
    u32::try_from(n).ok()?;
    if input.len() < MF_LIMIT + 1 {
        literals(out, input, 0);
        return Some(());
    }
    let buf = &mut scratch.window;
    let id = dict as *const Dictionary as usize;
    if scratch.holds == Some(id) {
        buf.truncate(start);
    } else {
        buf.clear();
        buf.extend_from_slice(dict.bytes);
        scratch.holds = Some(id);
    }
    buf.extend_from_slice(input);
    let table = scratch.table.get_or_insert_with(|| Box::new([0u32; TABLE]));
    table.copy_from_slice(&dict.table[..]);

    let match_limit = n - LAST_LITERALS;
    let mut anchor = start;
    let mut ip = start;
    while ip + MF_LIMIT <= n {
        let seq = read_u32(buf, ip);
        let h = hash(seq);
        let cand = table[h] as usize;
        table[h] = ip as u32;
        if cand >= ip || ip - cand > MAX_DISTANCE || read_u32(buf, cand) != seq {
            ip += 1;
            continue;
        }
        let (mut from, mut at) = (cand, ip);
        let mut len =
            MIN_MATCH + common_prefix(&buf[from + MIN_MATCH..], &buf[at + MIN_MATCH..match_limit]);
        // Backwards over literals not yet written (never before the block's start).
        while at > anchor && from > 0 && buf[from - 1] == buf[at - 1] {
            from -= 1;
            at -= 1;
            len += 1;
        }
        sequence(out, &buf[anchor..at], at - from, len);
        ip = at + len;
        anchor = ip;
        // The position two bytes back as well, as the reference does: the next match often
        // starts there in repetitive text.
        if ip >= 2 && ip + 2 <= n {
            let p = ip - 2;
            table[hash(read_u32(buf, p))] = p as u32;
        }
    }
    literals(out, &buf[anchor..n], 0);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    static DICT: &[u8] = include_bytes!("dictionary-1.json");

    fn round_trip(input: &[u8]) -> usize {
        // One scratch per thread, as `pack` keeps it: each call starts from what the last left.
        thread_local! {
            static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
        }
        static PRIMED: std::sync::OnceLock<Dictionary> = std::sync::OnceLock::new();
        let dict = PRIMED.get_or_init(|| Dictionary::new(DICT));
        let mut out = Vec::new();
        SCRATCH
            .with_borrow_mut(|scratch| compress(dict, input, scratch, &mut out))
            .expect("compressible length");
        let mut back = vec![0u8; input.len()];
        let n = lz4_flex::block::decompress_into_with_dict(&out, &mut back, DICT)
            .unwrap_or_else(|e| panic!("{} bytes: {e}", input.len()));
        assert_eq!(n, input.len());
        assert!(
            back == input,
            "{} bytes decode to something else",
            input.len()
        );
        out.len()
    }

    /// A deterministic pseudo-random byte stream.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn every_short_length_round_trips() {
        let text = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}"#;
        for len in 0..text.len() {
            round_trip(&text[..len]);
            round_trip(&vec![b'a'; len]);
            round_trip(&noise(len, len as u64));
        }
    }

    #[test]
    fn documents_round_trip_and_compress_as_well_as_lz4_flex() {
        let pod = String::from_utf8_lossy(DICT).replace("\"name\":\"", "\"name\":\"x-");
        let docs: Vec<Vec<u8>> = vec![
            DICT.to_vec(),
            pod.into_bytes(),
            DICT[DICT.len() / 2..].to_vec(),
            br#"{"kind":"Job","metadata":{"name":"j"},"status":{}}"#.to_vec(),
        ];
        for doc in docs {
            let ours = round_trip(&doc);
            let theirs = lz4_flex::block::compress_with_dict(&doc, DICT).len();
            assert!(
                ours <= theirs + theirs / 20 + 8,
                "{} bytes: {ours} against lz4_flex's {theirs}",
                doc.len()
            );
        }
    }

    #[test]
    fn long_and_awkward_inputs_round_trip() {
        // Runs (offset-1 matches overlapping their own output), long literal runs, matches
        // longer than 15 + 255, repeats further apart than the 64 KiB window.
        let mut far = noise(70_000, 7);
        let head = far[..5_000].to_vec();
        far.extend_from_slice(&head);
        let mut mixed = Vec::new();
        for i in 0..2_000u32 {
            mixed.extend_from_slice(format!("{{\"i\":{i},\"v\":\"{}\"}}", i % 7).as_bytes());
            mixed.extend(noise((i % 40) as usize, u64::from(i)));
        }
        for input in [
            vec![0u8; 100_000],
            noise(100_000, 3),
            far,
            mixed,
            [DICT, DICT, DICT].concat(),
        ] {
            round_trip(&input);
        }
    }
}
