//! Pseudo-terminals, for the one process that runs on each: an exec with a TTY and a container
//! with `tty: true`. The node keeps the master side: it reads the terminal's output (one stream,
//! stdout and stderr together), types input into it and sets its window size.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use nix::fcntl::OFlag;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, ReadBuf};

/// The master side of a terminal, registered with the reactor.
pub type Master = Arc<AsyncFd<OwnedFd>>;

/// A pseudo-terminal: its master side, non-blocking for the reactor, and its slave side for the
/// process. Both are close-on-exec, so that no other process the node starts meanwhile keeps
/// the terminal open.
pub fn open() -> std::io::Result<(Master, std::fs::File)> {
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
    Ok((Arc::new(master), slave))
}

/// Give `cmd` the slave side as stdin, stdout and stderr, in a session of its own whose
/// controlling terminal it is. The parent's copies of the slave go with `cmd`: drop it once
/// spawned, so that the master reads the end of the output (EIO) once the process's side has
/// closed.
pub fn attach_command(
    cmd: &mut tokio::process::Command,
    slave: std::fs::File,
) -> std::io::Result<()> {
    cmd.stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(slave);
    // SAFETY: the hook runs in the child between fork and exec, and only makes system calls
    // (setsid, ioctl), which are async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(controlling_terminal);
    }
    Ok(())
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
pub async fn read(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut guard = fd.readable().await?;
        match guard.try_io(|inner| Ok(nix::unistd::read(inner.get_ref(), buf)?)) {
            Ok(Err(e)) if e.raw_os_error() == Some(nix::libc::EIO) => return Ok(0),
            Ok(result) => return result,
            Err(_would_block) => continue,
        }
    }
}

/// Type `data` into the terminal.
pub async fn write(fd: &AsyncFd<OwnedFd>, mut data: &[u8]) -> std::io::Result<()> {
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

/// The terminal's output as a byte stream (for the log pump), ending at EIO.
pub struct Output(pub Master);

impl AsyncRead for Output {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|inner| Ok(nix::unistd::read(inner.get_ref(), unfilled)?)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(nix::libc::EIO) => {
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
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
pub struct Resize {
    buf: Vec<u8>,
    broken: bool,
}

impl Resize {
    pub fn feed(&mut self, data: &[u8], pty: &AsyncFd<OwnedFd>) {
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
                    tracing::debug!(error = %e, "a malformed terminal size");
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
