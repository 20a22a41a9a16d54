//! `kbatch up`: store + API server + controllers + executor in one process, until a signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use kbatch_store::StoreOptions;

use crate::controllers::ControllerFlags;
use crate::instance::{Executor, Instance, InstanceConfig};

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the store, logs and kubeconfig live.
    #[arg(long, default_value = "./kbatch-data")]
    pub data_dir: PathBuf,
    /// Address to serve the Kubernetes API on: plain HTTP on a loopback address, HTTPS with
    /// a CA of its own and a bearer token (both in the kubeconfig) on any other.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Which executor runs pods.
    #[arg(long, value_enum, default_value = "process")]
    pub executor: Executor,
    /// How many past changes a watch can resume from (older resourceVersions get 410 Expired).
    #[arg(long, default_value_t = StoreOptions::default().history_events)]
    pub watch_history_events: usize,
    /// How long events are kept after their last write (kube-apiserver's --event-ttl; a Go
    /// duration).
    #[arg(long, default_value = "1h0m0s", value_parser = crate::controllers::go_duration)]
    pub event_ttl: std::time::Duration,
    /// How often every node's kubelet is scraped for the metrics.k8s.io API that `kubectl
    /// top` reads (metrics-server's --metric-resolution; a Go duration).
    #[arg(long, default_value = "15s", value_parser = metric_resolution)]
    pub metric_resolution: std::time::Duration,
    /// At most this many unfinished pods run on the executor's node at once (kubelet's maxPods).
    #[arg(long, default_value_t = 110)]
    pub max_pods: usize,
    /// Which controllers to run, comma-separated: job, cronjob, ttl, podgc, tainteviction,
    /// serviceaccount, disruption (empty: none; without serviceaccount, new namespaces get no
    /// default ServiceAccount and their pods are refused).
    #[arg(
        long,
        default_value = "job,cronjob,ttl,podgc,tainteviction,serviceaccount,disruption"
    )]
    pub controllers: String,
    #[command(flatten)]
    pub controller_flags: ControllerFlags,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let controllers = args.controller_flags.manager_config(&args.controllers)?;
    let instance = Instance::start(InstanceConfig {
        data_dir: args.data_dir,
        listen: args.listen,
        executor: args.executor,
        watch_history_events: args.watch_history_events,
        max_pods: args.max_pods,
        event_ttl: args.event_ttl,
        metric_resolution: Some(args.metric_resolution),
        controllers,
    })
    .await?;
    tracing::info!(
        address = %instance.addr,
        kubeconfig = %instance.kubeconfig.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "kbatch is up"
    );
    wait_for_signal().await;
    tracing::info!("shutting down");
    instance.stop().await;
    Ok(())
}

/// A positive Go duration (a scrape period of zero would never wait).
fn metric_resolution(s: &str) -> Result<std::time::Duration, String> {
    let d = crate::controllers::go_duration(s)?;
    if d.is_zero() {
        return Err(format!("metric-resolution must be positive, got {s}"));
    }
    Ok(d)
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
