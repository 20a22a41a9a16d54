//! A SPDY connection's plumbing: one writer of everything that goes to the client, in order
//! (frames wrapped in WebSocket binary messages when the connection is a tunnel), and the
//! client's bytes, off the connection or out of its WebSocket messages.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::super::ws::{self, Message};

/// What goes to the client, in order, through the connection's one writer.
pub enum Outgoing {
    /// A SPDY frame (wrapped in a binary message when tunnelled).
    Spdy(Vec<u8>),
    /// A WebSocket control frame of the tunnel (a pong), as it is.
    Raw(Vec<u8>),
}

/// SPDY frames to the client.
#[derive(Clone)]
pub struct Frames(pub mpsc::Sender<Outgoing>);

impl Frames {
    pub async fn send(&self, frame: Vec<u8>) -> bool {
        self.0.send(Outgoing::Spdy(frame)).await.is_ok()
    }
}

/// Writes what is queued until the queue closes, then ends the connection (with a normal
/// close when tunnelled).
pub async fn write_out<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::Receiver<Outgoing>,
    tunneled: bool,
) {
    while let Some(item) = rx.recv().await {
        let bytes = match item {
            Outgoing::Spdy(frame) if tunneled => ws::frame(ws::OP_BINARY, &[&frame]),
            Outgoing::Spdy(bytes) | Outgoing::Raw(bytes) => bytes,
        };
        if w.write_all(&bytes).await.is_err() {
            return;
        }
        if rx.is_empty() && w.flush().await.is_err() {
            return;
        }
    }
    if tunneled {
        let _ = w.write_all(&ws::close_frame(ws::CLOSE_NORMAL)).await;
    }
    let _ = w.flush().await;
    let _ = w.shutdown().await;
}

/// The client's bytes: straight off the connection, or out of WebSocket messages.
pub enum Source<R> {
    Raw(R),
    Tunnel(ws::Reader<R>, mpsc::Sender<Outgoing>),
}

impl<R: AsyncRead + Unpin> Source<R> {
    /// The next bytes; `None` once the client is done.
    pub async fn next(&mut self, buf: &mut Vec<u8>) -> Option<usize> {
        match self {
            Source::Raw(r) => {
                buf.resize(16 * 1024, 0);
                match r.read(buf).await {
                    Ok(0) | Err(_) => None,
                    Ok(n) => Some(n),
                }
            }
            Source::Tunnel(reader, pongs) => loop {
                match reader.next().await {
                    Ok(Some(Message::Data(data))) => {
                        *buf = data;
                        return Some(buf.len());
                    }
                    Ok(Some(Message::Ping(payload))) => {
                        let pong = ws::frame(ws::OP_PONG, &[&payload]);
                        let _ = pongs.send(Outgoing::Raw(pong)).await;
                    }
                    Ok(Some(Message::Pong)) => {}
                    Ok(Some(Message::Close(_)) | None) | Err(_) => return None,
                }
            },
        }
    }
}
