//! Which pods to bind to this node, and the binding call: kbatch's executor is its node's
//! scheduler. A pod is bound when it fits (`fit`: the default scheduler's filters — node
//! unschedulable, taints, node affinity and selector, resources); one that does not is
//! reported Unschedulable (its `PodScheduled` condition and a `FailedScheduling` event, with the
//! scheduler's message) and tried again, with the scheduler's back-off, once something it
//! depends on has changed; a pod with scheduling gates waits, reported `SchedulingGated`. The
//! node holds at most `max_pods` non-terminal pods (counting bindings in flight): a pod beyond
//! that does not fit (`Too many pods`, the pods resource of the Node's allocatable) and is
//! reported as such, once (a pod that lower-priority pods keep out preempts them instead,
//! `preempt`); kept out by that alone, it takes the next place that frees up,
//! highest priority first, then oldest, without the scheduler's back-off (on one machine a Job wider than the node
//! would otherwise crawl at one pod per back-off).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kbatch_api::k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::fit::{self, Requests};
use crate::preempt::{self, Running};
use crate::worker::is_terminal;

/// After a failed bind, the pod is tried again this much later.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The scheduler's back-off for an unschedulable pod: 1 s, doubled after each attempt, at
/// most 10 s (`podInitialBackoffDuration`, `podMaxBackoffDuration`).
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// An unschedulable pod is tried again after this even if nothing changed
/// (`podMaxInUnschedulablePodsDuration`).
const UNSCHEDULABLE_FLUSH: Duration = Duration::from_secs(300);
/// While the node is full, the pods waiting for it are looked at this often (new ones at
/// once): none can be bound, only told so.
const FULL_NODE_RECHECK: Duration = Duration::from_secs(1);

/// An unscheduled pod to bind.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub pod: Arc<Pod>,
}

/// What the scheduler reports about a pod it does not bind.
#[derive(Debug, Clone, PartialEq)]
pub enum NotBound {
    /// It has scheduling gates.
    Gated(Candidate),
    /// It does not fit: the scheduler's message, and whether only the node's pod capacity
    /// keeps it out.
    Unschedulable(Candidate, String, bool),
    /// It does not fit, and lower-priority pods of the node (the fourth field) are preempted
    /// for it: the scheduler's message, the node it is nominated to, and the lower-priority
    /// pods nominated to that node before, which lose their nomination (they may no longer
    /// fit there).
    Preempting(Candidate, String, String, Vec<Arc<Pod>>, Vec<Candidate>),
}

/// The scheduling queue's order (upstream's PrioritySort): the highest `spec.priority` first,
/// then the oldest, then by namespace and name.
type Order = (std::cmp::Reverse<i32>, String, String, String);

/// An unschedulable pod's last attempt.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    /// The cluster's change count when it was made.
    generation: u64,
    at: Instant,
    backoff: Duration,
    /// It was reported gated (no attempt until the pod changes).
    gated: bool,
    /// The pod itself changed since.
    pod_changed: bool,
    /// Only the node's pod capacity kept it out (`Too many pods`): it was told, and is tried
    /// again as soon as there is room.
    full_node: bool,
}

impl Attempt {
    /// Something it depends on changed since.
    fn stale(&self, generation: u64) -> bool {
        self.pod_changed || self.generation < generation
    }
}

#[derive(Debug, Default)]
pub struct PodIndex {
    unscheduled: BTreeMap<Order, Candidate>,
    order_of: HashMap<String, Order>,
    /// Non-terminal pods bound to this node, with what they request.
    active: HashMap<String, Running>,
    in_flight: HashMap<String, Requests>,
    retry_at: HashMap<String, Instant>,
    attempts: HashMap<String, Attempt>,
    /// Counts changes that may let an unschedulable pod fit: a pod leaving the node, the
    /// node changing.
    generation: u64,
    /// An unscheduled pod arrived or changed since the last look.
    arrived: bool,
    /// While the node is full, when the waiting pods are looked at again.
    full_recheck_at: Option<Instant>,
}

/// Pods the default scheduler would place (kbatch's executor acts as that scheduler).
fn schedulable(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let scheduler = spec.and_then(|s| s.scheduler_name.as_deref()).unwrap_or("");
    pod.metadata.deletion_timestamp.is_none()
        && (scheduler.is_empty() || scheduler == "default-scheduler")
        && !is_terminal(pod)
}

