//! What the executor reports in a pod's status, computed as kubelet computes it: the phase
//! (`getPhase`), the conditions it owns (PodReadyToStartContainers, Initialized, Ready,
//! ContainersReady, PodScheduled) with transition times kept while unchanged, container
//! statuses (regular ones sorted by name, init ones in spec order), IPs and start time.
//! Ephemeral containers have statuses of their own (sorted by name, as kubelet's
//! `convertToAPIContainerStatuses` sorts every list but the init one) and count for nothing
//! else: not the phase, not a condition.

use jiff::Timestamp;
use kbatch_api::k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbatch_api::keys::{POD_FAILED, POD_PENDING, POD_RUNNING, POD_SUCCEEDED};

use crate::node::HOST_IP;

/// The end of one run of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

impl Terminated {
    /// kubelet's reasons: `Completed` for exit 0, `Error` otherwise.
    pub fn exited(
        exit_code: i32,
        signal: Option<i32>,
        started_at: Timestamp,
        finished_at: Timestamp,
        container_id: String,
    ) -> Terminated {
        Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_string(),
            message: None,
            started_at: Some(started_at),
            finished_at,
            container_id: Some(container_id),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
        container_id: String,
    },
    Terminated(Terminated),
}

/// What the executor knows of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRecord {
    pub name: String,
    pub image: String,
    /// An init container (regular or sidecar).
    pub init: bool,
    /// A restartable init container (a sidecar).
    pub sidecar: bool,
    pub restart_count: i32,
    pub state: RunState,
    pub last: Option<Terminated>,
    /// The startup probe passed (or there is none): kubelet's `started` while running.
    pub probe_started: bool,
    /// The readiness probe passed (or there is none): `ready` once started.
    pub probe_ready: bool,
}

