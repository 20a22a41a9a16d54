//! A running kbatch control plane in this process: the store, the API server, the
//! controllers (as HTTP clients of that server) and the executor. `kbatch up` runs one until
//! a signal; `kbatch run` runs an ephemeral one around a set of manifests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use kbatch_apiserver::ServerState;
use kbatch_controllers::manager::ManagerConfig;
use kbatch_store::{Store, StoreOptions};

use crate::kubeconfig::Access;
use crate::rest_metrics::RestMetricsLayer;
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

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

#[derive(Clone, Debug)]
pub struct InstanceConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub executor: Executor,
    pub watch_history_events: usize,
    /// The executor's node capacity (kubelet's maxPods).
    pub max_pods: usize,
    /// Events are deleted this long after their last write (kube-apiserver's `--event-ttl`).
    pub event_ttl: std::time::Duration,
    /// Serve metrics.k8s.io, scraping the nodes this often (metrics-server's
    /// `--metric-resolution`); none: not served.
    pub metric_resolution: Option<std::time::Duration>,
    pub controllers: ManagerConfig,
}

type ExecutorTask = (
    watch::Sender<bool>,
    JoinHandle<Result<(), kbatch_executor::ExecutorError>>,
);

pub struct Instance {
    /// Where clients on this machine reach the server.
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    client_config: kube::Config,
    store: Store,
    state: Arc<ServerState>,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    gc: JoinHandle<()>,
    event_expiry: JoinHandle<()>,
    metrics_scraper: Option<JoinHandle<()>>,
    stop_controllers: watch::Sender<bool>,
    controllers: JoinHandle<Result<(), kbatch_controllers::manager::ManagerError>>,
    executor: Option<ExecutorTask>,
}

impl Instance {
    /// Opens the store in `data_dir`, serves the API on `listen`, writes the kubeconfig and
    /// starts the controllers; `/readyz` answers 200 once all that is running.
    pub async fn start(cfg: InstanceConfig) -> anyhow::Result<Instance> {
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
        let bound = listener
            .local_addr()
            .context("reading the listen address")?;
        // Where this machine's clients connect: loopback when listening on every address.
        let addr = match bound.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, bound.port()))
            }
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, bound.port()))
            }
            _ => bound,
        };
        let state = ServerState::new(store.clone(), addr.to_string());
        state
            .bootstrap()
            .await
            .map_err(|e| anyhow::anyhow!("creating system namespaces: {e}"))?;

        // Plain HTTP on loopback; HTTPS with a bearer token on any other address.
        let kubeconfig = cfg.data_dir.join("kubeconfig");
        let (stop_server, stop_rx) = oneshot::channel::<()>();
        let stopped = async move {
            let _ = stop_rx.await;
        };
        let (server, client_config) = if cfg.listen.ip().is_loopback() {
            let url = format!("http://{addr}");
            crate::kubeconfig::write(&kubeconfig, &url, &Access::Plain)?;
            // Watch events go out as they happen, not held back for a segment to fill (TLS
            // connections get the same from the TLS listener).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let server = tokio::spawn(kbatch_apiserver::serve(listener, state.clone(), stopped));
            let url = url.parse().context("building the server's URL")?;
            (server, kube::Config::new(url))
        } else {
            let names = crate::tls::server_names(cfg.listen.ip());
            let creds = crate::tls::load_or_create(&crate::tls::pki_dir(&cfg.data_dir), &names)?;
            state.require_bearer_token(creds.token.clone());
            let access = Access::Tls {
                ca_pem: &creds.ca_pem,
                token: &creds.token,
            };
            crate::kubeconfig::write(&kubeconfig, &format!("https://{addr}"), &access)?;
            let listener = crate::tls::TlsListener::new(listener, creds.server.clone())
                .context("serving TLS")?;
            let server = tokio::spawn(kbatch_apiserver::serve(listener, state.clone(), stopped));
            // The in-process clients use the kubeconfig as any other client would.
            let kc = kube::config::Kubeconfig::read_from(&kubeconfig)
                .context("reading the kubeconfig just written")?;
            let config = kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .context("the kubeconfig just written")?;
            (server, config)
        };
        let gc = state.start_garbage_collector();
        let event_expiry = state.start_event_expiry(cfg.event_ttl);
        let metrics_scraper = cfg
            .metric_resolution
            .and_then(|r| state.start_metrics_api(r));
        state.set_metrics_source(Box::new(|| {
            kbatch_controllers::runtime::metrics::registry().render()
        }));

        // The controllers are clients of the server over HTTP, as they would be on a cluster.
        let (stop_controllers, controllers_stop) = watch::channel(false);
        let controllers = spawn_on_own_runtime("kbatch-controllers", || {
            let client = client_for(&client_config, Some(user_agent::CONTROLLER_MANAGER))?;
            // The embedded server is this process's own: one client, no client-side limit.
            Ok(kbatch_controllers::manager::run(
                kbatch_controllers::manager::Clients::shared(client),
                cfg.controllers,
                controllers_stop,
            ))
        })?;
        let executor = start_executor(
            &cfg.data_dir,
            cfg.executor,
            cfg.max_pods,
            &state,
            &client_config,
        )?;
        state.set_ready();
        Ok(Instance {
            addr,
            kubeconfig,
            client_config,
            store,
            state,
            stop_server,
            server,
            gc,
            event_expiry,
            metrics_scraper,
            stop_controllers,
            controllers,
            executor,
        })
    }

    /// A client of this instance's API server.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        client_for(&self.client_config, None)
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
        let _ = self.event_expiry.await;
        if let Some(scraper) = self.metrics_scraper {
            let _ = scraper.await;
        }
        self.store.close().await;
    }
}