impl PodIndex {
    /// Take the latest version of a pod into account.
    pub fn observe(&mut self, pod: &Arc<Pod>, node: &str) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("");
        if node_name.is_empty() && schedulable(pod) {
            let order = (
                std::cmp::Reverse(pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)),
                pod.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| crate::time::seconds(t.0).to_string())
                    .unwrap_or_default(),
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            );
            // An update of the pod itself may make it fit (once its back-off is over) or
            // remove its gates (a gated pod was never tried: no back-off).
            match self.attempts.get_mut(&uid) {
                Some(a) if a.gated => {
                    self.attempts.remove(&uid);
                }
                Some(a) => a.pod_changed = true,
                None => {}
            }
            self.unscheduled.insert(
                order.clone(),
                Candidate {
                    uid: uid.clone(),
                    namespace: order.2.clone(),
                    name: order.3.clone(),
                    pod: pod.clone(),
                },
            );
            self.order_of.insert(uid, order);
            self.arrived = true;
            return;
        }
        self.drop_candidate(&uid);
        if node_name.is_empty() {
            return;
        }
        let requests = self.in_flight.remove(&uid);
        if node_name == node && !is_terminal(pod) {
            let requests = match self.active.get(&uid) {
                Some(r) => r.requests.clone(),
                None => requests.unwrap_or_else(|| fit::pod_requests(pod)),
            };
            self.active.insert(uid, Running::of(pod, requests));
        } else if self.active.remove(&uid).is_some() || requests.is_some() {
            // It left the node (or was seen bound only once finished).
            self.generation += 1;
        }
    }

    fn drop_candidate(&mut self, uid: &str) {
        if let Some(order) = self.order_of.remove(uid) {
            self.unscheduled.remove(&order);
        }
        self.retry_at.remove(uid);
        self.attempts.remove(uid);
    }

    /// The pod is gone.
    pub fn forget(&mut self, uid: &str) {
        self.drop_candidate(uid);
        if self.active.remove(uid).is_some() || self.in_flight.remove(uid).is_some() {
            self.generation += 1;
        }
    }

    /// The node changed in a way that may let unschedulable pods fit (labels, taints,
    /// unschedulable, allocatable).
    pub fn node_changed(&mut self) {
        self.generation += 1;
    }

    /// Pods on (or being bound to) the node that are not finished.
    pub fn used(&self) -> usize {
        self.active.len() + self.in_flight.len()
    }

    /// What the node's other admitted pods request, and how many there are: what kubelet
    /// admits pod `uid` against.
    pub fn others(&self, uid: &str) -> (Requests, usize) {
        let mut sum = Requests::default();
        let mut count = 0;
        for (other, r) in &self.active {
            if other != uid {
                sum.add(&r.requests);
                count += 1;
            }
        }
        (sum, count)
    }

    /// What the node's pods (and those being bound) request.
    fn requested(&self) -> Requests {
        let mut sum = Requests::default();
        for r in self.active.values() {
            sum.add(&r.requests);
        }
        for r in self.in_flight.values() {
            sum.add(r);
        }
        sum
    }

    /// Whether candidate `c` is due for an attempt now.
    fn due(&self, c: &Candidate, now: Instant) -> bool {
        if self.in_flight.contains_key(&c.uid)
            || self.retry_at.get(&c.uid).is_some_and(|t| *t > now)
        {
            return false;
        }
        match self.attempts.get(&c.uid) {
            None => true,
            Some(a) if a.gated => false,
            Some(a) => {
                now >= a.at + UNSCHEDULABLE_FLUSH
                    || (a.stale(self.generation) && now >= a.at + a.backoff)
            }
        }
    }

    /// The pods to bind now, within the room left, and what to report about those that
    /// cannot be bound; pods to bind count as in flight until the watch shows them bound (or
    /// the bind fails). Without the node's object nothing is bound yet.
    pub fn take_bindable(
        &mut self,
        max_pods: usize,
        node: Option<&Node>,
        now: Instant,
    ) -> (Vec<Candidate>, Vec<NotBound>) {
        let mut room = max_pods.saturating_sub(self.used());
        let Some(node) = node.filter(|_| !self.unscheduled.is_empty()) else {
            return (Vec::new(), Vec::new());
        };
        // Called after every pod event: a full node binds nothing, so the waiting pods are
        // looked at (to be told so) when new ones came and at most once a second otherwise.
        if room == 0 {
            if !self.arrived && self.full_recheck_at.is_some_and(|t| now < t) {
                return (Vec::new(), Vec::new());
            }
            self.full_recheck_at = Some(now + FULL_NODE_RECHECK);
        }
        self.arrived = false;
        let mut requested = self.requested();
        let mut pod_count = self.used();
        let mut bind = Vec::new();
        let mut report = Vec::new();
        let node_name = node.metadata.name.clone().unwrap_or_default();
        // Pods nominated to this node by an earlier preemption hold their place against pods
        // of lower or equal priority (upstream's `addNominatedPods`).
        let nominated: Vec<(i32, Requests, String)> = self
            .unscheduled
            .values()
            .filter(|c| nominated_to(&c.pod) == Some(node_name.as_str()))
            .map(|c| {
                let p = preempt::priority(&c.pod);
                (p, fit::pod_requests(&c.pod), c.uid.clone())
            })
            .collect();
        // Victims chosen in this pass: gone for the rest of it.
        let mut claimed: std::collections::HashSet<String> = Default::default();
        for c in self.unscheduled.values() {
            let told_full = self
                .attempts
                .get(&c.uid)
                .is_some_and(|a| a.full_node && !a.pod_changed);
            // Told that the node is full: waits for a place, without a back-off.
            let skip = if told_full {
                room == 0 || self.in_flight.contains_key(&c.uid)
            } else {
                !self.due(c, now)
            };
            if skip {
                continue;
            }
            if fit::scheduling_gated(&c.pod) {
                report.push(NotBound::Gated(c.clone()));
                continue;
            }
            let priority = preempt::priority(&c.pod);
            let mut held = None;
            let mut count = pod_count;
            for (p, r, uid) in &nominated {
                // Once bound (or being bound) it is counted as the node's own.
                let placed = self.in_flight.contains_key(uid)
                    || bind
                        .iter()
                        .any(|(b, _): &(Candidate, Requests)| b.uid == *uid);
                if *p >= priority && *uid != c.uid && !placed {
                    held.get_or_insert_with(|| requested.clone()).add(r);
                    count += 1;
                }
            }
            let seen = held.as_ref().unwrap_or(&requested);
            let info = fit::NodeInfo {
                node,
                requested: seen,
                pod_count: count,
            };
            match fit::filter(&c.pod, &info) {
                // The executor's capacity and the Node's allocatable pods disagree (the Node
                // not yet updated): the pod waits for its place without a word.
                Ok(()) if room == 0 => {}
                Ok(()) => {
                    let r = fit::pod_requests(&c.pod);
                    requested.add(&r);
                    pod_count += 1;
                    room -= 1;
                    bind.push((c.clone(), r));
                }
                Err(unfit) => {
                    let full_node = unfit.reasons.iter().all(|r| r == fit::REASON_TOO_MANY_PODS);
                    let mut post = fit::PostFilter::NoVictims;
                    let mut victims = Vec::new();
                    // Only a rejection that removing pods could fix is worth a preemption.
                    if unfit.stage == fit::Stage::Node && unfit.code == fit::Code::Unschedulable {
                        let running: Vec<&Running> = self
                            .active
                            .values()
                            .filter(|r| !claimed.contains(&r.uid))
                            .collect();
                        let here = nominated_to(&c.pod) == Some(node_name.as_str());
                        match preempt::not_eligible(&c.pod, here, &running) {
                            // The usual message already says so.
                            Some(preempt::NOT_ELIGIBLE_NEVER) => {}
                            Some(why) => post = fit::PostFilter::NotEligible(why),
                            None => {
                                if let Some(v) =
                                    preempt::select_victims(&c.pod, node, seen, count, &running)
                                {
                                    post = fit::PostFilter::Nominated;
                                    victims = v;
                                }
                            }
                        }
                    }
                    let message = fit::fit_error_message_with(&c.pod, &unfit, post);
                    if post == fit::PostFilter::Nominated {
                        // For the rest of the pass the preemptor holds the place its victims
                        // leave.
                        let mut pods = Vec::new();
                        for uid in victims {
                            if let Some(r) = self.active.get(&uid) {
                                requested.sub(&r.requests);
                                pod_count = pod_count.saturating_sub(1);
                                pods.push(r.pod.clone());
                            }
                            claimed.insert(uid);
                        }
                        requested.add(&fit::pod_requests(&c.pod));
                        pod_count += 1;
                        // Upstream's `getLowerPriorityNominatedPods`.
                        let lower: Vec<Candidate> = self
                            .unscheduled
                            .values()
                            .filter(|o| o.uid != c.uid)
                            .filter(|o| nominated_to(&o.pod) == Some(node_name.as_str()))
                            .filter(|o| preempt::priority(&o.pod) < priority)
                            .cloned()
                            .collect();
                        report.push(NotBound::Preempting(
                            c.clone(),
                            message,
                            node_name.clone(),
                            pods,
                            lower,
                        ));
                    } else {
                        let full_node = full_node && post == fit::PostFilter::NoVictims;
                        report.push(NotBound::Unschedulable(c.clone(), message, full_node));
                    }
                }
            }
        }
        for (c, r) in &bind {
            self.in_flight.insert(c.uid.clone(), r.clone());
            self.retry_at.remove(&c.uid);
            self.attempts.remove(&c.uid);
        }
        // A pod told once that the node is full is not told again while it stays so.
        report.retain(|n| match n {
            NotBound::Unschedulable(c, _, true) => self
                .attempts
                .get(&c.uid)
                .is_none_or(|a| !a.full_node || a.pod_changed),
            _ => true,
        });
        for n in &report {
            let (uid, gated, full_node) = match n {
                NotBound::Gated(c) => (&c.uid, true, false),
                NotBound::Unschedulable(c, _, full_node) => (&c.uid, false, *full_node),
                NotBound::Preempting(c, ..) => (&c.uid, false, false),
            };
            let backoff = self
                .attempts
                .get(uid)
                .filter(|a| !a.gated)
                .map_or(BACKOFF_FIRST, |a| (a.backoff * 2).min(BACKOFF_MAX));
            self.attempts.insert(
                uid.clone(),
                Attempt {
                    generation: self.generation,
                    at: now,
                    backoff,
                    gated,
                    pod_changed: false,
                    full_node,
                },
            );
        }
        (bind.into_iter().map(|(c, _)| c).collect(), report)
    }

    /// A bind call returned. On success the pod stays in flight until the watch reports it
    /// bound; on failure it is tried again later (if still unscheduled).
    pub fn bind_done(&mut self, uid: &str, ok: bool, now: Instant) {
        if !ok {
            self.in_flight.remove(uid);
            if self.order_of.contains_key(uid) {
                self.retry_at.insert(uid.to_string(), now + RETRY_AFTER);
            }
        }
    }

    /// When a pod waiting out a failed bind or its back-off may be tried again.
    pub fn next_retry(&self) -> Option<Instant> {
        let backoffs = self.attempts.values().filter(|a| !a.gated).map(|a| {
            if a.stale(self.generation) {
                a.at + a.backoff
            } else {
                a.at + UNSCHEDULABLE_FLUSH
            }
        });
        self.retry_at.values().copied().chain(backoffs).min()
    }
}

