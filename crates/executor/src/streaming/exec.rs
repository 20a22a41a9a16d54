//! One exec session over an upgraded WebSocket connection: the command runs as a host process
//! with the container's environment and working directory, its streams multiplexed on the
//! remote-command channels (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize; each
//! message's first byte is its channel, or its digit in the base64 protocols; v5 adds the
//! client's `[255, channel]` close signal), and the status on channel 3 once all output is
//! delivered. Then the connection is closed normally.
//!
//! The command gets a process group of its own (with a TTY, a session of its own whose
//! controlling terminal is the pseudo-terminal). The group is killed when the command's main
//! process exits (what it left behind ends with it, as a container's processes end with it),
//! when the client goes away before that, and when the container stops.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use nix::fcntl::OFlag;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::registry::ExecTarget;
use super::status::{self, End, Format};
use super::ws::{self, Message};

/// The remote-command channels.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// v5's close signal: `[CLOSE, channel]`.
const CLOSE: u8 = 255;

/// Output is read and sent in pieces of at most this size.
const CHUNK: usize = 32 * 1024;
/// Frames waiting for the connection; a slow client holds the command's output back.
const OUT_QUEUE: usize = 16;
/// Once the command's group is gone, its output ends when nothing more comes for this long
/// (something that left the group may still hold a pipe open). Delivering what came is not
/// bounded: a slow client gets all of it.
const DRAIN: Duration = Duration::from_secs(2);
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

    fn format(self) -> Format {
        match self {
            Protocol::V5 => Format::Translator,
            Protocol::V4 | Protocol::V4Base64 => Format::Kubelet,
            Protocol::V1 | Protocol::V1Base64 => Format::Text,
        }
    }
}

/// What the request asked for (kubelet's `remotecommand.Options` and the command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Frames to the client, in order, through the connection's one writer.
#[derive(Clone)]
struct Out {
    tx: mpsc::Sender<Vec<u8>>,
    base64: bool,
}

impl Out {
    /// `data` on `channel`; false once the connection is gone.
    async fn data(&self, channel: u8, data: &[u8]) -> bool {
        let frame = if self.base64 {
            let text = base64::engine::general_purpose::STANDARD.encode(data);
            ws::frame(ws::OP_TEXT, &[&[b'0' + channel], text.as_bytes()])
        } else {
            ws::frame(ws::OP_BINARY, &[&[channel], data])
        };
        self.tx.send(frame).await.is_ok()
    }

