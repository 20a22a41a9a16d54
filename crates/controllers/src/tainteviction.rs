//! The taint eviction controller (upstream `pkg/controller/tainteviction`, which
//! kube-controller-manager runs as `taint-eviction-controller`): a pod on a node with NoExecute
//! taints it does not tolerate is deleted, after the shortest `tolerationSeconds` of the
//! tolerations that let it stay (at once when one taint is not tolerated, never when all are
//! tolerated without a limit). Before the deletion the pod gets the `DisruptionTarget`
//! condition (`DeletionByTaintManager`), which a Job's pod failure policy can match.
//! A scheduled deletion is cancelled when the taints go, the pod comes to tolerate them or the
//! pod goes, with the `TaintManagerEviction` events upstream records.
//!
//! The decision is the pure [`decide`]; one task owns the nodes' taints and the scheduled
//! deletions and handles node changes, pod changes and timers in arrival order (upstream
//! shards this by node over 8 workers; one node needs one). On a real cluster its own
//! controller does this job, so `kbatch controllers` does not run it by default.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kbatch_api::conditions::with_disruption_target;
use kbatch_api::k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Taint, Toleration};
use kbatch_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use kbatch_api::taints;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::runtime::events::EventRecorder;
use crate::runtime::informer::{Change, InformerFactory, Lister};

/// The controller's name, its event source component.
pub const COMPONENT: &str = "taint-eviction-controller";
/// The reason of both its events.
pub const EVENT_REASON: &str = "TaintManagerEviction";
pub const CONDITION_REASON: &str = "DeletionByTaintManager";
pub const CONDITION_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";
/// Attempts of one deletion before it is retried later (upstream's `retries`), 10 ms apart.
const ATTEMPTS: usize = 5;
const ATTEMPT_GAP: Duration = Duration::from_millis(10);
/// A deletion that failed all its attempts is decided again after this, doubling to the max.
const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// A deletion scheduled for later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub uid: String,
    pub node: String,
    /// The finite taints that decided it (see [`taint_set_key`]).
    pub taint_set: String,
    pub created_at: Timestamp,
    pub fire_at: Timestamp,
}

/// What to do about one pod on a tainted node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every taint tolerated without a limit (or none left): cancel any scheduled deletion.
    Keep,
    /// A taint not tolerated, or a toleration of zero seconds: delete now.
    Now,
    /// Delete at `trigger`. `keep_existing`: the scheduled deletion stands (its window started
    /// earlier); `cancel_scheduled`: one scheduled for other reasons is replaced.
    Later {
        start: Timestamp,
        trigger: Timestamp,
        taint_set: String,
        keep_existing: bool,
        cancel_scheduled: bool,
    },
}

/// Upstream's `getPodEvictionDecision` for a pod `uid` on `node`, whose NoExecute taints are
/// `taints`, at `now`, given what is scheduled for it.
pub fn decide(
    uid: &str,
    node: &str,
    tolerations: &[Toleration],
    no_execute: &[Taint],
    now: Timestamp,
    scheduled: Option<&Scheduled>,
) -> Decision {
    if no_execute.is_empty() {
        return Decision::Keep;
    }
    let Some(used) = taints::matching_tolerations(no_execute, tolerations) else {
        return Decision::Now;
    };
    let Some(min) = min_toleration_seconds(&used) else {
        return Decision::Keep;
    };
    if min == 0 {
        return Decision::Now;
    }
    let window = SignedDuration::from_secs(min);
    let taint_set = finite_taint_set_key(no_execute, &used);
    let trigger = now.saturating_add(window).unwrap_or(now);
    let fresh = |cancel_scheduled| Decision::Later {
        start: now,
        trigger,
        taint_set: taint_set.clone(),
        keep_existing: false,
        cancel_scheduled,
    };
    let Some(s) = scheduled else {
        return fresh(false);
    };
    if s.uid != uid || s.node != node || !taint_sets_overlap(&s.taint_set, &taint_set) {
        return fresh(true);
    }
    // The same taints still hold it: the window counts from when it first started.
    if s.created_at.saturating_add(window).unwrap_or(s.created_at) < trigger {
        return Decision::Later {
            start: s.created_at,
            trigger: s.fire_at,
            taint_set,
            keep_existing: true,
            cancel_scheduled: false,
        };
    }
    Decision::Later {
        start: s.created_at,
        trigger,
        taint_set,
        keep_existing: false,
        cancel_scheduled: true,
    }
}

