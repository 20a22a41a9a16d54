//! exec and attach over SPDY (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version`
//! `v4.channel.k8s.io` down to `channel.k8s.io`): what kubectl before 1.30 and client-go's
//! `SPDYExecutor` speak. The client opens one stream per part, its `streamType` header naming
//! it (`error`, `stdin`, `stdout`, `stderr`, `resize`); once all the request asked for are
//! there (kubelet waits 30 s for them), the session runs as a WebSocket client's would: the
//! streams are bridged onto the channels of the same session code, in-process, so exec and
//! attach behave the same over both. The end of the stdin stream closes the command's stdin;
//! the status goes to the error stream in the negotiated protocol's format, then every stream
//! the node writes is closed.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::registry::ExecTarget;
use super::session::{CLOSE, ERROR, Protocol, RESIZE, STDERR, STDIN, STDOUT};
use super::spdy::conn::{Frames, Source, write_out};
use super::spdy::{self, Decoder, Encoder, Frame};
use super::status::Format;
use super::ws::{self, Message};
use super::{Kind, exec, remote_command};

/// The SPDY remote-command protocols kubelet serves, in its order, with their status format
/// and whether a TTY session has a resize stream.
pub const PROTOCOLS: [(&str, Format, bool); 4] = [
    ("v4.channel.k8s.io", Format::Kubelet, true),
    ("v3.channel.k8s.io", Format::Text, true),
    ("v2.channel.k8s.io", Format::Text, false),
    ("channel.k8s.io", Format::Text, false),
];
/// How long the client may take to open the streams (kubelet's `streamCreationTimeout`).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
const OUT_QUEUE: usize = 64;
/// The bridge's in-process pipe.
const PIPE: usize = 64 * 1024;