    async fn frame(&self, frame: Vec<u8>) {
        let _ = self.tx.send(frame).await;
    }
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

/// Run `options.command` in `target` for the client on `io`, until the command has ended and
/// the client has closed the connection, or the client went away.
pub async fn run<S>(
    io: S,
    protocol: Protocol,
    options: Options,
    target: ExecTarget,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let writer = tokio::spawn(write_frames(wr, rx));
    let out = Out {
        tx,
        base64: protocol.base64(),
    };
    let mut reader = ws::Reader::new(rd);
    // kubelet tells the client its streams are open: an empty message on the lowest channel it
    // writes.
    let first = if options.stdout {
        STDOUT
    } else if options.stderr {
        STDERR
    } else {
        ERROR
    };
    out.data(first, &[]).await;
    let end = match spawn(&options, &target, &out) {
        Ok(process) => {
            drive(
                process,
                protocol,
                &mut reader,
                &out,
                target.running.clone(),
                &mut shutdown,
            )
            .await
        }
        Err(message) => {
            tracing::debug!(command = ?options.command, %message, "exec could not start");
            Some(End::Failed(message))
        }
    };
    if let Some(end) = end {
        tracing::debug!(command = ?options.command, ?end, "exec ended");
        if let Some(status) = status::message(protocol.format(), &options.command, &end) {
            out.data(ERROR, &status).await;
        }
        out.frame(ws::close_frame(ws::CLOSE_NORMAL)).await;
        // Closing the socket with the client's frames unread would reset it, and the output
        // it has not read yet with it: wait for its close (unless the node is stopping).
        let stopping = *shutdown.borrow();
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
    }
    drop(out);
    let _ = writer.await;
}

/// The running command.
struct Process {
    child: tokio::process::Child,
    group: Group,
    /// Its input, while it takes any (dropping the sender closes it).
    stdin: Option<mpsc::Sender<Vec<u8>>>,
    /// The tasks moving its output (and input) between it and the connection.
    pumps: JoinSet<()>,
    /// Tells the output pumps that the command's group is gone.
    exited: watch::Sender<bool>,
    pty: Option<Arc<AsyncFd<OwnedFd>>>,
    resize: Resize,
}

/// The command's process group: SIGKILLed when dropped unless disarmed, so that no command
/// outlives its session.
struct Group {
    pgid: i32,
    armed: bool,
}

impl Group {
    fn kill(&self) {
        // Never 0 or 1: killpg would reach our own group or init's.
        if self.pgid > 1 {
            // ESRCH: the group is gone already, which is what was wanted.
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// Start the command with its streams wired to the connection; `Err` is the runtime's message.
fn spawn(options: &Options, target: &ExecTarget, out: &Out) -> Result<Process, String> {
    let Some((program, args)) = options.command.split_first() else {
        return Err("no command to run".to_string());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(target.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(&target.workdir)
        .kill_on_drop(true);
    let mut pumps = JoinSet::new();
    let (exited, exited_rx) = watch::channel(false);
    let (child, pty, stdin) = if options.tty {
        let (master, slave) = open_pty().map_err(|e| format!("open /dev/ptmx: {e}"))?;
        let dup = |f: &std::fs::File| f.try_clone().map_err(|e| format!("dup pty: {e}"));
        cmd.stdin(dup(&slave)?).stdout(dup(&slave)?).stderr(slave);
        // SAFETY: the hook runs in the child between fork and exec, and only makes system
        // calls (setsid, ioctl), which are async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(controlling_terminal);
        }
        let child = cmd
            .spawn()
            .map_err(|e| crate::process::start_error(program, &e))?;
        // The parent's copies of the terminal's slave side go now: the master reads the end
        // of the output (EIO) once the command's processes have closed theirs.
        drop(cmd);
        let master = Arc::new(master);
        pumps.spawn(pump_pty(
            master.clone(),
            options.stdout.then(|| out.clone()),
            exited_rx,
        ));
        let stdin = options.stdin.then(|| {
            let (tx, rx) = mpsc::channel(8);
            pumps.spawn(feed_pty(master.clone(), rx));
            tx
        });
        (child, Some(master), stdin)
    } else {
        let piped = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
        cmd.process_group(0)
            .stdin(piped(options.stdin))
            .stdout(piped(options.stdout))
            .stderr(piped(options.stderr));
        let mut child = cmd
            .spawn()
            .map_err(|e| crate::process::start_error(program, &e))?;
        if let Some(o) = child.stdout.take() {
            pumps.spawn(pump(o, STDOUT, out.clone(), exited_rx.clone()));
        }
        if let Some(e) = child.stderr.take() {
            pumps.spawn(pump(e, STDERR, out.clone(), exited_rx));
        }
        let stdin = child.stdin.take().map(|input| {
            let (tx, rx) = mpsc::channel(8);
            pumps.spawn(feed(input, rx));
            tx
        });
        (child, None, stdin)
    };
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    Ok(Process {
        child,
        group: Group { pgid, armed: true },
        stdin,
        pumps,
        exited,
        pty,
        resize: Resize::default(),
    })
}

/// Drive the running command until it exits and its output is delivered (its end), or until
/// the client goes away (`None`; the command is killed).
async fn drive<R: AsyncRead + Unpin>(
    mut p: Process,
    protocol: Protocol,
    reader: &mut ws::Reader<R>,
    out: &Out,
    mut running: watch::Receiver<()>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<End> {
    let mut container_running = true;
    let mut stopping = *shutdown.borrow();
    if stopping {
        p.group.kill();
    }
    let status = loop {
        tokio::select! {
            status = p.child.wait() => break status,
            m = reader.next() => {
                if !p.on_message(protocol, m, out).await {
                    p.abandon().await;
                    return None;
                }
            }
            changed = running.changed(), if container_running => {
                if changed.is_err() {
                    // The container stopped: what was exec'd in it goes too.
                    container_running = false;
                    p.group.kill();
                }
            }
            changed = shutdown.changed(), if !stopping => {
                if changed.is_err() || *shutdown.borrow() {
                    stopping = true;
                    p.group.kill();
                }
            }
        }
    };
    // What the command left behind in its group ends with it.
    p.group.kill();
    p.group.armed = false;
    p.stdin = None;
    let end = match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(0), _) => End::Success,
            (Some(code), _) => End::Exit(code),
            (None, Some(signal)) => End::Exit(128 + signal),
            (None, None) => End::Exit(137),
        },
        Err(e) => End::Failed(format!("waiting for the command: {e}")),
    };
    // Deliver the rest of the output, answering the client meanwhile.
    p.exited.send_replace(true);
    let mut pumps = std::mem::take(&mut p.pumps);
    loop {
        tokio::select! {
            done = pumps.join_next() => {
                if done.is_none() {
                    break;
                }
            }
            m = reader.next() => {
                if !p.on_message(protocol, m, out).await {
                    return None;
                }
            }
            changed = shutdown.changed(), if !stopping => {
                if changed.is_err() || *shutdown.borrow() {
                    return None;
                }
            }
        }
    }
    Some(end)
}

impl Process {
    /// Act on what the client sent; false when it went away (a close frame is answered).
    async fn on_message(
        &mut self,
        protocol: Protocol,
        m: Result<Option<Message>, ws::WsError>,
        out: &Out,
    ) -> bool {
        match m {
            Ok(Some(Message::Data(data))) => {
                self.on_data(protocol, data).await;
                true
            }
            Ok(Some(Message::Ping(payload))) => {
                out.frame(ws::frame(ws::OP_PONG, &[&payload])).await;
                true
            }
            Ok(Some(Message::Pong)) => true,
            Ok(Some(Message::Close(_))) => {
                out.frame(ws::close_frame(ws::CLOSE_NORMAL)).await;
                false
            }
            Ok(None) => false,
            Err(e) => {
                tracing::debug!(error = %e, "exec stream");
                if let Some(code) = e.close_code() {
                    out.frame(ws::close_frame(code)).await;
                }
                false
            }
        }
    }

    /// A message on one of the channels.
    async fn on_data(&mut self, protocol: Protocol, data: Vec<u8>) {
        let Some((&first, rest)) = data.split_first() else {
            return;
        };
        let (channel, payload) = if protocol.base64() {
            match base64::engine::general_purpose::STANDARD.decode(rest) {
                Ok(p) => (first.wrapping_sub(b'0'), p),
                Err(e) => {
                    tracing::debug!(error = %e, "exec stream: a message that is not base64");
                    return;
                }
            }
        } else {
            (first, rest.to_vec())
        };
        match channel {
            STDIN if !payload.is_empty() => {
                if let Some(stdin) = &self.stdin {
                    // Fails once the command stopped reading: its input is dropped then.
                    let _ = stdin.send(payload).await;
                }
            }
            RESIZE => {
                if let Some(pty) = &self.pty {
                    self.resize.feed(&payload, pty);
                }
            }
            CLOSE if protocol == Protocol::V5 && payload.first() == Some(&STDIN) => {
                // Its input ends: the command reads EOF (with a TTY, nothing more is typed
                // into the terminal).
                self.stdin = None;
            }
            _ => {}
        }
    }

    /// The client went away first: the command is killed and reaped.
    async fn abandon(mut self) {
        self.group.kill();
        let _ = self.child.wait().await;
    }
}

/// Resolves once the command's group is gone and `DRAIN` has passed since (raced against each
/// read: the time counts from the last output).
async fn idle_after_exit(exited: &mut watch::Receiver<bool>) {
    // An error: the session is over, which ends the output as well.
    let _ = exited.wait_for(|gone| *gone).await;
    tokio::time::sleep(DRAIN).await;
}

/// Copy `r` to `channel` until its end.
async fn pump<R: AsyncRead + Unpin>(
    mut r: R,
    channel: u8,
    out: Out,
    mut exited: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = tokio::select! {
            read = r.read(&mut buf) => read,
            _ = idle_after_exit(&mut exited) => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if !out.data(channel, &buf[..n]).await {
                    return;
                }
            }
        }
    }
}

/// Write what arrives to the command's stdin; its end closes the pipe.
async fn feed<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(data) = rx.recv().await {
        if w.write_all(&data).await.is_err() {
            return;
        }
    }
}

