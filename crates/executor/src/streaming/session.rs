//! What exec and attach sessions share over an upgraded WebSocket connection: the subprotocols,
//! the remote-command channels (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize; each
//! message's first byte is its channel, or its digit in the base64 protocols; v5 adds the
//! client's `[255, channel]` close signal), the one writer of the client's frames, and the
//! session's end: the status on channel 3 once all output is delivered, then a normal close.

use base64::Engine as _;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::status::Format;
use super::ws::{self, Message};

/// The remote-command channels.
pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5's close signal: `[CLOSE, channel]`.
pub const CLOSE: u8 = 255;

/// Frames waiting for the connection; a slow client holds the output back.
pub const OUT_QUEUE: usize = 16;
/// How long the client may take to close the connection after the status: it reads the output
/// still on the way first (the limit upstream's stream translator gives it).
const FINISH_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A subprotocol the session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `v5.channel.k8s.io`: v4 and the close signal (kube-apiserver's, for kubectl >= 1.30).
    V5,
    /// `v4.channel.k8s.io`: the status as JSON.
    V4,
    /// `v4.base64.channel.k8s.io`.
    V4Base64,
    /// `channel.k8s.io`, and a client that named no subprotocol.
    V1,
    /// `base64.channel.k8s.io`.
    V1Base64,
    /// A SPDY client's session, bridged onto the channels (`spdy_exec`): binary, stdin closed
    /// by v5's close signal, the status in the negotiated SPDY protocol's format.
    Spdy(Format),
}

impl Protocol {
    /// The protocols kubelet's WebSocket server offers, and v5, which the API server's stream
    /// translator adds in front of it.
    pub const NAMES: [(&'static str, Protocol); 5] = [
        ("v5.channel.k8s.io", Protocol::V5),
        ("v4.channel.k8s.io", Protocol::V4),
        ("v4.base64.channel.k8s.io", Protocol::V4Base64),
        ("channel.k8s.io", Protocol::V1),
        ("base64.channel.k8s.io", Protocol::V1Base64),
    ];

    fn base64(self) -> bool {
        matches!(self, Protocol::V4Base64 | Protocol::V1Base64)
    }

    pub fn format(self) -> Format {
        match self {
            Protocol::V5 => Format::Translator,
            Protocol::V4 | Protocol::V4Base64 => Format::Kubelet,
            Protocol::V1 | Protocol::V1Base64 => Format::Text,
            Protocol::Spdy(format) => format,
        }
    }

    /// The client can close its stdin (v5's `[255, 0]`; a SPDY stream's end).
    pub fn closes_stdin(self) -> bool {
        matches!(self, Protocol::V5 | Protocol::Spdy(_))
    }
}

/// Frames to the client, in order, through the connection's one writer.
#[derive(Clone)]
pub struct Out {
    tx: mpsc::Sender<Vec<u8>>,
    base64: bool,
}

impl Out {
    /// `data` on `channel`; false once the connection is gone.
    pub async fn data(&self, channel: u8, data: &[u8]) -> bool {
        let frame = if self.base64 {
            let text = base64::engine::general_purpose::STANDARD.encode(data);
            ws::frame(ws::OP_TEXT, &[&[b'0' + channel], text.as_bytes()])
        } else {
            ws::frame(ws::OP_BINARY, &[&[channel], data])
        };
        self.tx.send(frame).await.is_ok()
    }

    pub async fn frame(&self, frame: Vec<u8>) {
        let _ = self.tx.send(frame).await;
    }
}

/// Start a connection's one writer: what is sent through the `Out` (and its clones) goes out
/// in order, framed as `protocol` frames its messages, until the last `Out` is dropped.
pub fn writer<W>(w: W, protocol: Protocol) -> (Out, JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let writer = tokio::spawn(write_frames(w, rx));
    let out = Out {
        tx,
        base64: protocol.base64(),
    };
    (out, writer)
}

/// Writes the frames until the channel closes or a close frame is written (nothing may follow
/// one).
async fn write_frames<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(frame) = rx.recv().await {
        let close = frame.first() == Some(&(0x80 | ws::OP_CLOSE));
        if w.write_all(&frame).await.is_err() {
            return;
        }
        if (close || rx.is_empty()) && w.flush().await.is_err() {
            return;
        }
        if close {
            return;
        }
    }
    let _ = w.flush().await;
}