/// The `PodScheduled` condition the scheduler writes for a pod it does not bind, as a
/// strategic merge patch of the pod's status; `None` when the pod already has it (the
/// scheduler writes the condition only when it changes).
pub fn not_bound_patch(n: &NotBound, now: jiff::Timestamp) -> Option<serde_json::Value> {
    let (c, reason, message) = match n {
        NotBound::Gated(c) => (c, fit::SCHEDULING_GATED, fit::SCHEDULING_GATED_MESSAGE),
        NotBound::Unschedulable(c, m, _) | NotBound::Preempting(c, m, ..) => {
            (c, fit::UNSCHEDULABLE, m.as_str())
        }
    };
    // A preemption nominates the pod to the node, in the same status write.
    let nominate = match n {
        NotBound::Preempting(_, _, node, ..) => Some(node.as_str()),
        _ => None,
    }
    .filter(|node| nominated_to(&c.pod) != Some(*node));
    let current = c
        .pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    let same = current.is_some_and(|cur| {
        cur.status == "False"
            && cur.reason.as_deref() == Some(reason)
            && cur.message.as_deref() == Some(message)
    });
    if same && nominate.is_none() {
        return None;
    }
    // The transition time stays when only the reason or message changes.
    let since = current
        .filter(|cur| cur.status == "False")
        .and_then(|cur| cur.last_transition_time.as_ref())
        .map_or_else(
            || crate::time::seconds(now).to_string(),
            |t| t.0.to_string(),
        );
    let mut patch = json!({
        "metadata": {"uid": c.uid},
        "status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": since,
        }]}
    });
    if let Some(node) = nominate {
        patch["status"]["nominatedNodeName"] = json!(node);
    }
    Some(patch)
}

