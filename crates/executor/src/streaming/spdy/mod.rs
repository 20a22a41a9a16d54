//! SPDY/3.1 framing, as much as a port-forward server needs (the protocol client-go and kubelet
//! speak through moby/spdystream): frames read off a byte stream (`Decoder`) and written to
//! one (`Encoder`). Header blocks are zlib-compressed, one stream per direction primed with
//! the SPDY/3 dictionary: the peer's are inflated (`inflate`), ours are written as stored
//! blocks (a valid zlib stream any reader takes; header blocks here are a few bytes, and
//! compressing them would save nothing). No flow control is kept: spdystream ignores
//! WINDOW_UPDATE as well.

pub mod conn;
mod dictionary;
mod inflate;

use bytes::{Buf, Bytes, BytesMut};

pub use inflate::InflateError;
use inflate::Inflater;

pub const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;

pub const FLAG_FIN: u8 = 0x01;

/// RST_STREAM status codes.
pub const RST_PROTOCOL_ERROR: u32 = 1;
pub const RST_CANCEL: u32 = 5;

/// A frame's payload is at most 2^24 - 1 bytes: its length field's width.
const MAX_PAYLOAD: usize = (1 << 24) - 1;
/// What one data frame of ours carries at most.
pub const MAX_DATA: usize = 32 * 1024;

/// Header names (lower-case, as SPDY/3 requires) and values; a name with several values
/// carries them NUL-separated, as here.
pub type Headers = Vec<(String, String)>;

/// The value of header `name` (the first, for one with several).
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.split('\0').next().unwrap_or(""))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Ping(u32),
    GoAway {
        last_stream: u32,
        status: u32,
    },
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    /// SETTINGS, WINDOW_UPDATE, HEADERS and control types SPDY/3.1 does not define: nothing a
    /// port-forward acts on (a HEADERS frame's block still goes through the header stream).
    Other(u16),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpdyError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("malformed {0} frame")]
    Malformed(&'static str),
    #[error("header block: {0}")]
    HeaderBlock(#[from] InflateError),
    #[error("header block: {0}")]
    Headers(&'static str),
}

/// Reads frames from the bytes of a connection as they arrive.
#[derive(Default)]
pub struct Decoder {
    buf: BytesMut,
    headers: Inflater,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    pub fn extend(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole frame buffered, if there is one.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, SpdyError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([0, self.buf[5], self.buf[6], self.buf[7]]) as usize;
        if self.buf.len() < 8 + len {
            return Ok(None);
        }
        let word = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        let flags = self.buf[4];
        self.buf.advance(8);
        let mut payload = self.buf.split_to(len).freeze();
        let fin = flags & FLAG_FIN != 0;
        if word & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream: word,
                fin,
                data: payload,
            }));
        }
        let version = ((word >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(SpdyError::Version(version));
        }
        let kind = (word & 0xffff) as u16;
        let frame = match kind {
            SYN_STREAM => {
                if payload.len() < 10 {
                    return Err(SpdyError::Malformed("SYN_STREAM"));
                }
                let stream = payload.get_u32() & 0x7fff_ffff;
                // The associated stream, priority and slot: nothing here depends on them.
                payload.advance(6);
                let headers = self.header_block(&payload)?;
                Frame::SynStream {
                    stream,
                    fin,
                    headers,
                }
            }
            SYN_REPLY => {
                if payload.len() < 4 {
                    return Err(SpdyError::Malformed("SYN_REPLY"));
                }
                let stream = payload.get_u32() & 0x7fff_ffff;
                let headers = self.header_block(&payload)?;
                Frame::SynReply {
                    stream,
                    fin,
                    headers,
                }
            }
            RST_STREAM => {
                if payload.len() != 8 {
                    return Err(SpdyError::Malformed("RST_STREAM"));
                }
                Frame::RstStream {
                    stream: payload.get_u32() & 0x7fff_ffff,
                    status: payload.get_u32(),
                }
            }
            PING => {
                if payload.len() != 4 {
                    return Err(SpdyError::Malformed("PING"));
                }
                Frame::Ping(payload.get_u32())
            }
            GOAWAY => {
                if payload.len() < 4 {
                    return Err(SpdyError::Malformed("GOAWAY"));
                }
                let last_stream = payload.get_u32() & 0x7fff_ffff;
                let status = if payload.len() >= 4 {
                    payload.get_u32()
                } else {
                    0
                };
                Frame::GoAway {
                    last_stream,
                    status,
                }
            }
            // HEADERS: its block moves the peer's header stream on.
            8 => {
                if payload.len() < 4 {
                    return Err(SpdyError::Malformed("HEADERS"));
                }
                payload.advance(4);
                self.header_block(&payload)?;
                Frame::Other(kind)
            }
            other => Frame::Other(other),
        };
        Ok(Some(frame))
    }

    fn header_block(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let raw = self.headers.inflate(compressed)?;
        parse_header_block(&raw)
    }
}