// ---- TTY ----

/// A pseudo-terminal: its master side, non-blocking for the reactor, and its slave side for the
/// command. Both are close-on-exec, so that no other process the node starts meanwhile keeps
/// the terminal open.
fn open_pty() -> std::io::Result<(AsyncFd<OwnedFd>, std::fs::File)> {
    let master = nix::pty::posix_openpt(
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
    )?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOCTTY)
        .open(name)?;
    // SAFETY: the descriptor is owned by what is registered and lives exactly as long.
    let master = unsafe { AsyncFd::register(OwnedFd::from(master)) }?;
    Ok((master, slave))
}

/// In the child: a session of its own whose controlling terminal is its stdin, the slave side.
fn controlling_terminal() -> std::io::Result<()> {
    nix::unistd::setsid()?;
    // SAFETY: TIOCSCTTY takes an int argument and no pointer.
    if unsafe { nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Read the terminal's output; 0 at its end (EIO: no slave side is open any more).
async fn read_pty(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut guard = fd.readable().await?;
        match guard.try_io(|inner| Ok(nix::unistd::read(inner.get_ref(), buf)?)) {
            Ok(Err(e)) if e.raw_os_error() == Some(nix::libc::EIO) => return Ok(0),
            Ok(result) => return result,
            Err(_would_block) => continue,
        }
    }
}

async fn write_pty(fd: &AsyncFd<OwnedFd>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut guard = fd.writable().await?;
        match guard.try_io(|inner| Ok(nix::unistd::write(inner.get_ref(), data)?)) {
            Ok(Ok(n)) => data = data.get(n..).unwrap_or_default(),
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
    Ok(())
}

/// The terminal's output to stdout (or nowhere, when stdout was not asked for: it is still
/// read, or the command would block on a full terminal).
async fn pump_pty(
    master: Arc<AsyncFd<OwnedFd>>,
    out: Option<Out>,
    mut exited: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = tokio::select! {
            read = read_pty(&master, &mut buf) => read,
            _ = idle_after_exit(&mut exited) => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Some(out) = &out
                    && !out.data(STDOUT, &buf[..n]).await
                {
                    return;
                }
            }
        }
    }
}

