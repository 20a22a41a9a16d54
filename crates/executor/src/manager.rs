//! The executor's main loop: one watch over all pods feeds the binder's index and one worker per
//! running pod bound to this node (each worker gets the latest version of its pod; the channel
//! closes when the object is gone). A finished pod is kept as its identity alone until it is
//! deleted: its deletion is confirmed, and its files are removed once the object is gone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kbatch_api::k8s_openapi::api::core::v1::{Node, Pod};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::ExecutorConfig;
use crate::binder::{self, PodIndex};
use crate::events::{NodeEvents, PodRef};
use crate::state::{self, Journal};
use crate::streaming::Registry;
use crate::workdir::WorkDirs;
use crate::worker::{self, Context, Finished};
use kbatch_controllers::runtime::informer::lean_watcher;

/// A finished pod waiting on the node for its deletion.
struct Done {
    pod: Finished,
    /// The deletion is being confirmed.
    confirming: bool,
}

struct Manager {
    ctx: Arc<Context>,
    index: PodIndex,
    /// Pods being run: the channel of each one's versions, to its worker.
    workers: HashMap<String, watch::Sender<Arc<Pod>>>,
    /// Pods whose terminal status is written, by UID.
    finished: HashMap<String, Done>,
    tasks: JoinSet<Option<Finished>>,
    confirms: JoinSet<()>,
    binds: JoinSet<(String, Result<(), kube::Error>)>,
    /// Writes of the scheduler's reports about pods it does not bind.
    reports: JoinSet<()>,
    /// This node's object, as the API has it (labels, taints, allocatable for scheduling).
    node: Option<Arc<Node>>,
    shutdown: watch::Receiver<bool>,
    /// Pods seen during a (re-)list; the ones missing at its end are gone.
    listing: Option<HashSet<String>>,
    swept: bool,
}

pub async fn run(
    client: kube::Client,
    config: ExecutorConfig,
    journal: Journal,
    workdirs: WorkDirs,
    allocatable: BTreeMap<String, Quantity>,
    streams: Registry,
    mut shutdown: watch::Receiver<bool>,
) {
    // Pods are decoded without managedFields, which nothing here reads.
    let pods: Api<Pod> = Api::all(client.clone());
    let mut pod_events = lean_watcher(pods, watcher::Config::default()).boxed();
    let nodes: Api<Node> = Api::all(client.clone());
    let this_node =
        watcher::Config::default().fields(&format!("metadata.name={}", config.node_name));
    let mut node_events = lean_watcher(nodes, this_node).boxed();
    let events = NodeEvents::start(client.clone(), &config.node_name);
    let mut m = Manager {
        ctx: Arc::new(Context {
            events,
            client,
            config,
            journal,
            workdirs,
            allocatable,
            streams,
        }),
        index: PodIndex::default(),
        workers: HashMap::new(),
        finished: HashMap::new(),
        tasks: JoinSet::new(),
        confirms: JoinSet::new(),
        binds: JoinSet::new(),
        reports: JoinSet::new(),
        node: None,
        shutdown: shutdown.clone(),
        listing: None,
        swept: false,
    };
    loop {
        if *shutdown.borrow() {
            break;
        }
        let retry = m.index.next_retry();
        tokio::select! {
            ev = pod_events.next() => match ev {
                Some(Ok(ev)) => m.on_event(ev).await,
                Some(Err(e)) => tracing::warn!(error = %e, "watching pods"),
                None => break,
            },
            ev = node_events.next() => match ev {
                Some(Ok(Event::Apply(node) | Event::InitApply(node))) => m.on_node(node),
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "watching the node"),
                None => break,
            },
            Some(_) = m.reports.join_next(), if !m.reports.is_empty() => {},
            Some(done) = m.binds.join_next(), if !m.binds.is_empty() => {
                if let Ok((uid, result)) = done {
                    if let Err(e) = &result {
                        tracing::debug!(%uid, error = %e, "binding a pod");
                    }
                    m.index.bind_done(&uid, result.is_ok(), Instant::now());
                }
            },
            Some(done) = m.tasks.join_next(), if !m.tasks.is_empty() => {
                if let Ok(Some(pod)) = done {
                    m.on_finished(pod);
                }
            },
            Some(_) = m.confirms.join_next(), if !m.confirms.is_empty() => {},
            _ = sleep_until(retry) => {},
            changed = shutdown.changed() => {
                // A dropped sender means nobody can stop us any more: stop now.
                if changed.is_err() {
                    break;
                }
            },
        }
        m.bind_what_fits();
    }
    m.binds.abort_all();
    m.reports.abort_all();
    m.confirms.abort_all();
    // Workers see the same shutdown signal and stop their containers.
    while m.tasks.join_next().await.is_some() {}
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => futures::future::pending().await,
    }
}

