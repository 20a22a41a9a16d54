//! The process runtime: a container run is a host process in its own process group, with
//! stdout and stderr pumped into its log file. Stop signals go to the whole group, and once the
//! main process has exited the rest of its group is killed, as a container's processes end with
//! it — so no process outlives its container.
//!
//! A container's `stdin`, `stdinOnce` and `tty` are a runtime's: with `stdin` its stdin is a pipe
//! the node keeps open for attached sessions to write into (otherwise /dev/null); with `tty` it
//! runs on a pseudo-terminal of its own, in a session of its own with the terminal as its
//! controlling terminal, and its one output stream goes to the log as stdout. What attach needs
//! of a run (`Attach`) is handed back with it for the streaming registry.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kbatch_api::podlog::Stream;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};

use crate::env::Launch;
use crate::logs::LogFile;
use crate::pty;
use crate::runtime::{Exit, Started, StopSignal};
use crate::volume::mount::{self, Mount, MountPoints, Prepared};

/// A container's `stdin`, `stdinOnce` and `tty`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerIo {
    pub stdin: bool,
    pub stdin_once: bool,
    pub tty: bool,
}

/// What an attach session reaches of a running container: its output (through the taps of its
/// log), its input when it has `stdin: true`, its terminal when it has `tty: true`.
#[derive(Debug, Clone)]
pub struct Attach {
    pub log: LogFile,
    pub input: Option<Input>,
    pub pty: Option<pty::Master>,
    pub stdin_once: bool,
}

/// A container's stdin, shared by the sessions attached to it.
#[derive(Debug, Clone)]
pub enum Input {
    /// The write end of its stdin pipe, until closed.
    Pipe(Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>),
    /// Typed into its terminal.
    Pty(pty::Master),
}

impl Input {
    /// Write `data`; false once the input is closed or the process no longer reads it.
    pub async fn write(&self, data: &[u8]) -> bool {
        use tokio::io::AsyncWriteExt;
        match self {
            Input::Pipe(pipe) => match pipe.lock().await.as_mut() {
                Some(w) => w.write_all(data).await.is_ok(),
                None => false,
            },
            Input::Pty(master) => pty::write(master, data).await.is_ok(),
        }
    }

    /// Close the input: the process reads EOF. A terminal stays open (containerd closes a
    /// `stdinOnce` container's stdin only without a TTY).
    pub async fn close(&self) {
        if let Input::Pipe(pipe) = self {
            pipe.lock().await.take();
        }
    }
}

/// How long the log pumps may take to drain after the process group is gone.
const PUMP_DRAIN: Duration = Duration::from_secs(2);

fn signal_group(pgid: i32, sig: Signal) {
    // Never 0 or 1: killpg would reach our own group or init's.
    if pgid > 1 {
        // ESRCH: the group is already gone, which is what was wanted.
        let _ = killpg(Pid::from_raw(pgid), sig);
    }
}

/// kubelet/runc's wording for a command that cannot be executed.
pub(crate) fn start_error(program: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("exec: {program:?}: executable file not found in $PATH")
        }
        std::io::ErrorKind::PermissionDenied => format!("exec: {program:?}: permission denied"),
        _ => format!("exec: {program:?}: {e}"),
    }
}