/// Upstream's `getMinTolerationTime`: the shortest `tolerationSeconds` (0 when one is zero or
/// negative, or when no toleration was used), None when none sets a limit.
pub fn min_toleration_seconds(used: &[&Toleration]) -> Option<i64> {
    if used.is_empty() {
        return Some(0);
    }
    let mut min: Option<i64> = None;
    for s in used.iter().filter_map(|t| t.toleration_seconds) {
        if s <= 0 {
            return Some(0);
        }
        min = Some(min.map_or(s, |m: i64| m.min(s)));
    }
    min
}

/// An identity of a set of taints, independent of their order (key, value, effect and the time
/// each was added).
pub fn taint_set_key(no_execute: &[Taint]) -> String {
    let mut ids: Vec<String> = no_execute
        .iter()
        .map(|t| {
            let added = t
                .time_added
                .as_ref()
                .map_or_else(|| "<nil>".to_string(), |a| a.0.to_string());
            format!(
                "{:?}|{:?}|{:?}|{:?}",
                t.key,
                t.value.as_deref().unwrap_or(""),
                t.effect,
                added
            )
        })
        .collect();
    ids.sort();
    ids.join("\n")
}

/// The identity of the taints tolerated for a limited time (`used` pairs with `no_execute`).
fn finite_taint_set_key(no_execute: &[Taint], used: &[&Toleration]) -> String {
    let finite: Vec<Taint> = no_execute
        .iter()
        .zip(used)
        .filter(|(_, t)| t.toleration_seconds.is_some_and(|s| s > 0))
        .map(|(taint, _)| taint.clone())
        .collect();
    taint_set_key(&finite)
}

/// Whether two taint sets share a taint (an empty one overlaps any).
fn taint_sets_overlap(a: &str, b: &str) -> bool {
    if a.is_empty() || b.is_empty() || a == b {
        return true;
    }
    let right: Vec<&str> = b.split('\n').collect();
    a.split('\n').any(|t| right.contains(&t))
}

enum Msg {
    Node(String),
    Pod {
        namespace: String,
        name: String,
        node: String,
    },
    /// A scheduled deletion's time came.
    Fire {
        key: String,
        generation: u64,
    },
    /// A deletion ended (`ok`: done or nothing left to do).
    Done {
        key: String,
        generation: u64,
        ok: bool,
    },
    /// Decide again about a pod whose deletion failed.
    Retry {
        key: String,
    },
}

struct Work {
    scheduled: Scheduled,
    generation: u64,
    running: bool,
    timer: Option<JoinHandle<()>>,
}