impl ContainerRecord {
    pub fn new(name: &str, image: &str, waiting_reason: &str) -> ContainerRecord {
        ContainerRecord {
            name: name.to_string(),
            image: image.to_string(),
            init: false,
            sidecar: false,
            restart_count: 0,
            state: RunState::Waiting {
                reason: waiting_reason.to_string(),
                message: None,
            },
            last: None,
            probe_started: true,
            probe_ready: true,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    /// kubelet's `started`: running, and past its startup probe.
    pub fn is_started(&self) -> bool {
        self.is_running() && self.probe_started
    }

    /// kubelet's `ready` for a regular container or a sidecar: started, and ready by its
    /// readiness probe.
    pub fn is_ready(&self) -> bool {
        self.is_started() && self.probe_ready
    }

    pub fn exit_code(&self) -> Option<i32> {
        match &self.state {
            RunState::Terminated(t) => Some(t.exit_code),
            _ => None,
        }
    }
}

/// A pod's end as the executor decided it, beyond what its containers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// Force Failed (deadline, configuration error, executor restart); otherwise the phase
    /// follows from the containers.
    pub failed: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// Everything the status is computed from.
#[derive(Debug, Clone)]
pub struct PodView {
    pub init: Vec<ContainerRecord>,
    pub main: Vec<ContainerRecord>,
    /// Ephemeral containers, in no particular order.
    pub ephemeral: Vec<ContainerRecord>,
    pub restart_policy: String,
    pub start_time: Timestamp,
    /// Set once nothing of the pod runs or will run again.
    pub finish: Option<Finish>,
}

/// kubelet's `getPhase`. Sidecars (restartable init containers) count as running while they
/// run and are ignored once they stopped; the pod is Pending until its regular init containers
/// are done and, before a regular container started, until its sidecars run.
pub fn phase(view: &PodView, pod_is_terminal: bool) -> &'static str {
    let never = view.restart_policy == "Never";
    let mut pending_init = 0;
    let mut pending_sidecars = 0;
    let mut failed_init = 0;
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &view.init {
        if c.sidecar {
            match &c.state {
                RunState::Running { .. } => running += 1,
                RunState::Terminated(_) => {}
                RunState::Waiting { .. } if c.last.is_some() => {}
                RunState::Waiting { .. } => {
                    pending_sidecars += 1;
                    waiting += 1;
                }
            }
            continue;
        }
        match &c.state {
            RunState::Running { .. } => pending_init += 1,
            RunState::Terminated(t) => {
                if t.exit_code != 0 {
                    failed_init += 1;
                }
            }
            RunState::Waiting { .. } => match &c.last {
                Some(last) if last.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
        }
    }
    for c in &view.main {
        match &c.state {
            RunState::Running { .. } => running += 1,
            RunState::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            RunState::Waiting { .. } => {
                if c.last.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if failed_init > 0 && never {
        return POD_FAILED;
    }
    if pending_init > 0 || (pending_sidecars > 0 && !any_main_started(view)) || waiting > 0 {
        return POD_PENDING;
    }
    if running > 0 {
        return POD_RUNNING;
    }
    if stopped == 0 {
        return POD_PENDING;
    }
    if pod_is_terminal || view.restart_policy != "Always" {
        if stopped == succeeded {
            return POD_SUCCEEDED;
        }
        if pod_is_terminal || never {
            return POD_FAILED;
        }
    }
    // Always, or OnFailure with a failed container: restarting.
    POD_RUNNING
}

/// Some container of the pod, of any kind, runs.
fn anything_running(view: &PodView) -> bool {
    view.init
        .iter()
        .chain(&view.main)
        .chain(&view.ephemeral)
        .any(|c| matches!(c.state, RunState::Running { .. }))
}

/// A regular container has run (kubelet's `HasAnyActiveRegularContainerStarted`).
fn any_main_started(view: &PodView) -> bool {
    view.main
        .iter()
        .any(|c| !matches!(c.state, RunState::Waiting { .. }) || c.last.is_some())
}

/// The phase reported: a finished pod is Succeeded or Failed, whatever its containers say.
/// An unfinished one is never reported terminal while something of it still runs (an
/// ephemeral container, which `getPhase` ignores, being stopped): kubelet's status manager
/// keeps the old phase then (`mergePodStatus`, `couldHaveRunningContainers`).
pub fn reported_phase(view: &PodView) -> &'static str {
    match &view.finish {
        None => match phase(view, false) {
            POD_SUCCEEDED | POD_FAILED if anything_running(view) => POD_RUNNING,
            p => p,
        },
        Some(f) if f.failed => POD_FAILED,
        Some(_) => match phase(view, true) {
            POD_SUCCEEDED => POD_SUCCEEDED,
            _ => POD_FAILED,
        },
    }
}

fn time(t: Timestamp) -> Time {
    Time(crate::time::seconds(t))
}

fn terminated_state(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.map(time),
        finished_at: Some(time(t.finished_at)),
        container_id: t.container_id.clone(),
    }
}

pub fn container_status(c: &ContainerRecord) -> ContainerStatus {
    let (state, container_id) = match &c.state {
        RunState::Waiting { reason, message } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            None,
        ),
        RunState::Running {
            started_at,
            container_id,
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(*started_at)),
                }),
                ..Default::default()
            },
            Some(container_id.clone()),
        ),
        RunState::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated_state(t)),
                ..Default::default()
            },
            t.container_id.clone(),
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        // The image is not pulled, so it has no digest.
        image_id: String::new(),
        container_id,
        // kubelet: a regular init container is ready once it completed; any other once it
        // is started and passes its readiness probe.
        ready: if c.init && !c.sidecar {
            c.exit_code() == Some(0)
        } else {
            c.is_ready()
        },
        started: Some(c.is_started()),
        restart_count: c.restart_count,
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: c.last.as_ref().map(terminated_state),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An ephemeral container's status: as a regular container's, but never ready, and without
/// `started` (kubelet's prober manager sets both for regular and init containers only).
pub fn ephemeral_container_status(c: &ContainerRecord) -> ContainerStatus {
    ContainerStatus {
        ready: false,
        started: None,
        ..container_status(c)
    }
}

fn condition(
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.map(str::to_string),
        message,
        ..Default::default()
    }
}

fn names(list: &[&str]) -> String {
    format!("[{}]", list.join(" "))
}

