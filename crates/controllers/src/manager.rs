//! Runs a chosen set of controllers against one API server until shutdown, as
//! kube-controller-manager does: each controller with its own event source component (and,
//! given [`Clients::per_controller`], its own API client), all of them reading the same
//! informers (one watch and cache per kind).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{error, info};

use crate::cronjob::controller::{self as cronjob_controller, CronJobControllerConfig};
use crate::job::controller::{self as job_controller, JobControllerConfig};
use crate::runtime::events::EventRecorder;
use crate::runtime::informer::InformerFactory;

/// A controller kbatch can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerName {
    Job,
    CronJob,
    Ttl,
    /// The unscheduled-terminating part of the pod garbage collector (standalone only: a
    /// cluster runs its own).
    PodGc,
    /// NoExecute taints evict the pods that do not tolerate them (standalone only: a cluster
    /// runs its own).
    TaintEviction,
    /// Every namespace's `default` ServiceAccount (standalone only: a cluster runs its own).
    ServiceAccount,
    /// PodDisruptionBudgets' status (standalone only: a cluster runs its own).
    Disruption,
}

impl ControllerName {
    pub const ALL: [ControllerName; 7] = [
        ControllerName::Job,
        ControllerName::CronJob,
        ControllerName::Ttl,
        ControllerName::PodGc,
        ControllerName::TaintEviction,
        ControllerName::ServiceAccount,
        ControllerName::Disruption,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ControllerName::Job => "job",
            ControllerName::CronJob => "cronjob",
            ControllerName::Ttl => "ttl",
            ControllerName::PodGc => "podgc",
            ControllerName::TaintEviction => "tainteviction",
            ControllerName::ServiceAccount => "serviceaccount",
            ControllerName::Disruption => "disruption",
        }
    }
}

impl ControllerName {
    /// The name kube-controller-manager builds this controller's client with (its
    /// `ClientBuilder.ClientOrDie` name; the client's User-Agent carries it there).
    pub fn client_name(self) -> &'static str {
        match self {
            ControllerName::Job => "job-controller",
            ControllerName::CronJob => "cronjob-controller",
            ControllerName::Ttl => "ttl-after-finished-controller",
            ControllerName::PodGc => "pod-garbage-collector",
            ControllerName::TaintEviction => crate::tainteviction::COMPONENT,
            ControllerName::ServiceAccount => crate::serviceaccount::COMPONENT,
            ControllerName::Disruption => crate::disruption::CLIENT_NAME,
        }
    }
}

/// The client of the informers, as kube-controller-manager names it.
pub const SHARED_INFORMERS: &str = "shared-informers";

/// The API client of each controller and of the shared informers: one for all, or one per
/// name (kube-controller-manager's layout, where each client has its own rate limit).
#[derive(Clone)]
pub struct Clients(Arc<dyn Fn(&str) -> Client + Send + Sync>);

impl Clients {
    /// Every controller and the informers share `client`.
    pub fn shared(client: Client) -> Clients {
        Clients(Arc::new(move |_| client.clone()))
    }

    /// `make(name)` builds the client of [`ControllerName::client_name`], or of
    /// [`SHARED_INFORMERS`]; it is called once per name.
    pub fn per_controller(make: impl Fn(&str) -> Client + Send + Sync + 'static) -> Clients {
        Clients(Arc::new(make))
    }

    pub fn client(&self, name: &str) -> Client {
        (self.0)(name)
    }
}

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown controller {0:?}: valid controllers are job, cronjob, ttl, podgc, tainteviction, serviceaccount, disruption"
)]
pub struct UnknownController(pub String);

impl FromStr for ControllerName {
    type Err = UnknownController;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "job" => Ok(ControllerName::Job),
            "cronjob" => Ok(ControllerName::CronJob),
            "ttl" | "ttl-after-finished" => Ok(ControllerName::Ttl),
            "podgc" => Ok(ControllerName::PodGc),
            "tainteviction" | "taint-eviction-controller" => Ok(ControllerName::TaintEviction),
            "serviceaccount" | "serviceaccount-controller" => Ok(ControllerName::ServiceAccount),
            "disruption" | "disruption-controller" => Ok(ControllerName::Disruption),
            other => Err(UnknownController(other.to_string())),
        }
    }
}

