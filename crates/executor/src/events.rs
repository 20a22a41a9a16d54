//! The events kubelet and the scheduler record about a pod, worded as theirs, so that
//! `kubectl describe pod` tells the same story: Scheduled, Created, Started, Killing,
//! BackOff, Failed.
//!
//! They go through client-go's correlator (`kbatch_controllers::runtime::events`) with
//! kubelet's limits: 50 writes a second after a burst of 100, and at most 1,000 waiting (the
//! rest are dropped, as client-go's broadcaster drops them), so a burst of short pods costs
//! the server a bounded trickle of writes.

use kbatch_api::k8s_openapi::api::core::v1::ObjectReference;
use kbatch_controllers::runtime::events::{EventRecorder, RecorderOptions};

/// kubelet's and kube-scheduler's defaults (`eventRecordQPS`, `eventBurst`; the scheduler's
/// client QPS and burst), and client-go's broadcaster queue.
const EVENT_QPS: f64 = 50.0;
const EVENT_BURST: u32 = 100;
const EVENT_QUEUE: usize = 1000;

/// A pod (or one of its containers) as events name it.
#[derive(Clone, Debug)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    fn object(&self, field_path: Option<String>) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            field_path,
            ..ObjectReference::default()
        }
    }

    /// kubelet's `GenerateContainerRef`: the pod, with the container's field path.
    fn container(&self, container: &str, list: List) -> ObjectReference {
        let list = match list {
            List::Containers => "containers",
            List::InitContainers => "initContainers",
            List::EphemeralContainers => "ephemeralContainers",
        };
        self.object(Some(format!("spec.{list}{{{container}}}")))
    }
}

/// The list of the pod's spec a container is in, which its events' field path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    Containers,
    InitContainers,
    EphemeralContainers,
}

impl List {
    pub fn of(init: bool) -> List {
        if init {
            List::InitContainers
        } else {
            List::Containers
        }
    }
}

/// The node's event recorders: kubelet's (source host: the node) and the scheduler's.
#[derive(Clone)]
pub struct NodeEvents {
    kubelet: EventRecorder,
    scheduler: EventRecorder,
}

impl NodeEvents {
    /// Starts the two writer tasks; they end once the last handle is dropped.
    pub fn start(client: kube::Client, node: &str) -> NodeEvents {
        let options = |host: Option<String>| RecorderOptions {
            host,
            rate: Some((EVENT_QPS, EVENT_BURST)),
            queue: Some(EVENT_QUEUE),
        };
        let (kubelet, _) =
            EventRecorder::start_with(client.clone(), "kubelet", options(Some(node.to_string())));
        let (scheduler, _) = EventRecorder::start_with(client, "default-scheduler", options(None));
        NodeEvents { kubelet, scheduler }
    }

    /// Recorders that hand their events to channels (tests).
    #[cfg(test)]
    pub fn from_recorders(kubelet: EventRecorder, scheduler: EventRecorder) -> NodeEvents {
        NodeEvents { kubelet, scheduler }
    }

    pub fn scheduled(&self, pod: &PodRef, node: &str) {
        self.scheduler.normal(
            pod.object(None),
            "Scheduled",
            &format!(
                "Successfully assigned {}/{} to {node}",
                pod.namespace, pod.name
            ),
        );
    }

    /// The scheduler could not place the pod (`FailedScheduling`, with its fit error).
    pub fn failed_scheduling(&self, pod: &PodRef, message: &str) {
        self.scheduler
            .warning(pod.object(None), "FailedScheduling", message);
    }

    /// The scheduler deleted the pod for a higher-priority one (`Preempted`).
    pub fn preempted(&self, pod: &PodRef, preemptor_uid: &str, node: &str) {
        self.scheduler.normal(
            pod.object(None),
            "Preempted",
            &format!("Preempted by pod {preemptor_uid} on node {node}"),
        );
    }

    pub fn created(&self, pod: &PodRef, container: &str, list: List) {
        self.kubelet.normal(
            pod.container(container, list),
            "Created",
            &format!("Created container: {container}"),
        );
    }

    pub fn started(&self, pod: &PodRef, container: &str, list: List) {
        self.kubelet.normal(
            pod.container(container, list),
            "Started",
            &format!("Started container {container}"),
        );
    }

    pub fn killing(&self, pod: &PodRef, container: &str, list: List) {
        self.killing_because(
            pod,
            container,
            list,
            &format!("Stopping container {container}"),
        );
    }

    /// Killing with kubelet's reason for it (a failed liveness or startup probe).
    pub fn killing_because(&self, pod: &PodRef, container: &str, list: List, message: &str) {
        self.kubelet
            .normal(pod.container(container, list), "Killing", message);
    }

    /// A preStop hook that failed (`FailedPreStopHook`).
    pub fn failed_pre_stop_hook(&self, pod: &PodRef, container: &str, list: List, message: &str) {
        self.kubelet
            .warning(pod.container(container, list), "FailedPreStopHook", message);
    }

