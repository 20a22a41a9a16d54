//! The disruption controller (kube-controller-manager's `disruption-controller`, upstream
//! `pkg/controller/disruption`): each PodDisruptionBudget's status says how many of its pods
//! are healthy (Ready, not being deleted, not just evicted), how many must be, and so how many
//! evictions the API server may still allow (`disruptionsAllowed`, with the `DisruptionAllowed`
//! condition). The eviction subresource reads and decrements it.
//!
//! A budget as a number (`minAvailable: 2`) counts the selected pods. A percentage or
//! `maxUnavailable` needs the pods' controllers' scale, which no kind served here has (a Job has
//! no scale subresource): such a budget fails safe, allowing no disruption, as upstream does
//! for Job pods.
//!
//! It also resets a `DisruptionTarget` condition left on a pod that was never deleted (an
//! eviction or preemption whose deletion failed) to False after 2 minutes, so that a later
//! failure of the pod is not taken for a disruption by its Job's pod failure policy.
//!
//! On a real cluster its own controller does this, so `kbatch controllers` does not run it by
//! default.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kbatch_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::info;

use crate::runtime::events::{EventRecorder, object_reference};
use crate::runtime::informer::{Change, InformerFactory, Lister};
use crate::runtime::key::{object_key, split_key};
use crate::runtime::queue::{ItemExponentialFailureRateLimiter, WorkQueue};

/// The event source kube-controller-manager gives this controller's recorder.
pub const COMPONENT: &str = "controllermanager";
/// The client name kube-controller-manager gives this controller.
pub const CLIENT_NAME: &str = "disruption-controller";

/// How long an evicted pod (in `status.disruptedPods`) counts as gone before the controller
/// stops waiting for its deletion (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a pod not being deleted keeps a `DisruptionTarget` condition (upstream's
/// `stalePodDisruptionTimeout`).
pub const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(120);
/// kubelet's reason, whose condition is never stale (its pod may take long to terminate).
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

use kbatch_api::pdb::set_disruption_allowed;
pub use kbatch_api::pdb::{
    DISRUPTION_ALLOWED, INSUFFICIENT_PODS, SUFFICIENT_PODS, SYNC_FAILED,
    update_disruption_allowed_condition,
};

/// An event the sync records: on the budget, or on one of its pods (by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdbEvent {
    pub on_pod: Option<String>,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What one sync of a budget decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status to write; `None` when the stored one is up to date.
    pub status: Option<PodDisruptionBudgetStatus>,
    pub events: Vec<PdbEvent>,
    /// Sync again after this long (an evicted pod's wait for deletion ends).
    pub recheck_after: Option<Duration>,
    /// Why the expected pod count could not be known: the status failed safe.
    pub failed: Option<String>,
}

/// The pods a budget selects: a null selector none, an empty one all of the namespace.
pub fn selector_of(selector: Option<&LabelSelector>) -> Option<Selector> {
    Selector::try_from(selector?.clone()).ok()
}

/// `intstr.GetScaledValueFromIntOrPercent` rounding up.
fn scaled(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|d| d.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let value = (pct * i64::from(total) + 99) / 100;
            Ok(i32::try_from(value).unwrap_or(i32::MAX))
        }
    }
}

/// `getExpectedScale`: the sum of the pods' controllers' scales. No kind served here has a
/// scale subresource, so a managed pod makes this fail in upstream's words; pods without a
/// controller are left out and named.
fn expected_scale(pods: &[&Pod]) -> Result<(i32, Vec<String>), String> {
    let mut unmanaged = Vec::new();
    for pod in pods {
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let Some(owner) = owner else {
            unmanaged.push(pod.name_any());
            continue;
        };
        let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
        return Err(match (owner.kind.as_str(), group) {
            ("Job", "batch") => "jobs.batch does not implement the scale subresource".to_string(),
            ("CronJob", "batch") => {
                "cronjobs.batch does not implement the scale subresource".to_string()
            }
            (kind, _) => format!(
                "no matches for kind \"{kind}\" in version \"{}\"",
                owner.api_version
            ),
        });
    }
    Ok((0, unmanaged))
}

