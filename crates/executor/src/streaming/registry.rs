//! What the streaming server may exec into and attach to: the pods bound to this node
//! (kubelet's pod manager: from the moment the node sees a pod bound to it until the object is
//! gone) and, of their containers, the ones running now with the environment and working
//! directory their process got, and its output, input and terminal for attach. The manager
//! records the pods, the workers publish each container run while it runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use jiff::Timestamp;
use tokio::sync::watch;

use crate::process::Attach;

/// The node's pods and running containers, shared by the manager, the workers and the
/// streaming server.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Pods bound to this node by UID: their `namespace/name`.
    pods: HashMap<String, String>,
    /// The same pods by `namespace/name`: their UID.
    names: HashMap<String, String>,
    /// Running containers by `namespace/pod/container`.
    containers: HashMap<String, Entry>,
    next_id: u64,
}

#[derive(Debug)]
struct Entry {
    /// Which publication this is (a later run of the same container replaces it).
    id: u64,
    pod_uid: String,
    env: Arc<Vec<(String, String)>>,
    workdir: PathBuf,
    attach: Option<Attach>,
    /// The run's process, leader of its process group (for the resource metrics).
    pid: Option<u32>,
    started_at: Timestamp,
    /// Closed when the run stops.
    running: watch::Receiver<()>,
}

/// A running container as the resource metrics see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The leader of the run's process group.
    pub pid: u32,
    pub started_at: Timestamp,
}

/// A running container an exec may go into.
#[derive(Debug, Clone)]
pub struct ExecTarget {
    /// The container's environment, exactly as its process got it.
    pub env: Arc<Vec<(String, String)>>,
    pub workdir: PathBuf,
    /// Its output, input and terminal (`None` for a run that is not a host process).
    pub attach: Option<Attach>,
    /// Its `changed()` fails once the container has stopped: what runs in it must end.
    pub running: watch::Receiver<()>,
    /// Its main process, whose mount namespace an exec joins.
    pub pid: Option<u32>,
}

/// Why there is nothing to exec into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The pod is not bound to this node (or no longer exists).
    Pod,
    /// The pod is, but that container is not running in it.
    Container,
}

/// A container run, published while it runs: dropping this takes it out of the registry and
/// tells the execs in it that it stopped.
#[derive(Debug)]
pub struct Published {
    registry: Registry,
    key: String,
    id: u64,
    _running: watch::Sender<()>,
}

impl Drop for Published {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if inner
            .containers
            .get(&self.key)
            .is_some_and(|e| e.id == self.id)
        {
            inner.containers.remove(&self.key);
        }
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The maps stay consistent whatever a panicking holder was doing: every change is one
        // insert or remove.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pod bound to this node was seen (called for every version of it: cheap when known).
    pub fn pod_bound(&self, uid: &str, namespace: &str, name: &str) {
        let mut inner = self.lock();
        if inner.pods.contains_key(uid) {
            return;
        }
        let key = format!("{namespace}/{name}");
        inner.names.insert(key.clone(), uid.to_string());
        inner.pods.insert(uid.to_string(), key);
    }

    /// The pod's object is gone.
    pub fn pod_gone(&self, uid: &str) {
        let mut inner = self.lock();
        if let Some(key) = inner.pods.remove(uid)
            && inner.names.get(&key).is_some_and(|u| u == uid)
        {
            inner.names.remove(&key);
        }
    }

    /// A container run of pod `pod_uid` started at `started_at` with `env` in `workdir`, as
    /// process `pid` (the leader of its group); it can be exec'd into (and attached to, with
    /// `attach`) until the returned value is dropped.
    #[allow(clippy::too_many_arguments)]
    pub fn publish(
        &self,
        namespace: &str,
        pod: &str,
        pod_uid: &str,
        container: &str,
        env: Arc<Vec<(String, String)>>,
        workdir: PathBuf,
        attach: Option<Attach>,
        pid: Option<u32>,
        started_at: Timestamp,
    ) -> Published {
        let (tx, rx) = watch::channel(());
        let key = format!("{namespace}/{pod}/{container}");
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        inner.containers.insert(
            key.clone(),
            Entry {
                id,
                pod_uid: pod_uid.to_string(),
                env,
                workdir,
                attach,
                pid,
                started_at,
                running: rx,
            },
        );
        drop(inner);
        Published {
            registry: self.clone(),
            key,
            id,
            _running: tx,
        }
    }