/// Parses `job,cronjob,ttl,podgc,tainteviction,serviceaccount,disruption` (or `*` for all).
pub fn parse_controllers(list: &str) -> Result<BTreeSet<ControllerName>, UnknownController> {
    if list.trim() == "*" {
        return Ok(ControllerName::ALL.into_iter().collect());
    }
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(str::parse)
        .collect()
}

#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub controllers: BTreeSet<ControllerName>,
    pub job: JobControllerConfig,
    pub cronjob: CronJobControllerConfig,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            controllers: ControllerName::ALL.into_iter().collect(),
            job: JobControllerConfig::default(),
            cronjob: CronJobControllerConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("the {0} controller failed: {1}")]
    Controller(ControllerName, String),
}

/// Runs the configured controllers until `shutdown` turns true (or one of them fails).
pub async fn run(
    clients: Clients,
    config: ManagerConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ManagerError> {
    let mut tasks: JoinSet<Result<(), ManagerError>> = JoinSet::new();
    let mut recorders = Vec::new();
    // One informer per kind, shared by the controllers that need it.
    let informers = InformerFactory::new(clients.client(SHARED_INFORMERS));
    for name in &config.controllers {
        // The controller's writes and its events go through its own client.
        let client = clients.client(name.client_name());
        match name {
            ControllerName::Job => {
                let (recorder, task) =
                    EventRecorder::start(client.clone(), job_controller::COMPONENT);
                recorders.push(task);
                let (client, cfg, stop) = (client.clone(), config.job.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    job_controller::run(client, &informers, cfg, recorder, stop)
                        .await
                        .map_err(|e| ManagerError::Controller(ControllerName::Job, e.to_string()))
                });
            }
            ControllerName::PodGc => {
                let (client, stop) = (client.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    crate::podgc::run(client, &informers, stop).await;
                    Ok(())
                });
            }
            ControllerName::Disruption => {
                let (recorder, task) =
                    EventRecorder::start(client.clone(), crate::disruption::COMPONENT);
                recorders.push(task);
                let (client, stop) = (client.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    crate::disruption::run(client, &informers, recorder, stop).await;
                    Ok(())
                });
            }
            ControllerName::ServiceAccount => {
                let (client, stop) = (client.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    crate::serviceaccount::run(client, &informers, stop).await;
                    Ok(())
                });
            }
            ControllerName::TaintEviction => {
                let (recorder, task) =
                    EventRecorder::start(client.clone(), crate::tainteviction::COMPONENT);
                recorders.push(task);
                let (client, stop) = (client.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    crate::tainteviction::run(client, &informers, recorder, stop).await;
                    Ok(())
                });
            }
            ControllerName::CronJob => {
                let (recorder, task) =
                    EventRecorder::start(client.clone(), cronjob_controller::COMPONENT);
                recorders.push(task);
                let (client, cfg, stop) =
                    (client.clone(), config.cronjob.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    cronjob_controller::run(client, &informers, cfg, recorder, stop)
                        .await
                        .map_err(|e| {
                            ManagerError::Controller(ControllerName::CronJob, e.to_string())
                        })
                });
            }
            ControllerName::Ttl => {
                let (client, stop) = (client.clone(), shutdown.clone());
                let informers = informers.clone();
                tasks.spawn(async move {
                    crate::ttl::controller::run(client, &informers, stop).await;
                    Ok(())
                });
            }
        }
    }
    info!(controllers = ?config.controllers, "controllers starting");
    let mut result = Ok(());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                error!(error = %e, "a controller stopped");
                result = Err(e);
            }
            Err(e) => error!(error = %e, "a controller task failed"),
        }
    }
    // The controllers dropped their recorders: each writer sends what is left, then ends.
    for r in recorders {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), r).await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_controller_lists() {
        let all: BTreeSet<_> = ControllerName::ALL.into_iter().collect();
        assert_eq!(
            parse_controllers("job,cronjob,ttl,podgc,tainteviction,serviceaccount,disruption"),
            Ok(all.clone())
        );
        assert_eq!(parse_controllers("*"), Ok(all));
        assert_eq!(
            parse_controllers("job"),
            Ok([ControllerName::Job].into_iter().collect())
        );
        assert_eq!(
            parse_controllers("job,nope"),
            Err(UnknownController("nope".into()))
        );
    }
}