/// Type what arrives into the terminal.
async fn feed_pty(master: Arc<AsyncFd<OwnedFd>>, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(data) = rx.recv().await {
        if write_pty(&master, &data).await.is_err() {
            return;
        }
    }
}

/// client-go's `TerminalSize`.
#[derive(Debug, serde::Deserialize)]
struct TerminalSize {
    #[serde(rename = "Width", alias = "width", default)]
    width: u16,
    #[serde(rename = "Height", alias = "height", default)]
    height: u16,
}

/// The resize channel: a stream of JSON sizes, as upstream decodes it (a value may span
/// messages; the first malformed one ends the resizing).
#[derive(Debug, Default)]
struct Resize {
    buf: Vec<u8>,
    broken: bool,
}

impl Resize {
    fn feed(&mut self, data: &[u8], pty: &AsyncFd<OwnedFd>) {
        if self.broken {
            return;
        }
        self.buf.extend_from_slice(data);
        let mut sizes = serde_json::Deserializer::from_slice(&self.buf).into_iter::<TerminalSize>();
        let mut used = 0;
        while let Some(size) = sizes.next() {
            match size {
                Ok(size) => {
                    set_window_size(pty, size.width, size.height);
                    used = sizes.byte_offset();
                }
                Err(e) if e.is_eof() => break,
                Err(e) => {
                    tracing::debug!(error = %e, "exec stream: a malformed terminal size");
                    self.broken = true;
                    break;
                }
            }
        }
        self.buf.drain(..used);
    }
}

fn set_window_size(pty: &AsyncFd<OwnedFd>, width: u16, height: u16) {
    let size = nix::libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize through the pointer, which outlives the call. On
    // the master it sizes the terminal and signals its foreground group (SIGWINCH).
    let r = unsafe { nix::libc::ioctl(pty.as_raw_fd(), nix::libc::TIOCSWINSZ, &size) };
    if r < 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "setting a terminal's size");
    }
}
