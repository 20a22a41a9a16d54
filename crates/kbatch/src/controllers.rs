//! `kbatch controllers`: the controllers against any Kubernetes API server, and the tuning
//! flags that `kbatch up` shares.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use kbatch_controllers::cronjob::controller::CronJobControllerConfig;
use kbatch_controllers::job::backoff::BackoffConfig;
use kbatch_controllers::job::controller::JobControllerConfig;
use kbatch_controllers::manager::{self, ManagerConfig};
use kbatch_controllers::runtime::leader::{self, LeaderElectionConfig};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;

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
    /// Which controllers to run, comma-separated: job, cronjob, ttl (or `*`).
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
}

/// A client for the API server of a kubeconfig file, or inferred from the environment.
pub async fn client_for(kubeconfig: Option<&PathBuf>) -> anyhow::Result<Client> {
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
    let config = crate::user_agent::with_user_agent(config, crate::user_agent::CONTROLLER_MANAGER)?;
    Client::try_from(config).context("building the API client")
}

pub async fn run(args: ControllersArgs) -> anyhow::Result<()> {
    let config = args.flags.manager_config(&args.controllers)?;
    let client = client_for(args.kubeconfig.as_ref()).await?;
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
            match leader::run_with_leader_election(client.clone(), election, stop_rx, move |stop| {
                manager::run(client, config, stop)
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
            manager::run(client, config, stop_rx)
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