/// The node a pod was nominated to by a preemption (`status.nominatedNodeName`).
fn nominated_to(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Write what the scheduler reports about a pod it did not bind: its `PodScheduled`
/// condition when that changed, and for an unschedulable pod a `FailedScheduling` event.
pub async fn report(client: kube::Client, events: crate::events::NodeEvents, n: NotBound) {
    let c = match &n {
        NotBound::Gated(c) | NotBound::Unschedulable(c, _, _) | NotBound::Preempting(c, ..) => c,
    };
    if let NotBound::Preempting(c, _, node, victims, lower) = &n {
        for victim in victims {
            preempt_victim(&client, &events, &c.pod, node, victim).await;
        }
        for other in lower {
            clear_nomination(&client, other).await;
        }
    }
    if let NotBound::Unschedulable(c, message, _) | NotBound::Preempting(c, message, ..) = &n {
        tracing::debug!(pod = %c.name, %message, "pod does not fit");
        let pod = crate::events::PodRef {
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            uid: c.uid.clone(),
        };
        events.failed_scheduling(&pod, &fit::event_message(message));
    }
    let Some(patch) = not_bound_patch(&n, jiff::Timestamp::now()) else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client, &c.namespace);
    let params = kube::api::PatchParams::default();
    let result = api
        .patch_status(&c.name, &params, &kube::api::Patch::Strategic(patch))
        .await;
    if let Err(e) = result {
        tracing::debug!(pod = %c.name, error = %e, "writing the PodScheduled condition");
    }
}

/// Upstream's `ClearNominatedNodeName`: a lower-priority pod nominated to the node a
/// preemption took loses its nomination, so that it is scheduled anew.
async fn clear_nomination(client: &kube::Client, c: &Candidate) {
    let api: Api<Pod> = Api::namespaced(client.clone(), &c.namespace);
    let patch = json!({"metadata": {"uid": c.uid}, "status": {"nominatedNodeName": null}});
    let params = kube::api::PatchParams::default();
    if let Err(e) = api
        .patch_status(&c.name, &params, &kube::api::Patch::Strategic(patch))
        .await
    {
        tracing::debug!(pod = %c.name, error = %e, "clearing a nomination");
    }
}