/// `getExpectedPodCount`: (expected pods, desired healthy, unmanaged pods).
fn expected_pod_count(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
) -> Result<(i32, i32, Vec<String>), String> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(pods)?;
        let max = scaled(max, expected)?;
        return Ok((expected, expected.saturating_sub(max).max(0), unmanaged));
    }
    match &spec.min_available {
        Some(IntOrString::Int(min)) => Ok((
            i32::try_from(pods.len()).unwrap_or(i32::MAX),
            *min,
            Vec::new(),
        )),
        Some(min) => {
            let (expected, unmanaged) = expected_scale(pods)?;
            Ok((expected, scaled(min, expected)?, unmanaged))
        }
        None => Ok((0, 0, Vec::new())),
    }
}

fn after(t: &Time, d: Duration) -> Timestamp {
    t.0.saturating_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

/// `ConditionsAreUpToDate`.
fn conditions_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = &pdb.status else {
        return false;
    };
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    else {
        return false;
    };
    if status.observed_generation != pdb.metadata.generation {
        return false;
    }
    if status.disruptions_allowed.unwrap_or(0) > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

/// One sync of `pdb` over the pods it selects (`trySync`, and `failSafe` when the expected
/// count cannot be known).
pub fn decide(pdb: &PodDisruptionBudget, pods: &[&Pod], now: Timestamp) -> Decision {
    let mut events = Vec::new();
    if pods.is_empty() {
        events.push(PdbEvent {
            on_pod: None,
            warning: false,
            reason: "NoPods",
            message: "No matching pods found".into(),
        });
    }
    let old = pdb.status.clone().unwrap_or_default();
    let (expected, desired, unmanaged) = match expected_pod_count(pdb, pods) {
        Ok(v) => v,
        Err(e) => {
            events.push(PdbEvent {
                on_pod: None,
                warning: true,
                reason: "CalculateExpectedPodCountFailed",
                message: format!("Failed to calculate the number of expected pods: {e}"),
            });
            let mut status = old.clone();
            status.disruptions_allowed = Some(0);
            let generation = status.observed_generation;
            set_disruption_allowed(
                status.conditions.get_or_insert_with(Vec::new),
                "False",
                SYNC_FAILED,
                &e,
                generation,
                now,
            );
            return Decision {
                status: (status != old).then_some(status),
                events,
                recheck_after: None,
                failed: Some(e),
            };
        }
    };
    if !unmanaged.is_empty() {
        let selector = pdb
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(|s| serde_json::to_string(s).unwrap_or_default())
            .unwrap_or_else(|| "nil".into());
        events.push(PdbEvent {
            on_pod: None,
            warning: true,
            reason: "UnmanagedPods",
            message: format!(
                "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."
            ),
        });
    }

    // `buildDisruptedPodMap`: evicted pods count as gone until deleted or timed out.
    let mut disrupted = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let recorded = old.disrupted_pods.clone().unwrap_or_default();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        let Some(when) = recorded.get(&name) else {
            continue;
        };
        let expected_deletion = after(when, DELETION_TIMEOUT);
        if expected_deletion < now {
            events.push(PdbEvent {
                on_pod: Some(name.clone()),
                warning: true,
                reason: "NotDeleted",
                // Upstream names the budget by its namespace twice.
                message: format!(
                    "Pod was expected by PDB {}/{} to be deleted but it wasn't",
                    pdb.namespace().unwrap_or_default(),
                    pdb.namespace().unwrap_or_default()
                ),
            });
        } else {
            recheck = Some(recheck.map_or(expected_deletion, |r| r.min(expected_deletion)));
            disrupted.insert(name, when.clone());
        }
    }
    // `countHealthyPods`.
    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            disrupted
                .get(&p.name_any())
                .is_none_or(|t| after(t, DELETION_TIMEOUT) <= now)
        })
        .filter(|p| crate::job::pods::is_ready(p))
        .count();
    let healthy = i32::try_from(healthy).unwrap_or(i32::MAX);
    // `updatePdbStatus`: no disruption while the budget matches no pods.
    let mut allowed = healthy - desired;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let disrupted = (!disrupted.is_empty()).then_some(disrupted);
    let recorded = (!recorded.is_empty()).then_some(recorded);
    let generation = pdb.metadata.generation;
    let up_to_date = old.current_healthy.unwrap_or(0) == healthy
        && old.desired_healthy.unwrap_or(0) == desired
        && old.expected_pods.unwrap_or(0) == expected
        && old.disruptions_allowed.unwrap_or(0) == allowed
        && recorded == disrupted
        && old.observed_generation == generation
        && conditions_up_to_date(pdb);
    let status = (!up_to_date).then(|| {
        let mut s = PodDisruptionBudgetStatus {
            current_healthy: Some(healthy),
            desired_healthy: Some(desired),
            expected_pods: Some(expected),
            disruptions_allowed: Some(allowed),
            disrupted_pods: disrupted,
            observed_generation: generation,
            conditions: old.conditions.clone(),
        };
        update_disruption_allowed_condition(&mut s, now);
        s
    });
    let recheck_after = recheck.map(|t| {
        let d = t.duration_since(now);
        Duration::try_from(d).unwrap_or(Duration::ZERO)
    });
    Decision {
        status,
        events,
        recheck_after,
        failed: None,
    }
}