/// The local executor, in-process, as a client of this server, which serves its logs.
fn start_executor(
    data_dir: &std::path::Path,
    executor: Executor,
    max_pods: usize,
    state: &ServerState,
    client_config: &kube::Config,
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
        let client = client_for(client_config, Some(user_agent::KUBELET))?;
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

/// The cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Worker threads of each side runtime (the controllers', the executor's) on a machine of
/// `cores`: half the cores, one at least and four at most. On two cores, two per side
/// runtime only made the threads take turns (a run of 1,000 short pods spent ~15% more of the
/// executor's CPU and took ~5% longer).
fn side_runtime_workers(cores: usize) -> usize {
    (cores / 2).clamp(1, 4)
}

/// Worker threads of the server's runtime when the side runtimes share the machine with it:
/// the cores one side runtime leaves, one at least. On two cores that is one thread: with
/// two, the 1,000-pod run took 3-5% longer (the threads took turns with the side runtimes,
/// the store's writer and the containers) and 10,000 single-pod Jobs no less time.
pub fn server_workers(cores: usize) -> usize {
    cores.saturating_sub(side_runtime_workers(cores)).max(1)
}

/// A runtime of `workers` threads, named `name` when given. One thread is tokio's
/// current-thread scheduler, driven by the thread that blocks on it: against a multi-thread
/// scheduler of one worker it spared the controllers ~7% of their CPU and the executor ~5% in
/// the 10,000-Job benchmark (no work-stealing queues, no hand-off to a worker).
pub fn runtime(workers: usize, name: Option<&str>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    if let Some(name) = name {
        builder.thread_name(name);
    }
    builder.enable_all().build()
}

/// Runs the future `start` makes on a runtime of its own, driven by a thread named `name`
/// (its workers too, if it has several), as the controllers and the kubelet run in processes
/// of their own on a cluster: their work (decoding watch events, spawning processes) then
/// never holds up the server's threads, and the OS shares the cores between the three.
/// `start` runs in that runtime's context, so the client it builds keeps its tasks there too.
fn spawn_on_own_runtime<F, S>(name: &str, start: S) -> anyhow::Result<JoinHandle<F::Output>>
where
    S: FnOnce() -> anyhow::Result<F>,
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = runtime(side_runtime_workers(cores()), Some(name))
        .with_context(|| format!("starting the {name} runtime"))?;
    let future = {
        let _on = rt.enter();
        start()?
    };
    // The future runs as a task of the runtime (on its workers when it has several); the
    // thread drives the runtime until the task ends, then drops it. The outcome, or a panic
    // to pass on, comes back to the caller's runtime.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let task = rt.spawn(future);
            let _ = tx.send(rt.block_on(task));
        })
        .with_context(|| format!("starting the {name} thread"))?;
    Ok(tokio::spawn(async move {
        match rx.await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => match e.try_into_panic() {
                Ok(payload) => std::panic::resume_unwind(payload),
                // Not cancelled: the runtime lives until its thread has sent the outcome.
                Err(e) => panic!("the {name} task ended without an outcome: {e}"),
            },
            Err(_) => panic!("the {name} thread ended without an outcome"),
        }
    }))
}

/// A client with `config` (the server's URL and credentials), sending `component`'s
/// User-Agent when given.
fn client_for(config: &kube::Config, component: Option<&str>) -> anyhow::Result<kube::Client> {
    let mut config = config.clone();
    if let Some(component) = component {
        config = user_agent::with_user_agent(config, component)?;
    }
    let metrics = RestMetricsLayer::for_config(&config);
    Ok(kube::client::ClientBuilder::try_from(config)
        .context("building the API client")?
        .with_layer(&metrics)
        .build())
}

#[cfg(test)]
mod tests {
    use super::{server_workers, side_runtime_workers};

    /// Side runtimes: half the cores, one to four; the server: what one side runtime leaves.
    #[test]
    fn threads_per_runtime_by_cores() {
        let got: Vec<(usize, usize, usize)> = [1, 2, 3, 4, 6, 8, 16, 64]
            .into_iter()
            .map(|cores| (cores, side_runtime_workers(cores), server_workers(cores)))
            .collect();
        let want = [
            (1, 1, 1),
            (2, 1, 1),
            (3, 1, 2),
            (4, 2, 2),
            (6, 3, 3),
            (8, 4, 4),
            (16, 4, 12),
            (64, 4, 60),
        ];
        assert_eq!(got, want);
    }
}