/// Upstream's `prepareCandidate` for one victim: its `DisruptionTarget` condition
/// (`PreemptionByScheduler`), its deletion with its own grace period, and the `Preempted` event.
async fn preempt_victim(
    client: &kube::Client,
    events: &crate::events::NodeEvents,
    preemptor: &Pod,
    node: &str,
    victim: &Arc<Pod>,
) {
    let ns = victim.metadata.namespace.clone().unwrap_or_default();
    let name = victim.metadata.name.clone().unwrap_or_default();
    let uid = victim.metadata.uid.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // None when already marked (an earlier attempt): only the deletion is left to do.
    let marked = kbatch_api::conditions::with_disruption_target(
        victim,
        preempt::PREEMPTION_REASON,
        &preempt::condition_message(preemptor),
        crate::time::seconds(jiff::Timestamp::now()),
    );
    if let Some(conditions) = marked {
        let patch = json!({"metadata": {"uid": uid}, "status": {"conditions": conditions}});
        let params = kube::api::PatchParams::default();
        if let Err(e) = api
            .patch_status(&name, &params, &kube::api::Patch::Strategic(patch))
            .await
        {
            tracing::debug!(pod = %name, error = %e, "marking a preemption victim");
            return;
        }
    }
    if let Err(e) = api.delete(&name, &kube::api::DeleteParams::default()).await {
        tracing::debug!(pod = %name, error = %e, "deleting a preemption victim");
        return;
    }
    let preemptor_uid = preemptor.metadata.uid.clone().unwrap_or_default();
    events.preempted(
        &crate::events::PodRef {
            namespace: ns,
            name,
            uid,
        },
        &preemptor_uid,
        node,
    );
}

