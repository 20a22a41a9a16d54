//! `kbatch up`: store + API server (+ controllers and executor as they are added), one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use kbatch_apiserver::ServerState;
use kbatch_store::{Store, StoreOptions};
use tokio::sync::watch;

use crate::controllers::ControllerFlags;

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
    /// Which controllers to run, comma-separated: job, cronjob, ttl, podgc (empty: none).
    #[arg(long, default_value = "job,cronjob,ttl,podgc")]
    pub controllers: String,
    #[command(flatten)]
    pub controller_flags: ControllerFlags,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    if !args.listen.ip().is_loopback() {
        bail!(
            "--listen {}: plain HTTP is served on loopback addresses only (TLS for other addresses is not available yet)",
            args.listen
        );
    }
    if args.executor != Executor::None {
        bail!(
            "--executor {:?}: only the `none` executor is available in this build; run with --executor none",
            args.executor
        );
    }
    let manager_config = args.controller_flags.manager_config(&args.controllers)?;
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
    state.set_metrics_source(Box::new(|| {
        kbatch_controllers::runtime::metrics::registry().render()
    }));

    // The controllers are clients of the server over HTTP, as they would be on a cluster.
    let client_config = kube::Config::new(
        format!("http://{addr}")
            .parse()
            .context("building the server's URL")?,
    );
    let client = kube::Client::try_from(client_config).context("building the API client")?;
    let (stop_controllers, controllers_stop) = watch::channel(false);
    let controllers = tokio::spawn(kbatch_controllers::manager::run(
        client,
        manager_config,
        controllers_stop,
    ));
    state.set_ready();
    tracing::info!(
        address = %addr,
        kubeconfig = %kubeconfig.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "kbatch is up"
    );

    wait_for_signal().await;
    tracing::info!("shutting down");
    let _ = stop_controllers.send(true);
    match controllers.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "controllers stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "controllers task failed"),
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

pub async fn wait_for_signal() {
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
