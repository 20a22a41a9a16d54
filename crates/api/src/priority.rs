//! Pod priority: the limits and the system PriorityClasses of upstream's
//! `pkg/apis/scheduling`, which kube-apiserver creates at start.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The highest priority a user-defined PriorityClass may have.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;
/// The priority of `system-cluster-critical` (`system-node-critical` is 1,000 higher).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
/// Names with this prefix are reserved for the system classes.
pub const SYSTEM_PRIORITY_CLASS_PREFIX: &str = "system-";
pub const SYSTEM_CLUSTER_CRITICAL: &str = "system-cluster-critical";
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";
/// A pod's priority when it names no class and no class is the global default.
pub const DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS: i32 = 0;
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";
pub const PREEMPT_NEVER: &str = "Never";

/// The system classes, as kube-apiserver's `scheduling/bootstrap-system-priority-classes`
/// creates them.
pub fn system_priority_classes() -> Vec<PriorityClass> {
    let class = |name: &str, value: i32, description: &str| PriorityClass {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        value: Some(value),
        description: Some(description.to_string()),
        preemption_policy: Some(PREEMPT_LOWER_PRIORITY.to_string()),
        ..PriorityClass::default()
    };
    vec![
        class(
            SYSTEM_NODE_CRITICAL,
            SYSTEM_CRITICAL_PRIORITY + 1000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        class(
            SYSTEM_CLUSTER_CRITICAL,
            SYSTEM_CRITICAL_PRIORITY,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ]
}

/// Upstream's `IsKnownSystemPriorityClass`: Ok for a system class's own name, value and
/// globalDefault; otherwise why not.
pub fn is_known_system_priority_class(
    name: &str,
    value: i32,
    global_default: bool,
) -> Result<(), String> {
    let Some(spc) = system_priority_classes()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
    else {
        return Err(format!("{name} is not a known system priority class"));
    };
    let own = spc.value.unwrap_or(0);
    if own != value {
        return Err(format!("value of {name} PriorityClass must be {own}"));
    }
    if spc.global_default.unwrap_or(false) != global_default {
        return Err(format!(
            "globalDefault of {name} PriorityClass must be {}",
            spc.global_default.unwrap_or(false)
        ));
    }
    Ok(())
}

/// Whether `name` is one of the system classes (which may not be deleted).
pub fn is_system_class_name(name: &str) -> bool {
    name == SYSTEM_CLUSTER_CRITICAL || name == SYSTEM_NODE_CRITICAL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_classes_are_known_only_with_their_own_values() {
        assert_eq!(
            is_known_system_priority_class(SYSTEM_NODE_CRITICAL, 2_000_001_000, false),
            Ok(())
        );
        assert_eq!(
            is_known_system_priority_class(SYSTEM_CLUSTER_CRITICAL, 5, false),
            Err("value of system-cluster-critical PriorityClass must be 2000000000".into())
        );
        assert_eq!(
            is_known_system_priority_class(SYSTEM_CLUSTER_CRITICAL, 2_000_000_000, true),
            Err("globalDefault of system-cluster-critical PriorityClass must be false".into())
        );
        assert_eq!(
            is_known_system_priority_class("system-mine", 1, false),
            Err("system-mine is not a known system priority class".into())
        );
    }
}
