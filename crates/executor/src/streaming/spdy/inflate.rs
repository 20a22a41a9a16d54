//! The zlib stream of a SPDY peer's header blocks, read back (RFC 1950 and 1951): one stream
//! per direction of a connection, primed with the SPDY/3 dictionary, each frame's part ending
//! with a sync flush (an empty stored block), as Go's framer and every zlib-based peer write
//! it. A frame's part is therefore whole deflate blocks: each is decoded when its frame
//! arrives, against the window of everything decoded before (the dictionary first).

use super::dictionary::dictionary;

/// Back-references reach at most this far (RFC 1951, 32 KiB window).
const WINDOW: usize = 32 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    #[error("bad zlib header")]
    Header,
    #[error("a compressed block did not end within its frame")]
    Incomplete,
    #[error("invalid compressed data: {0}")]
    Invalid(&'static str),
}

/// One direction's header stream.
pub struct Inflater {
    /// What was decoded so far (the dictionary first), the last `WINDOW` bytes at least.
    window: Vec<u8>,
    /// The zlib header's bytes still to come (2, then 4 more for a dictionary id).
    header: Vec<u8>,
    header_done: bool,
    /// The final block was read: nothing may follow.
    finished: bool,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater::new()
    }
}

impl Inflater {
    pub fn new() -> Inflater {
        Inflater {
            window: dictionary().to_vec(),
            header: Vec::new(),
            header_done: false,
            finished: false,
        }
    }

    /// The bytes one frame's part of the stream decodes to.
    pub fn inflate(&mut self, mut input: &[u8]) -> Result<Vec<u8>, InflateError> {
        if !self.header_done {
            while self.header.len() < 2 && !input.is_empty() {
                self.header.push(input[0]);
                input = &input[1..];
            }
            if self.header.len() < 2 {
                return Ok(Vec::new());
            }
            let (cmf, flg) = (self.header[0], self.header[1]);
            if cmf & 0x0f != 8 || cmf >> 4 > 7 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
                return Err(InflateError::Header);
            }
            // With a preset dictionary its Adler-32 follows; the dictionary is SPDY's either
            // way (the window holds it from the start).
            let wanted = if flg & 0x20 != 0 { 6 } else { 2 };
            while self.header.len() < wanted && !input.is_empty() {
                self.header.push(input[0]);
                input = &input[1..];
            }
            if self.header.len() < wanted {
                return Ok(Vec::new());
            }
            self.header_done = true;
        }
        let start = self.window.len();
        let mut bits = Bits {
            input,
            pos: 0,
            buf: 0,
            count: 0,
        };
        while !bits.exhausted() {
            if self.finished {
                return Err(InflateError::Invalid("data after the final block"));
            }
            self.finished = bits.take(1)? == 1;
            match bits.take(2)? {
                0 => self.stored(&mut bits)?,
                1 => self.codes(&mut bits, &FIXED.0, &FIXED.1)?,
                2 => {
                    let (lit, dist) = dynamic_tables(&mut bits)?;
                    self.codes(&mut bits, &lit, &dist)?;
                }
                _ => return Err(InflateError::Invalid("block type 3")),
            }
        }
        let out = self.window[start..].to_vec();
        if self.window.len() > 4 * WINDOW {
            self.window.drain(..self.window.len() - WINDOW);
        }
        Ok(out)
    }

    fn stored(&mut self, bits: &mut Bits<'_>) -> Result<(), InflateError> {
        bits.align();
        let len = bits.take(16)? as usize;
        let nlen = bits.take(16)? as usize;
        if len != !nlen & 0xffff {
            return Err(InflateError::Invalid("stored block length"));
        }
        let data = bits.bytes(len)?;
        self.window.extend_from_slice(data);
        Ok(())
    }

    fn codes(
        &mut self,
        bits: &mut Bits<'_>,
        lit: &Huffman,
        dist: &Huffman,
    ) -> Result<(), InflateError> {
        loop {
            let symbol = lit.decode(bits)? as usize;
            match symbol {
                0..=255 => self.window.push(symbol as u8),
                256 => return Ok(()),
                _ => {
                    let i = symbol - 257;
                    if i >= LENGTH_BASE.len() {
                        return Err(InflateError::Invalid("length symbol"));
                    }
                    let len = LENGTH_BASE[i] as usize + bits.take(LENGTH_EXTRA[i])? as usize;
                    let d = dist.decode(bits)? as usize;
                    if d >= DIST_BASE.len() {
                        return Err(InflateError::Invalid("distance symbol"));
                    }
                    let back = DIST_BASE[d] as usize + bits.take(DIST_EXTRA[d])? as usize;
                    if back > self.window.len() {
                        return Err(InflateError::Invalid("distance too far back"));
                    }
                    let from = self.window.len() - back;
                    // Overlapping copies repeat what they have just written.
                    for k in 0..len {
                        let b = self.window[from + k];
                        self.window.push(b);
                    }
                }
            }
        }
    }
}

