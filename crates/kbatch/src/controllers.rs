//! `kbatch controllers`: the controllers against any Kubernetes API server, and the tuning
//! flags that `kbatch up` shares.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use kbatch_controllers::cronjob::controller::CronJobControllerConfig;
use kbatch_controllers::job::backoff::BackoffConfig;
use kbatch_controllers::job::controller::JobControllerConfig;
use kbatch_controllers::manager::{self, Clients, ControllerName, ManagerConfig};
use kbatch_controllers::runtime::leader::{self, LeaderElectionConfig};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;

use crate::ratelimit::{Rate, RateLimitLayer};
use crate::rest_metrics::RestMetricsLayer;

pub(crate) fn go_duration(s: &str) -> Result<Duration, String> {
    kbatch_cron::parse_go_duration(s)
}

/// Controller settings, named after upstream's kube-controller-manager settings.
#[derive(Args, Debug, Clone)]
pub struct ControllerFlags {
    /// Jobs synced at once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_job_syncs: u16,
    /// CronJobs synced at once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_cron_job_syncs: u16,
    /// First delay before replacing a failed pod (doubles with each failure).
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub pod_failure_backoff: Duration,
    /// Longest delay before replacing a failed pod.
    #[arg(long, default_value = "10m", value_parser = go_duration)]
    pub pod_failure_backoff_max: Duration,
    /// How long a Job's pod changes are gathered before the Job syncs (upstream's fixed 1 s
    /// syncJobBatchPeriod). Shorter turns waves of short pods around faster on one machine.
    #[arg(long, default_value = "1s", value_parser = go_duration)]
    pub job_sync_batch_period: Duration,
}

impl ControllerFlags {
    pub fn manager_config(&self, controllers: &str) -> anyhow::Result<ManagerConfig> {
        let controllers = manager::parse_controllers(controllers)?;
        Ok(ManagerConfig {
            controllers,
            job: JobControllerConfig {
                workers: usize::from(self.concurrent_job_syncs),
                backoff: BackoffConfig {
                    base: self.pod_failure_backoff,
                    max: self.pod_failure_backoff_max.max(self.pod_failure_backoff),
                },
                pod_update_batch_period: self.job_sync_batch_period,
            },
            cronjob: CronJobControllerConfig {
                workers: usize::from(self.concurrent_cron_job_syncs),
            },
        })
    }
}

#[derive(Args, Debug)]
pub struct ControllersArgs {
    /// The kubeconfig of the API server to work against (default: $KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Which controllers to run, comma-separated: job, cronjob, ttl, and (which a cluster runs
    /// itself) podgc, tainteviction, serviceaccount, disruption; or `*`.
    #[arg(long, default_value = "job,cronjob,ttl")]
    pub controllers: String,
    #[command(flatten)]
    pub flags: ControllerFlags,
    /// Serve `/metrics` (Prometheus) and `/healthz` on this address.
    #[arg(long)]
    pub metrics_bind_address: Option<std::net::SocketAddr>,
    /// Run as one of several replicas: only the holder of the Lease
    /// kube-system/kbatch-controller-manager acts.
    #[arg(long)]
    pub leader_elect: bool,
    /// How long a leader's Lease stays valid without renewal.
    #[arg(long, default_value = "15s", value_parser = go_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader to renew.
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    pub leader_elect_retry_period: Duration,
    /// Requests per second that each controller's client (and the informers', and leader
    /// election's) may send; 0 means 5, a negative value no limit (client-go's QPS).
    #[arg(long, default_value_t = 20.0, allow_negative_numbers = true)]
    pub kube_api_qps: f32,
    /// Requests a client may send at once above that rate; 0 means 10.
    #[arg(long, default_value_t = 30, allow_negative_numbers = true)]
    pub kube_api_burst: i32,
}

/// The client configuration of a kubeconfig file, or inferred from the environment, with the
/// controller manager's User-Agent.
async fn config_for(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster configuration")?,
    };
    crate::user_agent::with_user_agent(config, crate::user_agent::CONTROLLER_MANAGER)
}

/// A client of `config` whose requests keep to `rate` (its own bucket), when given.
fn limited_client(config: &kube::Config, rate: Option<Rate>) -> anyhow::Result<Client> {
    // client-go's request metrics time a request after its wait for the rate limiter.
    let builder = kube::client::ClientBuilder::try_from(config.clone())
        .context("building the API client")?
        .with_layer(&RestMetricsLayer::for_config(config));
    Ok(match rate {
        Some(rate) => builder.with_layer(&RateLimitLayer::new(rate)).build(),
        None => builder.build(),
    })
}

/// As kube-controller-manager: a client, with its own rate limit, for each controller, for
/// the shared informers and for leader election.
fn controller_clients(
    config: &kube::Config,
    rate: Option<Rate>,
) -> anyhow::Result<(Clients, Client)> {
    let informers = limited_client(config, rate)?;
    let mut clients = std::collections::HashMap::new();
    for c in ControllerName::ALL {
        clients.insert(c.client_name(), limited_client(config, rate)?);
    }
    let leader_election = limited_client(config, rate)?;
    // Every name the manager asks for is a controller's or the informers'.
    let clients =
        Clients::per_controller(move |name| clients.get(name).unwrap_or(&informers).clone());
    Ok((clients, leader_election))
}

pub async fn run(args: ControllersArgs) -> anyhow::Result<()> {
    let config = args.flags.manager_config(&args.controllers)?;
    let rate =
        Rate::from_flags(args.kube_api_qps, args.kube_api_burst).context("--kube-api-burst")?;
    let client_config = config_for(args.kubeconfig.as_ref()).await?;
    let (clients, client) = controller_clients(&client_config, rate)?;
    let version = client
        .apiserver_version()
        .await
        .context("reaching the API server")?;
    tracing::info!(
        server = %format!("{}.{}", version.major, version.minor),
        controllers = %args.controllers,
        "connected"
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    if let Some(addr) = args.metrics_bind_address {
        let listener = crate::metrics_server::bind(addr).await?;
        tracing::info!(address = %addr, "serving metrics");
        tokio::spawn(crate::metrics_server::serve(listener, stop_rx.clone()));
    }
    let mut controllers = if args.leader_elect {
        let election = LeaderElectionConfig {
            namespace: "kube-system".into(),
            name: "kbatch-controller-manager".into(),
            identity: format!("{}_{}", hostname(), uuid::Uuid::new_v4()),
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        };
        tokio::spawn(async move {
            match leader::run_with_leader_election(client, election, stop_rx, move |stop| {
                manager::run(clients, config, stop)
            })
            .await
            {
                Ok(Some(r)) => r.map_err(anyhow::Error::from),
                Ok(None) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
    } else {
        tokio::spawn(async move {
            manager::run(clients, config, stop_rx)
                .await
                .map_err(anyhow::Error::from)
        })
    };
    let result = tokio::select! {
        _ = crate::up::wait_for_signal() => {
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
            (&mut controllers).await
        }
        r = &mut controllers => r,
    };
    result.context("the controllers task failed")?
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kbatch".to_string())
}