/// The conditions kubelet owns, in its order.
fn kubelet_conditions(view: &PodView, phase: &str) -> Vec<PodCondition> {
    let terminal = phase == POD_SUCCEEDED || phase == POD_FAILED;
    let mut out = vec![condition(
        "PodReadyToStartContainers",
        !terminal,
        None,
        None,
    )];

    // Initialized: regular init containers completed, sidecars started.
    let any_main_started = any_main_started(view);
    let incomplete: Vec<&str> = view
        .init
        .iter()
        .filter(|c| match c.sidecar {
            true => !c.is_started(),
            false => c.exit_code() != Some(0),
        })
        .map(|c| c.name.as_str())
        .collect();
    out.push(if view.init.is_empty() {
        condition("Initialized", true, None, None)
    } else if phase == POD_SUCCEEDED {
        condition("Initialized", true, Some("PodCompleted"), None)
    } else if any_main_started || incomplete.is_empty() {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                names(&incomplete)
            )),
        )
    });

    // ContainersReady, and Ready which follows it (no readiness gates).
    let containers_ready = if phase == POD_SUCCEEDED {
        condition("ContainersReady", false, Some("PodCompleted"), None)
    } else if phase == POD_FAILED {
        condition("ContainersReady", false, Some("PodFailed"), None)
    } else {
        // Sidecars first, then the regular containers, as kubelet lists them.
        let unready: Vec<&str> = view
            .init
            .iter()
            .filter(|c| c.sidecar)
            .chain(view.main.iter())
            .filter(|c| !c.is_ready())
            .map(|c| c.name.as_str())
            .collect();
        if unready.is_empty() {
            condition("ContainersReady", true, None, None)
        } else {
            condition(
                "ContainersReady",
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: {}",
                    names(&unready)
                )),
            )
        }
    };
    let mut ready = containers_ready.clone();
    ready.type_ = "Ready".to_string();
    out.push(ready);
    out.push(containers_ready);
    out.push(condition("PodScheduled", true, None, None));
    out
}

pub fn is_kubelet_condition(type_: &str) -> bool {
    matches!(
        type_,
        "PodReadyToStartContainers" | "Initialized" | "Ready" | "ContainersReady" | "PodScheduled"
    )
}