fn parse_header_block(mut raw: &[u8]) -> Result<Headers, SpdyError> {
    fn take<'a>(raw: &mut &'a [u8], n: usize) -> Result<&'a [u8], SpdyError> {
        if raw.len() < n {
            return Err(SpdyError::Headers("truncated"));
        }
        let (head, rest) = raw.split_at(n);
        *raw = rest;
        Ok(head)
    }
    fn len(raw: &mut &[u8]) -> Result<usize, SpdyError> {
        let b = take(raw, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    let count = len(&mut raw)?;
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let n = len(&mut raw)?;
        let name = take(&mut raw, n)?;
        let n = len(&mut raw)?;
        let value = take(&mut raw, n)?;
        let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
            return Err(SpdyError::Headers("not UTF-8"));
        };
        headers.push((name.to_ascii_lowercase(), value.to_string()));
    }
    Ok(headers)
}

/// Writes frames; header blocks continue this direction's one zlib stream.
#[derive(Default)]
pub struct Encoder {
    zlib_started: bool,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    pub fn syn_reply(&mut self, stream: u32, fin: bool, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = stream.to_be_bytes().to_vec();
        self.header_block(headers, &mut payload);
        control(SYN_REPLY, fin_flag(fin), &payload)
    }

    /// A client's frame (the tests speak as kubectl does).
    #[cfg(test)]
    pub fn syn_stream(&mut self, stream: u32, fin: bool, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = stream.to_be_bytes().to_vec();
        payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        self.header_block(headers, &mut payload);
        control(SYN_STREAM, fin_flag(fin), &payload)
    }