    /// A postStart hook that failed (`FailedPostStartHook`); upstream leaves the hook's
    /// message out, as it may hold secrets.
    pub fn failed_post_start_hook(&self, pod: &PodRef, container: &str, list: List) {
        self.kubelet.warning(
            pod.container(container, list),
            "FailedPostStartHook",
            "PostStartHook failed",
        );
    }

    /// A probe that failed or could not run (`Unhealthy`).
    pub fn unhealthy(&self, pod: &PodRef, container: &str, list: List, message: &str) {
        self.kubelet
            .warning(pod.container(container, list), "Unhealthy", message);
    }

    /// A probe that passed with a warning (an HTTP redirect it did not follow).
    pub fn probe_warning(&self, pod: &PodRef, container: &str, list: List, message: &str) {
        self.kubelet
            .warning(pod.container(container, list), "ProbeWarning", message);
    }

    pub fn back_off(&self, pod: &PodRef, container: &str, list: List) {
        self.kubelet.warning(
            pod.container(container, list),
            "BackOff",
            &format!(
                "Back-off restarting failed container {container} in pod {}_{}({})",
                pod.name, pod.namespace, pod.uid
            ),
        );
    }

    /// kubelet refused the pod (its admission): the reason (`OutOfcpu`, `NodeAffinity`, …)
    /// and message of its rejection.
    pub fn rejected(&self, pod: &PodRef, reason: &str, message: &str) {
        self.kubelet.warning(pod.object(None), reason, message);
    }

    /// kubelet's eviction manager evicts the pod (`Evicted`, about the pod).
    pub fn evicted(&self, pod: &PodRef, message: &str) {
        self.kubelet.warning(pod.object(None), "Evicted", message);
    }

    /// A volume of the pod that could not be set up (`FailedMount`, about the pod).
    pub fn failed_mount(&self, pod: &PodRef, message: &str) {
        self.kubelet
            .warning(pod.object(None), "FailedMount", message);
    }

    /// A container that could not be created or started.
    pub fn failed(&self, pod: &PodRef, container: &str, list: List, message: &str) {
        self.kubelet.warning(
            pod.container(container, list),
            "Failed",
            &format!("Error: {message}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_controllers::runtime::events::{EventRecord, EventType};
    use tokio::sync::mpsc;

    #[test]
    fn events_are_worded_and_addressed_as_kubelet_and_the_scheduler_word_them() {
        let (ktx, mut krx) = mpsc::unbounded_channel::<EventRecord>();
        let (stx, mut srx) = mpsc::unbounded_channel::<EventRecord>();
        let ev = NodeEvents::from_recorders(
            EventRecorder::to_channel(ktx),
            EventRecorder::to_channel(stx),
        );
        let pod = PodRef {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u1".into(),
        };
        ev.scheduled(&pod, "kbatch-node");
        let s = srx.try_recv().expect("scheduled");
        assert_eq!(s.reason, "Scheduled");
        assert_eq!(s.message, "Successfully assigned default/p to kbatch-node");
        assert_eq!(s.object.field_path, None);
        assert_eq!(s.object.kind.as_deref(), Some("Pod"));

        ev.created(&pod, "main", List::Containers);
        ev.started(&pod, "setup", List::InitContainers);
        ev.killing(&pod, "main", List::Containers);
        ev.back_off(&pod, "main", List::Containers);
        ev.failed(&pod, "main", List::Containers, "no command");
        ev.unhealthy(
            &pod,
            "main",
            List::Containers,
            "Readiness probe failed: nope",
        );
        ev.probe_warning(
            &pod,
            "main",
            List::Containers,
            "Liveness probe warning: moved",
        );
        ev.started(&pod, "debugger", List::EphemeralContainers);
        let got: Vec<(String, String, Option<String>, EventType)> =
            std::iter::from_fn(|| krx.try_recv().ok())
                .map(|r| (r.reason, r.message, r.object.field_path, r.type_))
                .collect();
        let main = Some("spec.containers{main}".to_string());
        assert_eq!(
            got,
            vec![
                (
                    "Created".into(),
                    "Created container: main".into(),
                    main.clone(),
                    EventType::Normal
                ),
                (
                    "Started".into(),
                    "Started container setup".into(),
                    Some("spec.initContainers{setup}".into()),
                    EventType::Normal
                ),
                (
                    "Killing".into(),
                    "Stopping container main".into(),
                    main.clone(),
                    EventType::Normal
                ),
                (
                    "BackOff".into(),
                    "Back-off restarting failed container main in pod p_default(u1)".into(),
                    main.clone(),
                    EventType::Warning
                ),
                (
                    "Failed".into(),
                    "Error: no command".into(),
                    main.clone(),
                    EventType::Warning
                ),
                (
                    "Unhealthy".into(),
                    "Readiness probe failed: nope".into(),
                    main.clone(),
                    EventType::Warning
                ),
                (
                    "ProbeWarning".into(),
                    "Liveness probe warning: moved".into(),
                    main,
                    EventType::Warning
                ),
                (
                    "Started".into(),
                    "Started container debugger".into(),
                    Some("spec.ephemeralContainers{debugger}".into()),
                    EventType::Normal
                ),
            ]
        );
    }
}
