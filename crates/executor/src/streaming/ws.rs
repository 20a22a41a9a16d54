//! The WebSocket protocol (RFC 6455), as much of it as a server of the remote-command streams
//! needs: the opening handshake's accept key, reading the client's (masked, possibly
//! fragmented) frames into messages, and writing unmasked single-frame messages. No extension
//! is ever negotiated, so every frame's reserved bits must be clear.

use base64::Engine as _;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The key every accept value is derived with (RFC 6455, section 1.3).
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A client message larger than this ends the connection (1009): stdin arrives in small
/// chunks, and an unbounded message would let one client take the node's memory.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// Close codes (RFC 6455, section 7.4.1).
pub const CLOSE_NORMAL: u16 = 1000;
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
pub const CLOSE_TOO_BIG: u16 = 1009;

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut input = Vec::with_capacity(key.len() + ACCEPT_GUID.len());
    input.extend_from_slice(key.trim().as_bytes());
    input.extend_from_slice(ACCEPT_GUID);
    // SHA-1 is what the protocol prescribes here; it protects nothing.
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A whole message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text or binary message (the channel protocols tell them apart by their subprotocol,
    /// not by the frame type).
    Data(Vec<u8>),
    Ping(Vec<u8>),
    Pong,
    /// The client's close frame, with its code if it gave one.
    Close(Option<u16>),
}

#[derive(Debug, thiserror::Error)]
pub enum WsError {
    #[error("reading the connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
    #[error("websocket message larger than {MAX_MESSAGE} bytes")]
    TooBig,
}

impl WsError {
    /// The close code that tells the client why the connection ends, if it can still be told.
    pub fn close_code(&self) -> Option<u16> {
        match self {
            WsError::Io(_) => None,
            WsError::Protocol(_) => Some(CLOSE_PROTOCOL_ERROR),
            WsError::TooBig => Some(CLOSE_TOO_BIG),
        }
    }
}

/// One frame as it came off the wire, unmasked.
struct Frame {
    fin: bool,
    opcode: u8,
    payload: Vec<u8>,
}

/// Reads the client's messages. `next` is cancel-safe: what was read is kept in the buffer,
/// so it can be raced against other events in a `select!`.
pub struct Reader<R> {
    io: R,
    buf: BytesMut,
    /// A fragmented message being put together.
    partial: Option<Vec<u8>>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(io: R) -> Reader<R> {
        Reader {
            io,
            buf: BytesMut::with_capacity(8 * 1024),
            partial: None,
        }
    }

