//! One pod bound to this node, from its first sight to its terminal status: run init
//! containers in order and then the regular ones, restart them per restartPolicy with crash
//! back-off, enforce activeDeadlineSeconds, stop everything on deletion (SIGTERM, SIGKILL after
//! the grace period), report status whenever it changes. A finished pod is then the manager's
//! to keep until deleted (`confirm_deletion`, then `remove_pod_files` once it is gone).
//!
//! Ephemeral containers (`kubectl debug`) get a slot as they appear in the spec and start once
//! while the pod runs, as kubelet's `computePodActions` starts them: whether or not
//! initialization is done, never restarted, without probes or hooks. They count for nothing
//! in the phase or the conditions, and are stopped with the pod's other containers (deletion,
//! deadline, or the regular containers' end, as sidecars are). The simulate runtime runs them
//! as it runs regular containers (the pod's simulate annotations).
//!
//! After an executor restart, a pod that had started containers under the previous run cannot
//! be followed (its processes are no longer our children, their exit codes are lost): leftover
//! processes are killed and the pod is reported Failed with reason `ExecutorRestarted`, so that
//! no controller counts it twice or waits for it forever.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;
use kbatch_api::k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EphemeralContainer, Pod, PodSpec, PodStatus,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kbatch_api::podlog;
use kube::api::{Api, DeleteParams, Preconditions};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::backoff::{CrashBackoff, go_string};
use crate::events::{List, NodeEvents, PodRef};
use crate::hook;
use crate::probe::{self, Change, Prober, Verdict};
use crate::runtime::{self, Exit, Plan, StopSignal};
use crate::state::{self, Journal, ProcessRecord};
use crate::status::{self, ContainerRecord, Finish, PodView, RunState, Terminated};
use crate::storage_limits;
use crate::{ExecutorConfig, RuntimeKind};

pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const MESSAGE_DEADLINE_EXCEEDED: &str =
    "Pod was active on the node longer than the specified deadline";
pub const REASON_EXECUTOR_RESTARTED: &str = "ExecutorRestarted";
pub const MESSAGE_EXECUTOR_RESTARTED: &str = "the executor restarted while this pod was running: \
     its containers were stopped and their exit codes are unknown";
const REASON_CONFIG_ERROR: &str = "CreateContainerConfigError";
/// kubelet's ErrPostStartHook: the waiting reason after a failed postStart hook.
const REASON_POST_START_HOOK_ERROR: &str = "PostStartHookError";
const REASON_CONTAINER_UNKNOWN: &str = "ContainerStatusUnknown";
const MESSAGE_CONTAINER_UNKNOWN: &str =
    "The container could not be located when the pod was terminated";
/// kubelet's default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// On executor shutdown, processes get at most this long after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Wait before retrying a failed API call.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// A container whose env can't be built yet (a ConfigMap or Secret, or a key of one, is
/// missing, or the API failed) is tried again after this: kubelet's pod worker re-syncs a pod
/// whose sync failed after its `backOffPeriod` of 10 s.
const CONFIG_ERROR_RETRY: Duration = Duration::from_secs(10);
/// A start is reported this long after it happens, unless something ends first: a container
/// that exits within it is reported once, terminated, as kubelet (whose PLEG relists each
/// second) reports a short-lived container. That saves a status write per short pod.
const START_REPORT_DELAY: Duration = Duration::from_millis(100);
/// kubelet's `minimumGracePeriodInSeconds`: the stop signal after a preStop hook gets at least
/// this long before SIGKILL.
const PRE_STOP_MIN_GRACE: Duration = Duration::from_secs(2);
/// A volume set-up that failed is tried again after this, doubled after each failure up to
/// `VOLUME_RETRY_MAX`: kubelet's exponential back-off of volume operations.
const VOLUME_RETRY_FIRST: Duration = Duration::from_millis(500);
const VOLUME_RETRY_MAX: Duration = Duration::from_secs(122);

/// What every worker shares.
pub struct Context {
    pub client: kube::Client,
    pub config: ExecutorConfig,
    pub events: NodeEvents,
    /// What a restarted executor needs to find the processes this one started.
    pub journal: Journal,
    /// The pods' default working directories, reused from finished pods.
    pub workdirs: crate::workdir::WorkDirs,
    /// The node's allocatable resources: a resourceFieldRef limit the container leaves unset.
    pub allocatable: BTreeMap<String, Quantity>,
    /// The pods and running containers the streaming endpoint can exec into.
    pub streams: crate::streaming::Registry,
}

/// A pod whose terminal status is written. The node keeps only this of it until the object
/// is deleted (see `confirm_deletion` and `remove_pod_files`): a node holds many finished
/// pods, and a worker task with its pod for each would cost kilobytes apiece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// Run the pod whose latest version `pods` carries (not yet terminal: the manager keeps a pod
/// that is finished already without a worker); the channel closes when the object is gone.
/// Returns the pod once its terminal status is written.
pub async fn run(
    ctx: Arc<Context>,
    pods: watch::Receiver<Arc<Pod>>,
    shutdown: watch::Receiver<bool>,
) -> Option<Finished> {
    let mut w = Worker::new(ctx, pods, shutdown);
    let outcome = if w.started_before() {
        Box::pin(w.fail_after_restart()).await
    } else {
        // Boxed: the run's state (API calls in flight) is large, and a task is allocated at
        // the size of its largest state.
        Box::pin(w.run_containers()).await
    };
    match outcome {
        Outcome::Finished => {
            // Nothing of the pod runs any more: an empty working directory is the next pod's.
            if w.config().runtime == RuntimeKind::Process {
                w.ctx.workdirs.finished(&w.uid);
            }
            Some(Finished {
                uid: w.uid,
                namespace: w.namespace,
                name: w.name,
            })
        }
        Outcome::Vanished => {
            w.cleanup();
            None
        }
        Outcome::Shutdown => None,
    }
}

/// The merge patch kubelet's status manager sends for `status`: the pod's UID as a
/// precondition, and the fields this status no longer has cleared with null
/// (`ephemeralContainerStatuses` is never one: ephemeral containers are never removed, so a
/// status that has them keeps them). Written straight to bytes (the status once, no JSON tree
/// in between): it is sent for every pod.
fn status_patch(uid: &str, status: &PodStatus) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(1536);
    out.extend_from_slice(br#"{"metadata":{"uid":"#);
    serde_json::to_writer(&mut out, uid)?;
    out.extend_from_slice(br#"},"status":"#);
    let start = out.len();
    serde_json::to_writer(&mut out, status)?;
    // Reopen the status object (it ends with its brace) to add the cleared fields.
    out.pop();
    let mut empty = out.len() == start + 1;
    let cleared = [
        ("message", status.message.is_none()),
        ("reason", status.reason.is_none()),
        (
            "initContainerStatuses",
            status.init_container_statuses.is_none(),
        ),
    ];
    for (field, absent) in cleared {
        if absent {
            if !empty {
                out.push(b',');
            }
            empty = false;
            out.push(b'"');
            out.extend_from_slice(field.as_bytes());
            out.extend_from_slice(br#"":null"#);
        }
    }
    out.extend_from_slice(b"}}");
    Ok(out)
}

/// Sends a `pods/status` merge patch and returns the written status: kube's
/// `Api::patch_status` would decode the whole pod (spec, metadata, managedFields) only for the
/// worker to keep the status.
async fn patch_status(
    api: &Api<Pod>,
    name: &str,
    body: Vec<u8>,
) -> Result<Option<PodStatus>, kube::Error> {
    #[derive(serde::Deserialize)]
    struct StatusOnly {
        #[serde(default)]
        status: Option<PodStatus>,
    }
    let url = format!("{}/{name}/status", api.resource_url());
    let mut req = http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
        .body(body)
        .map_err(|e| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e)))?;
    req.extensions_mut().insert("patch_status");
    let written: StatusOnly = api.clone().into_client().request(req).await?;
    Ok(written.status)
}

