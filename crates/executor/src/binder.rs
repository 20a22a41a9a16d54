//! Which pods to bind to this node, and the binding call. The node holds at most `max_pods`
//! non-terminal pods (counting bindings in flight); unscheduled pods wait, oldest first, until
//! room frees up — as the scheduler leaves pods Pending on a full node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::worker::is_terminal;

/// After a failed bind, the pod is tried again this much later.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// An unscheduled pod to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// Oldest first, then by namespace and name.
type Order = (String, String, String);

#[derive(Debug, Default)]
pub struct PodIndex {
    unscheduled: BTreeMap<Order, Candidate>,
    order_of: HashMap<String, Order>,
    /// Non-terminal pods bound to this node.
    active: HashSet<String>,
    in_flight: HashSet<String>,
    retry_at: HashMap<String, Instant>,
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
    pub fn observe(&mut self, pod: &Pod, node: &str) {
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
                pod.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| crate::time::seconds(t.0).to_string())
                    .unwrap_or_default(),
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            );
            self.unscheduled.insert(
                order.clone(),
                Candidate {
                    uid: uid.clone(),
                    namespace: order.1.clone(),
                    name: order.2.clone(),
                },
            );
            self.order_of.insert(uid, order);
            return;
        }
        self.drop_candidate(&uid);
        if node_name.is_empty() {
            return;
        }
        self.in_flight.remove(&uid);
        if node_name == node && !is_terminal(pod) {
            self.active.insert(uid);
        } else {
            self.active.remove(&uid);
        }
    }

    fn drop_candidate(&mut self, uid: &str) {
        if let Some(order) = self.order_of.remove(uid) {
            self.unscheduled.remove(&order);
        }
        self.retry_at.remove(uid);
    }

    /// The pod is gone.
    pub fn forget(&mut self, uid: &str) {
        self.drop_candidate(uid);
        self.active.remove(uid);
        self.in_flight.remove(uid);
    }

    /// Pods on (or being bound to) the node that are not finished.
    pub fn used(&self) -> usize {
        self.active.len() + self.in_flight.len()
    }

    /// The pods to bind now, within the room left; they count as in flight until the watch
    /// shows them bound (or the bind fails).
    pub fn take_bindable(&mut self, max_pods: usize, now: Instant) -> Vec<Candidate> {
        let mut room = max_pods.saturating_sub(self.used());
        let mut out = Vec::new();
        for c in self.unscheduled.values() {
            if room == 0 {
                break;
            }
            if self.in_flight.contains(&c.uid)
                || self.retry_at.get(&c.uid).is_some_and(|t| *t > now)
            {
                continue;
            }
            out.push(c.clone());
            room -= 1;
        }
        for c in &out {
            self.in_flight.insert(c.uid.clone());
            self.retry_at.remove(&c.uid);
        }
        out
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

    /// When a pod waiting out a failed bind may be tried again.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retry_at.values().min().copied()
    }
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
    use serde_json::json;

    fn pod(name: &str, created: &str, node: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "creationTimestamp": created},
            "spec": {"nodeName": node, "schedulerName": "default-scheduler",
                "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn names(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn binds_oldest_first_within_capacity() {
        let now = Instant::now();
        let mut idx = PodIndex::default();
        idx.observe(&pod("c", "2024-01-01T00:00:03Z", "", "Pending"), "n");
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "", "Pending"), "n");
        idx.observe(&pod("b", "2024-01-01T00:00:02Z", "", "Pending"), "n");
        idx.observe(&pod("d", "2024-01-01T00:00:04Z", "", "Pending"), "n");
        let first = idx.take_bindable(2, now);
        assert_eq!(names(&first), vec!["a", "b"]);
        // In flight counts against the capacity.
        assert!(idx.take_bindable(2, now).is_empty());
        idx.bind_done("uid-a", true, now);
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "n", "Pending"), "n");
        idx.observe(&pod("b", "2024-01-01T00:00:02Z", "n", "Running"), "n");
        assert_eq!(idx.used(), 2);
        assert!(idx.take_bindable(2, now).is_empty());
        // A pod finishing frees its place.
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "n", "Succeeded"), "n");
        assert_eq!(names(&idx.take_bindable(2, now)), vec!["c"]);
        // A deleted pod frees its place too.
        idx.forget("uid-b");
        assert_eq!(names(&idx.take_bindable(2, now)), vec!["d"]);
    }

    #[test]
    fn failed_binds_wait_and_others_are_ignored() {
        let now = Instant::now();
        let mut idx = PodIndex::default();
        idx.observe(&pod("a", "2024-01-01T00:00:01Z", "", "Pending"), "n");
        assert_eq!(idx.take_bindable(5, now).len(), 1);
        idx.bind_done("uid-a", false, now);
        assert!(idx.take_bindable(5, now).is_empty());
        assert_eq!(idx.next_retry(), Some(now + RETRY_AFTER));
        assert_eq!(idx.take_bindable(5, now + RETRY_AFTER).len(), 1);

        let mut idx = PodIndex::default();
        let mut other = pod("x", "2024-01-01T00:00:01Z", "", "Pending");
        other.spec.as_mut().unwrap().scheduler_name = Some("my-scheduler".into());
        idx.observe(&other, "n");
        let mut deleting = pod("y", "2024-01-01T00:00:01Z", "", "Pending");
        deleting.metadata.deletion_timestamp = other.metadata.creation_timestamp.clone();
        idx.observe(&deleting, "n");
        idx.observe(
            &pod("z", "2024-01-01T00:00:01Z", "elsewhere", "Running"),
            "n",
        );
        assert!(idx.take_bindable(5, now).is_empty());
        assert_eq!(idx.used(), 0);
    }
}
