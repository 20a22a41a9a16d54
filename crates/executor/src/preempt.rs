//! The default scheduler's preemption (DefaultPreemption's PostFilter) on this one node: a pod
//! that does not fit, for a reason removing pods could fix, may have lower-priority pods of the
//! node deleted to make room. The victims are the fewest of the least important: all
//! lower-priority pods are taken away, and then given back, the most important first (higher
//! priority, then earlier start), as long as the pod still fits (`SelectVictimsOnNode`).

use std::sync::Arc;

use kbatch_api::conditions::is_disruption_target;
use kbatch_api::k8s_openapi::api::core::v1::{Node, Pod};

use crate::fit::{self, Requests};

/// A pod running on the node, as preemption sees it.
#[derive(Debug, Clone)]
pub struct Running {
    pub uid: String,
    pub requests: Requests,
    pub priority: i32,
    /// `status.startTime` (None: not started, which upstream counts as now): earlier is more
    /// important.
    pub start: Option<jiff::Timestamp>,
    /// Already being deleted: leaving anyway, never chosen.
    pub deleting: bool,
    /// Being deleted by a preemption (its `DisruptionTarget` is `PreemptionByScheduler`).
    pub preempted: bool,
    pub pod: Arc<Pod>,
}

impl Running {
    pub fn of(pod: &Arc<Pod>, requests: Requests) -> Running {
        let status = pod.status.as_ref();
        let start = status.and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let preempted = deleting && is_disruption_target(pod, PREEMPTION_REASON);
        Running {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            requests,
            priority: priority(pod),
            start,
            deleting,
            preempted,
            pod: pod.clone(),
        }
    }
}

pub const PREEMPTION_REASON: &str = "PreemptionByScheduler";

/// A pod's `spec.priority` (0 when unset).
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The condition's message: `<scheduler>: preempting to accommodate a higher priority pod`.
pub fn condition_message(preemptor: &Pod) -> String {
    let scheduler = preemptor
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default-scheduler");
    format!("{scheduler}: preempting to accommodate a higher priority pod")
}

pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";

/// Why a pod may not preempt (`PodEligibleToPreemptOthers`), as the scheduler words it; None
/// when it may. `nominated_here`: its `status.nominatedNodeName` is this node.
pub fn not_eligible(pod: &Pod, nominated_here: bool, running: &[&Running]) -> Option<&'static str> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref());
    if policy == Some("Never") {
        return Some(NOT_ELIGIBLE_NEVER);
    }
    let p = priority(pod);
    if nominated_here && running.iter().any(|r| r.priority < p && r.preempted) {
        return Some("not eligible due to a terminating pod on the nominated node.");
    }
    None
}