/// Confirm the deletion of a finished pod, as kubelet does once its containers are stopped:
/// delete with grace 0 and a UID precondition, retried until the server answers.
pub async fn confirm_deletion(api: Api<Pod>, pod: Finished, mut shutdown: watch::Receiver<bool>) {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    loop {
        match api.delete(&pod.name, &dp).await {
            // 404: gone already; 409: the name now belongs to another pod.
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
            Err(e) => {
                tracing::warn!(pod = %pod.name, error = %e, "removing a deleted pod");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_DELAY) => {}
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}

/// The object is gone: so are its logs, its default working directory and its state record.
pub fn remove_pod_files(ctx: &Context, namespace: &str, name: &str, uid: &str) {
    let config = &ctx.config;
    let logs = podlog::pod_dir(&config.log_dir(), namespace, name, uid);
    let _ = std::fs::remove_dir_all(logs);
    ctx.workdirs.removed(uid);
    if let Err(e) = ctx.journal.done(uid) {
        tracing::warn!(pod = %name, error = %e, "writing the executor state journal");
    }
    tracing::debug!(%namespace, pod = %name, "pod removed");
}

pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Terminal status written.
    Finished,
    /// The object is gone.
    Vanished,
    /// The executor is stopping.
    Shutdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Deleted,
    Deadline,
    /// kubelet's eviction manager: the pod outgrew a storage limit.
    Evicted,
    Shutdown,
    Vanished,
    /// The pod's end is decided and only its sidecars or ephemeral containers still run: they
    /// are stopped, and their ends do not count (kubelet terminates them once the regular
    /// containers are done, and reports the terminal phase only after).
    SidecarsDone,
}

struct Stopping {
    reason: StopReason,
    kill_at: Instant,
}

struct Active {
    run: u32,
    pid: Option<u32>,
    stop: mpsc::UnboundedSender<StopSignal>,
    term_sent: bool,
    kill_sent: bool,
    /// SIGKILL follows at this time (a failed probe's kill, or after a preStop hook) rather
    /// than at the pod's stop deadline.
    kill_at: Option<Instant>,
    /// The preStop hook of this run: started (true) before the stop signal, which waits for it.
    pre_stop: Option<bool>,
    /// The run's exit, when it came while its postStart hook ran: taken in once the hook is done
    /// (kubelet sees it on its next sync, after the hook).
    held_exit: Option<Option<Exit>>,
    /// A process run, published for exec and attach while it runs (dropped with the run).
    _exec: Option<crate::streaming::Published>,
}

struct Slot {
    init: bool,
    /// A restartable init container (restartPolicy Always): started in the init sequence,
    /// then kept running beside the regular containers, restarted whenever it exits.
    sidecar: bool,
    /// An ephemeral container (`spec.ephemeralContainers`): started once, never restarted.
    ephemeral: bool,
    /// It has run at least once: the init sequence goes on past a sidecar only then.
    ever_started: bool,
    record: ContainerRecord,
    /// `None` when the container can't start (its record says why), or, for one whose env
    /// reads objects, until they are read for the next start (which takes it).
    plan: Option<Plan>,
    /// The env reads ConfigMaps or Secrets: they are read through the API before each start,
    /// as kubelet builds the env at each start.
    env_objects: bool,
    /// Those objects are being read.
    fetching: bool,
    runs: u32,
    backoff: CrashBackoff,
    active: Option<Active>,
    exited_at: Option<std::time::Instant>,
    restart_at: Option<Instant>,
    /// Its startup, liveness and readiness probes (process runtime only).
    probes: Vec<Prober>,
    /// The env and working directory of the current run, for exec probes and hooks.
    run_env: Option<RunEnv>,
    /// The current run was killed by a failed probe: it restarts unless restartPolicy is
    /// Never, whatever its exit code.
    probe_killed: bool,
    /// A sidecar passed its startup probe once: the init sequence goes on past it.
    passed_startup: bool,
    /// It has a preStop hook, run before its stop signal (process runtime only).
    has_pre_stop: bool,
    /// It has a postStart hook, run after each start (process runtime only).
    has_post_start: bool,
    /// Set exactly while the current run's postStart hook runs: the record as it was before
    /// the start, which is what is reported (kubelet writes no status for the pod until the
    /// hook is done); meanwhile the container is not probed and the pod's next container does
    /// not start.
    shown: Option<ContainerRecord>,
    /// The failed postStart hook's message, the waiting reason's message if it restarts.
    post_start_error: Option<String>,
}

impl Slot {
    /// A slot for a container that has not run, with nothing planned.
    fn blank(record: ContainerRecord) -> Slot {
        Slot {
            init: record.init,
            sidecar: record.sidecar,
            ephemeral: false,
            ever_started: false,
            record,
            plan: None,
            env_objects: false,
            fetching: false,
            runs: 0,
            backoff: CrashBackoff::default(),
            active: None,
            exited_at: None,
            restart_at: None,
            probes: Vec::new(),
            run_env: None,
            probe_killed: false,
            passed_startup: false,
            has_pre_stop: false,
            has_post_start: false,
            shown: None,
            post_start_error: None,
        }
    }

    /// The spec list the container is in, which its events name.
    fn list(&self) -> List {
        if self.ephemeral {
            List::EphemeralContainers
        } else {
            List::of(self.init)
        }
    }

    /// Its postStart hook is running.
    fn hook_running(&self) -> bool {
        self.shown.is_some()
    }

    /// Past its startup probe (or it has none).
    fn started_by_probes(&self) -> bool {
        probe::gates(&self.probes).0
    }

    /// The env and working directory of the current run (none before a process run).
    fn run_env(&self) -> RunEnv {
        self.run_env
            .clone()
            .unwrap_or_else(|| (Arc::new(Vec::new()), PathBuf::from("/")))
    }
}

/// The env and working directory exec probes and hooks of a run use.
type RunEnv = (Arc<Vec<(String, String)>>, PathBuf);

impl Active {
    /// SIGTERM to the run's process group.
    fn term(&mut self) {
        self.term_sent = true;
        let _ = self.stop.send(StopSignal::Term);
    }

    /// SIGTERM once a preStop hook is done: SIGKILL follows at `deadline`, but no sooner than
    /// kubelet's minimum grace after the signal.
    fn term_after_hook(&mut self, deadline: Instant, now: Instant) {
        self.term();
        self.kill_at = Some(deadline.max(now + PRE_STOP_MIN_GRACE));
    }

    /// SIGKILL, once (after SIGTERM).
    fn kill_once(&mut self) {
        if self.term_sent && !self.kill_sent {
            self.kill_sent = true;
            let _ = self.stop.send(StopSignal::Kill);
        }
    }

    /// When SIGKILL is due while the pod stops by `stop_kill_at`: after a preStop hook, the
    /// grace it left (2 s at least); after a failed probe's kill, that kill's time or the
    /// pod's, whichever comes first.
    fn kill_due(&self, stop_kill_at: Instant) -> Instant {
        match (self.pre_stop, self.kill_at) {
            (Some(_), Some(t)) => t,
            (_, Some(t)) => t.min(stop_kill_at),
            (_, None) => stop_kill_at,
        }
    }
}

/// Where the set-up of a pod's volumes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Volumes {
    /// Set up (or none to set up).
    Ready,
    /// Being set up; a failure is retried after `retry`.
    SettingUp { retry: Duration },
    /// Failed: tried again at `at`, then after `retry` if it fails again.
    Failed { at: Instant, retry: Duration },
}

/// What a slot waits for.
enum Pending {
    /// A run ended (slot, run, exit).
    Exit(usize, u32, Option<Exit>),
    /// The objects of a container's env were read.
    Objects(usize, crate::env::Objects),
    /// The pod's volumes were set up, or one failed.
    Volumes(Result<(), crate::volume::SetUpError>),
    /// The files of its API-backed volumes were brought up to date, or one failed.
    VolumesRefreshed(Result<(), crate::volume::SetUpError>),
    /// A probe attempt ended (slot, probe, run, attempt).
    Probe(usize, usize, u32, probe::run::Attempt),
    /// A lifecycle hook ended (where, slot, run, its error).
    Hook(hook::Point, usize, u32, Result<(), String>),
    /// The pod's storage was measured: whether it outgrew a limit.
    Storage(Option<storage_limits::Eviction>),
}

enum Sync {
    Done,
    Retry,
    Gone,
}

struct Worker {
    ctx: Arc<Context>,
    api: Api<Pod>,
    namespace: String,
    name: String,
    uid: String,
    latest: Arc<Pod>,
    /// The status this worker last wrote (what the server stores, as far as it knows).
    written: Option<PodStatus>,
    pods: watch::Receiver<Arc<Pod>>,
    pod_gone: bool,
    shutdown: watch::Receiver<bool>,
    shutting_down: bool,
    // The run of the pod's containers.
    slots: Vec<Slot>,
    restart_policy: String,
    start_time: Timestamp,
    /// When the pod started here (`start_time` as an Instant).
    started: Instant,
    deadline: Option<Instant>,
    stopping: Option<Stopping>,
    finish: Option<Finish>,
    /// Runs that have not ended and env objects being read, by slot.
    exits: FuturesUnordered<BoxFuture<'static, Pending>>,
    /// The pod's volumes: containers start once they are set up.
    volumes: Volumes,
    /// When the files of its API-backed volumes are next brought up to date (none while a
    /// refresh runs, or when it has no such volumes).
    volume_refresh_at: Option<Instant>,
    /// When its storage is next measured against its limits (none while it is measured, or
    /// when nothing of it is limited).
    storage_check_at: Option<Instant>,
    /// Why it was evicted, once it was.
    eviction: Option<String>,
    /// Probe attempts and preStop hooks out (kept apart from `exits`: a pod's end does not
    /// wait for them).
    side: FuturesUnordered<BoxFuture<'static, Pending>>,
    /// The journal holds this pod (its processes are recorded as they start and exit).
    journaled: bool,
    status_retry_at: Option<Instant>,
    /// No status write before this: a start waits to be reported (`START_REPORT_DELAY`).
    report_at: Option<Instant>,
    /// The pod is run here (not reported failed after a restart): ephemeral containers that
    /// appear in its spec get slots.
    runs_ephemeral: bool,
}