    /// The running containers that are host processes, in no particular order.
    pub fn running(&self) -> Vec<RunningContainer> {
        let inner = self.lock();
        inner
            .containers
            .iter()
            .filter_map(|(key, e)| {
                // Namespace and pod names are DNS names and container names DNS labels: none
                // holds a `/`.
                let mut parts = key.splitn(3, '/');
                let (namespace, pod, container) = (parts.next()?, parts.next()?, parts.next()?);
                Some(RunningContainer {
                    namespace: namespace.to_string(),
                    pod: pod.to_string(),
                    container: container.to_string(),
                    pid: e.pid?,
                    started_at: e.started_at,
                })
            })
            .collect()
    }

    /// The UID of pod `namespace/name`, when it is bound to this node.
    pub fn pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.lock()
            .names
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    /// The running container `container` of pod `namespace/pod` (of UID `uid`, when given:
    /// kubelet's URLs may name it).
    pub fn find(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
        container: &str,
    ) -> Result<ExecTarget, Missing> {
        let inner = self.lock();
        let Some(pod_uid) = inner.names.get(&format!("{namespace}/{pod}")) else {
            return Err(Missing::Pod);
        };
        if uid.is_some_and(|u| u != pod_uid) {
            return Err(Missing::Container);
        }
        match inner
            .containers
            .get(&format!("{namespace}/{pod}/{container}"))
        {
            Some(e) if &e.pod_uid == pod_uid => Ok(ExecTarget {
                env: e.env.clone(),
                workdir: e.workdir.clone(),
                attach: e.attach.clone(),
                running: e.running.clone(),
                pid: e.pid,
            }),
            _ => Err(Missing::Container),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_and_running_containers() {
        let r = Registry::new();
        assert_eq!(r.find("ns", "p", None, "c").unwrap_err(), Missing::Pod);
        r.pod_bound("u1", "ns", "p");
        assert_eq!(
            r.find("ns", "p", None, "c").unwrap_err(),
            Missing::Container
        );
        let env = Arc::new(vec![("A".to_string(), "1".to_string())]);
        let at = Timestamp::now();
        let run = r.publish("ns", "p", "u1", "c", env, "/w".into(), None, Some(7), at);
        assert_eq!(
            r.running(),
            [RunningContainer {
                namespace: "ns".into(),
                pod: "p".into(),
                container: "c".into(),
                pid: 7,
                started_at: at,
            }]
        );
        let t = r.find("ns", "p", None, "c").unwrap();
        assert_eq!(t.env[0].1, "1");
        assert_eq!(t.workdir, PathBuf::from("/w"));
        assert!(r.find("ns", "p", Some("u1"), "c").is_ok());
        assert_eq!(
            r.find("ns", "p", Some("u2"), "c").unwrap_err(),
            Missing::Container
        );
        // The next run replaces the entry; the end of the earlier one leaves it.
        let next = r.publish(
            "ns",
            "p",
            "u1",
            "c",
            Arc::new(Vec::new()),
            "/x".into(),
            None,
            None,
            at,
        );
        // Not a host process: nothing to measure.
        assert!(r.running().is_empty());
        let running = t.running.clone();
        drop(run);
        assert!(
            running.has_changed().is_err(),
            "the first run's execs are told"
        );
        assert_eq!(
            r.find("ns", "p", None, "c").unwrap().workdir,
            PathBuf::from("/x")
        );
        drop(next);
        assert_eq!(
            r.find("ns", "p", None, "c").unwrap_err(),
            Missing::Container
        );
        // A pod of the same name but another UID: the old one's end does not remove it.
        r.pod_bound("u2", "ns", "p");
        r.pod_gone("u1");
        let _run = r.publish(
            "ns",
            "p",
            "u2",
            "c",
            Arc::new(Vec::new()),
            "/y".into(),
            None,
            Some(8),
            at,
        );
        assert!(r.find("ns", "p", None, "c").is_ok());
        r.pod_gone("u2");
        assert_eq!(r.find("ns", "p", None, "c").unwrap_err(), Missing::Pod);
    }
}