/// `nonTerminatingPodHasStaleDisruptionCondition`: for a pod not being deleted and not
/// finished, with a `DisruptionTarget` condition True set by others than kubelet, how long
/// until the condition is stale (zero: now). `None` for any other pod.
pub fn stale_disruption_wait(pod: &Pod, now: Timestamp) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let cond = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kbatch_api::conditions::DISRUPTION_TARGET)?;
    if cond.status != "True" || cond.reason.as_deref() == Some(TERMINATION_BY_KUBELET) {
        return None;
    }
    let since = cond
        .last_transition_time
        .as_ref()
        .map_or(SignedDuration::ZERO, |t| now.duration_since(t.0));
    let left = SignedDuration::try_from(STALE_POD_DISRUPTION_TIMEOUT)
        .unwrap_or(SignedDuration::MAX)
        .saturating_sub(since);
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
}

/// The status patch that resets a stale `DisruptionTarget` condition (`UpdatePodCondition`
/// with status False: reason and message go, the transition time is now), written at the
/// pod's revision.
pub fn reset_disruption_patch(pod: &Pod, now: Timestamp) -> serde_json::Value {
    let mut condition = serde_json::json!({
        "type": kbatch_api::conditions::DISRUPTION_TARGET,
        "status": "False",
        "reason": null,
        "message": null,
        "lastTransitionTime": Time(now),
    });
    if let Some(g) = pod.metadata.generation {
        condition["observedGeneration"] = serde_json::json!(g);
    }
    serde_json::json!({
        "metadata": {"uid": pod.metadata.uid, "resourceVersion": pod.metadata.resource_version},
        "status": {"conditions": [condition]},
    })
}