impl Worker {
    fn new(
        ctx: Arc<Context>,
        mut pods: watch::Receiver<Arc<Pod>>,
        shutdown: watch::Receiver<bool>,
    ) -> Worker {
        let latest = pods.borrow_and_update().clone();
        let namespace = latest.metadata.namespace.clone().unwrap_or_default();
        let api = Api::namespaced(ctx.client.clone(), &namespace);
        let shutting_down = *shutdown.borrow();
        Worker {
            api,
            name: latest.metadata.name.clone().unwrap_or_default(),
            uid: latest.metadata.uid.clone().unwrap_or_default(),
            namespace,
            latest,
            written: None,
            pods,
            pod_gone: false,
            shutting_down,
            shutdown,
            ctx,
            slots: Vec::new(),
            restart_policy: "Always".to_string(),
            start_time: crate::time::seconds(Timestamp::now()),
            started: Instant::now(),
            deadline: None,
            stopping: None,
            finish: None,
            exits: FuturesUnordered::new(),
            volumes: Volumes::Ready,
            volume_refresh_at: None,
            storage_check_at: None,
            eviction: None,
            side: FuturesUnordered::new(),
            journaled: false,
            status_retry_at: None,
            report_at: None,
            runs_ephemeral: false,
        }
    }

    fn config(&self) -> &ExecutorConfig {
        &self.ctx.config
    }

    fn events(&self) -> &NodeEvents {
        &self.ctx.events
    }

    fn pod_ref(&self) -> PodRef {
        PodRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }

    /// Containers of this pod ran under an earlier executor run.
    fn started_before(&self) -> bool {
        if self.ctx.journal.contains(&self.uid) {
            return true;
        }
        let status = self.latest.status.clone().unwrap_or_default();
        status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .chain(status.ephemeral_container_statuses.iter().flatten())
            .any(|cs| {
                let state = cs.state.clone().unwrap_or_default();
                state.running.is_some()
                    || state.terminated.is_some()
                    || cs
                        .last_state
                        .as_ref()
                        .is_some_and(|l| l.terminated.is_some())
                    || cs.restart_count > 0
            })
    }

    // ---- the normal run -------------------------------------------------------------

    async fn run_containers(&mut self) -> Outcome {
        self.prepare();
        loop {
            if self.shutting_down && self.stopping.is_none() {
                self.stop(StopReason::Shutdown, SHUTDOWN_GRACE);
            }
            self.step(Instant::now());
            let idle = self.slots.iter().all(|s| s.active.is_none());
            match self.stopping.as_ref().map(|s| s.reason) {
                Some(StopReason::Vanished) if idle => return Outcome::Vanished,
                Some(StopReason::Shutdown) if idle => return Outcome::Shutdown,
                Some(StopReason::Vanished) | Some(StopReason::Shutdown) => {}
                _ => {
                    let now = Instant::now();
                    if self.report_at.is_some_and(|t| t <= now) {
                        self.report_at = None;
                    }
                    let due =
                        self.status_retry_at.is_none_or(|t| t <= now) && self.report_at.is_none();
                    if due {
                        match self.sync_status().await {
                            Sync::Done => {
                                if self.finish.is_some() && idle {
                                    self.forget_state();
                                    return Outcome::Finished;
                                }
                            }
                            Sync::Retry => {}
                            // The object is gone; the channel closing stops what runs.
                            Sync::Gone => {}
                        }
                    }
                }
            }
            self.wait_for_event().await;
        }
    }

