//! `kbatch up`: store + API server (+ controllers and executor as they are added), one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use kbatch_apiserver::ServerState;
use kbatch_store::{Store, StoreOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Executor {
    /// Run pod containers as host processes.
    Process,
    /// Bind and complete pods without processes (for scale tests and demos).
    Simulate,
    /// No executor: pods stay Pending until a client updates their status.
    None,
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the store, logs and kubeconfig live.
    #[arg(long, default_value = "./kbatch-data")]
    pub data_dir: PathBuf,
    /// Address to serve the Kubernetes API on (plain HTTP: loopback only).
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Which executor runs pods.
    #[arg(long, value_enum, default_value = "process")]
    pub executor: Executor,
    /// How many past changes a watch can resume from (older resourceVersions get 410 Expired).
    #[arg(long, default_value_t = StoreOptions::default().history_events)]
    pub watch_history_events: usize,
    /// At most this many unfinished pods run on the executor's node at once (kubelet's maxPods).
    #[arg(long, default_value_t = 110)]
    pub max_pods: usize,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    if !args.listen.ip().is_loopback() {
        bail!(
            "--listen {}: plain HTTP is served on loopback addresses only (TLS for other addresses is not available yet)",
            args.listen
        );
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let store_dir = args.data_dir.join("store");
    std::fs::create_dir_all(&store_dir)
        .with_context(|| format!("creating {}", store_dir.display()))?;
    let store = Store::open(
        &store_dir,
        StoreOptions {
            history_events: args.watch_history_events,
            ..StoreOptions::default()
        },
    )
    .with_context(|| format!("opening the store in {}", store_dir.display()))?;

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener
        .local_addr()
        .context("reading the listen address")?;
    let state = ServerState::new(store.clone(), addr.to_string());
    state
        .bootstrap()
        .await
        .map_err(|e| anyhow::anyhow!("creating system namespaces: {e}"))?;

    let kubeconfig = args.data_dir.join("kubeconfig");
    crate::kubeconfig::write(&kubeconfig, &format!("http://{addr}"))?;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(kbatch_apiserver::serve(
        listener,
        state.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let gc = state.start_garbage_collector();
    let executor = start_executor(&args, &state, addr)?;
    state.set_ready();
    tracing::info!(
        address = %addr,
        kubeconfig = %kubeconfig.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "kbatch is up"
    );

    wait_for_signal().await;
    tracing::info!("shutting down");
    if let Some((stop, task)) = executor {
        // Before the server: the executor stops its containers while it can still reach it.
        let _ = stop.send(true);
        if let Err(e) = task.await {
            tracing::warn!(error = %e, "executor task failed");
        }
    }
    state.begin_shutdown();
    let _ = stop_tx.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "server stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "server task failed"),
    }
    let _ = gc.await;
    store.close().await;
    Ok(())
}

type ExecutorTask = (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), kbatch_executor::ExecutorError>>,
);

/// The local executor, in-process, as a client of this server; its logs are served by it.
fn start_executor(
    args: &UpArgs,
    state: &ServerState,
    addr: SocketAddr,
) -> anyhow::Result<Option<ExecutorTask>> {
    let runtime = match args.executor {
        Executor::None => return Ok(None),
        Executor::Process => kbatch_executor::RuntimeKind::Process,
        Executor::Simulate => kbatch_executor::RuntimeKind::Simulate,
    };
    let mut config = kbatch_executor::ExecutorConfig::new(args.data_dir.clone());
    config.runtime = runtime;
    config.max_pods = args.max_pods;
    state.set_log_dir(config.log_dir());
    let url = format!("http://{addr}")
        .parse()
        .context("the executor's server URL")?;
    let client =
        kube::Client::try_from(kube::Config::new(url)).context("building the executor's client")?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let result = kbatch_executor::run(client, config, stopped).await;
        if let Err(e) = &result {
            // Said at once: the server keeps serving without an executor.
            tracing::error!(error = %e, "the executor stopped");
        }
        result
    });
    Ok(Some((stop, task)))
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
