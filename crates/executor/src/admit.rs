//! kubelet's admission of a pod bound to its node (`predicateAdmitHandler` with
//! `generalFilter`): a pod placed here without the scheduler (by `spec.nodeName`) that does
//! not fit is failed, never run. Resources first (every shortfall, the first one reported),
//! then node affinity and selector, the node name, and NoExecute taints; the first failure
//! is the pod's reason: `OutOf<resource>` or the predicate's name.

use kbatch_api::k8s_openapi::api::core::v1::Pod;

use crate::fit::{self, NodeInfo};

/// Why the node refuses a pod: the reason and message of its Failed status (the message
/// after kubelet's `Pod was rejected: `) and of the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// kubelet's `generalFilter` on `pod` against the node and its other admitted pods.
pub fn admit(pod: &Pod, node: &NodeInfo) -> Result<(), Rejection> {
    if let Some(short) = fit::insufficient_resources(pod, node).into_iter().next() {
        return Err(Rejection {
            reason: format!("OutOf{}", short.resource),
            message: format!(
                "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
                short.resource, short.requested, short.used, short.capacity
            ),
        });
    }
    if !fit::required_affinity_matches(pod, node.node) {
        return Err(predicate(fit::NODE_AFFINITY, fit::REASON_NODE_AFFINITY));
    }
    let node_name = node.node.metadata.name.as_deref().unwrap_or("");
    let wanted = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if wanted.is_some_and(|w| !w.is_empty() && w != node_name) {
        return Err(predicate(fit::NODE_NAME, fit::REASON_NODE_NAME));
    }
    // kubelet only looks at NoExecute taints.
    let taints = node
        .node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[]);
    let tolerations = fit::tolerations(pod);
    let untolerated = taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .any(|taint| !tolerations.iter().any(|t| fit::tolerates(t, taint)));
    if untolerated {
        return Err(predicate(
            fit::TAINT_TOLERATION,
            fit::REASON_UNTOLERATED_TAINT,
        ));
    }
    Ok(())
}

/// A failed predicate (`PredicateFailureError`): its name is the reason.
fn predicate(name: &str, description: &str) -> Rejection {
    Rejection {
        reason: name.to_string(),
        message: format!("Predicate {name} failed: {description}"),
    }
}

/// The Failed status kubelet writes for a rejected pod (`rejectPod`), as a merge patch.
pub fn rejected_status_patch(uid: &str, r: &Rejection) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"uid": uid},
        "status": {
            "phase": "Failed",
            "reason": r.reason,
            "message": format!("Pod was rejected: {}", r.message),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fit::Requests;
    use kbatch_api::k8s_openapi::api::core::v1::Node;
    use serde_json::{Value, json};

    fn node(spec: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"disk": "ssd"}},
            "spec": spec,
            "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "3"}}
        }))
        .unwrap()
    }

    fn pod(spec: Value) -> Pod {
        let mut v = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n",
            "containers": [{"name": "c", "image": "i"}]}});
        if let (Some(s), Some(extra)) = (v["spec"].as_object_mut(), spec.as_object()) {
            s.extend(extra.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    fn check(p: &Pod, n: &Node, used_cpu: i64, pods: usize) -> Result<(), Rejection> {
        let requested = Requests {
            milli_cpu: used_cpu,
            ..Requests::default()
        };
        admit(
            p,
            &NodeInfo {
                node: n,
                requested: &requested,
                pod_count: pods,
            },
        )
    }

    fn rejection(reason: &str, message: &str) -> Result<(), Rejection> {
        Err(Rejection {
            reason: reason.into(),
            message: message.into(),
        })
    }

    #[test]
    fn rejections_are_worded_as_kubelets() {
        let n = node(json!({}));
        let cpu = json!({"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}}]});
        assert_eq!(
            check(&pod(cpu.clone()), &n, 1000, 1),
            rejection(
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"
            ),
            "the first shortfall of several"
        );
        assert_eq!(
            check(&pod(json!({})), &n, 0, 3),
            rejection(
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
            )
        );
        assert_eq!(
            check(&pod(json!({"nodeSelector": {"disk": "hdd"}})), &n, 0, 0),
            rejection(
                "NodeAffinity",
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
            )
        );
        assert_eq!(
            check(&pod(json!({"nodeSelector": {"disk": "ssd"}})), &n, 0, 0),
            Ok(())
        );
        // NoSchedule taints are the scheduler's business; kubelet refuses only NoExecute.
        let no_schedule = node(json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}));
        assert_eq!(check(&pod(json!({})), &no_schedule, 0, 0), Ok(()));
        let no_execute = node(json!({"taints": [{"key": "k", "effect": "NoExecute"}]}));
        assert_eq!(
            check(&pod(json!({})), &no_execute, 0, 0),
            rejection(
                "TaintToleration",
                "Predicate TaintToleration failed: node(s) had untolerated taint(s)"
            )
        );
        let tolerant = json!({"tolerations": [{"key": "k", "operator": "Exists"}]});
        assert_eq!(check(&pod(tolerant), &no_execute, 0, 0), Ok(()));
    }

    #[test]
    fn the_status_says_the_pod_was_rejected() {
        let r = Rejection {
            reason: "OutOfcpu".into(),
            message: "Node didn't have enough resource: cpu".into(),
        };
        assert_eq!(
            rejected_status_patch("u", &r),
            json!({"metadata": {"uid": "u"}, "status": {"phase": "Failed", "reason": "OutOfcpu",
                "message": "Pod was rejected: Node didn't have enough resource: cpu"}})
        );
    }
}