    fn prepare(&mut self) {
        if self.config().runtime == RuntimeKind::Process
            && let Err(e) = self.ctx.workdirs.provide(&self.uid)
        {
            // The start of a container that needs it reports the error.
            tracing::debug!(pod = %self.name, error = %e, "preparing the working directory");
        }
        let pod = self.latest.clone();
        let spec = pod.spec.clone().unwrap_or_default();
        self.restart_policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".to_string());
        let inits = spec.init_containers.clone().unwrap_or_default();
        let waiting_reason = waiting_reason(&spec);
        let mut config_error = false;
        let all = inits
            .iter()
            .map(|c| (true, c))
            .chain(spec.containers.iter().map(|c| (false, c)));
        for (init, c) in all {
            let sidecar = init && c.restart_policy.as_deref() == Some("Always");
            let process = self.config().runtime == RuntimeKind::Process;
            let (plan, env_objects) = self.first_plan(&pod, c, || {
                if sidecar {
                    Ok(crate::simulate::sidecar_plan())
                } else if init {
                    Ok(crate::simulate::init_plan())
                } else {
                    crate::simulate::plan(&pod)
                }
            });
            let mut record =
                ContainerRecord::new(&c.name, c.image.as_deref().unwrap_or(""), waiting_reason);
            record.init = init;
            record.sidecar = sidecar;
            // Probes and hooks run commands and connections on this host: not for simulated
            // pods, nor for regular init containers (the API rejects both on them).
            let hooked = process && (!init || sidecar);
            let probes = if hooked {
                Prober::for_container(c)
            } else {
                Vec::new()
            };
            let has_pre_stop = hooked && c.lifecycle.as_ref().is_some_and(|l| l.pre_stop.is_some());
            let has_post_start =
                hooked && c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some());
            let plan = match plan {
                Ok(p) => p,
                Err(e) => {
                    let list = List::of(init);
                    self.events().failed(&self.pod_ref(), &c.name, list, &e.0);
                    config_error = true;
                    record.state = RunState::Waiting {
                        reason: REASON_CONFIG_ERROR.to_string(),
                        message: Some(e.0),
                    };
                    None
                }
            };
            self.slots.push(Slot {
                plan,
                env_objects,
                probes,
                has_pre_stop,
                has_post_start,
                ..Slot::blank(record)
            });
        }
        self.runs_ephemeral = true;
        if config_error {
            // A missing command: the spec can't change, so no restart can help, and the pod
            // fails before it starts.
            self.finish = Some(Finish {
                failed: true,
                reason: None,
                message: None,
            });
            return;
        }
        self.started = Instant::now();
        if self.config().runtime == RuntimeKind::Process && crate::volume::has_volumes(&pod) {
            self.set_up_volumes(VOLUME_RETRY_FIRST);
        }
        self.schedule_storage_check();
        if self.config().runtime == RuntimeKind::Process {
            // Recorded before anything starts, so a crash right after a start is noticed.
            if let Err(e) = self
                .ctx
                .journal
                .begin(&self.namespace, &self.name, &self.uid)
            {
                tracing::warn!(pod = %self.name, error = %e, "writing the executor state journal");
            }
            self.journaled = true;
        }
        self.on_pod_update();
    }

    /// Set up the pod's volumes (kubelet's volume manager does it before any container of the
    /// pod starts); a failure is retried after `retry`.
    fn set_up_volumes(&mut self, retry: Duration) {
        self.volumes = Volumes::SettingUp { retry };
        let pass = self.volume_pass(crate::volume::Pass::All);
        self.exits
            .push(Box::pin(async move { Pending::Volumes(pass.await) }));
    }

    /// Read what the pod's volumes need from the API, then set up those `pass` covers (off
    /// the worker's task: it writes files).
    fn volume_pass(
        &self,
        pass: crate::volume::Pass,
    ) -> BoxFuture<'static, Result<(), crate::volume::SetUpError>> {
        let (ctx, pod) = (self.ctx.clone(), self.latest.clone());
        Box::pin(async move {
            let objects = crate::volume::fetch(&ctx.client, &pod).await;
            tokio::task::spawn_blocking(move || {
                let pods_dir = ctx.config.pods_dir();
                crate::volume::set_up(&pod, &pods_dir, &objects, &ctx.allocatable, pass)
            })
            .await
            .unwrap_or_else(|e| {
                Err(crate::volume::SetUpError {
                    volume: String::new(),
                    message: e.to_string(),
                })
            })
        })
    }

    fn on_volumes(&mut self, result: Result<(), crate::volume::SetUpError>) {
        let Volumes::SettingUp { retry } = self.volumes else {
            return;
        };
        match result {
            Ok(()) => {
                self.volumes = Volumes::Ready;
                self.schedule_volume_refresh();
            }
            Err(e) => {
                let message = e.event_message();
                tracing::info!(pod = %self.name, volume = %e.volume, error = %e.message, "volume set-up failed");
                self.events().failed_mount(&self.pod_ref(), &message);
                self.volumes = Volumes::Failed {
                    at: Instant::now() + retry,
                    retry: (retry * 2).min(VOLUME_RETRY_MAX),
                };
            }
        }
    }

    fn schedule_volume_refresh(&mut self) {
        self.volume_refresh_at = crate::volume::has_api_volumes(&self.latest)
            .then(|| Instant::now() + self.config().volume_sync_period);
    }

    /// Bring the files of the pod's API-backed volumes up to date, as kubelet's periodic
    /// sync does while the pod runs.
    fn refresh_volumes(&mut self) {
        self.volume_refresh_at = None;
        let pass = self.volume_pass(crate::volume::Pass::Refresh);
        self.side.push(Box::pin(
            async move { Pending::VolumesRefreshed(pass.await) },
        ));
    }

    fn schedule_storage_check(&mut self) {
        self.storage_check_at = (self.config().runtime == RuntimeKind::Process
            && storage_limits::has_limits(&self.latest))
        .then(|| Instant::now() + storage_limits::MONITORING_PERIOD);
    }

    /// Measure what the pod's storage holds (off the worker's task: it walks directories).
    fn check_storage(&mut self) {
        self.storage_check_at = None;
        let pod = self.latest.clone();
        let logs = podlog::pod_dir(
            &self.config().log_dir(),
            &self.namespace,
            &self.name,
            &self.uid,
        );
        let places = storage_limits::Places::of(&pod, &self.config().pods_dir(), logs);
        self.side.push(Box::pin(async move {
            let usage = tokio::task::spawn_blocking(move || {
                let usage = places.measure(&pod);
                storage_limits::exceeded(&pod, &usage)
            })
            .await
            .unwrap_or_default();
            Pending::Storage(usage)
        }));
    }

    /// kubelet's eviction manager evicts a pod that outgrew a storage limit: an `Evicted`
    /// event, then a stop with a short grace period, and the pod Failed with the reason.
    fn on_storage(&mut self, eviction: Option<storage_limits::Eviction>) {
        if self.stopping.is_some() || self.finish.is_some() {
            return;
        }
        let Some(eviction) = eviction else {
            self.schedule_storage_check();
            return;
        };
        if storage_limits::is_critical(&self.latest) {
            tracing::error!(pod = %self.name, "cannot evict a critical pod");
            self.schedule_storage_check();
            return;
        }
        tracing::info!(pod = %self.name, message = %eviction.message, "evicting pod");
        storage_limits::KUBELET_EVICTIONS.inc(&[eviction.signal]);
        self.events().evicted(&self.pod_ref(), &eviction.message);
        self.eviction = Some(eviction.message);
        self.stop(StopReason::Evicted, storage_limits::EVICTION_GRACE);
    }

    fn on_volumes_refreshed(&mut self, result: Result<(), crate::volume::SetUpError>) {
        if let Err(e) = result {
            tracing::info!(pod = %self.name, volume = %e.volume, error = %e.message, "volume refresh failed");
            self.events()
                .failed_mount(&self.pod_ref(), &e.event_message());
        }
        self.schedule_volume_refresh();
    }

    /// The plan of a process run of `c`: with its volume mounts (a subPathExpr expanded
    /// against its env), or the configuration error that keeps it from starting.
    fn process_plan(
        &self,
        pod: &Pod,
        c: &Container,
        launch: crate::env::Launch,
    ) -> Result<Plan, crate::env::ConfigError> {
        let mounts =
            crate::volume::mount::container_mounts(pod, c, &self.config().pods_dir(), &launch.env)
                .map_err(crate::env::ConfigError)?;
        let workdir = c
            .working_dir
            .as_deref()
            .filter(|d| !d.is_empty())
            .map_or_else(|| self.ctx.workdirs.path(&self.uid), PathBuf::from);
        let io = crate::process::ContainerIo {
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
            tty: c.tty.unwrap_or(false),
        };
        Ok(Plan::Process {
            launch,
            workdir,
            io,
            mounts: mounts.into(),
        })
    }

    /// The spec of slot `i`'s container (an ephemeral one as the container it describes).
    fn container_spec(&self, i: usize) -> Option<Cow<'_, Container>> {
        let slot = self.slots.get(i)?;
        let spec = self.latest.spec.as_ref()?;
        let name = slot.record.name.as_str();
        if slot.ephemeral {
            let list = spec.ephemeral_containers.as_deref().unwrap_or_default();
            return list
                .iter()
                .find(|c| c.name == name)
                .map(|c| Cow::Owned(ephemeral_as_container(c)));
        }
        let list = if slot.init {
            spec.init_containers.as_deref().unwrap_or_default()
        } else {
            spec.containers.as_slice()
        };
        list.iter().find(|c| c.name == name).map(Cow::Borrowed)
    }

    /// The first plan of container `c`, and whether its env reads ConfigMaps or Secrets: then
    /// its env is built once they are read, and only a missing command is known now.
    /// `simulated` gives the simulate runtime's plan.
    fn first_plan(
        &self,
        pod: &Pod,
        c: &Container,
        simulated: impl FnOnce() -> Result<Plan, crate::env::ConfigError>,
    ) -> (Result<Option<Plan>, crate::env::ConfigError>, bool) {
        match self.config().runtime {
            RuntimeKind::Process if crate::env::needs_objects(c) => {
                (crate::env::command_error(c).map_or(Ok(None), Err), true)
            }
            RuntimeKind::Process => {
                let plan = crate::env::launch(pod, c, &self.ctx.allocatable, &Default::default())
                    .and_then(|launch| self.process_plan(pod, c, launch))
                    .map(Some);
                (plan, false)
            }
            RuntimeKind::Simulate => (simulated().map(Some), false),
        }
    }

    /// Give each ephemeral container new in the spec a slot, waiting to start (kubelet lists
    /// every one in the status, with its default waiting reason, until it runs). Slots are only
    /// added at the end: the indices pending runs hold stay valid.
    fn add_ephemeral_containers(&mut self) {
        if !self.runs_ephemeral {
            return;
        }
        let pod = self.latest.clone();
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let waiting_reason = waiting_reason(spec);
        for ec in spec.ephemeral_containers.iter().flatten() {
            // Names are unique among all of a pod's containers (logs and exec go by name).
            if self.slots.iter().any(|s| s.record.name == ec.name) {
                continue;
            }
            let c = ephemeral_as_container(ec);
            let (plan, env_objects) = self.first_plan(&pod, &c, || crate::simulate::plan(&pod));
            let mut record =
                ContainerRecord::new(&c.name, c.image.as_deref().unwrap_or(""), waiting_reason);
            let plan = match plan {
                Ok(plan) => plan,
                // It waits for good (or, for missing objects, until they are read again); the
                // pod runs on: a debugging container never decides the pod's fate.
                Err(e) => {
                    let list = List::EphemeralContainers;
                    self.events().failed(&self.pod_ref(), &c.name, list, &e.0);
                    record.state = RunState::Waiting {
                        reason: REASON_CONFIG_ERROR.to_string(),
                        message: Some(e.0),
                    };
                    None
                }
            };
            tracing::debug!(pod = %self.name, container = %c.name, "ephemeral container added");
            self.slots.push(Slot {
                ephemeral: true,
                plan,
                env_objects,
                ..Slot::blank(record)
            });
        }
    }

    /// Read the objects slot `i`'s env refers to; `on_objects` goes on with the start.
    fn fetch_objects(&mut self, i: usize) {
        let Some(container) = self.container_spec(i).map(Cow::into_owned) else {
            return;
        };
        let (client, namespace) = (self.ctx.client.clone(), self.namespace.clone());
        self.slots[i].fetching = true;
        self.exits.push(Box::pin(async move {
            let objects = crate::env::fetch(&client, &namespace, &container).await;
            Pending::Objects(i, objects)
        }));
    }

    /// The objects of slot `i`'s env are read: build its plan for the start that is due, or
    /// leave it waiting with kubelet's `CreateContainerConfigError` and try again later
    /// (the pod stays Pending meanwhile, as under kubelet).
    fn on_objects(&mut self, i: usize, objects: crate::env::Objects) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        slot.fetching = false;
        if self.stopping.is_some() || self.finish.is_some() {
            return;
        }
        let pod = self.latest.clone();
        let Some(container) = self.container_spec(i) else {
            return;
        };
        let result = crate::env::launch(&pod, &container, &self.ctx.allocatable, &objects)
            .and_then(|launch| self.process_plan(&pod, &container, launch));
        let (events, pod_ref) = (self.ctx.events.clone(), self.pod_ref());
        let slot = &mut self.slots[i];
        match result {
            Ok(plan) => slot.plan = Some(plan),
            Err(e) => {
                tracing::info!(pod = %self.name, container = %slot.record.name, error = %e.0, "container env can't be built yet");
                events.failed(&pod_ref, &slot.record.name, slot.list(), &e.0);
                if let RunState::Terminated(t) = &slot.record.state {
                    slot.record.last = Some(t.clone());
                }
                slot.record.state = RunState::Waiting {
                    reason: REASON_CONFIG_ERROR.to_string(),
                    message: Some(e.0),
                };
                slot.restart_at = Some(Instant::now() + CONFIG_ERROR_RETRY);
            }
        }
    }

    fn grace(&self) -> Duration {
        let meta = self.latest.metadata.deletion_grace_period_seconds;
        let spec = self
            .latest
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        let secs = meta.or(spec).unwrap_or(DEFAULT_GRACE_SECONDS);
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    fn stop(&mut self, reason: StopReason, grace: Duration) {
        self.report_at = None;
        let kill_at = Instant::now() + grace;
        match &mut self.stopping {
            Some(s) => {
                s.kill_at = s.kill_at.min(kill_at);
                // Vanishing and shutting down end the run without a final status.
                if matches!(reason, StopReason::Vanished | StopReason::Shutdown) {
                    s.reason = reason;
                }
            }
            None => self.stopping = Some(Stopping { reason, kill_at }),
        }
    }

    fn on_pod_update(&mut self) {
        // activeDeadlineSeconds may be changed on a running pod; it counts from the start.
        self.deadline = self
            .latest
            .spec
            .as_ref()
            .and_then(|s| s.active_deadline_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map(|s| self.started + Duration::from_secs(s));
        if self.latest.metadata.deletion_timestamp.is_some() && self.finish.is_none() {
            let grace = self.grace();
            self.stop(StopReason::Deleted, grace);
        }
        self.add_ephemeral_containers();
    }

    /// Move the pod forward as far as it can go now.
    fn step(&mut self, now: Instant) {
        if let Some(stop) = &self.stopping {
            let (reason, kill_at) = (stop.reason, stop.kill_at);
            let kill_now = now >= kill_at || reason == StopReason::Vanished;
            let (events, pod) = (self.ctx.events.clone(), self.pod_ref());
            // kubelet runs a preStop hook when it stops a container, not when the node goes.
            let hooks = matches!(
                reason,
                StopReason::Deleted
                    | StopReason::Deadline
                    | StopReason::Evicted
                    | StopReason::SidecarsDone
            );
            self.abandon_post_start_hooks();
            let mut pre_stops = Vec::new();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                slot.restart_at = None;
                let list = slot.list();
                if let Some(a) = &mut slot.active {
                    if !a.term_sent && a.pre_stop.is_none() && hooks && slot.has_pre_stop {
                        a.pre_stop = Some(true);
                        events.killing(&pod, &slot.record.name, list);
                        pre_stops.push((i, a.run));
                    }
                    // A hook holds the stop signal back, unless the node itself is going.
                    if !a.term_sent && (a.pre_stop != Some(true) || !hooks) {
                        if a.pre_stop.is_some() {
                            a.term_after_hook(kill_at, now);
                        } else {
                            a.term();
                            if reason != StopReason::Vanished {
                                events.killing(&pod, &slot.record.name, list);
                            }
                        }
                    }
                    if kill_now || now >= a.kill_due(kill_at) {
                        a.kill_once();
                    }
                }
            }
            for (i, run) in pre_stops {
                self.launch_hook(
                    hook::Point::PreStop,
                    i,
                    run,
                    Some(kill_at.saturating_duration_since(now)),
                );
            }
            let idle = self.slots.iter().all(|s| s.active.is_none());
            if idle && self.finish.is_none() {
                self.finish = Some(match reason {
                    StopReason::Deadline => Finish {
                        failed: true,
                        reason: Some(REASON_DEADLINE_EXCEEDED.to_string()),
                        message: Some(MESSAGE_DEADLINE_EXCEEDED.to_string()),
                    },
                    StopReason::Evicted => Finish {
                        failed: true,
                        reason: Some(storage_limits::REASON_EVICTED.to_string()),
                        message: self.eviction.clone(),
                    },
                    _ => Finish {
                        failed: false,
                        reason: None,
                        message: None,
                    },
                });
            }
            return;
        }
        if self.finish.is_some() {
            if self.slots.iter().any(|s| s.active.is_some()) {
                // Decided while sidecars run (a failed init container): stop them.
                let grace = self.grace();
                self.stop(StopReason::SidecarsDone, grace);
                return self.step(now);
            }
            return;
        }
        if self.deadline.is_some_and(|d| now >= d) {
            let grace = self.grace();
            self.stop(StopReason::Deadline, grace);
            return self.step(now);
        }
        if self.storage_check_at.is_some_and(|t| now >= t) {
            self.check_storage();
        }
        self.probe_step(now);
        // kubelet starts a pod's containers one after the other, each after its postStart hook.
        if self.slots.iter().any(Slot::hook_running) {
            return;
        }
        // No container starts before the pod's volumes are set up.
        match self.volumes {
            Volumes::Ready => {}
            Volumes::SettingUp { .. } => return,
            Volumes::Failed { at, retry } => {
                if now >= at {
                    self.set_up_volumes(retry);
                }
                return;
            }
        }
        if self.volume_refresh_at.is_some_and(|t| now >= t) {
            self.refresh_volumes();
        }
        // Ephemeral containers start once, as soon as they are seen: kubelet starts them before
        // init and regular containers, whether or not initialization is done.
        for i in 0..self.slots.len() {
            if self.slots[i].ephemeral && self.slots[i].active.is_none() && self.due(i, now) {
                self.start(i);
            }
        }
        // Sidecars that exited after they first ran restart when their back-off ends.
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.sidecar && slot.ever_started && slot.active.is_none() && self.due(i, now) {
                self.start(i);
                if self.slots[i].hook_running() {
                    return;
                }
            }
        }
        // Init containers, one at a time, in order; a sidecar lets the next one start once
        // it has run.
        for i in 0..self.slots.len() {
            if !self.slots[i].init {
                break;
            }
            if self.slots[i].sidecar {
                if !self.slots[i].ever_started && self.slots[i].active.is_none() && self.due(i, now)
                {
                    self.start(i);
                }
                let slot = &mut self.slots[i];
                if slot.record.is_running() && !slot.hook_running() && slot.started_by_probes() {
                    slot.passed_startup = true;
                }
                if slot.ever_started && slot.passed_startup {
                    continue;
                }
                return;
            }
            let slot = &self.slots[i];
            if slot.active.is_some() {
                return;
            }
            if slot.record.exit_code() == Some(0) && slot.restart_at.is_none() {
                continue;
            }
            if self.due(i, now) {
                self.start(i);
                // Finished already (a start error)? Look again on the next step.
            }
            return;
        }
        let mut all_done = true;
        for i in 0..self.slots.len() {
            if self.slots[i].init || self.slots[i].ephemeral {
                continue;
            }
            if self.slots[i].active.is_none() && self.due(i, now) {
                self.start(i);
                if self.slots[i].hook_running() {
                    return;
                }
            }
            let s = &self.slots[i];
            if s.active.is_some() || s.restart_at.is_some() || s.runs == 0 {
                all_done = false;
            }
        }
        // What runs beside the regular containers is stopped once they are done; the pod's end
        // waits for it.
        let others_running = self
            .slots
            .iter()
            .any(|s| (s.sidecar || s.ephemeral) && s.active.is_some());
        if all_done && others_running {
            let grace = self.grace();
            self.stop(StopReason::SidecarsDone, grace);
            return self.step(now);
        }
        if all_done && !self.exits.is_empty() {
            all_done = false;
        }
        if all_done {
            self.finish = Some(Finish {
                failed: false,
                reason: None,
                message: None,
            });
        }
    }

    /// SIGKILL for containers a failed probe stopped whose grace is over, then the probe
    /// attempts that are due.
    fn probe_step(&mut self, now: Instant) {
        for slot in &mut self.slots {
            let Some(a) = &mut slot.active else {
                continue;
            };
            // A failed probe's kill whose preStop hook is done: the stop signal goes now,
            // SIGKILL when the grace is over but no sooner than 2 s later.
            if a.pre_stop == Some(false) && !a.term_sent {
                a.term_after_hook(a.kill_at.unwrap_or(now), now);
            }
            if a.kill_at.is_some_and(|t| t <= now) {
                a.kill_once();
            }
        }
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            let Some(run) = slot
                .active
                .as_ref()
                .filter(|a| !a.term_sent && !slot.hook_running())
                .map(|a| a.run)
            else {
                continue;
            };
            let started = slot.started_by_probes();
            let due: Vec<usize> = (0..slot.probes.len())
                .filter(|k| slot.probes[*k].due(now, started))
                .collect();
            for k in due {
                self.launch_probe(i, k, run, now);
            }
        }
    }

    /// Start one attempt of probe `k` of slot `i` (run `run`).
    fn launch_probe(&mut self, i: usize, k: usize, run: u32, now: Instant) {
        let Some(container) = self.container_spec(i).map(Cow::into_owned) else {
            return;
        };
        let slot = &mut self.slots[i];
        let (env, workdir) = slot.run_env();
        let pid = slot.active.as_ref().and_then(|a| a.pid);
        let prober = &mut slot.probes[k];
        prober.begin(run, now);
        let timeout = prober.timing.timeout;
        match probe::run::action(
            &prober.spec,
            &container,
            crate::node::HOST_IP,
            &env,
            &workdir,
        ) {
            Ok(mut action) => self.side.push(Box::pin(async move {
                if let probe::run::Action::Exec { container_pid, .. } = &mut action {
                    *container_pid = pid;
                }
                let attempt = probe::run::run(&action, timeout).await;
                Pending::Probe(i, k, run, attempt)
            })),
            // Not runnable (a port that does not resolve): an errored attempt, as kubelet's
            // three tries of it end.
            Err(error) => {
                let attempt = probe::run::Attempt::errored(probe::run::Outcome::Unknown, error);
                self.on_probe(i, k, run, attempt);
            }
        }
    }

    /// Run slot `i`'s hook at `point` for run `run`, for at most `limit` (a preStop hook's
    /// grace; kubelet gives a postStart hook none).
    fn launch_hook(&mut self, point: hook::Point, i: usize, run: u32, limit: Option<Duration>) {
        let Some(container) = self.container_spec(i).map(Cow::into_owned) else {
            return self.on_hook(point, i, run, Ok(()));
        };
        let (env, workdir) = self.slots[i].run_env();
        let pid = self.slots[i].active.as_ref().and_then(|a| a.pid);
        let pod = format!("{}_{}({})", self.name, self.namespace, self.uid);
        match hook::at(point, &container, crate::node::HOST_IP, &env, &workdir) {
            Some(Ok(mut h)) => {
                if let hook::Hook::Run(probe::run::Action::Exec { container_pid, .. }) = &mut h {
                    *container_pid = pid;
                }
                let name = container.name.clone();
                self.side.push(Box::pin(async move {
                    let result = hook::run(h, limit, &name, &pod).await;
                    Pending::Hook(point, i, run, result)
                }));
            }
            Some(Err(e)) => self.on_hook(point, i, run, Err(e)),
            None => self.on_hook(point, i, run, Ok(())),
        }
    }

    fn on_hook(&mut self, point: hook::Point, i: usize, run: u32, result: Result<(), String>) {
        match point {
            hook::Point::PostStart => self.on_post_start(i, run, result),
            hook::Point::PreStop => self.on_pre_stop(i, run, result),
        }
    }

    /// The postStart hook ended: the container is reported running from now on, or, when the
    /// hook failed, killed as kubelet's killContainer does (its preStop hook, then the stop
    /// signal, SIGKILL after the pod's grace period); it restarts as its exit code and the
    /// restart policy say.
    fn on_post_start(&mut self, i: usize, run: u32, result: Result<(), String>) {
        let (events, pod) = (self.ctx.events.clone(), self.pod_ref());
        let grace = self.grace();
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if !slot.hook_running() {
            return;
        }
        let list = slot.list();
        let Some(a) = slot.active.as_mut().filter(|a| a.run == run) else {
            return;
        };
        slot.shown = None;
        let held = a.held_exit.take();
        if let Err(message) = result {
            tracing::info!(pod = %self.name, container = %slot.record.name, %message, "postStart hook failed");
            // The message stays out of the event, as upstream's: it may hold secrets.
            events.failed_post_start_hook(&pod, &slot.record.name, list);
            events.killing_because(&pod, &slot.record.name, list, "FailedPostStartHook");
            slot.post_start_error = Some(message);
            if held.is_none() {
                a.kill_at = Some(Instant::now() + grace);
                if slot.has_pre_stop {
                    a.pre_stop = Some(true);
                    self.launch_hook(hook::Point::PreStop, i, run, Some(grace));
                } else {
                    a.term();
                }
            }
        }
        if let Some(exit) = held {
            self.on_exit(i, run, exit);
        }
    }

    /// The pod stops: postStart hooks still running no longer matter (kubelet cancels them),
    /// and exits they held back are taken in.
    fn abandon_post_start_hooks(&mut self) {
        let mut held = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.shown.take().is_some()
                && let Some(a) = slot.active.as_mut()
                && let Some(exit) = a.held_exit.take()
            {
                held.push((i, a.run, exit));
            }
        }
        for (i, run, exit) in held {
            self.on_exit(i, run, exit);
        }
    }

    /// The preStop hook ended: the stop signal may go (the next step sends it).
    fn on_pre_stop(&mut self, i: usize, run: u32, result: Result<(), String>) {
        let (events, pod) = (self.ctx.events.clone(), self.pod_ref());
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if let Some(a) = slot.active.as_mut().filter(|a| a.run == run) {
            a.pre_stop = Some(false);
        }
        if let Err(message) = result {
            tracing::info!(pod = %self.name, container = %slot.record.name, %message, "preStop hook failed");
            events.failed_pre_stop_hook(&pod, &slot.record.name, slot.list(), &message);
        }
    }

    /// An attempt ended: report it as kubelet's prober does, count it, and act on a change.
    fn on_probe(&mut self, i: usize, k: usize, run: u32, attempt: probe::run::Attempt) {
        use probe::run::Outcome;
        let (events, pod) = (self.ctx.events.clone(), self.pod_ref());
        let policy = self.restart_policy.clone();
        let pod_grace = self.grace();
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let current = slot.active.as_ref().map(|a| a.run) == Some(run);
        let list = slot.list();
        let Some(prober) = slot.probes.get_mut(k) else {
            return;
        };
        if prober.in_flight != Some(run) || !current || self.stopping.is_some() {
            // An attempt for a run that is over (or a pod that is stopping): it means nothing.
            if prober.in_flight == Some(run) {
                prober.discard();
            }
            return;
        }
        let (name, init, kind) = (slot.record.name.clone(), list, prober.kind.name());
        if let Some(error) = attempt.error {
            events.unhealthy(
                &pod,
                &name,
                init,
                &format!(
                    "{kind} probe errored and resulted in {} state: {error}",
                    attempt.outcome.as_str()
                ),
            );
            prober.discard();
            return;
        }
        let verdict = match attempt.outcome {
            Outcome::Success => Verdict::Success,
            Outcome::Warning => {
                let message = format!("{kind} probe warning: {}", attempt.output);
                events.probe_warning(&pod, &name, init, &message);
                Verdict::Success
            }
            Outcome::Failure => {
                let message = format!("{kind} probe failed: {}", attempt.output);
                events.unhealthy(&pod, &name, init, &message);
                Verdict::Failure
            }
            Outcome::Unknown => Verdict::Failure,
        };
        match prober.finish(verdict, &name) {
            Change::None => {}
            Change::Verdict(_) => {}
            Change::Kill(message) => {
                let grace = prober.timing.termination_grace.unwrap_or(pod_grace);
                let restart = slot.sidecar || policy != "Never";
                let message = if restart {
                    format!("{message}, will be restarted")
                } else {
                    message
                };
                tracing::info!(pod = %self.name, container = %name, %message, "killing a container");
                events.killing_because(&pod, &name, init, &message);
                slot.probe_killed = true;
                // kubelet's killContainer: the preStop hook first, then the stop signal.
                let hook = slot.has_pre_stop;
                if let Some(a) = &mut slot.active {
                    a.kill_at = Some(Instant::now() + grace);
                    if hook {
                        a.pre_stop = Some(true);
                    } else {
                        a.term();
                    }
                }
                if hook {
                    self.launch_hook(hook::Point::PreStop, i, run, Some(grace));
                }
            }
        }
    }

    fn due(&self, i: usize, now: Instant) -> bool {
        let s = &self.slots[i];
        (s.plan.is_some() || s.env_objects)
            && match s.restart_at {
                Some(t) => t <= now,
                None => s.runs == 0,
            }
    }

    fn start(&mut self, i: usize) {
        let log_dir = self.config().log_dir();
        let (ns, name, uid) = (self.namespace.clone(), self.name.clone(), self.uid.clone());
        let (events, pod) = (self.ctx.events.clone(), self.pod_ref());
        let slot = &mut self.slots[i];
        let plan = if slot.env_objects {
            // Built for this start from objects just read; the next start reads them again.
            match slot.plan.take() {
                Some(plan) => plan,
                None => {
                    if !slot.fetching {
                        self.fetch_objects(i);
                    }
                    return;
                }
            }
        } else {
            match slot.plan.clone() {
                Some(plan) => plan,
                None => return,
            }
        };
        let slot = &mut self.slots[i];
        let run = slot.runs;
        let container = slot.record.name.clone();
        let log_file = podlog::log_file(&log_dir, &ns, &name, &uid, &container, run);
        let container_id = podlog::container_id(&uid, &container, run);
        let now = Timestamp::now();
        if run > 0 {
            let exited = slot.exited_at.unwrap_or_else(std::time::Instant::now);
            slot.backoff.restarted(exited, std::time::Instant::now());
        }
        slot.runs += 1;
        slot.restart_at = None;
        let before = slot.has_post_start.then(|| slot.record.clone());
        // The run before this one becomes the last state.
        match std::mem::replace(
            &mut slot.record.state,
            RunState::Waiting {
                reason: String::new(),
                message: None,
            },
        ) {
            RunState::Terminated(t) => slot.record.last = Some(t),
            RunState::Waiting { .. } | RunState::Running { .. } => {}
        }
        slot.record.restart_count = i32::try_from(run).unwrap_or(i32::MAX);
        let started = runtime::start(&plan, log_file);
        // The env and working directory of a process run, moved out of its plan (no copy on
        // the start path): for exec, and for its probes and hooks.
        let run_env = match plan {
            Plan::Process {
                launch, workdir, ..
            } => Some((Arc::new(launch.env), workdir)),
            Plan::Simulate { .. } => None,
        };
        slot.run_env = run_env
            .clone()
            .filter(|_| !slot.probes.is_empty() || slot.has_pre_stop || slot.has_post_start);
        match started {
            Ok(mut started) => {
                let attach = started.attach.take();
                let exec = run_env.map(|(env, workdir)| {
                    self.ctx.streams.publish(
                        &ns,
                        &name,
                        &uid,
                        &container,
                        env,
                        workdir,
                        attach,
                        started.pid,
                        now,
                    )
                });
                let at = Instant::now();
                for p in &mut slot.probes {
                    p.container_started(at);
                }
                events.created(&pod, &container, slot.list());
                events.started(&pod, &container, slot.list());
                slot.ever_started = true;
                slot.record.state = RunState::Running {
                    started_at: now,
                    container_id,
                };
                slot.active = Some(Active {
                    run,
                    pid: started.pid,
                    stop: started.stop,
                    term_sent: false,
                    kill_sent: false,
                    kill_at: None,
                    pre_stop: None,
                    held_exit: None,
                    _exec: exec,
                });
                slot.shown = before;
                if let Some(pid) = started.pid.filter(|_| self.journaled) {
                    let rec = ProcessRecord {
                        container: container.clone(),
                        run,
                        pid,
                        start_ticks: started.start_ticks.unwrap_or(0),
                    };
                    if let Err(e) = self.ctx.journal.started(&uid, rec) {
                        tracing::warn!(pod = %name, error = %e, "writing the executor state journal");
                    }
                }
                if self.report_at.is_none() {
                    self.report_at = Some(Instant::now() + START_REPORT_DELAY);
                }
                let exit = started.exit;
                self.exits.push(Box::pin(
                    async move { Pending::Exit(i, run, exit.await.ok()) },
                ));
                if self.slots[i].shown.is_some() {
                    self.launch_hook(hook::Point::PostStart, i, run, None);
                }
                tracing::debug!(namespace = %ns, pod = %name, container = %container, run, "container started");
            }
            Err(message) => {
                tracing::info!(namespace = %ns, pod = %name, container = %container, %message, "container failed to start");
                events.failed(&pod, &container, slot.list(), &message);
                slot.record.state = RunState::Terminated(Terminated {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".to_string(),
                    message: Some(message),
                    started_at: None,
                    finished_at: now,
                    container_id: Some(container_id),
                });
                slot.exited_at = Some(std::time::Instant::now());
                self.after_exit(i, 128);
            }
        }
    }

    fn on_exit(&mut self, i: usize, run: u32, exit: Option<Exit>) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let hook_running = slot.hook_running();
        match slot.active.as_mut() {
            Some(a) if a.run == run && hook_running => {
                a.held_exit = Some(exit);
                return;
            }
            Some(a) if a.run == run => {}
            _ => return,
        }
        let active = slot.active.take();
        self.report_at = None;
        // A lost exit report means the run was torn down: report it killed.
        let exit = exit.unwrap_or_else(|| Exit::signaled(9));
        let (started_at, container_id) = match &slot.record.state {
            RunState::Running {
                started_at,
                container_id,
            } => (*started_at, container_id.clone()),
            _ => (
                Timestamp::now(),
                podlog::container_id(&self.uid, &slot.record.name, run),
            ),
        };
        let mut terminated = Terminated::exited(
            exit.exit_code,
            exit.signal,
            started_at,
            exit.finished_at,
            container_id,
        );
        slot.exited_at = Some(std::time::Instant::now());
        // No message file is offered at terminationMessagePath: the message is the log's
        // tail when the policy falls back to it and the run failed, as kubelet's with an
        // empty file.
        let container = slot.record.name.clone();
        let falls_back = self.container_spec(i).is_some_and(|c| {
            c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        });
        if falls_back && exit.exit_code != 0 {
            let log_dir = self.config().log_dir();
            let path = podlog::log_file(
                &log_dir,
                &self.namespace,
                &self.name,
                &self.uid,
                &container,
                run,
            );
            terminated.message = crate::logs::termination_message_from_log(&path);
        }
        let slot = &mut self.slots[i];
        slot.record.state = RunState::Terminated(terminated);
        for p in &mut slot.probes {
            p.container_stopped();
        }
        if let Some(pid) = active.and_then(|a| a.pid).filter(|_| self.journaled)
            && let Err(e) = self.ctx.journal.exited(&self.uid, pid)
        {
            tracing::warn!(pod = %self.name, error = %e, "writing the executor state journal");
        }
        tracing::debug!(pod = %self.name, container = %slot.record.name, run, exit_code = exit.exit_code, "container exited");
        self.after_exit(i, exit.exit_code);
    }

    /// Restart per policy (with back-off), or let the pod end.
    fn after_exit(&mut self, i: usize, exit_code: i32) {
        if self.stopping.is_some() {
            return;
        }
        let policy = self.restart_policy.clone();
        let (pod_name, ns, uid) = (self.name.clone(), self.namespace.clone(), self.uid.clone());
        let (events, pod) = (self.ctx.events.clone(), self.pod_ref());
        let slot = &mut self.slots[i];
        let probe_killed = std::mem::take(&mut slot.probe_killed);
        let hook_error = slot.post_start_error.take();
        let restart = match (slot.init, policy.as_str()) {
            // kubelet starts an ephemeral container only while it has no status: never again.
            _ if slot.ephemeral => false,
            _ if slot.sidecar => true,
            // kubelet restarts a container it killed for a failed probe unless the policy
            // is Never, whatever the exit code.
            (_, "Never") if probe_killed => false,
            _ if probe_killed => true,
            (_, "Never") => false,
            (true, _) | (false, "OnFailure") => exit_code != 0,
            (false, _) => true,
        };
        if restart {
            let exited = slot.exited_at.unwrap_or_else(std::time::Instant::now);
            let delay = slot.backoff.delay_after_exit(exited);
            let since_exit = exited.elapsed();
            slot.restart_at = Some(Instant::now() + delay.saturating_sub(since_exit));
            // Waiting until the restart: in back-off, or with why the last start failed
            // (kubelet's reason cache keeps it until the next start).
            let waiting = if delay.is_zero() {
                hook_error.map(|message| (REASON_POST_START_HOOK_ERROR.to_string(), message))
            } else {
                Some((
                    "CrashLoopBackOff".to_string(),
                    format!(
                        "back-off {} restarting failed container={} pod={}_{}({})",
                        go_string(delay),
                        slot.record.name,
                        pod_name,
                        ns,
                        uid
                    ),
                ))
            };
            if let Some((reason, message)) = waiting
                && let RunState::Terminated(t) = &slot.record.state
            {
                slot.record.last = Some(t.clone());
                if !delay.is_zero() {
                    events.back_off(&pod, &slot.record.name, slot.list());
                }
                slot.record.state = RunState::Waiting {
                    reason,
                    message: Some(message),
                };
            }
        } else if slot.init && !slot.sidecar && exit_code != 0 {
            // A failed init container under Never fails the pod (the phase says Failed).
            self.finish = Some(Finish {
                failed: false,
                reason: None,
                message: None,
            });
        }
    }

    async fn wait_for_event(&mut self) {
        let wake = self.next_wake();
        let has_exits = !self.exits.is_empty();
        let has_side = !self.side.is_empty();
        tokio::select! {
            Some(pending) = self.exits.next(), if has_exits => self.on_pending(pending),
            Some(pending) = self.side.next(), if has_side => self.on_pending(pending),
            changed = self.pods.changed(), if !self.pod_gone => match changed {
                Ok(()) => {
                    self.latest = self.pods.borrow_and_update().clone();
                    self.on_pod_update();
                }
                Err(_) => {
                    self.pod_gone = true;
                    self.stop(StopReason::Vanished, Duration::ZERO);
                }
            },
            changed = self.shutdown.changed(), if !self.shutting_down => {
                if changed.is_err() || *self.shutdown.borrow() {
                    self.shutting_down = true;
                }
            },
            _ = sleep_until(wake) => {}
        }
    }

    fn on_pending(&mut self, pending: Pending) {
        match pending {
            Pending::Exit(i, run, exit) => self.on_exit(i, run, exit),
            Pending::Objects(i, objects) => self.on_objects(i, objects),
            Pending::Volumes(result) => self.on_volumes(result),
            Pending::VolumesRefreshed(result) => self.on_volumes_refreshed(result),
            Pending::Probe(i, k, run, attempt) => self.on_probe(i, k, run, attempt),
            Pending::Hook(point, i, run, result) => self.on_hook(point, i, run, result),
            Pending::Storage(eviction) => self.on_storage(eviction),
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake: Vec<Instant> = Vec::new();
        match &self.stopping {
            Some(s) => {
                for a in self.slots.iter().filter_map(|sl| sl.active.as_ref()) {
                    if !a.kill_sent && a.pre_stop != Some(true) {
                        wake.push(a.kill_due(s.kill_at));
                    }
                }
            }
            None => {
                wake.extend(self.slots.iter().filter_map(|s| s.restart_at));
                if self.finish.is_none() {
                    wake.extend(self.deadline);
                    if let Volumes::Failed { at, .. } = self.volumes {
                        wake.push(at);
                    }
                    wake.extend(self.volume_refresh_at);
                    wake.extend(self.storage_check_at);
                    for s in self
                        .slots
                        .iter()
                        .filter(|s| s.active.is_some() && !s.hook_running())
                    {
                        let started = s.started_by_probes();
                        wake.extend(s.probes.iter().filter_map(|p| p.wake(started)));
                    }
                }
                wake.extend(
                    self.slots
                        .iter()
                        .filter_map(|s| s.active.as_ref())
                        // Not while a preStop hook holds the stop signal back.
                        .filter(|a| a.term_sent && !a.kill_sent)
                        .filter_map(|a| a.kill_at),
                );
            }
        }
        wake.extend(self.status_retry_at);
        wake.extend(self.report_at);
        wake.into_iter().min()
    }

    // ---- status ---------------------------------------------------------------------

    fn view(&self) -> PodView {
        // A record as reported: with `started` and `ready` as its probes now say; while a
        // postStart hook runs, as it was before the start.
        let record = |s: &Slot| match &s.shown {
            Some(before) => before.clone(),
            None => {
                let (started, ready) = probe::gates(&s.probes);
                ContainerRecord {
                    probe_started: started,
                    probe_ready: ready,
                    ..s.record.clone()
                }
            }
        };
        let main = |s: &&Slot| !s.init && !s.ephemeral;
        PodView {
            init: self.slots.iter().filter(|s| s.init).map(record).collect(),
            main: self.slots.iter().filter(main).map(record).collect(),
            ephemeral: self
                .slots
                .iter()
                .filter(|s| s.ephemeral)
                .map(record)
                .collect(),
            restart_policy: self.restart_policy.clone(),
            start_time: self.start_time,
            finish: self.finish.clone(),
        }
    }

    /// The latest pod's status, as this worker last wrote it (plus other writers' conditions
    /// as the server has them): what the next status is computed against.
    fn base_status(&self) -> Option<PodStatus> {
        let latest = self.latest.status.as_ref();
        let Some(written) = &self.written else {
            return latest.cloned();
        };
        let mut s = written.clone();
        let foreign = latest
            .and_then(|st| st.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| !status::is_kubelet_condition(&c.type_))
            .cloned();
        let own = s
            .conditions
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| status::is_kubelet_condition(&c.type_));
        s.conditions = Some(foreign.chain(own).collect());
        Some(s)
    }

    /// Write the status if it changed; conflicts re-read the pod and try again.
    async fn sync_status(&mut self) -> Sync {
        let view = self.view();
        for _ in 0..5 {
            let base = self.base_status();
            let generation = self.latest.metadata.generation;
            let desired = status::status_after(
                base.clone().unwrap_or_default(),
                generation,
                &view,
                Timestamp::now(),
            );
            if base.as_ref() == Some(&desired) {
                self.status_retry_at = None;
                return Sync::Done;
            }
            let body = match status_patch(&self.uid, &desired) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(pod = %self.name, error = %e, "encoding a pod status");
                    return Sync::Retry;
                }
            };
            match patch_status(&self.api, &self.name, body).await {
                Ok(written) => {
                    self.written = written;
                    self.status_retry_at = None;
                    return Sync::Done;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => match self.api.get(&self.name).await {
                    Ok(p) if p.metadata.uid.as_deref() == Some(self.uid.as_str()) => {
                        self.written = p.status.clone();
                        self.latest = Arc::new(p);
                    }
                    Ok(_) => return Sync::Gone,
                    Err(kube::Error::Api(s)) if s.code == 404 => return Sync::Gone,
                    Err(e) => {
                        tracing::warn!(pod = %self.name, error = %e, "re-reading a pod after a conflict");
                        break;
                    }
                },
                Err(kube::Error::Api(s)) if s.code == 404 => return Sync::Gone,
                Err(e) => {
                    tracing::warn!(pod = %self.name, error = %e, "writing a pod status");
                    break;
                }
            }
        }
        self.status_retry_at = Some(Instant::now() + RETRY_DELAY);
        Sync::Retry
    }

    // ---- after an executor restart ----------------------------------------------------

    async fn fail_after_restart(&mut self) -> Outcome {
        let mut killed = 0;
        if let Some(rec) = self.ctx.journal.record(&self.uid) {
            for p in &rec.processes {
                if state::kill_leftover(p).await {
                    killed += 1;
                }
            }
        }
        tracing::info!(
            namespace = %self.namespace, pod = %self.name, killed,
            "pod was running under a previous executor run; reporting it failed"
        );
        let pod = self.latest.clone();
        let spec = pod.spec.clone().unwrap_or_default();
        let old = pod.status.clone().unwrap_or_default();
        self.restart_policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        self.start_time = old.start_time.as_ref().map_or(self.start_time, |t| t.0);
        let now = Timestamp::now();
        // Every container of the spec, with the list it is in and its restart policy.
        let inits = spec.init_containers.iter().flatten();
        let all = inits
            .map(|c| (List::InitContainers, &c.name, &c.image, &c.restart_policy))
            .chain(
                spec.containers
                    .iter()
                    .map(|c| (List::Containers, &c.name, &c.image, &c.restart_policy)),
            )
            .chain(spec.ephemeral_containers.iter().flatten().map(|c| {
                let list = List::EphemeralContainers;
                (list, &c.name, &c.image, &c.restart_policy)
            }));
        for (list, name, image, restart_policy) in all {
            let statuses = match list {
                List::InitContainers => &old.init_container_statuses,
                List::Containers => &old.container_statuses,
                List::EphemeralContainers => &old.ephemeral_container_statuses,
            };
            let found = statuses.iter().flatten().find(|s| &s.name == name);
            let init = list == List::InitContainers;
            let sidecar = init && restart_policy.as_deref() == Some("Always");
            let mut record = match found {
                Some(cs) => record_from_status(cs),
                None => {
                    ContainerRecord::new(name, image.as_deref().unwrap_or(""), "ContainerCreating")
                }
            };
            if let RunState::Running {
                started_at,
                container_id,
            } = &record.state
            {
                record.state = RunState::Terminated(Terminated {
                    exit_code: 137,
                    signal: None,
                    reason: REASON_CONTAINER_UNKNOWN.to_string(),
                    message: Some(MESSAGE_CONTAINER_UNKNOWN.to_string()),
                    started_at: Some(*started_at),
                    finished_at: now,
                    container_id: Some(container_id.clone()),
                });
            }
            record.init = init;
            record.sidecar = sidecar;
            self.slots.push(Slot {
                ephemeral: list == List::EphemeralContainers,
                ..Slot::blank(record)
            });
        }
        self.finish = Some(Finish {
            failed: true,
            reason: Some(REASON_EXECUTOR_RESTARTED.to_string()),
            message: Some(MESSAGE_EXECUTOR_RESTARTED.to_string()),
        });
        loop {
            match self.sync_status().await {
                Sync::Done => {
                    self.forget_state();
                    return Outcome::Finished;
                }
                Sync::Gone => {
                    // Wait for the watch to confirm; the object may be held by finalizers.
                }
                Sync::Retry => {}
            }
            self.wait_for_event().await;
            if self.pod_gone {
                return Outcome::Vanished;
            }
            if self.shutting_down {
                return Outcome::Shutdown;
            }
        }
    }

    // ---- after the end ----------------------------------------------------------------

    /// Nothing of this pod runs any more: a restart has nothing to find.
    fn forget_state(&mut self) {
        self.journaled = false;
        if let Err(e) = self.ctx.journal.done(&self.uid) {
            tracing::warn!(pod = %self.name, error = %e, "writing the executor state journal");
        }
    }

    /// The object is gone while this worker ran it.
    fn cleanup(&mut self) {
        remove_pod_files(&self.ctx, &self.namespace, &self.name, &self.uid);
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => futures::future::pending().await,
    }
}

