//! kbatch-executor: the local node (kbatch's kubelet).
//!
//! It is an API client only: it registers a Node and renews its Lease (`node`), binds
//! unscheduled pods to itself within its pod capacity (`binder`), and runs each bound pod
//! (`worker`) through a runtime — host processes (`process`) or a simulation (`simulate`) —
//! reporting status through `pods/status` as kubelet does (`status`). Container output goes to
//! log files in `kbatch_api::podlog`'s layout (`logs`), which the API server serves. Its
//! streaming endpoint (`streaming`, kubelet's `/exec`) runs commands in running containers for
//! `pods/exec`, which the API server proxies to it.

mod admit;
mod backoff;
mod binder;
mod env;
mod events;
pub mod expand;
pub mod fit;
mod hook;
mod logs;
mod machine;
mod manager;
mod node;
mod preempt;
mod probe;
mod process;
mod pty;
mod runtime;
mod simulate;
pub mod state;
mod status;
mod storage_limits;
pub mod streaming;
mod usage;
pub mod volume;
mod workdir;
mod worker;

use std::path::PathBuf;

pub use node::{HOST_IP, LEASE_NAMESPACE};

/// How containers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// Each container's command runs as a host process.
    Process,
    /// No processes: containers "run" for the time their pod's annotations say.
    Simulate,
}

/// The node's identity, runtime and limits.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// The Node this executor registers and binds pods to.
    pub node_name: String,
    pub runtime: RuntimeKind,
    /// Logs live under `data_dir/logs`, executor state and default working dirs under
    /// `data_dir/executor`.
    pub data_dir: PathBuf,
    /// At most this many non-terminal pods are bound to the node at once.
    pub max_pods: usize,
    /// The port of the node's streaming endpoint (kubelet's server: `/exec`) on `HOST_IP`;
    /// `None` lets the OS choose one. `run` sets it to the port it listens on, which the Node
    /// reports as `status.daemonEndpoints.kubeletEndpoint.Port`.
    pub streaming_port: Option<u16>,
    /// How often the files of a running pod's configMap, secret, downwardAPI and projected
    /// volumes are brought up to date (kubelet's `--sync-frequency`, 1 minute).
    pub volume_sync_period: std::time::Duration,
}

impl ExecutorConfig {
    /// kubelet's defaults: node `kbatch-node`, 110 pods, the process runtime.
    pub fn new(data_dir: PathBuf) -> ExecutorConfig {
        ExecutorConfig {
            node_name: "kbatch-node".to_string(),
            runtime: RuntimeKind::Process,
            data_dir,
            max_pods: 110,
            streaming_port: None,
            volume_sync_period: std::time::Duration::from_secs(60),
        }
    }

    /// Where container logs are written (and served from).
    pub fn log_dir(&self) -> PathBuf {
        self.data_dir.join("logs")
    }

    pub(crate) fn state_dir(&self) -> PathBuf {
        self.data_dir.join("executor").join("state")
    }

    pub(crate) fn pods_dir(&self) -> PathBuf {
        self.data_dir.join("executor").join("pods")
    }

    /// Empty working directories kept for the next pods (`workdir`).
    pub(crate) fn spare_dir(&self) -> PathBuf {
        self.data_dir.join("executor").join("spare")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("registering node {node}: {source}")]
    Register {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("listening for the streaming endpoint on {HOST_IP}:{port}: {source}")]
    Streaming {
        port: u16,
        #[source]
        source: std::io::Error,
    },
}

/// Run the executor until `shutdown` turns true. On shutdown, running containers are stopped;
/// their pods are reported Failed by the next start (see `worker`'s restart handling). The
/// streaming endpoint listens before the Node is registered, so that the Node reports its port
/// from the start.
pub async fn run(
    client: kube::Client,
    mut config: ExecutorConfig,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ExecutorError> {
    // The pods' directory is made by `WorkDirs::open`.
    for dir in [config.log_dir(), config.state_dir()] {
        std::fs::create_dir_all(&dir).map_err(|source| ExecutorError::Io {
            path: dir.clone(),
            source,
        })?;
    }
    let journal =
        state::Journal::open(&config.state_dir()).map_err(|source| ExecutorError::Io {
            path: config.state_dir(),
            source,
        })?;
    let workdirs =
        workdir::WorkDirs::open(config.pods_dir(), config.spare_dir()).map_err(|source| {
            ExecutorError::Io {
                path: config.spare_dir(),
                source,
            }
        })?;
    let requested = config.streaming_port;
    let listen_error = |source| ExecutorError::Streaming {
        port: requested.unwrap_or(0),
        source,
    };
    let listener = streaming::bind(requested).await.map_err(listen_error)?;
    let port = listener.local_addr().map_err(listen_error)?.port();
    config.streaming_port = Some(port);
    let streams = streaming::Registry::new();
    let server = tokio::spawn(streaming::serve(
        listener,
        streams.clone(),
        shutdown.clone(),
    ));
    let machine = machine::Machine::detect(&config.data_dir);
    let node = register_with_retries(&client, &machine, &config, &mut shutdown).await;
    let node = match node {
        Ok(Some(node)) => node,
        Ok(None) => {
            server.abort();
            return Ok(());
        }
        Err(e) => {
            server.abort();
            return Err(e);
        }
    };
    tracing::info!(
        node = %config.node_name,
        runtime = ?config.runtime,
        max_pods = config.max_pods,
        cpus = machine.cpus,
        streaming_port = port,
        "executor registered its node"
    );
    let allocatable = node::allocatable(&machine, &config);
    let heartbeat = tokio::spawn(node::heartbeat(
        client.clone(),
        machine,
        config.clone(),
        node,
        shutdown.clone(),
    ));
    manager::run(
        client,
        config,
        journal,
        workdirs,
        allocatable,
        streams,
        shutdown,
    )
    .await;
    let _ = heartbeat.await;
    // Sessions still under way end with their containers, which have stopped.
    server.abort();
    let _ = server.await;
    Ok(())
}

/// Registering fails only while the API server is unreachable: retry for a while.
async fn register_with_retries(
    client: &kube::Client,
    machine: &machine::Machine,
    config: &ExecutorConfig,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Option<kbatch_api::k8s_openapi::api::core::v1::Node>, ExecutorError> {
    let mut delay = std::time::Duration::from_millis(100);
    let mut attempt = 0;
    loop {
        match node::register(client, machine, config).await {
            Ok(n) => return Ok(Some(n)),
            Err(e) if attempt < 10 => {
                tracing::warn!(error = %e, attempt, "registering the node; retrying");
            }
            Err(source) => {
                return Err(ExecutorError::Register {
                    node: config.node_name.clone(),
                    source,
                });
            }
        }
        attempt += 1;
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => return Ok(None),
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(5));
    }
}

/// Time helpers shared by the modules.
pub(crate) mod time {
    use jiff::Timestamp;

    /// `metav1.Time` carries whole seconds: truncate so that what is compared is what is stored.
    pub fn seconds(t: Timestamp) -> Timestamp {
        Timestamp::from_second(t.as_second()).unwrap_or(t)
    }
}
