//! Test harness: the real store and API server in-process on 127.0.0.1:0, and the executor
//! running against it through a kube client, as `kbatch up` wires them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ContainerStateWaiting, ContainerStatus, Event, Pod, ServiceAccount,
};
use kbatch_api::k8s_openapi;
use kbatch_apiserver::ServerState;
use kbatch_executor::{ExecutorConfig, ExecutorError, RuntimeKind};
use kbatch_store::{Store, StoreOptions};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub mod streams;

pub struct Cluster {
    pub client: kube::Client,
    pub config: ExecutorConfig,
    dir: tempfile::TempDir,
    store: Store,
    state: Arc<ServerState>,
    stop_server: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    stop_executor: Option<watch::Sender<bool>>,
    executor: Option<JoinHandle<Result<(), ExecutorError>>>,
}

impl Cluster {
    /// Server and executor (process runtime, 110 pods).
    pub async fn start() -> Cluster {
        Cluster::start_with(RuntimeKind::Process, 110).await
    }

    pub async fn start_with(runtime: RuntimeKind, max_pods: usize) -> Cluster {
        let mut c = Cluster::server_only().await;
        c.config.runtime = runtime;
        c.config.max_pods = max_pods;
        c.start_executor();
        c.wait_for_node().await;
        c
    }

    /// Only the API server (the executor is started later with `start_executor`).
    pub async fn server_only() -> Cluster {
        // RUST_LOG=kbatch_executor=debug shows what the executor does.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::Builder::new()
            .prefix("kbatch-executor-")
            .tempdir()
            .expect("temp dir");
        let data_dir = dir.path().join("data");
        let store = Store::open(
            &data_dir.join("store"),
            StoreOptions {
                durable: false,
                ..StoreOptions::default()
            },
        )
        .expect("open store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = ServerState::new(store.clone(), addr.to_string());
        state.bootstrap().await.expect("bootstrap");
        let config = ExecutorConfig::new(data_dir);
        state.set_log_dir(config.log_dir());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(kbatch_apiserver::serve(
            listener,
            state.clone(),
            async move {
                let _ = stop_rx.await;
            },
        ));
        state.set_ready();
        let url: http::Uri = format!("http://{addr}").parse().expect("url");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
        // The account the API server's ServiceAccount admission gives every pod, which the
        // service account controller would make.
        let mut sa = ServiceAccount::default();
        sa.metadata.name = Some("default".into());
        Api::<ServiceAccount>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &sa)
            .await
            .expect("create the default service account");
        Cluster {
            client,
            config,
            dir,
            store,
            state,
            stop_server: Some(stop_tx),
            server: Some(server),
            stop_executor: None,
            executor: None,
        }
    }

    pub fn start_executor(&mut self) {
        assert!(self.executor.is_none(), "executor already running");
        let (tx, rx) = watch::channel(false);
        self.stop_executor = Some(tx);
        self.executor = Some(tokio::spawn(kbatch_executor::run(
            self.client.clone(),
            self.config.clone(),
            rx,
        )));
    }

    /// Graceful executor stop; asserts it returns in time and without error.
    pub async fn stop_executor(&mut self) {
        if let Some(tx) = self.stop_executor.take() {
            let _ = tx.send(true);
        }
        if let Some(h) = self.executor.take() {
            let r = tokio::time::timeout(Duration::from_secs(15), h)
                .await
                .expect("executor stops within 15 s")
                .expect("executor task");
            r.expect("executor returns Ok");
        }
    }

    pub async fn wait_for_node(&self) {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        eventually(
            Duration::from_secs(10),
            "the node is registered",
            || async { nodes.get_opt("kbatch-node").await.ok().flatten() },
        )
        .await;
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    pub fn log_dir(&self) -> PathBuf {
        self.config.log_dir()
    }

    pub async fn create(&self, pod: Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).expect("pod JSON");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod")
    }

    /// Poll the pod until `pred` holds.
    pub async fn wait_pod(
        &self,
        name: &str,
        secs: u64,
        what: &str,
        pred: impl Fn(&Pod) -> bool,
    ) -> Pod {
        let pods = self.pods();
        let last = std::sync::Mutex::new(None::<Pod>);
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Ok(p) = pods.get(name).await {
                if pred(&p) {
                    return p;
                }
                *last.lock().unwrap() = Some(p);
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {secs}s waiting for pod {name}: {what}; last seen: {}",
                    serde_json::to_string_pretty(&*last.lock().unwrap()).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn wait_phase(&self, name: &str, phase: &str, secs: u64) -> Pod {
        self.wait_pod(name, secs, &format!("phase {phase}"), |p| {
            phase_of(p) == phase
        })
        .await
    }

    pub async fn wait_gone(&self, name: &str, secs: u64) {
        let pods = self.pods();
        eventually(
            Duration::from_secs(secs),
            &format!("pod {name} is removed"),
            || async { matches!(pods.get_opt(name).await, Ok(None)).then_some(()) },
        )
        .await;
    }

    pub async fn delete(&self, name: &str) {
        self.pods()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete pod");
    }

    pub async fn shutdown(mut self) {
        self.stop_executor().await;
        self.state.begin_shutdown();
        if let Some(tx) = self.stop_server.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.server.take() {
            let _ = h.await;
        }
        self.store.close().await;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(tx) = self.stop_executor.take() {
            let _ = tx.send(true);
        }
    }
}

pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A pod with one container `main` running `command`.
pub fn pod(name: &str, command: &[&str], restart_policy: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "busybox", "command": command}]
        }
    })
}

pub fn phase_of(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether `container` has a status saying it is ready (false while it has none).
pub fn is_ready(p: &Pod, container: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == container && c.ready))
}

pub fn status_of<'a>(p: &'a Pod, container: &str) -> &'a ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .unwrap_or_else(|| panic!("no status for container {container}: {p:?}"))
}

/// The waiting state of `container`, if it is waiting.
pub fn waiting_of(p: &Pod, container: &str) -> Option<ContainerStateWaiting> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .state
        .as_ref()?
        .waiting
        .clone()
}

pub fn init_status_of<'a>(p: &'a Pod, container: &str) -> &'a ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .unwrap_or_else(|| panic!("no init status for container {container}: {p:?}"))
}

pub fn condition<'a>(p: &'a Pod, ty: &str) -> &'a k8s_openapi::api::core::v1::PodCondition {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
        .unwrap_or_else(|| panic!("no condition {ty}: {p:?}"))
}

/// Live (non-zombie) processes whose environment carries `KBATCH_TEST_MARKER=<marker>`.
pub fn processes_with_marker(marker: &str) -> Vec<u32> {
    let needle = format!("KBATCH_TEST_MARKER={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rfind(')')
                        .map(|i| s[i + 1..].trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
            !zombie
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                    .unwrap_or(false)
        })
        .collect()
}

/// The events about pod `name`, as (reason, message).
pub async fn events_of(c: &Cluster, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(c.client.clone(), "default");
    let list = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("list events");
    list.items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// A marker unique to this test run.
pub fn marker(test: &str) -> String {
    format!(
        "{test}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    )
}

/// GET a path, returning status and body text.
pub async fn get_raw(client: &kube::Client, path: &str) -> (u16, String) {
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("request");
    let resp = client.send(req).await.expect("send");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await.expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}