/// kubelet's waiting reason for a container that has not started: `PodInitializing` in a pod
/// with init containers, `ContainerCreating` otherwise.
fn waiting_reason(spec: &PodSpec) -> &'static str {
    if spec.init_containers.as_ref().is_some_and(|l| !l.is_empty()) {
        "PodInitializing"
    } else {
        "ContainerCreating"
    }
}

/// The container an ephemeral container describes: what its env, command and streams are
/// built from. Its target container names a process namespace to share, which host
/// processes have no use for.
fn ephemeral_as_container(ec: &EphemeralContainer) -> Container {
    kbatch_api::defaults::ephemeral_to_container(ec.clone()).0
}

/// A container status as written by an earlier run, back into a record.
fn record_from_status(cs: &ContainerStatus) -> ContainerRecord {
    let term = |t: &kbatch_api::k8s_openapi::api::core::v1::ContainerStateTerminated| Terminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: t.reason.clone().unwrap_or_default(),
        message: t.message.clone(),
        started_at: t.started_at.as_ref().map(|s| s.0),
        finished_at: t.finished_at.as_ref().map_or_else(Timestamp::now, |f| f.0),
        container_id: t.container_id.clone(),
    };
    let state = cs.state.clone().unwrap_or_default();
    let run_state = if let Some(r) = &state.running {
        RunState::Running {
            started_at: r.started_at.as_ref().map_or_else(Timestamp::now, |s| s.0),
            container_id: cs.container_id.clone().unwrap_or_default(),
        }
    } else if let Some(t) = &state.terminated {
        RunState::Terminated(term(t))
    } else {
        let w = state.waiting.clone().unwrap_or_default();
        RunState::Waiting {
            reason: w.reason.unwrap_or_else(|| "ContainerCreating".to_string()),
            message: w.message,
        }
    };
    ContainerRecord {
        name: cs.name.clone(),
        image: cs.image.clone(),
        init: false,
        sidecar: false,
        probe_started: true,
        probe_ready: true,
        restart_count: cs.restart_count,
        state: run_state,
        last: cs
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .map(term),
    }
}

