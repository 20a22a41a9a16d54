//! One exec session over an upgraded WebSocket connection (`session`: channels, frames, the
//! end): the command runs as a host process with the container's environment and working
//! directory, its streams multiplexed on the remote-command channels, and the status on
//! channel 3 once all output is delivered.
//!
//! The command gets a process group of its own (with a TTY, a session of its own whose
//! controlling terminal is the pseudo-terminal). The group is killed when the command's main
//! process exits (what it left behind ends with it, as a container's processes end with it),
//! when the client goes away before that, and when the container stops.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::registry::ExecTarget;
use super::session::{self, CLOSE, Conn, Incoming, Out, Protocol, RESIZE, STDERR, STDIN, STDOUT};
use super::status::{self, End};
use super::ws;
use crate::pty;

/// Output is read and sent in pieces of at most this size.
const CHUNK: usize = 32 * 1024;
/// Once the command's group is gone, its output ends when nothing more comes for this long
/// (something that left the group may still hold a pipe open). Delivering what came is not
/// bounded: a slow client gets all of it.
const DRAIN: Duration = Duration::from_secs(2);

/// What the request asked for (kubelet's `remotecommand.Options` and the command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
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
    let mut conn = Conn::open(io, protocol, options.stdout, options.stderr).await;
    let end = match spawn(&options, &target, &conn.out) {
        Ok(process) => {
            drive(
                process,
                protocol,
                &mut conn.reader,
                &conn.out,
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
    match end {
        Some(end) => {
            tracing::debug!(command = ?options.command, ?end, "exec ended");
            let status = status::message(protocol.format(), &options.command, &end);
            conn.finish(status, &mut shutdown).await;
        }
        None => conn.close().await,
    }
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
    pty: Option<pty::Master>,
    resize: pty::Resize,
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
        .kill_on_drop(true);
    crate::volume::mount::in_container(&mut cmd, target.pid, &target.workdir)?;
    let mut pumps = JoinSet::new();
    let (exited, exited_rx) = watch::channel(false);
    let (child, pty, stdin) = if options.tty {
        let (master, slave) = pty::open().map_err(|e| format!("open /dev/ptmx: {e}"))?;
        pty::attach_command(&mut cmd, slave).map_err(|e| format!("dup pty: {e}"))?;
        let child = cmd
            .spawn()
            .map_err(|e| crate::process::start_error(program, &e))?;
        // The parent's copies of the terminal's slave side go now: the master reads the end
        // of the output (EIO) once the command's processes have closed theirs.
        drop(cmd);
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
        resize: pty::Resize::default(),
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
    /// Act on what the client sent; false when it went away.
    async fn on_message(
        &mut self,
        protocol: Protocol,
        m: Result<Option<ws::Message>, ws::WsError>,
        out: &Out,
    ) -> bool {
        let (channel, payload) = match session::incoming(protocol, m, out).await {
            Incoming::Data(channel, payload) => (channel, payload),
            Incoming::Nothing => return true,
            Incoming::Gone => return false,
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
            CLOSE if protocol.closes_stdin() && payload.first() == Some(&STDIN) => {
                // Its input ends: the command reads EOF (with a TTY, nothing more is typed
                // into the terminal).
                self.stdin = None;
            }
            _ => {}
        }
        true
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

/// The terminal's output to stdout (or nowhere, when stdout was not asked for: it is still
/// read, or the command would block on a full terminal).
async fn pump_pty(master: pty::Master, out: Option<Out>, mut exited: watch::Receiver<bool>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = tokio::select! {
            read = pty::read(&master, &mut buf) => read,
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
async fn feed_pty(master: pty::Master, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(data) = rx.recv().await {
        if pty::write(&master, &data).await.is_err() {
            return;
        }
    }
}