impl Manager {
    async fn on_event(&mut self, ev: Event<Pod>) {
        match ev {
            Event::Init => self.listing = Some(HashSet::new()),
            Event::InitApply(pod) => {
                if let (Some(seen), Some(uid)) = (self.listing.as_mut(), pod.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                self.apply(pod);
            }
            Event::InitDone => {
                let seen = self.listing.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .workers
                    .keys()
                    .chain(self.finished.keys())
                    .filter(|uid| !seen.contains(*uid))
                    .cloned()
                    .collect();
                for uid in gone {
                    self.remove(&uid);
                }
                if !self.swept {
                    self.swept = true;
                    sweep_leftovers(&self.ctx, &seen).await;
                }
            }
            Event::Apply(pod) => self.apply(pod),
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.remove(uid);
                }
            }
        }
    }

    /// The node's object changed: unschedulable pods are tried again if what scheduling
    /// reads of it changed (its heartbeats do not count).
    fn on_node(&mut self, node: Node) {
        let scheduling = |n: &Node| {
            let spec = n.spec.as_ref();
            (
                n.metadata.labels.clone(),
                spec.and_then(|s| s.taints.clone()),
                spec.and_then(|s| s.unschedulable),
                n.status.as_ref().and_then(|s| s.allocatable.clone()),
            )
        };
        let changed = self
            .node
            .as_deref()
            .is_none_or(|old| scheduling(old) != scheduling(&node));
        if changed {
            self.index.node_changed();
        }
        self.node = Some(Arc::new(node));
    }

    fn apply(&mut self, mut pod: Pod) {
        // Kept by the workers for the pod's life; kubelet has no use for managedFields either.
        pod.metadata.managed_fields = None;
        let pod = Arc::new(pod);
        let node = self.ctx.config.node_name.clone();
        self.index.observe(&pod, &node);
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let on_this_node =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str());
        if !on_this_node {
            return;
        }
        // kubelet's pod manager: exec finds the pod from now until the object is gone.
        if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
            self.ctx.streams.pod_bound(&uid, ns, name);
        }
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if let Some(done) = self.finished.get_mut(&uid) {
            if deleting && !done.confirming {
                done.confirming = true;
                let pod = done.pod.clone();
                self.confirm_deletion(pod);
            }
            return;
        }
        match self.workers.get(&uid) {
            Some(tx) => {
                tx.send_replace(pod);
            }
            // Finished before we saw it (a restarted executor lists all its finished pods):
            // no worker needed.
            None if worker::is_terminal(&pod) => {
                let m = &pod.metadata;
                let done = Finished {
                    uid,
                    namespace: m.namespace.clone().unwrap_or_default(),
                    name: m.name.clone().unwrap_or_default(),
                };
                self.keep_finished(done, deleting);
            }
            None => {
                if let Some(rejection) = self.admission(&pod) {
                    let m = &pod.metadata;
                    let done = Finished {
                        uid: uid.clone(),
                        namespace: m.namespace.clone().unwrap_or_default(),
                        name: m.name.clone().unwrap_or_default(),
                    };
                    let (client, events) = (self.ctx.client.clone(), self.ctx.events.clone());
                    self.reports
                        .spawn(reject(client, events, done.clone(), rejection));
                    self.keep_finished(done, deleting);
                    return;
                }
                let (tx, rx) = watch::channel(pod);
                self.workers.insert(uid, tx);
                self.tasks
                    .spawn(worker::run(self.ctx.clone(), rx, self.shutdown.clone()));
            }
        }
    }

    /// kubelet's admission of a pod new on the node: `Some` when it must not run (a pod the
    /// scheduler placed always fits; one bound by `spec.nodeName` may not).
    fn admission(&self, pod: &Pod) -> Option<crate::admit::Rejection> {
        let node = self.node.as_deref()?;
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let (requested, pod_count) = self.index.others(uid);
        let info = crate::fit::NodeInfo {
            node,
            requested: &requested,
            pod_count,
        };
        crate::admit::admit(pod, &info).err()
    }

    /// A worker wrote its pod's terminal status: the pod now only waits to be deleted.
    fn on_finished(&mut self, pod: Finished) {
        let Some(tx) = self.workers.remove(&pod.uid) else {
            // Deleted while it finished: nothing waits for it.
            worker::remove_pod_files(&self.ctx, &pod.namespace, &pod.name, &pod.uid);
            return;
        };
        let deleting = tx.borrow().metadata.deletion_timestamp.is_some();
        self.keep_finished(pod, deleting);
    }

    /// Keep a finished pod until it is deleted, confirming the deletion if it has begun.
    fn keep_finished(&mut self, pod: Finished, deleting: bool) {
        if deleting {
            self.confirm_deletion(pod.clone());
        }
        self.finished.insert(
            pod.uid.clone(),
            Done {
                pod,
                confirming: deleting,
            },
        );
    }

    fn confirm_deletion(&mut self, pod: Finished) {
        let api = Api::namespaced(self.ctx.client.clone(), &pod.namespace);
        self.confirms
            .spawn(worker::confirm_deletion(api, pod, self.shutdown.clone()));
    }

    fn remove(&mut self, uid: &str) {
        self.index.forget(uid);
        self.ctx.streams.pod_gone(uid);
        if let Some(done) = self.finished.remove(uid) {
            let p = &done.pod;
            worker::remove_pod_files(&self.ctx, &p.namespace, &p.name, &p.uid);
        }
        // Dropping the sender tells the worker its pod is gone.
        self.workers.remove(uid);
    }

    fn bind_what_fits(&mut self) {
        let node = self.ctx.config.node_name.clone();
        let (bind, report) = self.index.take_bindable(
            self.ctx.config.max_pods,
            self.node.as_deref(),
            Instant::now(),
        );
        for n in report {
            let (client, events) = (self.ctx.client.clone(), self.ctx.events.clone());
            self.reports.spawn(binder::report(client, events, n));
        }
        for c in bind {
            let client = self.ctx.client.clone();
            let node = node.clone();
            let events = self.ctx.events.clone();
            self.binds.spawn(async move {
                let result = binder::bind(client, &c, &node).await;
                if result.is_ok() {
                    let pod = PodRef {
                        namespace: c.namespace.clone(),
                        name: c.name.clone(),
                        uid: c.uid.clone(),
                    };
                    events.scheduled(&pod, &node);
                }
                (c.uid, result)
            });
        }
    }
}