#[cfg(test)]
mod tests {
    use super::status_patch;
    use kbatch_api::k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
    use serde_json::{Value, json};

    /// The patch as a tree: the status's own fields, then null for each of the three a
    /// status may have dropped since the last write.
    fn reference(uid: &str, status: &PodStatus) -> Value {
        let mut body = serde_json::to_value(status).unwrap();
        let m = body.as_object_mut().unwrap();
        for k in ["message", "reason", "initContainerStatuses"] {
            m.entry(k).or_insert(Value::Null);
        }
        json!({"metadata": {"uid": uid}, "status": body})
    }

    #[test]
    fn the_status_patch_clears_what_the_status_no_longer_has() {
        let full = PodStatus {
            phase: Some("Failed".into()),
            reason: Some("DeadlineExceeded".into()),
            message: Some("Pod was active on the node longer than \"5s\"".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..PodCondition::default()
            }]),
            init_container_statuses: Some(vec![]),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                restart_count: 2,
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        };
        let only_phase = PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        };
        for (uid, status) in [
            ("u-1", PodStatus::default()),
            ("u-\"2\"", only_phase),
            ("u-3", full),
        ] {
            let bytes = status_patch(uid, &status).unwrap();
            let got: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                got,
                reference(uid, &status),
                "{}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let empty: Value =
            serde_json::from_slice(&status_patch("u", &PodStatus::default()).unwrap()).unwrap();
        assert_eq!(
            empty["status"],
            json!({"message": null, "reason": null, "initContainerStatuses": null})
        );
    }
}