struct Controller {
    client: Client,
    recorder: EventRecorder,
    pods: Lister<Pod>,
    nodes: Lister<Node>,
    tx: mpsc::UnboundedSender<Msg>,
    /// NoExecute taints of the tainted nodes.
    tainted: HashMap<String, Vec<Taint>>,
    /// Deletions scheduled or running, by `namespace/name`.
    work: HashMap<String, Work>,
    generation: u64,
    failures: HashMap<String, u32>,
    /// Whether anything is tainted or scheduled: pod changes matter only then.
    active: Arc<AtomicBool>,
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(
    client: Client,
    informers: &InformerFactory,
    recorder: EventRecorder,
    mut shutdown: watch::Receiver<bool>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let active = Arc::new(AtomicBool::new(false));
    let node_informer = informers.informer::<Node>();
    let pod_informer = informers.informer::<Pod>();
    {
        let tx = tx.clone();
        node_informer.add_handler(move |change: Change<Node>| {
            let (old, new) = match &change {
                Change::Added(n) => (None, Some(n)),
                Change::Updated { old, new } => (Some(old), Some(new)),
                Change::Deleted(n) => (Some(n), None),
            };
            let no_exec = |n: &Arc<Node>| {
                taints::no_execute(
                    n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_deref())
                        .unwrap_or(&[]),
                )
            };
            if let (Some(o), Some(n)) = (old, new)
                && no_exec(o) == no_exec(n)
            {
                return;
            }
            if let Some(n) = new.or(old) {
                let _ = tx.send(Msg::Node(n.name_any()));
            }
        });
    }
    {
        let tx = tx.clone();
        let active = Arc::clone(&active);
        pod_informer.add_handler(move |change: Change<Pod>| {
            if !active.load(Ordering::Acquire) {
                return;
            }
            let node_of = |p: &Pod| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default()
            };
            let tolerations_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.tolerations.clone());
            let pod = match &change {
                Change::Added(p) | Change::Deleted(p) => p,
                Change::Updated { old, new } => {
                    if node_of(old) == node_of(new) && tolerations_of(old) == tolerations_of(new) {
                        return;
                    }
                    new
                }
            };
            let _ = tx.send(Msg::Pod {
                namespace: pod.namespace().unwrap_or_default(),
                name: pod.name_any(),
                node: node_of(pod),
            });
        });
    }
    let mut c = Controller {
        client,
        recorder,
        pods: pod_informer.lister(),
        nodes: node_informer.lister(),
        tx,
        tainted: HashMap::new(),
        work: HashMap::new(),
        generation: 0,
        failures: HashMap::new(),
        active,
    };
    info!("taint eviction controller started");
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(m) => c.handle(m),
                None => break,
            },
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    for w in c.work.values_mut() {
        if let Some(t) = w.timer.take() {
            t.abort();
        }
    }
    drop((pod_informer, node_informer));
}

fn pod_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectReference::default()
    }
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

