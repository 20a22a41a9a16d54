//! A running kbatch control plane in this process: the store, the API server, the
//! controllers (as HTTP clients of that server) and the executor. `kbatch up` runs one until
//! a signal; `kbatch run` runs an ephemeral one around a set of manifests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use kbatch_apiserver::ServerState;
use kbatch_controllers::manager::ManagerConfig;
use kbatch_store::{Store, StoreOptions};

use crate::user_agent;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Which executor runs pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Executor {
    /// Run pod containers as host processes.
    Process,
    /// Bind and complete pods without processes (for scale tests and demos).
    Simulate,
    /// No executor: pods stay Pending until a client updates their status.
    None,
}

#[derive(Clone, Debug)]
pub struct InstanceConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub executor: Executor,
    pub watch_history_events: usize,
    /// The executor's node capacity (kubelet's maxPods).
    pub max_pods: usize,
    pub controllers: ManagerConfig,
}

type ExecutorTask = (
    watch::Sender<bool>,
    JoinHandle<Result<(), kbatch_executor::ExecutorError>>,
);

pub struct Instance {
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    store: Store,
    state: Arc<ServerState>,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    gc: JoinHandle<()>,
    stop_controllers: watch::Sender<bool>,
    controllers: JoinHandle<Result<(), kbatch_controllers::manager::ManagerError>>,
    executor: Option<ExecutorTask>,
}

impl Instance {
    /// Opens the store in `data_dir`, serves the API on `listen`, writes the kubeconfig and
    /// starts the controllers; `/readyz` answers 200 once all that is running.
    pub async fn start(cfg: InstanceConfig) -> anyhow::Result<Instance> {
        if !cfg.listen.ip().is_loopback() {
            bail!(
                "--listen {}: plain HTTP is served on loopback addresses only (TLS for other addresses is not available yet)",
                cfg.listen
            );
        }
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
        let store_dir = cfg.data_dir.join("store");
        std::fs::create_dir_all(&store_dir)
            .with_context(|| format!("creating {}", store_dir.display()))?;
        let store = Store::open(
            &store_dir,
            StoreOptions {
                history_events: cfg.watch_history_events,
                ..StoreOptions::default()
            },
        )
        .with_context(|| format!("opening the store in {}", store_dir.display()))?;

        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("listening on {}", cfg.listen))?;
        let addr = listener
            .local_addr()
            .context("reading the listen address")?;
        let state = ServerState::new(store.clone(), addr.to_string());
        state
            .bootstrap()
            .await
            .map_err(|e| anyhow::anyhow!("creating system namespaces: {e}"))?;

        let kubeconfig = cfg.data_dir.join("kubeconfig");
        crate::kubeconfig::write(&kubeconfig, &format!("http://{addr}"))?;

        let (stop_server, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(kbatch_apiserver::serve(
            listener,
            state.clone(),
            async move {
                let _ = stop_rx.await;
            },
        ));
        let gc = state.start_garbage_collector();
        state.set_metrics_source(Box::new(|| {
            kbatch_controllers::runtime::metrics::registry().render()
        }));

        // The controllers are clients of the server over HTTP, as they would be on a cluster.
        let (stop_controllers, controllers_stop) = watch::channel(false);
        let controllers = spawn_on_own_runtime("kbatch-controllers", || {
            let client = client_for(addr, Some(user_agent::CONTROLLER_MANAGER))?;
            Ok(kbatch_controllers::manager::run(
                client,
                cfg.controllers,
                controllers_stop,
            ))
        })?;
        let executor = start_executor(&cfg.data_dir, cfg.executor, cfg.max_pods, &state, addr)?;
        state.set_ready();
        Ok(Instance {
            addr,
            kubeconfig,
            store,
            state,
            stop_server,
            server,
            gc,
            stop_controllers,
            controllers,
            executor,
        })
    }

    /// A client of this instance's API server.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        client_for(self.addr, None)
    }

    /// Stops the executor (its containers, while it can still report them), the
    /// controllers, then the server (ending every watch), then closes the store.
    pub async fn stop(self) {
        if let Some((stop, task)) = self.executor {
            let _ = stop.send(true);
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "executor stopped with an error"),
                Err(e) => tracing::warn!(error = %e, "executor task failed"),
            }
        }
        let _ = self.stop_controllers.send(true);
        match self.controllers.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "controllers stopped with an error"),
            Err(e) => tracing::warn!(error = %e, "controllers task failed"),
        }
        self.state.begin_shutdown();
        let _ = self.stop_server.send(());
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "server stopped with an error"),
            Err(e) => tracing::warn!(error = %e, "server task failed"),
        }
        let _ = self.gc.await;
        self.store.close().await;
    }
}

/// The local executor, in-process, as a client of this server, which serves its logs.
fn start_executor(
    data_dir: &std::path::Path,
    executor: Executor,
    max_pods: usize,
    state: &ServerState,
    addr: SocketAddr,
) -> anyhow::Result<Option<ExecutorTask>> {
    let runtime = match executor {
        Executor::None => return Ok(None),
        Executor::Process => kbatch_executor::RuntimeKind::Process,
        Executor::Simulate => kbatch_executor::RuntimeKind::Simulate,
    };
    let mut config = kbatch_executor::ExecutorConfig::new(data_dir.to_path_buf());
    config.runtime = runtime;
    config.max_pods = max_pods;
    state.set_log_dir(config.log_dir());
    let (stop, stopped) = watch::channel(false);
    let task = spawn_on_own_runtime("kbatch-executor", || {
        let client = client_for(addr, Some(user_agent::KUBELET))?;
        Ok(async move {
            let result = kbatch_executor::run(client, config, stopped).await;
            if let Err(e) = &result {
                // Said at once: the server keeps serving without an executor.
                tracing::error!(error = %e, "the executor stopped");
            }
            result
        })
    })?;
    Ok(Some((stop, task)))
}

/// Runs the future `start` makes on a runtime of its own (two worker threads named `name`),
/// as the controllers and the kubelet run in processes of their own on a cluster: their work
/// (decoding watch events, spawning processes) then never holds up the server's threads, and
/// the OS shares the cores between the three. `start` runs in that runtime's context, so the
/// client it builds keeps its tasks there too.
fn spawn_on_own_runtime<F, S>(name: &str, start: S) -> anyhow::Result<JoinHandle<F::Output>>
where
    S: FnOnce() -> anyhow::Result<F>,
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .with_context(|| format!("starting the {name} runtime"))?;
    let future = {
        let _on = rt.enter();
        start()?
    };
    // The blocking thread drives the runtime until the future ends, then drops it.
    Ok(tokio::task::spawn_blocking(move || rt.block_on(future)))
}

/// A client of the server at `addr`, sending `component`'s User-Agent when given.
fn client_for(addr: SocketAddr, component: Option<&str>) -> anyhow::Result<kube::Client> {
    let url = format!("http://{addr}")
        .parse()
        .context("building the server's URL")?;
    let mut config = kube::Config::new(url);
    if let Some(component) = component {
        config = user_agent::with_user_agent(config, component)?;
    }
    kube::Client::try_from(config).context("building the API client")
}