/// A little-endian bit reader over one frame's bytes.
struct Bits<'a> {
    input: &'a [u8],
    pos: usize,
    buf: u64,
    count: u32,
}

impl Bits<'_> {
    /// No whole byte is left (the bits of a partly read last byte are a block's padding).
    fn exhausted(&self) -> bool {
        self.pos >= self.input.len() && self.count < 8
    }

    fn take(&mut self, n: u8) -> Result<u32, InflateError> {
        let n = u32::from(n);
        while self.count < n {
            let Some(&b) = self.input.get(self.pos) else {
                return Err(InflateError::Incomplete);
            };
            self.pos += 1;
            self.buf |= u64::from(b) << self.count;
            self.count += 8;
        }
        let v = (self.buf & ((1u64 << n) - 1)) as u32;
        self.buf >>= n;
        self.count -= n;
        Ok(v)
    }

    /// Drop the bits left of the current byte.
    fn align(&mut self) {
        let drop = self.count % 8;
        self.buf >>= drop;
        self.count -= drop;
    }

    /// `n` whole bytes (after `align`).
    fn bytes(&mut self, n: usize) -> Result<&[u8], InflateError> {
        // Whole bytes already in the bit buffer go back to the input first.
        let buffered = (self.count / 8) as usize;
        self.pos -= buffered;
        self.buf = 0;
        self.count = 0;
        let end = self.pos.checked_add(n).ok_or(InflateError::Incomplete)?;
        let data = self
            .input
            .get(self.pos..end)
            .ok_or(InflateError::Incomplete)?;
        self.pos = end;
        Ok(data)
    }
}

/// A canonical Huffman code: how many codes of each length, and the symbols in code order.
struct Huffman {
    count: [u16; 16],
    symbol: Vec<u16>,
}

impl Huffman {
    fn new(lengths: &[u8]) -> Result<Huffman, InflateError> {
        let mut count = [0u16; 16];
        for &l in lengths {
            count[l as usize] += 1;
        }
        // An over-subscribed code cannot be decoded; an incomplete one is allowed (a single
        // distance code, say), as zlib allows it.
        let mut left: i32 = 1;
        for c in count.iter().skip(1) {
            left <<= 1;
            left -= i32::from(*c);
            if left < 0 {
                return Err(InflateError::Invalid("over-subscribed code"));
            }
        }
        let mut offsets = [0u16; 16];
        for len in 1..15 {
            offsets[len + 1] = offsets[len] + count[len];
        }
        let mut symbol = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                symbol[offsets[l as usize] as usize] = s as u16;
                offsets[l as usize] += 1;
            }
        }
        count[0] = 0;
        Ok(Huffman { count, symbol })
    }

    fn decode(&self, bits: &mut Bits<'_>) -> Result<u16, InflateError> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16 {
            code |= bits.take(1)? as i32;
            let count = i32::from(self.count[len]);
            if code - count < first {
                return Ok(self.symbol[(index + (code - first)) as usize]);
            }
            index += count;
            first += count;
            first <<= 1;
            code <<= 1;
        }
        Err(InflateError::Invalid("no such code"))
    }
}

const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// The fixed codes of block type 1.
static FIXED: std::sync::LazyLock<(Huffman, Huffman)> = std::sync::LazyLock::new(|| {
    let mut lit = [0u8; 288];
    for (s, l) in lit.iter_mut().enumerate() {
        *l = match s {
            0..=143 => 8,
            144..=255 => 9,
            256..=279 => 7,
            _ => 8,
        };
    }
    let lit = Huffman::new(&lit).unwrap_or_else(|_| unreachable!("the fixed code is complete"));
    let dist = Huffman::new(&[5u8; 30]).unwrap_or_else(|_| unreachable!("the fixed code"));
    (lit, dist)
});