impl Controller {
    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Node(name) => self.node_changed(&name),
            Msg::Pod {
                namespace,
                name,
                node,
            } => self.pod_changed(&namespace, &name, &node),
            Msg::Fire { key, generation } => self.fire(&key, generation),
            Msg::Done {
                key,
                generation,
                ok,
            } => self.done(key, generation, ok),
            Msg::Retry { key } => {
                let (ns, name) = split(&key);
                if let Some(pod) = self.pods.get(ns, name) {
                    let node = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default();
                    self.pod_changed(ns, name, &node);
                }
            }
        }
        self.active.store(
            !self.tainted.is_empty() || !self.work.is_empty(),
            Ordering::Release,
        );
    }

    fn node_changed(&mut self, name: &str) {
        let Some(node) = self.nodes.get("", name) else {
            self.tainted.remove(name);
            return;
        };
        let no_execute = taints::no_execute(
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or(&[]),
        );
        if no_execute.is_empty() {
            self.tainted.remove(name);
        } else {
            self.tainted.insert(name.to_string(), no_execute.clone());
        }
        // The pods are listed after the taints are recorded: a pod bound meanwhile is either
        // in this list or reported as a change that sees the taints.
        self.active.store(
            !self.tainted.is_empty() || !self.work.is_empty(),
            Ordering::Release,
        );
        let pods: Vec<Arc<Pod>> = self
            .pods
            .list()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
            .collect();
        let now = Timestamp::now();
        for pod in pods {
            let (ns, pod_name) = (pod.namespace().unwrap_or_default(), pod.name_any());
            if no_execute.is_empty() {
                self.cancel_with_event(&format!("{ns}/{pod_name}"));
            } else {
                self.process(&pod, name, &no_execute, now);
            }
        }
    }

    fn pod_changed(&mut self, namespace: &str, name: &str, node: &str) {
        let key = format!("{namespace}/{name}");
        let Some(pod) = self.pods.get(namespace, name) else {
            self.cancel_with_event(&key);
            return;
        };
        let current = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("");
        if current != node {
            return;
        }
        let Some(no_execute) = (!node.is_empty())
            .then(|| self.tainted.get(node).cloned())
            .flatten()
        else {
            self.cancel_with_event(&key);
            return;
        };
        self.process(&pod, node, &no_execute, Timestamp::now());
    }

    fn process(&mut self, pod: &Pod, node: &str, no_execute: &[Taint], now: Timestamp) {
        let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let uid = pod.uid().unwrap_or_default();
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[]);
        let existing = self
            .work
            .get(&key)
            .filter(|w| !w.running)
            .map(|w| &w.scheduled);
        match decide(&uid, node, tolerations, no_execute, now, existing) {
            Decision::Keep => self.cancel_with_event(&key),
            Decision::Now => {
                let replaced = self.schedule(
                    &key,
                    Scheduled {
                        uid,
                        node: node.to_string(),
                        taint_set: taint_set_key(no_execute),
                        created_at: now,
                        fire_at: now,
                    },
                );
                if replaced {
                    self.cancel_event(&key);
                }
            }
            Decision::Later {
                start,
                trigger,
                taint_set,
                keep_existing,
                cancel_scheduled,
            } => {
                if keep_existing {
                    return;
                }
                let replaced = self.schedule(
                    &key,
                    Scheduled {
                        uid,
                        node: node.to_string(),
                        taint_set,
                        created_at: start,
                        fire_at: trigger,
                    },
                );
                if cancel_scheduled && replaced {
                    self.cancel_event(&key);
                }
            }
        }
    }

    /// Schedules a deletion (upstream's `UpdateWork`): a running one, or one due at the same
    /// time, stays. Returns whether a scheduled one was replaced.
    fn schedule(&mut self, key: &str, s: Scheduled) -> bool {
        let mut replaced = false;
        if let Some(w) = self.work.get_mut(key) {
            if w.running || w.scheduled.fire_at == s.fire_at {
                return false;
            }
            if let Some(t) = w.timer.take() {
                t.abort();
            }
            replaced = true;
        }
        self.generation += 1;
        let generation = self.generation;
        let delay = s
            .fire_at
            .duration_since(Timestamp::now())
            .unsigned_abs()
            .min(Duration::from_secs(u64::from(u32::MAX)));
        let due = s.fire_at > Timestamp::now();
        debug!(pod = %key, fire_at = %s.fire_at, "deletion scheduled");
        let tx = self.tx.clone();
        let k = key.to_string();
        let timer = tokio::spawn(async move {
            if due {
                tokio::time::sleep(delay).await;
            }
            let _ = tx.send(Msg::Fire { key: k, generation });
        });
        self.work.insert(
            key.to_string(),
            Work {
                scheduled: s,
                generation,
                running: false,
                timer: Some(timer),
            },
        );
        replaced
    }

    /// Cancels what is scheduled for `key`, with upstream's event when a deletion was waiting.
    fn cancel_with_event(&mut self, key: &str) {
        if let Some(mut w) = self.work.remove(key) {
            if let Some(t) = w.timer.take() {
                t.abort();
            }
            if !w.running {
                self.cancel_event(key);
            }
        }
    }

    fn cancel_event(&self, key: &str) {
        let (ns, name) = split(key);
        self.recorder.normal(
            pod_reference(ns, name),
            EVENT_REASON,
            &format!("Cancelling deletion of Pod {key}"),
        );
    }

    fn fire(&mut self, key: &str, generation: u64) {
        let Some(w) = self.work.get_mut(key) else {
            return;
        };
        if w.generation != generation || w.running {
            return;
        }
        w.running = true;
        w.timer = None;
        let (ns, name) = split(key);
        info!(pod = %key, "deleting pod for a NoExecute taint");
        self.recorder.normal(
            pod_reference(ns, name),
            EVENT_REASON,
            &format!("Marking for deletion Pod {key}"),
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let (name, uid, tx, key) = (
            name.to_string(),
            w.scheduled.uid.clone(),
            self.tx.clone(),
            key.to_string(),
        );
        tokio::spawn(async move {
            let mut ok = false;
            for attempt in 0..ATTEMPTS {
                match mark_and_delete(&api, &name, &uid).await {
                    Ok(()) => {
                        ok = true;
                        break;
                    }
                    Err(e) => {
                        warn!(pod = %key, attempt, error = %e, "deleting a pod for a NoExecute taint failed");
                        tokio::time::sleep(ATTEMPT_GAP).await;
                    }
                }
            }
            let _ = tx.send(Msg::Done {
                key,
                generation,
                ok,
            });
        });
    }

    fn done(&mut self, key: String, generation: u64, ok: bool) {
        if self
            .work
            .get(&key)
            .is_some_and(|w| w.generation == generation)
        {
            self.work.remove(&key);
        }
        if ok {
            self.failures.remove(&key);
            return;
        }
        let n = self.failures.entry(key.clone()).or_insert(0);
        let delay = RETRY_BASE
            .saturating_mul(2u32.saturating_pow(*n))
            .min(RETRY_MAX);
        *n = n.saturating_add(1);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(Msg::Retry { key });
        });
    }
}

