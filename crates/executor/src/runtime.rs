//! Starting one run of a container and stopping it, whatever runs it: a host process
//! (`process`) or a timer (`simulate`). A started run reports its exit exactly once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};

use crate::env::Launch;

/// How one container runs, decided before the pod starts.
#[derive(Debug, Clone)]
pub enum Plan {
    Process {
        launch: Launch,
        workdir: PathBuf,
        io: crate::process::ContainerIo,
        /// Its volume mounts (most containers have none).
        mounts: Arc<[crate::volume::mount::Mount]>,
    },
    Simulate {
        duration: Duration,
        exit_code: i32,
    },
}

/// A stop request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM: ask to stop.
    Term,
    /// SIGKILL: stop now.
    Kill,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub exit_code: i32,
    /// The signal that ended the run, if one did (exit code 128 + signal).
    pub signal: Option<i32>,
    pub finished_at: Timestamp,
}

impl Exit {
    pub fn signaled(signal: i32) -> Exit {
        Exit {
            exit_code: 128 + signal,
            signal: Some(signal),
            finished_at: Timestamp::now(),
        }
    }
}

/// A running container run.
#[derive(Debug)]
pub struct Started {
    /// The process (and process group) id, for the process runtime.
    pub pid: Option<u32>,
    pub start_ticks: Option<u64>,
    pub stop: mpsc::UnboundedSender<StopSignal>,
    /// Resolves once the run has ended and its output is in the log file.
    pub exit: oneshot::Receiver<Exit>,
    /// What attach reaches of a process run.
    pub attach: Option<crate::process::Attach>,
}

/// Start a run; `Err` is kubelet's `StartError` message (the run never started).
pub fn start(plan: &Plan, log_file: PathBuf) -> Result<Started, String> {
    match plan {
        Plan::Process {
            launch,
            workdir,
            io,
            mounts,
        } => crate::process::start(launch, workdir, log_file, *io, mounts),
        Plan::Simulate {
            duration,
            exit_code,
        } => Ok(crate::simulate::start(*duration, *exit_code)),
    }
}