/// The order code-length code lengths come in (RFC 1951, 3.2.7).
const CODE_LENGTH_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// A dynamic block's literal/length and distance codes.
fn dynamic_tables(bits: &mut Bits<'_>) -> Result<(Huffman, Huffman), InflateError> {
    let nlen = bits.take(5)? as usize + 257;
    let ndist = bits.take(5)? as usize + 1;
    let ncode = bits.take(4)? as usize + 4;
    if nlen > 286 || ndist > 30 {
        return Err(InflateError::Invalid("too many length or distance codes"));
    }
    let mut code_lengths = [0u8; 19];
    for &i in CODE_LENGTH_ORDER.iter().take(ncode) {
        code_lengths[i] = bits.take(3)? as u8;
    }
    let lencode = Huffman::new(&code_lengths)?;
    let mut lengths = vec![0u8; nlen + ndist];
    let mut i = 0;
    while i < nlen + ndist {
        let symbol = lencode.decode(bits)?;
        let (value, repeat) = match symbol {
            0..=15 => (symbol as u8, 1),
            16 => {
                let Some(&prev) = i.checked_sub(1).and_then(|p| lengths.get(p)) else {
                    return Err(InflateError::Invalid("repeat with no previous length"));
                };
                (prev, 3 + bits.take(2)? as usize)
            }
            17 => (0, 3 + bits.take(3)? as usize),
            _ => (0, 11 + bits.take(7)? as usize),
        };
        if i + repeat > lengths.len() {
            return Err(InflateError::Invalid("too many lengths"));
        }
        lengths[i..i + repeat].fill(value);
        i += repeat;
    }
    if lengths[256] == 0 {
        return Err(InflateError::Invalid("no end-of-block code"));
    }
    Ok((
        Huffman::new(&lengths[..nlen])?,
        Huffman::new(&lengths[nlen..])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::hex;
    use super::*;

    fn block(headers: &[(&str, &str)]) -> Vec<u8> {
        let mut b = (headers.len() as u32).to_be_bytes().to_vec();
        for (k, v) in headers {
            b.extend_from_slice(&(k.len() as u32).to_be_bytes());
            b.extend_from_slice(k.as_bytes());
            b.extend_from_slice(&(v.len() as u32).to_be_bytes());
            b.extend_from_slice(v.as_bytes());
        }
        b
    }

    /// Three frames of one stream as zlib writes it (level 9, the SPDY/3 dictionary, a sync
    /// flush after each): two port-forward stream headers that refer back into the dictionary
    /// and the first frame, then a long one with a dynamic block.
    #[test]
    fn a_peers_header_stream_frame_by_frame() {
        let mut inf = Inflater::new();
        let f1 = hex(
            "78f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45e01c6061606100a4398b20d19809\
             4ade8c0600000000ffff",
        );
        assert_eq!(
            inf.inflate(&f1).unwrap(),
            block(&[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", "0")
            ])
        );
        let f2 = hex("826a4657856a18a85c4ac4d40b000000ffff");
        assert_eq!(
            inf.inflate(&f2).unwrap(),
            block(&[("port", "8080"), ("streamtype", "data"), ("requestid", "0")])
        );
        let f3 = hex("02654b5022ae009679a0bcc4b2213169148ec251380a870644699472218a6d00000000ffff");
        let long = "ab".repeat(600);
        assert_eq!(
            inf.inflate(&f3).unwrap(),
            block(&[("x-long", &long), ("accept", "text/plain")])
        );
    }

    #[test]
    fn stored_blocks_without_a_dictionary_id() {
        let mut inf = Inflater::new();
        let mut s = vec![0x78, 0x01, 0x00, 3, 0, !3, 0xff];
        s.extend_from_slice(b"abc");
        assert_eq!(inf.inflate(&s).unwrap(), b"abc");
        assert_eq!(inf.inflate(&[0, 1, 0, 0xfe, 0xff, b'd']).unwrap(), b"d");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(
            Inflater::new().inflate(&[0x78, 0x02]),
            Err(InflateError::Header)
        );
        // A dynamic block cut short.
        let f1 = hex("78f9e3c6a7c202253a703a2b294a");
        assert!(Inflater::new().inflate(&f1).is_err());
        // A reference before the dictionary's start: a fixed block, length 3, distance 24577+.
        let mut inf = Inflater::new();
        assert!(
            inf.inflate(&[0x78, 0x01, 0x03, 0x02, 0xff, 0xff, 0xff, 0xff])
                .is_err()
        );
        for junk in [&[0x78u8, 0x01, 0xff, 0xff, 0xff][..], &[0x78, 0x01, 0x06]] {
            assert!(Inflater::new().inflate(junk).is_err());
        }
    }
}