/// Start a run of `launch` in `workdir`, its output to `log_file`; with `mounts`, in a mount
/// namespace of its own where they are in place.
pub fn start(
    launch: &Launch,
    workdir: &Path,
    log_file: PathBuf,
    io: ContainerIo,
    mounts: &[Mount],
) -> Result<Started, String> {
    let Some((program, args)) = launch.argv.split_first() else {
        return Err("no command to run".to_string());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .kill_on_drop(false);
    // Held until the run ends: the mount points it needed stay until then.
    let mut prepared = None;
    if mounts.is_empty() {
        std::fs::create_dir_all(workdir)
            .map_err(|e| format!("creating the working directory {}: {e}", workdir.display()))?;
        cmd.current_dir(workdir);
    } else {
        mount::namespaces_available()?;
        // The working directory may be inside a mount: it is entered once they are in place
        // (the host's may not exist).
        let p = Arc::new(Prepared::new(mounts, workdir, MountPoints::global())?);
        let in_child = p.clone();
        // SAFETY: `enter` runs in the child between fork and exec and only makes system
        // calls on data prepared before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || in_child.enter());
        }
        prepared = Some(p);
    }
    let log = Arc::new(Mutex::new(crate::logs::LazyLog::new(log_file)));
    let mut pumps = Vec::new();
    let (child, input, master) = if io.tty {
        let (master, slave) = pty::open().map_err(|e| format!("open /dev/ptmx: {e}"))?;
        pty::attach_command(&mut cmd, slave).map_err(|e| format!("dup pty: {e}"))?;
        let child = cmd.spawn().map_err(|e| start_error(program, &e))?;
        // The parent's copies of the slave side go now: the master reads the end of the
        // output (EIO) once the container's processes have closed theirs.
        drop(cmd);
        pumps.push(tokio::spawn(crate::logs::pump(
            pty::Output(master.clone()),
            Stream::Stdout,
            log.clone(),
        )));
        let input = io.stdin.then(|| Input::Pty(master.clone()));
        (child, input, Some(master))
    } else {
        cmd.stdin(if io.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that signals reach everything the container starts.
        .process_group(0);
        let mut child = cmd.spawn().map_err(|e| start_error(program, &e))?;
        if let Some(out) = child.stdout.take() {
            pumps.push(tokio::spawn(crate::logs::pump(
                out,
                Stream::Stdout,
                log.clone(),
            )));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(tokio::spawn(crate::logs::pump(
                err,
                Stream::Stderr,
                log.clone(),
            )));
        }
        let input = child
            .stdin
            .take()
            .map(|w| Input::Pipe(Arc::new(tokio::sync::Mutex::new(Some(w)))));
        (child, input, None)
    };
    let mut child = child;
    let Some(pid) = child.id() else {
        return Err("the process exited before it could be tracked".to_string());
    };
    let start_ticks = crate::state::start_ticks(pid);
    let attach = Attach {
        log,
        input,
        pty: master,
        stdin_once: io.stdin_once,
    };
    let (stop, mut stop_rx) = mpsc::unbounded_channel();
    let (exit_tx, exit) = oneshot::channel();
    let pgid = i32::try_from(pid).unwrap_or(0);
    tokio::spawn(async move {
        let _mounts = prepared;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                sig = stop_rx.recv() => match sig {
                    Some(StopSignal::Term) => signal_group(pgid, Signal::SIGTERM),
                    Some(StopSignal::Kill) => signal_group(pgid, Signal::SIGKILL),
                    None => {
                        // Nobody will ask again: make sure nothing is left running.
                        signal_group(pgid, Signal::SIGKILL);
                        break child.wait().await;
                    }
                },
            }
        };
        // What the main process left behind in its group ends with it.
        signal_group(pgid, Signal::SIGKILL);
        for pump in pumps {
            let abort = pump.abort_handle();
            if tokio::time::timeout(PUMP_DRAIN, pump).await.is_err() {
                abort.abort();
            }
        }
        let exit = match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => Exit {
                    exit_code: code,
                    signal: None,
                    finished_at: jiff::Timestamp::now(),
                },
                (None, Some(sig)) => Exit::signaled(sig),
                (None, None) => Exit::signaled(9),
            },
            Err(e) => {
                tracing::warn!(pid, error = %e, "waiting for a container process");
                Exit::signaled(9)
            }
        };
        let _ = exit_tx.send(exit);
    });
    Ok(Started {
        pid: Some(pid),
        start_ticks,
        stop,
        exit,
        attach: Some(attach),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(argv: &[&str]) -> Launch {
        Launch {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("X".into(), "42".into()),
            ],
        }
    }

    #[tokio::test]
    async fn runs_with_env_and_workdir_and_logs_output() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/main/0.log");
        let s = start(
            &launch(&["sh", "-c", "echo $X; pwd; echo oops >&2; exit 3"]),
            &dir.path().join("wd"),
            log.clone(),
            ContainerIo::default(),
            &[],
        )
        .unwrap();
        let exit = s.exit.await.unwrap();
        assert_eq!((exit.exit_code, exit.signal), (3, None));
        let out = kbatch_api::podlog::render(&std::fs::read(&log).unwrap(), &Default::default());
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("42\n"), "{text}");
        assert!(text.contains("/wd\n"), "{text}");
        assert!(text.contains("oops\n"), "{text}");
    }

    #[tokio::test]
    async fn term_stops_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let s = start(
            &launch(&["sh", "-c", "sleep 1000 & wait"]),
            dir.path(),
            dir.path().join("0.log"),
            ContainerIo::default(),
            &[],
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.stop.send(StopSignal::Term).unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(5), s.exit)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(exit.exit_code, 143);
        // Nothing of the group is left alive (zombies awaiting their reaper do not count).
        // The shell's children got the signal too but may take a moment to finish exiting.
        let pgid = s.pid.unwrap().to_string();
        let alive = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                .filter(|stat| {
                    let Some(i) = stat.rfind(')') else {
                        return false;
                    };
                    let f: Vec<&str> = stat[i + 1..].split_whitespace().collect();
                    f.len() > 2 && f[2] == pgid && !matches!(f[0], "Z" | "X")
                })
                .count()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(alive(), 0);
    }

    #[test]
    fn missing_program_is_a_start_error() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _g = rt.enter();
        let dir = tempfile::tempdir().unwrap();
        let e = start(
            &launch(&["no-such-program-kbatch"]),
            dir.path(),
            dir.path().join("0.log"),
            ContainerIo::default(),
            &[],
        )
        .unwrap_err();
        assert_eq!(
            e,
            "exec: \"no-such-program-kbatch\": executable file not found in $PATH"
        );
    }
}