struct Inner {
    client: Client,
    pdbs: Lister<PodDisruptionBudget>,
    pods: Lister<Pod>,
    queue: WorkQueue<String>,
    /// Pods whose `DisruptionTarget` condition may be stale.
    stale: WorkQueue<String>,
    recorder: EventRecorder,
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(
    client: Client,
    informers: &InformerFactory,
    recorder: EventRecorder,
    mut shutdown: watch::Receiver<bool>,
) {
    let queue: WorkQueue<String> = WorkQueue::new(
        "disruption",
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000)),
    );
    let stale: WorkQueue<String> = WorkQueue::new(
        "stale-pod-disruption",
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000)),
    );
    let pdb_informer = informers.informer::<PodDisruptionBudget>();
    let pod_informer = informers.informer::<Pod>();
    {
        let q = queue.clone();
        pdb_informer.add_handler(move |change: Change<PodDisruptionBudget>| match &change {
            Change::Added(p) => q.add(object_key(p.as_ref())),
            Change::Updated { new, .. } => q.add(object_key(new.as_ref())),
            Change::Deleted(_) => {}
        });
    }
    {
        // A pod's change syncs the budgets that select it (none to look at while there are
        // no budgets, the common case).
        let q = queue.clone();
        let stale_q = stale.clone();
        let pdbs = pdb_informer.lister();
        pod_informer.add_handler(move |change: Change<Pod>| {
            if let Change::Added(pod) | Change::Updated { new: pod, .. } = &change
                && let Some(wait) = stale_disruption_wait(pod, Timestamp::now())
            {
                stale_q.add_after(object_key(pod.as_ref()), wait);
            }
            if pdbs.is_empty() {
                return;
            }
            let pods: Vec<&Arc<Pod>> = match &change {
                Change::Added(p) | Change::Deleted(p) => vec![p],
                Change::Updated { old, new } => vec![old, new],
            };
            for pod in pods {
                let ns = pod.namespace().unwrap_or_default();
                let labels = pod.metadata.labels.clone().unwrap_or_default();
                for pdb in pdbs.list_namespace(&ns) {
                    let selects = selector_of(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                        .is_some_and(|s| s.matches(&labels));
                    if selects {
                        q.add(object_key(pdb.as_ref()));
                    }
                }
            }
        });
    }
    let inner = Arc::new(Inner {
        client,
        pdbs: pdb_informer.lister(),
        pods: pod_informer.lister(),
        queue,
        stale,
        recorder,
    });
    let worker = {
        let inner = Arc::clone(&inner);
        tokio::spawn(async move {
            let _ = inner.pods.wait_until_synced().await;
            let inner = &inner;
            inner
                .queue
                .run_worker("disruption budget sync failed", |key| async move {
                    inner.sync(&key).await
                })
                .await;
        })
    };
    let stale_worker = {
        let inner = Arc::clone(&inner);
        tokio::spawn(async move {
            let inner = &inner;
            inner
                .stale
                .run_worker(
                    "resetting a stale DisruptionTarget failed",
                    |key| async move { inner.sync_stale_pod_disruption(&key).await },
                )
                .await;
        })
    };
    info!("disruption controller started");
    let _ = shutdown.wait_for(|s| *s).await;
    inner.queue.shut_down();
    inner.stale.shut_down();
    let _ = worker.await;
    let _ = stale_worker.await;
    drop((pdb_informer, pod_informer));
}

impl Inner {
    /// `syncStalePodDisruption`.
    async fn sync_stale_pod_disruption(&self, key: &str) -> Result<(), kube::Error> {
        let Ok((ns, name)) = split_key(key) else {
            return Ok(());
        };
        let Some(pod) = self.pods.get(ns, name) else {
            return Ok(());
        };
        let now = Timestamp::now();
        match stale_disruption_wait(&pod, now) {
            None => return Ok(()),
            Some(wait) if !wait.is_zero() => {
                self.stale.add_after(key.to_string(), wait);
                return Ok(());
            }
            Some(_) => {}
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let patch = reset_disruption_patch(&pod, now);
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
        info!(pod = %key, "reset stale DisruptionTarget condition to False");
        Ok(())
    }

    async fn sync(&self, key: &str) -> Result<(), kube::Error> {
        let Ok((ns, name)) = split_key(key) else {
            return Ok(());
        };
        let Some(pdb) = self.pdbs.get(ns, name) else {
            return Ok(());
        };
        let selected: Vec<Arc<Pod>> =
            match selector_of(pdb.spec.as_ref().and_then(|s| s.selector.as_ref())) {
                Some(sel) => self.pods.list_selected(Some(ns), &sel),
                None => Vec::new(),
            };
        let pods: Vec<&Pod> = selected.iter().map(Arc::as_ref).collect();
        let decision = decide(&pdb, &pods, Timestamp::now());
        for e in &decision.events {
            let object = match &e.on_pod {
                Some(pod) => match self.pods.get(ns, pod) {
                    Some(p) => object_reference(p.as_ref()),
                    None => continue,
                },
                None => object_reference(pdb.as_ref()),
            };
            if e.warning {
                self.recorder.warning(object, e.reason, &e.message);
            } else {
                self.recorder.normal(object, e.reason, &e.message);
            }
        }
        if let Some(status) = decision.status {
            let mut updated = (*pdb).clone();
            updated.status = Some(status);
            let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
            api.replace_status(name, &PostParams::default(), &updated)
                .await?;
        }
        if let Some(d) = decision.recheck_after {
            self.queue.add_after(key.to_string(), d);
        }
        // The status failed safe; upstream does not retry such a budget until it or its
        // pods change.
        if let Some(why) = decision.failed {
            info!(pdb = %key, error = %why, "failed to sync PDB");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
