//! One attach session over an upgraded WebSocket connection (`session`: channels, frames, the
//! end): the client joins a running container's own streams, as containerd's CRI attach does
//! (internal/cri/io/container_io.go `Attach`). It gets the output live from the moment it
//! attaches (the log file keeps all of it), stdout on channel 1 and stderr on 2 — with a TTY
//! the terminal's one stream on 1 and no stderr; what it sends on channel 0 is written to the
//! container's stdin when the container has `stdin: true` (and dropped otherwise), and resizes
//! on channel 4 size the container's terminal. Several sessions may be attached at once: all get
//! the output, any may write.
//!
//! The end, as containerd decides it: when the session's stdin ends (the client's v5 close
//! signal for channel 0, or the client leaving), a `stdinOnce` container without a TTY has its
//! stdin closed (the process reads EOF) and the session goes on until the container exits;
//! otherwise the session ends there. When the container's process exits, the session ends once
//! the output is delivered. kubelet's `ServeAttach` then writes a Success status on the error
//! channel (pkg/kubelet/cri/streaming/remotecommand/attach.go), and the connection is closed
//! normally.

use std::sync::PoisonError;

use kbatch_api::podlog::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::registry::ExecTarget;
use super::session::{
    self, CLOSE, Conn, Incoming, OUT_QUEUE, Protocol, RESIZE, STDERR, STDIN, STDOUT,
};
use super::status::{self, End};
use crate::process::Input;
use crate::pty;

/// The streams the request asked for (kubelet's `remotecommand.Options`; the TTY is the
/// container's, not the request's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// How the session's loop ended.
enum Ended {
    /// The container's process exited: the rest of the output, then the status.
    Stopped,
    /// The session's stdin ended and that ends the session: the status.
    StdinDone,
    /// The client went away, or the node is stopping: nothing more to say.
    Gone,
}

/// The session's writer of the container's input: a task, so that a container that does not
/// read never holds up the session.
struct Feed {
    tx: mpsc::Sender<Vec<u8>>,
    task: JoinHandle<()>,
}

/// Attach the client on `io` to `target`'s streams until the session ends.
pub async fn run<S>(
    io: S,
    protocol: Protocol,
    options: Options,
    target: ExecTarget,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    // Refused before the upgrade otherwise.
    let Some(attach) = target.attach else {
        return;
    };
    let tty = attach.pty.is_some();
    let stderr = options.stderr && !tty;
    // Tapped before the client hears its streams are open: what it causes after that is
    // output it gets.
    let (tap, mut output) = mpsc::channel(OUT_QUEUE);
    let mut tapped = options.stdout || stderr;
    if tapped {
        attach
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tap(tap);
    } else {
        drop(tap);
    }
    let mut conn = Conn::open(io, protocol, options.stdout, stderr).await;
    let mut feed = attach.input.clone().filter(|_| options.stdin).map(|input| {
        let (tx, rx) = mpsc::channel(8);
        Feed {
            tx,
            task: tokio::spawn(feed_input(input, rx)),
        }
    });
    // containerd closes a stdinOnce container's stdin when an attached stdin ends, except on a
    // terminal; any other attached stdin's end ends its session.
    let closes_stdin = attach.stdin_once && !tty;
    let mut resize = pty::Resize::default();
    let mut running = target.running.clone();
    let ended = loop {
        tokio::select! {
            piece = output.recv(), if tapped => match piece {
                Some((stream, data)) => {
                    if !deliver(&conn.out, options.stdout, stderr, stream, &data).await {
                        break Ended::Gone;
                    }
                }
                None => tapped = false,
            },
            m = conn.reader.next() => {
                match session::incoming(protocol, m, &conn.out).await {
                    Incoming::Data(STDIN, data) if !data.is_empty() => {
                        if let Some(f) = &feed {
                            // Fails once the container's input is closed: dropped then.
                            let _ = f.tx.send(data).await;
                        }
                    }
                    Incoming::Data(RESIZE, data) => {
                        if let Some(pty) = &attach.pty {
                            resize.feed(&data, pty);
                        }
                    }
                    Incoming::Data(CLOSE, data)
                        if protocol.closes_stdin() && data.first() == Some(&STDIN) =>
                    {
                        if let Some(f) = feed.take() {
                            end_stdin(f, attach.input.clone(), closes_stdin);
                            if !closes_stdin {
                                break Ended::StdinDone;
                            }
                        }
                    }
                    Incoming::Data(..) | Incoming::Nothing => {}
                    Incoming::Gone => break Ended::Gone,
                }
            }
            changed = running.changed() => {
                if changed.is_err() {
                    break Ended::Stopped;
                }
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break Ended::Gone;
                }
            }
        }
    };
    if let Some(f) = feed.take() {
        end_stdin(f, attach.input.clone(), closes_stdin);
    }
    match ended {
        Ended::Stopped => {
            // The run's output pumps finished before it was reported stopped: what is queued
            // is the rest of it.
            while let Ok((stream, data)) = output.try_recv() {
                if !deliver(&conn.out, options.stdout, stderr, stream, &data).await {
                    conn.close().await;
                    return;
                }
            }
            drop(output);
            finish(conn, protocol, &mut shutdown).await;
        }
        Ended::StdinDone => {
            drop(output);
            finish(conn, protocol, &mut shutdown).await;
        }
        Ended::Gone => conn.close().await,
    }
}

/// kubelet's Success status, and the end of the connection.
async fn finish<S>(conn: Conn<S>, protocol: Protocol, shutdown: &mut watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let status = status::message(protocol.format(), &[], &End::Success);
    conn.finish(status, shutdown).await;
}

/// Send a piece of the container's output on its channel, if the session asked for that
/// stream; false once the client is gone.
async fn deliver(
    out: &session::Out,
    stdout: bool,
    stderr: bool,
    stream: Stream,
    data: &[u8],
) -> bool {
    match stream {
        Stream::Stdout if stdout => out.data(STDOUT, data).await,
        Stream::Stderr if stderr => out.data(STDERR, data).await,
        _ => true,
    }
}

/// The session's stdin ended: what it sent is still written, then, when `close`, the
/// container's stdin is closed.
fn end_stdin(feed: Feed, input: Option<Input>, close: bool) {
    let Feed { tx, task } = feed;
    drop(tx);
    if close && let Some(input) = input {
        // The feed ends once its queue is written, or at once when the container has gone.
        tokio::spawn(async move {
            let _ = task.await;
            input.close().await;
        });
    }
}

/// Write what the session sends to the container's stdin.
async fn feed_input(input: Input, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(data) = rx.recv().await {
        if !input.write(&data).await {
            return;
        }
    }
}