/// What the client sent, once pings and closes are answered.
#[derive(Debug)]
pub enum Incoming {
    /// A message on a channel (decoded from base64 where the protocol encodes it).
    Data(u8, Vec<u8>),
    /// Nothing the session acts on (a pong, a malformed message).
    Nothing,
    /// The client went away (a close frame is answered).
    Gone,
}

/// One session's connection.
pub struct Conn<S> {
    pub reader: ws::Reader<ReadHalf<S>>,
    pub out: Out,
    writer: JoinHandle<()>,
}

impl<S> Conn<S>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    /// Start serving the connection and tell the client its streams are open, as kubelet does:
    /// an empty message on the lowest channel it writes.
    pub async fn open(io: S, protocol: Protocol, stdout: bool, stderr: bool) -> Conn<S> {
        let (rd, wr) = tokio::io::split(io);
        let (out, writer) = writer(wr, protocol);
        let first = if stdout {
            STDOUT
        } else if stderr {
            STDERR
        } else {
            ERROR
        };
        out.data(first, &[]).await;
        Conn {
            reader: ws::Reader::new(rd),
            out,
            writer,
        }
    }

    /// End the session: `status` on the error channel, a normal close, then the client's close
    /// (it reads the output still on the way first).
    pub async fn finish(mut self, status: Option<Vec<u8>>, shutdown: &mut watch::Receiver<bool>) {
        if let Some(status) = status {
            self.out.data(ERROR, &status).await;
        }
        self.out.frame(ws::close_frame(ws::CLOSE_NORMAL)).await;
        // Closing the socket with the client's frames unread would reset it, and the output
        // it has not read yet with it: wait for its close (unless the node is stopping).
        let stopping = *shutdown.borrow();
        let reader = &mut self.reader;
        let _ = tokio::time::timeout(FINISH_TIMEOUT, async {
            if stopping {
                return;
            }
            loop {
                tokio::select! {
                    m = reader.next() => match m {
                        Ok(Some(Message::Close(_)) | None) | Err(_) => return,
                        Ok(Some(_)) => {}
                    },
                    changed = shutdown.changed() => {
                        if changed.is_err() || *shutdown.borrow() {
                            return;
                        }
                    }
                }
            }
        })
        .await;
        self.close().await;
    }

    /// Let the writer deliver what is queued, then drop the connection.
    pub async fn close(self) {
        drop(self.out);
        let _ = self.writer.await;
    }
}

/// Act on what the client sent.
pub async fn incoming(
    protocol: Protocol,
    m: Result<Option<Message>, ws::WsError>,
    out: &Out,
) -> Incoming {
    match m {
        Ok(Some(Message::Data(data))) => decode(protocol, data),
        Ok(Some(Message::Ping(payload))) => {
            out.frame(ws::frame(ws::OP_PONG, &[&payload])).await;
            Incoming::Nothing
        }
        Ok(Some(Message::Pong)) => Incoming::Nothing,
        Ok(Some(Message::Close(_))) => {
            out.frame(ws::close_frame(ws::CLOSE_NORMAL)).await;
            Incoming::Gone
        }
        Ok(None) => Incoming::Gone,
        Err(e) => {
            tracing::debug!(error = %e, "remote-command stream");
            if let Some(code) = e.close_code() {
                out.frame(ws::close_frame(code)).await;
            }
            Incoming::Gone
        }
    }
}

/// A data message's channel and payload.
fn decode(protocol: Protocol, data: Vec<u8>) -> Incoming {
    let Some((&first, rest)) = data.split_first() else {
        return Incoming::Nothing;
    };
    if protocol.base64() {
        match base64::engine::general_purpose::STANDARD.decode(rest) {
            Ok(p) => Incoming::Data(first.wrapping_sub(b'0'), p),
            Err(e) => {
                tracing::debug!(error = %e, "remote-command stream: a message that is not base64");
                Incoming::Nothing
            }
        }
    } else {
        Incoming::Data(first, rest.to_vec())
    }
}