/// Upstream's `addConditionAndDeletePod`: nothing to do for a pod gone, replaced (another uid)
/// or already being deleted; otherwise the condition, then the deletion of that very pod.
async fn mark_and_delete(api: &Api<Pod>, name: &str, uid: &str) -> Result<(), kube::Error> {
    let Some(pod) = api.get_opt(name).await? else {
        return Ok(());
    };
    if (!uid.is_empty() && pod.uid().as_deref() != Some(uid))
        || pod.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    if let Some(conditions) =
        with_disruption_target(&pod, CONDITION_REASON, CONDITION_MESSAGE, Timestamp::now())
    {
        let patch = json!({"metadata": {"uid": pod.uid()}, "status": {"conditions": conditions}});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    let dp = DeleteParams {
        preconditions: (!uid.is_empty()).then(|| Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn taints(v: serde_json::Value) -> Vec<Taint> {
        serde_json::from_value(v).unwrap()
    }

    fn tolerations(v: serde_json::Value) -> Vec<Toleration> {
        serde_json::from_value(v).unwrap()
    }

    fn no_execute(key: &str) -> serde_json::Value {
        json!({"key": key, "value": "v", "effect": "NoExecute"})
    }

    fn tolerate(key: &str, seconds: Option<i64>) -> serde_json::Value {
        let mut t = json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = seconds {
            t["tolerationSeconds"] = json!(s);
        }
        t
    }

    // Scenarios of upstream's TestCreatePod / TestUpdatePod / TestUpdateNode, as decisions.
    #[test]
    fn decisions_for_a_pod_on_a_tainted_node() {
        let now = t("2024-01-01T00:00:00Z");
        let rows: Vec<(&str, serde_json::Value, serde_json::Value, &str)> = vec![
            ("no taints", json!([]), json!([]), "keep"),
            (
                "a taint, no tolerations",
                json!([no_execute("a")]),
                json!([]),
                "now",
            ),
            (
                "tolerated forever",
                json!([no_execute("a")]),
                json!([tolerate("a", None)]),
                "keep",
            ),
            (
                "tolerated for 3 s",
                json!([no_execute("a")]),
                json!([tolerate("a", Some(3))]),
                "later 3",
            ),
            (
                "tolerated for 0 s",
                json!([no_execute("a")]),
                json!([tolerate("a", Some(0))]),
                "now",
            ),
            (
                "negative seconds",
                json!([no_execute("a")]),
                json!([tolerate("a", Some(-5))]),
                "now",
            ),
            (
                "the shortest of the used tolerations",
                json!([no_execute("a"), no_execute("b")]),
                json!([tolerate("a", Some(100)), tolerate("b", Some(7))]),
                "later 7",
            ),
            (
                "one forever, one limited",
                json!([no_execute("a"), no_execute("b")]),
                json!([tolerate("a", None), tolerate("b", Some(20))]),
                "later 20",
            ),
            (
                "one taint of two not tolerated",
                json!([no_execute("a"), no_execute("b")]),
                json!([tolerate("a", None)]),
                "now",
            ),
        ];
        for (name, ta, to, want) in rows {
            let got = decide("u", "n", &tolerations(to), &taints(ta), now, None);
            let got = match got {
                Decision::Keep => "keep".to_string(),
                Decision::Now => "now".to_string(),
                Decision::Later {
                    start,
                    trigger,
                    keep_existing,
                    cancel_scheduled,
                    ..
                } => {
                    assert_eq!(start, now, "{name}");
                    assert!(!keep_existing && !cancel_scheduled, "{name}");
                    format!("later {}", trigger.duration_since(now).as_secs())
                }
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_scheduled_deletion_keeps_its_window_while_its_taints_stay() {
        let t0 = t("2024-01-01T00:00:00Z");
        let t1 = t0 + SignedDuration::from_secs(10);
        let ta = taints(json!([no_execute("a")]));
        let to = tolerations(json!([tolerate("a", Some(60))]));
        let Decision::Later {
            trigger, taint_set, ..
        } = decide("u", "n", &to, &ta, t0, None)
        else {
            panic!("later");
        };
        assert_eq!(trigger, t0 + SignedDuration::from_secs(60));
        let s = Scheduled {
            uid: "u".into(),
            node: "n".into(),
            taint_set,
            created_at: t0,
            fire_at: trigger,
        };
        // Seen again 10 s on: the deletion stands, due when first set.
        assert_eq!(
            decide("u", "n", &to, &ta, t1, Some(&s)),
            Decision::Later {
                start: t0,
                trigger,
                taint_set: s.taint_set.clone(),
                keep_existing: true,
                cancel_scheduled: false,
            }
        );
        // Another pod of the same name, another node or other taints: a fresh window.
        for (uid, node, ta2) in [
            ("v", "n", ta.clone()),
            ("u", "m", ta.clone()),
            ("u", "n", taints(json!([no_execute("b")]))),
        ] {
            let to2 = tolerations(json!([tolerate("a", Some(60)), tolerate("b", Some(60))]));
            match decide(uid, node, &to2, &ta2, t1, Some(&s)) {
                Decision::Later {
                    start,
                    trigger,
                    keep_existing,
                    cancel_scheduled,
                    ..
                } => {
                    assert_eq!(start, t1, "{uid} {node}");
                    assert_eq!(trigger, t1 + SignedDuration::from_secs(60));
                    assert!(!keep_existing && cancel_scheduled, "{uid} {node}");
                }
                other => panic!("{uid} {node}: {other:?}"),
            }
        }
        // A taint added beside the first one leaves the window where it was.
        let both = taints(json!([no_execute("a"), no_execute("b")]));
        let to2 = tolerations(json!([tolerate("a", Some(60)), tolerate("b", Some(60))]));
        assert!(matches!(
            decide("u", "n", &to2, &both, t1, Some(&s)),
            Decision::Later {
                keep_existing: true,
                ..
            }
        ));
    }

    #[test]
    fn min_toleration_seconds_as_upstream() {
        let none: Vec<&Toleration> = vec![];
        assert_eq!(min_toleration_seconds(&none), Some(0));
        let ts = tolerations(json!([
            tolerate("a", None),
            tolerate("b", Some(9)),
            tolerate("c", Some(4))
        ]));
        let refs: Vec<&Toleration> = ts.iter().collect();
        assert_eq!(min_toleration_seconds(&refs), Some(4));
        assert_eq!(min_toleration_seconds(&refs[..1]), None);
    }
}