    /// The next message; `None` once the client has closed the connection.
    pub async fn next(&mut self) -> Result<Option<Message>, WsError> {
        loop {
            if let Some(m) = self.parse()? {
                return Ok(Some(m));
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                if self.buf.is_empty() && self.partial.is_none() {
                    return Ok(None);
                }
                return Err(WsError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// A whole message from what is buffered, if there is one.
    fn parse(&mut self) -> Result<Option<Message>, WsError> {
        loop {
            let Some(frame) = take_frame(&mut self.buf)? else {
                return Ok(None);
            };
            match frame.opcode {
                OP_CLOSE => {
                    let code = (frame.payload.len() >= 2)
                        .then(|| u16::from_be_bytes([frame.payload[0], frame.payload[1]]));
                    return Ok(Some(Message::Close(code)));
                }
                OP_PING => return Ok(Some(Message::Ping(frame.payload))),
                OP_PONG => return Ok(Some(Message::Pong)),
                OP_TEXT | OP_BINARY => {
                    if self.partial.is_some() {
                        return Err(WsError::Protocol(
                            "a new message began inside a fragmented one",
                        ));
                    }
                    if frame.fin {
                        return Ok(Some(Message::Data(frame.payload)));
                    }
                    self.partial = Some(frame.payload);
                }
                OP_CONTINUATION => {
                    let Some(mut partial) = self.partial.take() else {
                        return Err(WsError::Protocol("a continuation frame began a message"));
                    };
                    if partial.len() + frame.payload.len() > MAX_MESSAGE {
                        return Err(WsError::TooBig);
                    }
                    partial.extend_from_slice(&frame.payload);
                    if frame.fin {
                        return Ok(Some(Message::Data(partial)));
                    }
                    self.partial = Some(partial);
                }
                _ => return Err(WsError::Protocol("unknown opcode")),
            }
        }
    }
}

/// Takes one frame off the front of `buf`, once all of it is there.
fn take_frame(buf: &mut BytesMut) -> Result<Option<Frame>, WsError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err(WsError::Protocol("reserved bits set without an extension"));
    }
    let fin = b0 & 0x80 != 0;
    let opcode = b0 & 0x0F;
    let masked = b1 & 0x80 != 0;
    let (len, mut at) = match b1 & 0x7F {
        126 => {
            if buf.len() < 4 {
                return Ok(None);
            }
            (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4)
        }
        127 => {
            let Some(bytes) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            (u64::from_be_bytes(b), 10)
        }
        n => (u64::from(n), 2),
    };
    if opcode >= OP_CLOSE && (!fin || len > 125) {
        return Err(WsError::Protocol(
            "a control frame was fragmented or too long",
        ));
    }
    let len = usize::try_from(len).map_err(|_| WsError::TooBig)?;
    if len > MAX_MESSAGE {
        return Err(WsError::TooBig);
    }
    let mask = if masked {
        let Some(m) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        at += 4;
        Some([m[0], m[1], m[2], m[3]])
    } else {
        // Clients must mask; an unmasked frame is still read, as nothing depends on it.
        None
    };
    if buf.len() < at + len {
        // Room for the rest of the frame, so that it arrives in few reads.
        buf.reserve(at + len - buf.len());
        return Ok(None);
    }
    buf.advance(at);
    let mut payload = buf.split_to(len).to_vec();
    if let Some(mask) = mask {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Ok(Some(Frame {
        fin,
        opcode,
        payload,
    }))
}

/// One unmasked, unfragmented frame whose payload is `parts` one after the other.
pub fn frame(opcode: u8, parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(len + 10);
    out.push(0x80 | opcode);
    if len < 126 {
        // Fits in the 7 bits.
        out.push(len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// A close frame with `code` and no reason.
pub fn close_frame(code: u16) -> Vec<u8> {
    frame(OP_CLOSE, &[&code.to_be_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's frame: masked with `mask`.
    fn client_frame(fin: bool, opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut f = frame(opcode, &[payload]);
        if !fin {
            f[0] &= 0x7F;
        }
        let header = f.len() - payload.len();
        f[1] |= 0x80;
        let mut out = f[..header].to_vec();
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    #[test]
    fn accept_key_is_the_rfc_example() {
        // RFC 6455, section 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn reads_masked_fragmented_and_control_frames() {
        let mut wire = Vec::new();
        wire.extend(client_frame(
            true,
            OP_BINARY,
            &[0, b'h', b'i'],
            [1, 2, 3, 4],
        ));
        wire.extend(client_frame(false, OP_BINARY, &[0, b'a'], [9, 8, 7, 6]));
        // A ping between the fragments of a message.
        wire.extend(client_frame(true, OP_PING, b"p", [5, 5, 5, 5]));
        wire.extend(client_frame(true, OP_CONTINUATION, b"bc", [0, 1, 0, 1]));
        let long = vec![7u8; 70_000];
        wire.extend(client_frame(true, OP_TEXT, &long, [3, 1, 4, 1]));
        wire.extend(client_frame(
            true,
            OP_CLOSE,
            &1000u16.to_be_bytes(),
            [2, 7, 1, 8],
        ));
        let mut r = Reader::new(&wire[..]);
        assert_eq!(
            r.next().await.unwrap(),
            Some(Message::Data(vec![0, b'h', b'i']))
        );
        assert_eq!(r.next().await.unwrap(), Some(Message::Ping(b"p".to_vec())));
        assert_eq!(
            r.next().await.unwrap(),
            Some(Message::Data(vec![0, b'a', b'b', b'c']))
        );
        assert_eq!(r.next().await.unwrap(), Some(Message::Data(long)));
        assert_eq!(r.next().await.unwrap(), Some(Message::Close(Some(1000))));
        assert_eq!(r.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn rejects_reserved_bits_and_truncation() {
        let mut f = client_frame(true, OP_BINARY, b"x", [1, 1, 1, 1]);
        f[0] |= 0x40;
        let mut r = Reader::new(&f[..]);
        assert!(matches!(r.next().await, Err(WsError::Protocol(_))));
        let f = client_frame(true, OP_BINARY, b"xyz", [1, 1, 1, 1]);
        let mut r = Reader::new(&f[..f.len() - 1]);
        assert!(matches!(r.next().await, Err(WsError::Io(_))));
    }

    #[test]
    fn frame_lengths_use_the_short_forms() {
        assert_eq!(frame(OP_BINARY, &[&[1], &[2, 3]]), vec![0x82, 3, 1, 2, 3]);
        let f = frame(OP_BINARY, &[&[0; 200]]);
        assert_eq!(&f[..4], &[0x82, 126, 0, 200]);
        let f = frame(OP_BINARY, &[&vec![0; 70_000]]);
        assert_eq!(&f[..2], &[0x82, 127]);
        assert_eq!(f.len(), 70_000 + 10);
        assert_eq!(close_frame(1000), vec![0x88, 2, 0x03, 0xE8]);
    }
}