/// A pod's status (`old`, at the pod's `generation`) with the executor's view applied: fields
/// the executor does not own (qosClass, other conditions, nominatedNodeName, ...) are kept; a
/// condition's lastTransitionTime moves to `now` only when its status changes.
pub fn status_after(
    old: PodStatus,
    generation: Option<i64>,
    view: &PodView,
    now: Timestamp,
) -> PodStatus {
    let phase = reported_phase(view);
    let mut conditions: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !is_kubelet_condition(&c.type_))
        .cloned()
        .collect();
    for mut c in kubelet_conditions(view, phase) {
        let previous = old
            .conditions
            .iter()
            .flatten()
            .find(|o| o.type_ == c.type_ && o.status == c.status);
        c.last_transition_time = Some(
            previous
                .and_then(|o| o.last_transition_time.clone())
                .unwrap_or_else(|| time(now)),
        );
        c.last_probe_time = previous.and_then(|o| o.last_probe_time.clone());
        c.observed_generation = generation;
        conditions.push(c);
    }
    let mut main: Vec<ContainerStatus> = view.main.iter().map(container_status).collect();
    main.sort_by(|a, b| a.name.cmp(&b.name));
    let init: Vec<ContainerStatus> = view.init.iter().map(container_status).collect();
    let mut ephemeral: Vec<ContainerStatus> = view
        .ephemeral
        .iter()
        .map(ephemeral_container_status)
        .collect();
    ephemeral.sort_by(|a, b| a.name.cmp(&b.name));
    let finish = view.finish.as_ref();
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        message: finish.and_then(|f| f.message.clone()),
        reason: finish.and_then(|f| f.reason.clone()),
        host_ip: Some(HOST_IP.to_string()),
        host_ips: Some(vec![HostIP {
            ip: HOST_IP.to_string(),
        }]),
        pod_ip: Some(HOST_IP.to_string()),
        pod_ips: Some(vec![PodIP {
            ip: HOST_IP.to_string(),
        }]),
        start_time: Some(time(view.start_time)),
        container_statuses: Some(main),
        init_container_statuses: (!init.is_empty()).then_some(init),
        // Ephemeral containers are never removed from a pod: once there, the list only grows,
        // so it never needs clearing.
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        observed_generation: generation.or(old.observed_generation),
        ..old
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_api::k8s_openapi::api::core::v1::Pod;

    fn pod_status(pod: &Pod, view: &PodView, now: Timestamp) -> PodStatus {
        status_after(
            pod.status.clone().unwrap_or_default(),
            pod.metadata.generation,
            view,
            now,
        )
    }
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn rec(name: &str, state: RunState) -> ContainerRecord {
        ContainerRecord {
            state,
            ..ContainerRecord::new(name, "busybox", "ContainerCreating")
        }
    }

    fn running() -> RunState {
        RunState::Running {
            started_at: t("2024-01-01T00:00:01Z"),
            container_id: "kbatch://u/main/0".into(),
        }
    }

    fn exited(code: i32) -> RunState {
        RunState::Terminated(Terminated::exited(
            code,
            None,
            t("2024-01-01T00:00:01Z"),
            t("2024-01-01T00:00:02Z"),
            "kbatch://u/main/0".into(),
        ))
    }

    fn waiting(reason: &str) -> RunState {
        RunState::Waiting {
            reason: reason.into(),
            message: None,
        }
    }

    fn view(policy: &str, init: Vec<ContainerRecord>, main: Vec<ContainerRecord>) -> PodView {
        PodView {
            init,
            main,
            ephemeral: Vec::new(),
            restart_policy: policy.into(),
            start_time: t("2024-01-01T00:00:00Z"),
            finish: None,
        }
    }

    /// Rows of kubelet's getPhase tests that apply to pods without sidecars.
    #[test]
    fn phase_table() {
        let cases: Vec<(&str, PodView, bool, &str)> = vec![
            (
                "waiting",
                view(
                    "Never",
                    vec![],
                    vec![rec("a", waiting("ContainerCreating"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "all running",
                view(
                    "Never",
                    vec![],
                    vec![rec("a", running()), rec("b", running())],
                ),
                false,
                POD_RUNNING,
            ),
            (
                "one running one waiting",
                view(
                    "Never",
                    vec![],
                    vec![rec("a", running()), rec("b", waiting("x"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "all succeeded",
                view(
                    "Never",
                    vec![],
                    vec![rec("a", exited(0)), rec("b", exited(0))],
                ),
                false,
                POD_SUCCEEDED,
            ),
            (
                "one failed never",
                view(
                    "Never",
                    vec![],
                    vec![rec("a", exited(0)), rec("b", exited(1))],
                ),
                false,
                POD_FAILED,
            ),
            (
                "one failed onfailure",
                view(
                    "OnFailure",
                    vec![],
                    vec![rec("a", exited(0)), rec("b", exited(1))],
                ),
                false,
                POD_RUNNING,
            ),
            (
                "all stopped always",
                view("Always", vec![], vec![rec("a", exited(0))]),
                false,
                POD_RUNNING,
            ),
            (
                "all stopped always terminal",
                view("Always", vec![], vec![rec("a", exited(0))]),
                true,
                POD_SUCCEEDED,
            ),
            (
                "one running one done",
                view(
                    "Never",
                    vec![],
                    vec![rec("a", running()), rec("b", exited(0))],
                ),
                false,
                POD_RUNNING,
            ),
            (
                "init running",
                view(
                    "Never",
                    vec![rec("i", running())],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "init failed never",
                view(
                    "Never",
                    vec![rec("i", exited(1))],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_FAILED,
            ),
            (
                "init failed onfailure",
                view(
                    "OnFailure",
                    vec![rec("i", exited(1))],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "init done main running",
                view(
                    "Never",
                    vec![rec("i", exited(0))],
                    vec![rec("a", running())],
                ),
                false,
                POD_RUNNING,
            ),
        ];
        for (name, v, terminal, want) in cases {
            assert_eq!(phase(&v, terminal), want, "{name}");
        }
        // Crash-looping under OnFailure: waiting with a last state counts as stopped.
        let mut c = rec("a", waiting("CrashLoopBackOff"));
        c.last = match exited(1) {
            RunState::Terminated(t) => Some(t),
            _ => None,
        };
        assert_eq!(
            phase(&view("OnFailure", vec![], vec![c]), false),
            POD_RUNNING
        );
    }

    fn sidecar(state: RunState) -> ContainerRecord {
        ContainerRecord {
            sidecar: true,
            ..rec("proxy", state)
        }
    }

    fn crash_looping(mut c: ContainerRecord, code: i32) -> ContainerRecord {
        c.last = match exited(code) {
            RunState::Terminated(t) => Some(t),
            _ => None,
        };
        c
    }

    /// Rows of kubelet's getPhase tests with restartable init containers.
    #[test]
    fn phase_table_with_sidecars() {
        let cases: Vec<(&str, PodView, bool, &str)> = vec![
            (
                "sidecar not started yet",
                view(
                    "Never",
                    vec![sidecar(waiting("PodInitializing"))],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "sidecar running, main not started",
                view(
                    "Never",
                    vec![sidecar(running())],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "sidecar and main running",
                view("Never", vec![sidecar(running())], vec![rec("a", running())]),
                false,
                POD_RUNNING,
            ),
            (
                "main done, sidecar still running",
                view("Never", vec![sidecar(running())], vec![rec("a", exited(0))]),
                false,
                POD_RUNNING,
            ),
            (
                "main succeeded, sidecar stopped by SIGTERM",
                view(
                    "Never",
                    vec![sidecar(exited(143))],
                    vec![rec("a", exited(0))],
                ),
                true,
                POD_SUCCEEDED,
            ),
            (
                "main succeeded, sidecar stopped, not yet terminal",
                view(
                    "OnFailure",
                    vec![sidecar(exited(137))],
                    vec![rec("a", exited(0))],
                ),
                false,
                POD_SUCCEEDED,
            ),
            (
                "main failed, sidecar stopped",
                view("Never", vec![sidecar(exited(0))], vec![rec("a", exited(1))]),
                true,
                POD_FAILED,
            ),
            (
                "sidecar crash looping, main running",
                view(
                    "Never",
                    vec![crash_looping(sidecar(waiting("CrashLoopBackOff")), 1)],
                    vec![rec("a", running())],
                ),
                false,
                POD_RUNNING,
            ),
            (
                "regular init after a running sidecar",
                view(
                    "Never",
                    vec![sidecar(running()), rec("i", running())],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_PENDING,
            ),
            (
                "a failed regular init fails the pod whatever the sidecar does",
                view(
                    "Never",
                    vec![sidecar(running()), rec("i", exited(2))],
                    vec![rec("a", waiting("PodInitializing"))],
                ),
                false,
                POD_FAILED,
            ),
        ];
        for (name, v, terminal, want) in cases {
            assert_eq!(phase(&v, terminal), want, "{name}");
        }
    }

    #[test]
    fn sidecars_in_initialized_and_ready() {
        let find = |v: &PodView, ty: &str| {
            let phase = phase(v, false);
            kubelet_conditions(v, phase)
                .into_iter()
                .find(|c| c.type_ == ty)
                .expect("condition")
        };
        // A started sidecar counts as initialized; one that never ran does not.
        let v = view(
            "Never",
            vec![sidecar(running()), rec("i", exited(0))],
            vec![rec("a", waiting("PodInitializing"))],
        );
        assert_eq!(find(&v, "Initialized").status, "True");
        let v = view(
            "Never",
            vec![sidecar(waiting("PodInitializing"))],
            vec![rec("a", waiting("PodInitializing"))],
        );
        let c = find(&v, "Initialized");
        assert_eq!(c.status, "False");
        assert_eq!(
            c.message.as_deref(),
            Some("containers with incomplete status: [proxy]")
        );
        // Readiness needs the sidecars too, listed first.
        let v = view(
            "Never",
            vec![crash_looping(sidecar(waiting("CrashLoopBackOff")), 1)],
            vec![rec("a", running()), rec("b", waiting("ContainerCreating"))],
        );
        let c = find(&v, "ContainersReady");
        assert_eq!(c.status, "False");
        assert_eq!(
            c.message.as_deref(),
            Some("containers with unready status: [proxy b]")
        );
        let v = view("Never", vec![sidecar(running())], vec![rec("a", running())]);
        assert_eq!(find(&v, "Ready").status, "True");
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u", "generation": 1},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": "X", "lastTransitionTime": "2024-01-01T00:00:00Z"}
            ]}
        }))
        .unwrap()
    }

    fn cond<'a>(s: &'a PodStatus, ty: &str) -> &'a PodCondition {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == ty)
            .unwrap()
    }

    #[test]
    fn running_then_completed_status() {
        let now = t("2024-01-01T00:00:05Z");
        let v = view("Never", vec![], vec![rec("main", running())]);
        let s = pod_status(&pod(), &v, now);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        assert_eq!(s.pod_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(s.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(s.start_time, Some(Time(t("2024-01-01T00:00:00Z"))));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "Ready").last_transition_time, Some(Time(now)));
        // PodScheduled keeps its time; other writers' conditions stay, first.
        assert_eq!(
            cond(&s, "PodScheduled").last_transition_time,
            Some(Time(t("2024-01-01T00:00:00Z")))
        );
        assert_eq!(s.conditions.as_ref().unwrap()[0].type_, "DisruptionTarget");
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready);
        assert_eq!(cs.started, Some(true));
        assert_eq!(cs.container_id.as_deref(), Some("kbatch://u/main/0"));

        let mut p = pod();
        p.status = Some(s);
        let mut done = view("Never", vec![], vec![rec("main", exited(0))]);
        done.finish = Some(Finish {
            failed: false,
            reason: None,
            message: None,
        });
        let later = t("2024-01-01T00:00:09Z");
        let s2 = pod_status(&p, &done, later);
        assert_eq!(s2.phase.as_deref(), Some("Succeeded"));
        let ready = cond(&s2, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted"))
        );
        assert_eq!(ready.last_transition_time, Some(Time(later)));
        assert_eq!(cond(&s2, "PodReadyToStartContainers").status, "False");
        // Initialized did not change: its transition time stays.
        assert_eq!(
            cond(&s2, "Initialized").last_transition_time,
            Some(Time(now))
        );
        let term = s2.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!(
            (term.exit_code, term.reason.as_deref()),
            (0, Some("Completed"))
        );
        // Computing again from what was written changes nothing (no needless writes).
        p.status = Some(s2.clone());
        assert_eq!(pod_status(&p, &done, t("2024-01-01T00:01:00Z")), s2);
    }

    #[test]
    fn failed_and_initializing_conditions() {
        let v = view(
            "Never",
            vec![rec("init", running())],
            vec![
                rec("b", waiting("PodInitializing")),
                rec("a", waiting("PodInitializing")),
            ],
        );
        let s = pod_status(&pod(), &v, t("2024-01-01T00:00:05Z"));
        let init = cond(&s, "Initialized");
        assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
        assert_eq!(
            cond(&s, "Ready").message.as_deref(),
            Some("containers with unready status: [b a]")
        );
        // Regular container statuses are sorted by name; init ones come in spec order.
        let names: Vec<_> = s
            .container_statuses
            .unwrap()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(names, vec!["a", "b"]);

        let mut v = view("Never", vec![], vec![rec("main", exited(3))]);
        v.finish = Some(Finish {
            failed: true,
            reason: Some("DeadlineExceeded".into()),
            message: Some("Pod was active on the node longer than the specified deadline".into()),
        });
        let s = pod_status(&pod(), &v, t("2024-01-01T00:00:05Z"));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
    }

    #[test]
    fn ephemeral_containers_have_statuses_of_their_own_and_count_for_nothing_else() {
        let mut v = view("Never", vec![], vec![rec("main", running())]);
        v.ephemeral = vec![rec("zz-debug", exited(1)), rec("debugger", running())];
        let s = pod_status(&pod(), &v, t("2024-01-01T00:00:05Z"));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "True");
        let eph = s.ephemeral_container_statuses.expect("ephemeral statuses");
        let names: Vec<&str> = eph.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["debugger", "zz-debug"]);
        assert!(eph.iter().all(|c| !c.ready && c.started.is_none()));
        assert!(eph[0].state.as_ref().unwrap().running.is_some());
        let ended = eph[1].state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!(
            (ended.exit_code, ended.reason.as_deref()),
            (1, Some("Error"))
        );
        // Only the regular container is in containerStatuses and the conditions.
        assert_eq!(s.container_statuses.unwrap().len(), 1);
        // A running ephemeral container beside finished regular ones keeps nothing running.
        let mut v = view("Never", vec![], vec![rec("main", exited(0))]);
        v.ephemeral = vec![rec("debugger", running())];
        assert_eq!(phase(&v, false), POD_SUCCEEDED);
        // But the pod is not reported Succeeded until the worker has stopped it.
        assert_eq!(reported_phase(&v), POD_RUNNING);
    }
}
