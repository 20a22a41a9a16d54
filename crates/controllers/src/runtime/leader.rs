//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's `leaderelection`
//! package does it, so that several replicas of the controllers can run and only one acts.
//!
//! A candidate takes the Lease when it does not exist, when it is released (no holder), or when
//! its record has not changed for a whole lease duration *as observed by this candidate's own
//! clock* (no comparison of timestamps written by other machines, so clock skew does not
//! matter). The leader renews every retry period; if it cannot renew within the renew deadline
//! it stops leading. On a graceful stop it releases the Lease so that another replica takes
//! over at once.

use std::future::Future;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    pub namespace: String,
    pub name: String,
    /// This candidate's identity (hostname and a random suffix, as upstream).
    pub identity: String,
    /// `--leader-elect-lease-duration` (15s).
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline` (10s).
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period` (2s).
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error("leader election lost: the lease {0} could not be renewed in time")]
    Lost(String),
}

/// What this candidate last saw of the Lease, and when it saw it change.
#[derive(Default)]
struct Observed {
    record: Option<(Option<String>, Option<MicroTime>, Option<i32>)>,
    at: Option<Instant>,
}

/// Whether a Lease record can be taken by `identity`, given what was observed of it.
fn can_take(
    spec: &LeaseSpec,
    identity: &str,
    observed_at: Option<Instant>,
    now: Instant,
    lease: Duration,
) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    // Someone else holds it: only when their record has been still for a full lease.
    observed_at.is_some_and(|at| now.saturating_duration_since(at) >= lease)
}

struct Elector {
    api: Api<Lease>,
    cfg: LeaderElectionConfig,
    observed: Observed,
}

impl Elector {
    fn observe(&mut self, spec: &LeaseSpec) {
        let record = (
            spec.holder_identity.clone(),
            spec.renew_time.clone(),
            spec.lease_transitions,
        );
        if self.observed.record.as_ref() != Some(&record) {
            self.observed.record = Some(record);
            self.observed.at = Some(Instant::now());
        }
    }

    fn desired(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let secs = i32::try_from(self.cfg.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        match previous {
            Some(prev) if prev.holder_identity.as_deref() == Some(self.cfg.identity.as_str()) => {
                LeaseSpec {
                    renew_time: Some(now),
                    lease_duration_seconds: Some(secs),
                    ..prev.clone()
                }
            }
            _ => LeaseSpec {
                holder_identity: Some(self.cfg.identity.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(
                    previous
                        .and_then(|p| p.lease_transitions)
                        .unwrap_or(0)
                        .saturating_add(i32::from(previous.is_some())),
                ),
                ..LeaseSpec::default()
            },
        }
    }

    /// One attempt to acquire or renew; `true` when this candidate holds the Lease after it.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let current = match self.api.get_opt(&self.cfg.name).await {
            Ok(c) => c,
            Err(e) => {
                warn!(lease = %self.cfg.name, error = %e, "reading the leader lease failed");
                return false;
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.desired(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    if let Some(s) = created.spec.as_ref() {
                        self.observe(s);
                    }
                    true
                }
                Err(e) => {
                    warn!(lease = %self.cfg.name, error = %e, "creating the leader lease failed");
                    false
                }
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(&spec);
        if !can_take(
            &spec,
            &self.cfg.identity,
            self.observed.at,
            Instant::now(),
            self.cfg.lease_duration,
        ) {
            return false;
        }
        lease.spec = Some(self.desired(Some(&spec)));
        // The resourceVersion read above makes this a compare-and-swap.
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                if let Some(s) = updated.spec.as_ref() {
                    self.observe(s);
                }
                true
            }
            Err(e) => {
                warn!(lease = %self.cfg.name, error = %e, "updating the leader lease failed");
                false
            }
        }
    }

    /// Gives the Lease up (holder cleared, duration 1s) so another candidate can take it now.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if let Err(e) = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            warn!(lease = %self.cfg.name, error = %e, "releasing the leader lease failed");
        }
    }
}

/// Resolves once `rx` turns true (or its sender is gone). The guard `wait_for` returns is
/// dropped here, so the future stays `Send`.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Waits to become leader, then runs `lead` (handing it a stop signal) while renewing the
/// Lease. Returns when `shutdown` turns true (after `lead` stopped and the Lease is released),
/// or with an error when leadership is lost (after `lead` stopped).
pub async fn run_with_leader_election<F, Fut, T>(
    client: Client,
    cfg: LeaderElectionConfig,
    mut shutdown: watch::Receiver<bool>,
    lead: F,
) -> Result<Option<T>, LeaderElectionError>
where
    F: FnOnce(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut elector = Elector {
        api: Api::namespaced(client, &cfg.namespace),
        cfg: cfg.clone(),
        observed: Observed::default(),
    };
    info!(lease = %format!("{}/{}", cfg.namespace, cfg.name), identity = %cfg.identity, "waiting to become leader");
    loop {
        let stop_now = *shutdown.borrow();
        if stop_now {
            return Ok(None);
        }
        if elector.try_acquire_or_renew().await {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.retry_period) => {}
            _ = stopped(&mut shutdown) => return Ok(None),
        }
    }
    info!(identity = %cfg.identity, "became leader");

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut leading = tokio::spawn(lead(stop_rx));
    let mut last_renew = Instant::now();
    let outcome = loop {
        tokio::select! {
            r = &mut leading => {
                // The work ended by itself: nothing more to lead.
                elector.release().await;
                return Ok(r.ok());
            }
            _ = stopped(&mut shutdown) => break Ok(()),
            _ = tokio::time::sleep(cfg.retry_period) => {
                if elector.try_acquire_or_renew().await {
                    last_renew = Instant::now();
                } else if last_renew.elapsed() >= cfg.renew_deadline {
                    break Err(LeaderElectionError::Lost(format!("{}/{}", cfg.namespace, cfg.name)));
                }
            }
        }
    };
    let _ = stop_tx.send(true);
    let result = leading.await.ok();
    match outcome {
        Ok(()) => {
            elector.release().await;
            info!(identity = %cfg.identity, "released leadership");
            Ok(result)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn who_may_take_a_lease() {
        let lease = Duration::from_secs(15);
        let now = Instant::now();
        let fresh = Some(now);
        let stale = now.checked_sub(Duration::from_secs(16));
        // Free or released leases, and our own, can be taken at once.
        assert!(can_take(&spec(None), "me", fresh, now, lease));
        assert!(can_take(&spec(Some("")), "me", fresh, now, lease));
        assert!(can_take(&spec(Some("me")), "me", fresh, now, lease));
        // Another holder's lease only once it has been still for a full lease duration.
        assert!(!can_take(&spec(Some("other")), "me", fresh, now, lease));
        if stale.is_some() {
            assert!(can_take(&spec(Some("other")), "me", stale, now, lease));
        }
        assert!(!can_take(&spec(Some("other")), "me", None, now, lease));
    }
}