    /// The header block, as stored deflate blocks and a sync flush, so each frame's part can
    /// be read on its own.
    fn header_block(&mut self, headers: &[(&str, &str)], out: &mut Vec<u8>) {
        let mut raw = (headers.len() as u32).to_be_bytes().to_vec();
        for (name, value) in headers {
            raw.extend_from_slice(&(name.len() as u32).to_be_bytes());
            raw.extend_from_slice(name.to_ascii_lowercase().as_bytes());
            raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
            raw.extend_from_slice(value.as_bytes());
        }
        if !self.zlib_started {
            // Deflate, 32 KiB window, no preset dictionary id (none of ours refers to it).
            out.extend_from_slice(&[0x78, 0x01]);
            self.zlib_started = true;
        }
        for chunk in raw.chunks(0xffff) {
            let n = chunk.len() as u16;
            out.push(0x00);
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&(!n).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        // The sync flush's empty stored block: Go's inflater hands a block's bytes on only
        // once it has read the next block's header.
        out.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
    }
}

fn fin_flag(fin: bool) -> u8 {
    if fin { FLAG_FIN } else { 0 }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(payload.len().min(MAX_PAYLOAD) as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

/// A data frame (`data` at most `MAX_DATA` bytes: callers cut larger writes).
pub fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.push(fin_flag(fin));
    f.extend_from_slice(&(data.len().min(MAX_PAYLOAD) as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

pub fn rst_stream(stream: u32, status: u32) -> Vec<u8> {
    let mut p = (stream & 0x7fff_ffff).to_be_bytes().to_vec();
    p.extend_from_slice(&status.to_be_bytes());
    control(RST_STREAM, 0, &p)
}

pub fn goaway(last_stream: u32, status: u32) -> Vec<u8> {
    let mut p = (last_stream & 0x7fff_ffff).to_be_bytes().to_vec();
    p.extend_from_slice(&status.to_be_bytes());
    control(GOAWAY, 0, &p)
}

/// Bytes written as hex digits (the tests' captured frames).
#[cfg(test)]
fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubectl's first SYN_STREAM of a forwarded connection, as Go's framer writes it (its
    /// header block compressed against the dictionary).
    fn go_syn_stream() -> Vec<u8> {
        let block = hex(
            "78f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45e01c6061606100a4398b20d19809\
             4ade8c0600000000ffff",
        );
        let mut frame = vec![0x80, 0x03, 0x00, 0x01, 0x00, 0, 0, 0];
        let len = (10 + block.len()) as u32;
        frame[5..8].copy_from_slice(&len.to_be_bytes()[1..]);
        frame.extend_from_slice(&1u32.to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        frame.extend_from_slice(&block);
        frame
    }

    /// That frame, arriving in pieces.
    #[test]
    fn a_syn_stream_compressed_as_go_writes_it() {
        let frame = go_syn_stream();
        let mut d = Decoder::new();
        let (first, rest) = frame.split_at(11);
        d.extend(first);
        assert_eq!(d.next_frame().unwrap(), None);
        d.extend(rest);
        let Some(Frame::SynStream {
            stream, headers, ..
        }) = d.next_frame().unwrap()
        else {
            panic!("not a SYN_STREAM");
        };
        assert_eq!(stream, 1);
        assert_eq!(header(&headers, "streamtype"), Some("error"));
        assert_eq!(header(&headers, "port"), Some("8080"));
        assert_eq!(header(&headers, "requestID"), Some("0"));
        assert_eq!(d.next_frame().unwrap(), None);
    }

    #[test]
    fn frames_round_trip() {
        let mut enc = Encoder::new();
        let mut bytes = enc.syn_stream(3, false, &[("streamType", "data"), ("port", "80")]);
        bytes.extend(enc.syn_reply(3, true, &[]));
        bytes.extend(data(3, true, b"hello"));
        bytes.extend(ping(7));
        bytes.extend(rst_stream(5, RST_CANCEL));
        bytes.extend(goaway(9, 0));
        let mut d = Decoder::new();
        d.extend(&bytes);
        let mut frames = Vec::new();
        while let Some(f) = d.next_frame().unwrap() {
            frames.push(f);
        }
        assert_eq!(
            frames,
            [
                Frame::SynStream {
                    stream: 3,
                    fin: false,
                    headers: vec![
                        ("streamtype".into(), "data".into()),
                        ("port".into(), "80".into())
                    ],
                },
                Frame::SynReply {
                    stream: 3,
                    fin: true,
                    headers: vec![],
                },
                Frame::Data {
                    stream: 3,
                    fin: true,
                    data: Bytes::from_static(b"hello"),
                },
                Frame::Ping(7),
                Frame::RstStream {
                    stream: 5,
                    status: RST_CANCEL,
                },
                Frame::GoAway {
                    last_stream: 9,
                    status: 0,
                },
            ]
        );
    }

    /// Whatever a client sends, the decoder answers with frames or an error, never a panic:
    /// random bytes, and random corruptions of a valid stream (header blocks included).
    #[test]
    fn random_input_never_panics() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid = go_syn_stream();
        let mut d = Decoder::new();
        d.extend(&valid);
        assert!(matches!(d.next_frame(), Ok(Some(Frame::SynStream { .. }))));
        for round in 0..20_000 {
            let bytes: Vec<u8> = if round % 2 == 0 {
                (0..next() % 200).map(|_| next() as u8).collect()
            } else {
                let mut v = valid.clone();
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % v.len();
                    v[i] = next() as u8;
                }
                v
            };
            let mut d = Decoder::new();
            d.extend(&bytes);
            for _ in 0..16 {
                match d.next_frame() {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut d = Decoder::new();
        d.extend(&[0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1]);
        assert_eq!(d.next_frame(), Err(SpdyError::Version(2)));
        let mut d = Decoder::new();
        d.extend(&[0x80, 0x03, 0x00, 0x06, 0, 0, 0, 2, 0, 0]);
        assert_eq!(d.next_frame(), Err(SpdyError::Malformed("PING")));
        // A header block that claims more pairs than it holds.
        let mut d = Decoder::new();
        let mut f = vec![0x80, 0x03, 0x00, 0x02, 0, 0, 0, 0];
        let payload = [0, 0, 0, 1, 0x78, 0x01, 0x00, 4, 0, 0xfb, 0xff, 0, 0, 0, 2];
        f[7] = payload.len() as u8;
        f.extend_from_slice(&payload);
        d.extend(&f);
        assert_eq!(d.next_frame(), Err(SpdyError::Headers("truncated")));
    }
}