/// Fail a pod kubelet's admission refused, as kubelet's `rejectPod` does: its status
/// Failed with the reason and `Pod was rejected: …`, and a Warning event with the reason.
async fn reject(
    client: kube::Client,
    events: NodeEvents,
    pod: Finished,
    rejection: crate::admit::Rejection,
) {
    tracing::info!(pod = %pod.name, reason = %rejection.reason, "pod rejected");
    let pod_ref = PodRef {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    };
    events.rejected(&pod_ref, &rejection.reason, &rejection.message);
    let api: Api<Pod> = Api::namespaced(client, &pod.namespace);
    let patch = crate::admit::rejected_status_patch(&pod.uid, &rejection);
    let params = kube::api::PatchParams::default();
    if let Err(e) = api
        .patch_status(&pod.name, &params, &kube::api::Patch::Merge(&patch))
        .await
    {
        tracing::warn!(pod = %pod.name, error = %e, "writing a rejected pod's status");
    }
}

/// After the first list: what a previous run left for pods that no longer exist — processes,
/// state records, logs and working directories — is removed.
async fn sweep_leftovers(ctx: &Context, existing: &HashSet<String>) {
    let config = &ctx.config;
    for rec in ctx.journal.records() {
        if existing.contains(&rec.uid) {
            continue;
        }
        for p in &rec.processes {
            state::kill_leftover(p).await;
        }
        if let Err(e) = ctx.journal.done(&rec.uid) {
            tracing::warn!(pod = %rec.name, error = %e, "writing the executor state journal");
        }
    }
    let uid_of_log_dir = |name: &str| name.rsplit('_').next().map(str::to_string);
    for (dir, uid_of) in [
        (
            config.log_dir(),
            &uid_of_log_dir as &dyn Fn(&str) -> Option<String>,
        ),
        (config.pods_dir(), &|name: &str| Some(name.to_string())),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if uid_of(&name).is_some_and(|uid| !existing.contains(&uid)) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}