/// The streams of a session, by type.
#[derive(Default)]
struct Streams {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

impl Streams {
    fn complete(&self, o: &exec::Options, resize: bool) -> bool {
        self.error.is_some()
            && (!o.stdin || self.stdin.is_some())
            && (!o.stdout || self.stdout.is_some())
            && (!o.stderr || self.stderr.is_some())
            && (!(o.tty && resize) || self.resize.is_some())
    }
}

/// Serve one SPDY exec or attach session on `io`.
#[allow(clippy::too_many_arguments)]
pub async fn run<S>(
    io: S,
    kind: Kind,
    format: Format,
    resize: bool,
    options: exec::Options,
    target: ExecTarget,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let writer = tokio::spawn(write_out(wr, rx, false));
    let frames = Frames(tx);
    let mut source = Source::Raw(rd);
    let mut decoder = Decoder::new();
    let mut encoder = Encoder::new();
    let mut streams = Streams::default();
    // Client frames that came before the session started, replayed into it.
    let mut early: Vec<Frame> = Vec::new();
    let mut buf = Vec::new();
    let deadline = Instant::now() + STREAM_CREATION_TIMEOUT;
    let mut ok = true;
    while ok && !streams.complete(&options, resize) {
        match next_frame(&mut decoder, &mut source, &mut buf, deadline).await {
            Some(Frame::SynStream {
                stream, headers, ..
            }) => {
                frames.send(encoder.syn_reply(stream, false, &[])).await;
                let slot = match spdy::header(&headers, "streamtype").unwrap_or("") {
                    "error" => &mut streams.error,
                    "stdin" => &mut streams.stdin,
                    "stdout" => &mut streams.stdout,
                    "stderr" => &mut streams.stderr,
                    "resize" => &mut streams.resize,
                    other => {
                        tracing::debug!(stream_type = other, "exec: unexpected stream type");
                        continue;
                    }
                };
                *slot = Some(stream);
            }
            Some(Frame::Ping(id)) => {
                frames.send(spdy::ping(id)).await;
            }
            Some(Frame::GoAway { .. }) | None => ok = false,
            Some(f) => early.push(f),
        }
    }
    if !ok {
        tracing::debug!("exec: the client did not open its streams");
        drop(frames);
        let _ = writer.await;
        return;
    }

    // The session, on one end of an in-process pipe; its channels on the other.
    let (inner, outer) = tokio::io::duplex(PIPE);
    let protocol = Protocol::Spdy(format);
    let session = tokio::spawn(remote_command(
        inner, kind, protocol, options, target, shutdown,
    ));
    let (outer_rd, mut to_session) = tokio::io::split(outer);
    let mut from_session = ws::Reader::new(outer_rd);
    let by_channel: HashMap<u8, u32> = [
        (STDOUT, streams.stdout),
        (STDERR, streams.stderr),
        (ERROR, streams.error),
    ]
    .into_iter()
    .filter_map(|(c, s)| Some((c, s?)))
    .collect();
    for f in early {
        if !to_the_session(f, &streams, &frames, &mut to_session).await {
            break;
        }
    }
    loop {
        tokio::select! {
            m = from_session.next() => match m {
                Ok(Some(Message::Data(data))) => {
                    if let Some((channel, payload)) = data.split_first()
                        && !payload.is_empty()
                        && let Some(&stream) = by_channel.get(channel)
                    {
                        for chunk in payload.chunks(spdy::MAX_DATA) {
                            frames.send(spdy::data(stream, false, chunk)).await;
                        }
                    }
                }
                Ok(Some(Message::Close(_))) => {
                    // Answer the session's close, then end every stream the node writes.
                    let _ = to_session.write_all(&ws::close_frame(ws::CLOSE_NORMAL)).await;
                    for stream in by_channel.values() {
                        frames.send(spdy::data(*stream, true, &[])).await;
                    }
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            },
            n = source.next(&mut buf) => match n {
                Some(n) => {
                    decoder.extend(&buf[..n]);
                    let mut alive = true;
                    loop {
                        match decoder.next_frame() {
                            Ok(Some(f)) => {
                                if !to_the_session(f, &streams, &frames, &mut to_session).await {
                                    alive = false;
                                    break;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                tracing::debug!(error = %e, "exec: SPDY");
                                alive = false;
                                break;
                            }
                        }
                    }
                    if !alive {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    // The session ends (its command killed if it still runs) once its client is gone.
    drop(to_session);
    drop(from_session);
    let _ = session.await;
    drop(frames);
    drop(source);
    let _ = writer.await;
}

/// The next frame before `deadline`; `None` when the client is gone, broke the protocol or
/// took too long.
async fn next_frame<R: AsyncRead + Unpin>(
    decoder: &mut Decoder,
    source: &mut Source<R>,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Option<Frame> {
    loop {
        match decoder.next_frame() {
            Ok(Some(f)) => return Some(f),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "exec: SPDY");
                return None;
            }
        }
        let n = tokio::time::timeout_at(deadline, source.next(buf))
            .await
            .ok()??;
        decoder.extend(&buf[..n]);
    }
}

/// Pass a client frame on to the session as a channel message; false once the session or
/// the client is done.
async fn to_the_session<W: AsyncWrite + Unpin>(
    f: Frame,
    streams: &Streams,
    frames: &Frames,
    to_session: &mut W,
) -> bool {
    let message = match f {
        Frame::Data { stream, fin, data } if Some(stream) == streams.stdin => {
            let mut m = Vec::new();
            if !data.is_empty() {
                m.extend(ws::frame(ws::OP_BINARY, &[&[STDIN], &data]));
            }
            if fin {
                m.extend(ws::frame(ws::OP_BINARY, &[&[CLOSE, STDIN]]));
            }
            m
        }
        Frame::RstStream { stream, .. } if Some(stream) == streams.stdin => {
            ws::frame(ws::OP_BINARY, &[&[CLOSE, STDIN]])
        }
        // Each resize is one JSON object, as client-go encodes it.
        Frame::Data { stream, data, .. } if Some(stream) == streams.resize && !data.is_empty() => {
            ws::frame(ws::OP_BINARY, &[&[RESIZE], &data])
        }
        Frame::Ping(id) => {
            frames.send(spdy::ping(id)).await;
            return true;
        }
        Frame::GoAway { .. } => return false,
        _ => return true,
    };
    message.is_empty() || to_session.write_all(&message).await.is_ok()
}