/// POST pods/NAME/binding to `node`.
pub async fn bind(client: kube::Client, c: &Candidate, node: &str) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client, &c.namespace);
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": c.name, "namespace": c.namespace, "uid": c.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    api.create_subresource::<_, serde_json::Value>(
        "binding",
        &c.name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn pod_with(name: &str, created: &str, node: &str, phase: &str, extra: Value) -> Arc<Pod> {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "creationTimestamp": created},
            "spec": {"nodeName": node, "schedulerName": "default-scheduler",
                "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase}
        });
        if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pod(name: &str, created: &str, node: &str, phase: &str) -> Arc<Pod> {
        pod_with(name, created, node, phase, json!({}))
    }

    fn cpu(name: &str, created: &str, node: &str, millis: u32) -> Arc<Pod> {
        let containers = json!({"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": format!("{millis}m")}}}]});
        pod_with(name, created, node, "Pending", containers)
    }

    fn node() -> Node {
        node_with_pods(110)
    }

    fn node_with_pods(pods: usize) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n"}},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": pods.to_string()}}
        }))
        .unwrap()
    }

    fn names(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.name.as_str()).collect()
    }

    fn reported(r: &[NotBound]) -> Vec<(&str, &str)> {
        r.iter()
            .map(|n| match n {
                NotBound::Gated(c) => (c.name.as_str(), "gated"),
                NotBound::Unschedulable(c, m, _) => (c.name.as_str(), m.as_str()),
                NotBound::Preempting(c, m, ..) => (c.name.as_str(), m.as_str()),
            })
            .collect()
    }

    #[test]
    fn binds_oldest_first_within_capacity() {
        let now = Instant::now();
        let n = node();
        let mut idx = PodIndex::default();
        idx.observe(&pod("c", "2024-01-01T00:00:03Z", "", "Pending"), "n");
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "", "Pending"), "n");
        idx.observe(&pod("b", "2024-01-01T00:00:02Z", "", "Pending"), "n");
        idx.observe(&pod("d", "2024-01-01T00:00:04Z", "", "Pending"), "n");
        assert!(
            idx.take_bindable(2, None, now).0.is_empty(),
            "nothing before the node is known"
        );
        let (first, report) = idx.take_bindable(2, Some(&n), now);
        assert_eq!(names(&first), vec!["a", "b"]);
        // The Node (110 pods) has not caught up with the capacity: the others wait unreported.
        assert!(report.is_empty());
        // In flight counts against the capacity.
        assert!(idx.take_bindable(2, Some(&n), now).0.is_empty());
        idx.bind_done("uid-a", true, now);
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "n", "Pending"), "n");
        idx.observe(&pod("b", "2024-01-01T00:00:02Z", "n", "Running"), "n");
        assert_eq!(idx.used(), 2);
        assert!(idx.take_bindable(2, Some(&n), now).0.is_empty());
        // A pod finishing frees its place.
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "n", "Succeeded"), "n");
        assert_eq!(names(&idx.take_bindable(2, Some(&n), now).0), vec!["c"]);
        // A deleted pod frees its place too.
        idx.forget("uid-b");
        assert_eq!(names(&idx.take_bindable(2, Some(&n), now).0), vec!["d"]);
    }

    /// DefaultPreemption on a full node: each higher-priority pod gets a victim of its own (a
    /// pod nominated earlier in the pass holds the place its victim leaves), a pod of equal
    /// priority gets none, and a nominated pod waits while its victims terminate.
    #[test]
    fn higher_priority_pods_preempt_lower_ones_one_victim_each() {
        let now = Instant::now();
        let n = node_with_pods(2);
        let mut idx = PodIndex::default();
        let prio = |name, created: &str, node, p: i32| {
            let mut pod =
                (*pod_with(name, created, node, "Running", json!({"priority": p}))).clone();
            let started = serde_json::from_value(json!(created)).unwrap();
            pod.status.get_or_insert_with(Default::default).start_time = Some(started);
            Arc::new(pod)
        };
        idx.observe(&prio("low-a", "2024-01-01T00:00:01Z", "n", 1), "n");
        idx.observe(&prio("low-b", "2024-01-01T00:00:02Z", "n", 1), "n");
        idx.observe(&prio("high-1", "2024-01-01T00:00:05Z", "", 100), "n");
        idx.observe(&prio("high-2", "2024-01-01T00:00:06Z", "", 100), "n");
        idx.observe(&prio("same", "2024-01-01T00:00:04Z", "", 1), "n");
        let (bind, report) = idx.take_bindable(2, Some(&n), now);
        assert!(bind.is_empty());
        let preempting: Vec<(&str, &str, Vec<&str>)> = report
            .iter()
            .filter_map(|r| match r {
                NotBound::Preempting(c, m, node, victims, _) => {
                    assert_eq!(node, "n");
                    let v = victims
                        .iter()
                        .map(|p| p.metadata.name.as_deref().unwrap_or(""))
                        .collect();
                    Some((c.name.as_str(), m.as_str(), v))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            preempting,
            // The later started is the less important: it goes first.
            vec![
                (
                    "high-1",
                    "0/1 nodes are available: 1 Too many pods.",
                    vec!["low-b"]
                ),
                (
                    "high-2",
                    "0/1 nodes are available: 1 Too many pods.",
                    vec!["low-a"]
                ),
            ]
        );
        let same = reported(&report)
            .into_iter()
            .find(|(name, _)| *name == "same")
            .map(|(_, m)| m.to_string());
        assert!(
            same.as_deref()
                .is_some_and(|m| m.ends_with("1 No preemption victims found for incoming pod.")),
            "{same:?}"
        );
        // The victims terminate; the preemptors, nominated, wait for them without preempting
        // again.
        let terminating = |name, created| {
            let mut p = (*prio(name, created, "n", 1)).clone();
            p.metadata.deletion_timestamp = p.metadata.creation_timestamp.clone();
            let status = p.status.get_or_insert_with(Default::default);
            status.conditions =
                Some(vec![serde_json::from_value(json!({
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"
            }))
            .unwrap()]);
            Arc::new(p)
        };
        idx.observe(&terminating("low-a", "2024-01-01T00:00:01Z"), "n");
        idx.observe(&terminating("low-b", "2024-01-01T00:00:02Z"), "n");
        let nominated = |name, created| {
            let mut p = (*prio(name, created, "", 100)).clone();
            p.status
                .get_or_insert_with(Default::default)
                .nominated_node_name = Some("n".into());
            Arc::new(p)
        };
        idx.observe(&nominated("high-1", "2024-01-01T00:00:05Z"), "n");
        idx.observe(&nominated("high-2", "2024-01-01T00:00:06Z"), "n");
        let later = now + Duration::from_secs(2);
        let (bind, report) = idx.take_bindable(2, Some(&n), later);
        assert!(bind.is_empty());
        let high: Vec<(&str, &str)> = reported(&report)
            .into_iter()
            .filter(|(name, _)| name.starts_with("high"))
            .collect();
        assert_eq!(high.len(), 2, "{report:?}");
        for (_, m) in high {
            assert!(
                m.ends_with(
                    "preemption: not eligible due to a terminating pod on the nominated node."
                ),
                "{m}"
            );
        }
        // Once they are gone, the nominated pods take the places, before the older `same`.
        idx.forget("uid-low-a");
        idx.forget("uid-low-b");
        let (bind, _) = idx.take_bindable(2, Some(&n), later + Duration::from_secs(20));
        assert_eq!(names(&bind), vec!["high-1", "high-2"]);
    }

    /// Upstream's `getLowerPriorityNominatedPods`: a preemption takes the nomination of the
    /// lower-priority pods nominated to the node before.
    #[test]
    fn a_preemption_clears_lower_priority_nominations() {
        let now = Instant::now();
        let n = node_with_pods(2);
        let mut idx = PodIndex::default();
        let prio = |name, created: &str, node, p: i32, nominated: Option<&str>| {
            let mut pod =
                (*pod_with(name, created, node, "Running", json!({"priority": p}))).clone();
            let status = pod.status.get_or_insert_with(Default::default);
            status.start_time = Some(serde_json::from_value(json!(created)).unwrap());
            status.nominated_node_name = nominated.map(str::to_string);
            Arc::new(pod)
        };
        idx.observe(&prio("low-a", "2024-01-01T00:00:01Z", "n", 1, None), "n");
        idx.observe(&prio("low-b", "2024-01-01T00:00:02Z", "n", 1, None), "n");
        idx.observe(&prio("mid", "2024-01-01T00:00:03Z", "", 50, Some("n")), "n");
        idx.observe(&prio("high", "2024-01-01T00:00:04Z", "", 100, None), "n");
        let (_, report) = idx.take_bindable(2, Some(&n), now);
        let lower: Vec<&str> = report
            .iter()
            .find_map(|r| match r {
                NotBound::Preempting(c, _, _, _, lower) if c.name == "high" => {
                    Some(lower.iter().map(|l| l.name.as_str()).collect())
                }
                _ => None,
            })
            .expect("high preempts");
        assert_eq!(lower, ["mid"]);
    }

    /// Upstream's PrioritySort: a higher priority goes first, whatever its age.
    #[test]
    fn binds_the_highest_priority_first_then_the_oldest() {
        let now = Instant::now();
        let n = node();
        let mut idx = PodIndex::default();
        let with_priority =
            |name, created, p: i32| pod_with(name, created, "", "Pending", json!({"priority": p}));
        idx.observe(&with_priority("old-low", "2024-01-01T00:00:01Z", 0), "n");
        idx.observe(
            &with_priority("new-high", "2024-01-01T00:00:09Z", 1000),
            "n",
        );
        idx.observe(
            &with_priority("old-high", "2024-01-01T00:00:02Z", 1000),
            "n",
        );
        idx.observe(&pod("unset", "2024-01-01T00:00:00Z", "", "Pending"), "n");
        idx.observe(&with_priority("negative", "2024-01-01T00:00:00Z", -5), "n");
        let (first, _) = idx.take_bindable(5, Some(&n), now);
        assert_eq!(
            names(&first),
            vec!["old-high", "new-high", "unset", "old-low", "negative"]
        );
    }

    #[test]
    fn pods_beyond_the_nodes_capacity_are_told_too_many_pods_and_wait_for_a_place() {
        let now = Instant::now();
        let n = node_with_pods(2);
        let mut idx = PodIndex::default();
        for (name, second) in [("a", 1), ("b", 2), ("c", 3)] {
            let created = format!("2024-01-01T00:00:0{second}Z");
            idx.observe(&pod(name, &created, "", "Pending"), "n");
        }
        let too_many = "0/1 nodes are available: 1 Too many pods. no new claims to deallocate, \
                        preemption: 0/1 nodes are available: 1 No preemption victims found for \
                        incoming pod.";
        let (bind, report) = idx.take_bindable(2, Some(&n), now);
        assert_eq!(names(&bind), vec!["a", "b"]);
        assert_eq!(reported(&report), vec![("c", too_many)]);
        // Nothing new: the full node is not looked at again within the second.
        let (bind, report) = idx.take_bindable(2, Some(&n), now);
        assert!(bind.is_empty() && report.is_empty());
        // A new pod is told at once; the one already told is not told again.
        idx.observe(&pod("d", "2024-01-01T00:00:04Z", "", "Pending"), "n");
        let (bind, report) = idx.take_bindable(2, Some(&n), now);
        assert!(bind.is_empty());
        assert_eq!(reported(&report), vec![("d", too_many)]);
        let later = now + FULL_NODE_RECHECK;
        let (bind, report) = idx.take_bindable(2, Some(&n), later);
        assert!(bind.is_empty() && report.is_empty(), "{report:?}");
        // A pod leaves: the oldest waiting takes its place at once (no back-off for a full
        // node), and the next is not told again.
        idx.bind_done("uid-a", true, now);
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "n", "Succeeded"), "n");
        let (bind, report) = idx.take_bindable(2, Some(&n), later);
        assert_eq!(names(&bind), vec!["c"]);
        assert!(report.is_empty(), "{report:?}");
        // Another pod that does not fit for another reason as well is told with back-off.
        idx.observe(&cpu("e", "2024-01-01T00:00:05Z", "", 3000), "n");
        let (_, report) = idx.take_bindable(2, Some(&n), later);
        assert_eq!(report.len(), 1);
        assert!(
            reported(&report)[0]
                .1
                .contains("1 Insufficient cpu, 1 Too many pods")
        );
    }

    #[test]
    fn failed_binds_wait_and_others_are_ignored() {
        let now = Instant::now();
        let n = node();
        let mut idx = PodIndex::default();
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "", "Pending"), "n");
        assert_eq!(idx.take_bindable(5, Some(&n), now).0.len(), 1);
        idx.bind_done("uid-a", false, now);
        assert!(idx.take_bindable(5, Some(&n), now).0.is_empty());
        assert_eq!(idx.next_retry(), Some(now + RETRY_AFTER));
        assert_eq!(idx.take_bindable(5, Some(&n), now + RETRY_AFTER).0.len(), 1);

        let mut idx = PodIndex::default();
        let mut other = (*pod("x", "2024-01-01T00:00:01Z", "", "Pending")).clone();
        other.spec.as_mut().unwrap().scheduler_name = Some("my-scheduler".into());
        idx.observe(&Arc::new(other.clone()), "n");
        let mut deleting = (*pod("y", "2024-01-01T00:00:01Z", "", "Pending")).clone();
        deleting.metadata.deletion_timestamp = other.metadata.creation_timestamp.clone();
        idx.observe(&Arc::new(deleting), "n");
        idx.observe(
            &pod("z", "2024-01-01T00:00:01Z", "elsewhere", "Running"),
            "n",
        );
        assert!(idx.take_bindable(5, Some(&n), now).0.is_empty());
        assert_eq!(idx.used(), 0);
    }

    #[test]
    fn a_pod_that_does_not_fit_is_reported_and_waits_for_a_change_and_its_back_off() {
        let now = Instant::now();
        let n = node();
        let mut idx = PodIndex::default();
        idx.observe(&cpu("big", "2024-01-01T00:00:01Z", "n", 1500), "n");
        idx.observe(&cpu("more", "2024-01-01T00:00:02Z", "", 1000), "n");
        idx.observe(&cpu("fits", "2024-01-01T00:00:03Z", "", 500), "n");
        // The pod behind one that does not fit is still bound.
        let (bind, report) = idx.take_bindable(110, Some(&n), now);
        assert_eq!(names(&bind), vec!["fits"]);
        assert_eq!(
            reported(&report),
            vec![(
                "more",
                "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, \
                 preemption: 0/1 nodes are available: 1 No preemption victims found for \
                 incoming pod."
            )]
        );
        // Nothing changed: not tried again, however long it waits (short of the flush).
        let later = now + Duration::from_secs(60);
        assert!(idx.take_bindable(110, Some(&n), later).1.is_empty());
        assert_eq!(idx.next_retry(), Some(now + UNSCHEDULABLE_FLUSH));
        // A pod leaving the node: tried again once its back-off (1 s) is over.
        idx.forget("uid-big");
        assert_eq!(idx.next_retry(), Some(now + BACKOFF_FIRST));
        let (bind, report) = idx.take_bindable(110, Some(&n), now + Duration::from_millis(500));
        assert!(bind.is_empty() && report.is_empty(), "still backing off");
        let (bind, _) = idx.take_bindable(110, Some(&n), now + BACKOFF_FIRST);
        assert_eq!(names(&bind), vec!["more"]);
    }

    #[test]
    fn back_off_doubles_up_to_ten_seconds() {
        let mut now = Instant::now();
        let n = node();
        let mut idx = PodIndex::default();
        idx.observe(&cpu("huge", "2024-01-01T00:00:01Z", "", 3000), "n");
        let mut waits = Vec::new();
        for _ in 0..6 {
            assert_eq!(idx.take_bindable(110, Some(&n), now).1.len(), 1);
            idx.node_changed();
            let next = idx.next_retry().unwrap();
            waits.push(next - now);
            now = next;
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn gated_pods_are_reported_once_and_tried_when_they_change() {
        let now = Instant::now();
        let n = node();
        let mut idx = PodIndex::default();
        let gates = json!({"schedulingGates": [{"name": "g"}]});
        idx.observe(
            &pod_with("g", "2024-01-01T00:00:01Z", "", "Pending", gates),
            "n",
        );
        let (bind, report) = idx.take_bindable(110, Some(&n), now);
        assert!(bind.is_empty());
        assert_eq!(reported(&report), vec![("g", "gated")]);
        idx.node_changed();
        assert!(
            idx.take_bindable(110, Some(&n), now + UNSCHEDULABLE_FLUSH)
                .1
                .is_empty()
        );
        idx.observe(&pod("g", "2024-01-01T00:00:01Z", "", "Pending"), "n");
        assert_eq!(names(&idx.take_bindable(110, Some(&n), now).0), vec!["g"]);
    }

    #[test]
    fn the_condition_is_written_only_when_it_changes() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let c = |p: Arc<Pod>| Candidate {
            uid: "u".into(),
            namespace: "default".into(),
            name: "p".into(),
            pod: p,
        };
        let fresh = c(pod("p", "2024-01-01T00:00:01Z", "", "Pending"));
        let patch = not_bound_patch(&NotBound::Unschedulable(fresh, "m1".into(), false), now)
            .expect("a first patch");
        assert_eq!(
            patch,
            json!({"metadata": {"uid": "u"}, "status": {"conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "m1", "lastProbeTime": null,
                "lastTransitionTime": "2023-11-14T22:13:20Z"}]}})
        );
        let status = json!({"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "m1",
            "lastTransitionTime": "2023-01-01T00:00:00Z"}]});
        let mut with = (*pod("p", "2024-01-01T00:00:01Z", "", "Pending")).clone();
        with.status = Some(serde_json::from_value(status).unwrap());
        let with = Arc::new(with);
        assert_eq!(
            not_bound_patch(
                &NotBound::Unschedulable(c(with.clone()), "m1".into(), false),
                now
            ),
            None
        );
        let changed = not_bound_patch(&NotBound::Unschedulable(c(with), "m2".into(), false), now)
            .expect("a changed message");
        assert_eq!(
            changed["status"]["conditions"][0]["lastTransitionTime"], "2023-01-01T00:00:00Z",
            "still False since then"
        );
    }
}