/// `SelectVictimsOnNode` for `pod` on `node`, whose pods request `requested` in all and number
/// `pod_count` (the running ones among them in `running`): the uids of the victims, or None
/// when taking every lower-priority pod away would not make it fit.
pub fn select_victims(
    pod: &Pod,
    node: &Node,
    requested: &Requests,
    pod_count: usize,
    running: &[&Running],
) -> Option<Vec<String>> {
    let p = priority(pod);
    let mut lower: Vec<&Running> = running
        .iter()
        .copied()
        .filter(|r| r.priority < p && !r.deleting)
        .collect();
    if lower.is_empty() {
        return None;
    }
    let mut req = requested.clone();
    let mut count = pod_count;
    for r in &lower {
        req.sub(&r.requests);
        count = count.saturating_sub(1);
    }
    let fits = |req: &Requests, count: usize| {
        fit::filter(
            pod,
            &fit::NodeInfo {
                node,
                requested: req,
                pod_count: count,
            },
        )
        .is_ok()
    };
    if !fits(&req, count) {
        return None;
    }
    // The most important first: higher priority, then the earlier start.
    lower.sort_by(|a, b| {
        let start = |r: &Running| r.start.unwrap_or(jiff::Timestamp::MAX);
        b.priority
            .cmp(&a.priority)
            .then_with(|| start(a).cmp(&start(b)))
            // Ties in no particular order upstream; here a fixed one.
            .then_with(|| a.uid.cmp(&b.uid))
    });
    let mut victims = Vec::new();
    for r in lower {
        let mut with = req.clone();
        with.add(&r.requests);
        if fits(&with, count + 1) {
            req = with;
            count += 1;
        } else {
            victims.push(r.uid.clone());
        }
    }
    (!victims.is_empty()).then_some(victims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, priority: i32, started: &str, millis: u32) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": format!("uid-{name}"),
                    "creationTimestamp": "2024-01-01T00:00:00Z"},
                "spec": {"priority": priority, "nodeName": "n",
                    "containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": format!("{millis}m")}}}]},
                "status": {"phase": "Running", "startTime": started}
            }))
            .unwrap(),
        )
    }

    fn node(pods: usize) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": pods.to_string()}}
        }))
        .unwrap()
    }

    fn running(pods: &[Arc<Pod>]) -> Vec<Running> {
        pods.iter()
            .map(|p| Running::of(p, fit::pod_requests(p)))
            .collect()
    }

    fn total(rs: &[Running]) -> Requests {
        let mut sum = Requests::default();
        for r in rs {
            sum.add(&r.requests);
        }
        sum
    }

    // Scenarios of upstream's TestSelectVictimsOnNode / TestPreempt, on one node.
    #[test]
    fn the_fewest_least_important_lower_priority_pods_go() {
        let on_node = running(&[
            pod("low-old", 1, "2024-01-01T00:00:01Z", 300),
            pod("low-new", 1, "2024-01-01T00:00:05Z", 300),
            pod("mid", 5, "2024-01-01T00:00:02Z", 300),
            pod("high", 100, "2024-01-01T00:00:03Z", 100),
        ]);
        let refs: Vec<&Running> = on_node.iter().collect();
        let n = node(110);
        let req = total(&on_node);
        // 1000m allocatable, 1000m used. A 300m pod of priority 10: one victim, the least
        // important of the lower ones (lowest priority, latest start).
        let preemptor = pod("p", 10, "2024-01-01T00:00:09Z", 300);
        assert_eq!(
            select_victims(&preemptor, &n, &req, 4, &refs),
            Some(vec!["uid-low-new".to_string()])
        );
        // 600m: both priority-1 pods.
        let preemptor = pod("p", 10, "2024-01-01T00:00:09Z", 600);
        assert_eq!(
            select_victims(&preemptor, &n, &req, 4, &refs),
            Some(vec!["uid-low-old".to_string(), "uid-low-new".to_string()])
        );
        // 1000m: not even with every lower pod gone (the priority-100 pod stays).
        let preemptor = pod("p", 10, "2024-01-01T00:00:09Z", 1000);
        assert_eq!(select_victims(&preemptor, &n, &req, 4, &refs), None);
        // Nothing of lower priority: no victims.
        let preemptor = pod("p", 1, "2024-01-01T00:00:09Z", 100);
        assert_eq!(select_victims(&preemptor, &n, &req, 4, &refs), None);
    }

    #[test]
    fn pod_capacity_is_freed_too_and_deleting_pods_are_not_chosen() {
        let mut on_node = running(&[
            pod("a", 0, "2024-01-01T00:00:01Z", 0),
            pod("b", 0, "2024-01-01T00:00:02Z", 0),
        ]);
        on_node[1].deleting = true;
        let refs: Vec<&Running> = on_node.iter().collect();
        let preemptor = pod("p", 10, "2024-01-01T00:00:09Z", 0);
        assert_eq!(
            select_victims(&preemptor, &node(2), &Requests::default(), 2, &refs),
            Some(vec!["uid-a".to_string()])
        );
    }

    #[test]
    fn eligibility_as_upstream() {
        let mut on_node = running(&[pod("v", 0, "2024-01-01T00:00:01Z", 0)]);
        let p = pod("p", 10, "2024-01-01T00:00:09Z", 0);
        assert_eq!(not_eligible(&p, true, &[&on_node[0]]), None);
        on_node[0].preempted = true;
        assert_eq!(
            not_eligible(&p, true, &[&on_node[0]]),
            Some("not eligible due to a terminating pod on the nominated node.")
        );
        assert_eq!(not_eligible(&p, false, &[&on_node[0]]), None);
        let mut never = (*p).clone();
        never.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        assert_eq!(
            not_eligible(&never, false, &[]),
            Some("not eligible due to preemptionPolicy=Never.")
        );
        assert_eq!(
            condition_message(&p),
            "default-scheduler: preempting to accommodate a higher priority pod"
        );
    }
}
