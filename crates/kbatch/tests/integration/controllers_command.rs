//! `kbatch controllers` against an API server reached through a kubeconfig (here a
//! `kbatch up` that runs no controllers of its own), with leader election between replicas.

use crate::common;

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// One `kbatch controllers` replica; killed when dropped.
struct Replica {
    child: Child,
    log: PathBuf,
    metrics_port: u16,
}

impl Replica {
    fn start(server: &Server, dir: &tempfile::TempDir, n: usize) -> Replica {
        let log = dir.path().join(format!("controllers-{n}.log"));
        let metrics_port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_kbatch"))
            .args(["controllers", "--controllers", "job", "--kubeconfig"])
            .arg(server.data_dir().join("kubeconfig"))
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .args([
                "--leader-elect",
                "--leader-elect-lease-duration",
                "2s",
                "--leader-elect-renew-deadline",
                "1500ms",
                "--leader-elect-retry-period",
                "200ms",
            ])
            .env("KBATCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("create the replica log"))
            .spawn()
            .expect("spawn kbatch controllers");
        Replica {
            child,
            log,
            metrics_port,
        }
    }

    fn is_leader(&self) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|l| l.contains("became leader"))
    }

    /// A plain HTTP GET of the replica's metrics endpoint: (status line, body).
    fn get(&self, path: &str) -> Option<(String, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        Some((head.lines().next()?.to_string(), body.to_string()))
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn job(name: &str) -> Job {
    let mut j = common::job_json(name);
    j["spec"]["parallelism"] = json!(2);
    j["spec"]["completions"] = json!(4);
    serde_json::from_value(j).expect("a Job")
}

async fn active_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    pods.list(&lp)
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            p.metadata.deletion_timestamp.is_none()
                && !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .collect()
}

async fn succeed(pods: &Api<Pod>, p: &Pod) {
    pods.patch_status(
        &p.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .expect("patch pod status");
}

#[tokio::test]
async fn one_leader_acts_and_a_standby_takes_over() {
    let server = Server::start().await;
    let client = server.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut replicas = vec![
        Replica::start(&server, &dir, 0),
        Replica::start(&server, &dir, 1),
    ];

    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let holder = eventually(WAIT, "a replica holds the lease", || async {
        let l = leases.get_opt("kbatch-controller-manager").await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    let leader = eventually(WAIT, "the leader logs it", || async {
        replicas.iter().position(Replica::is_leader)
    })
    .await;
    assert!(
        !replicas[1 - leader].is_leader(),
        "two leaders at once:\n{}\n---\n{}",
        replicas[0].logs(),
        replicas[1].logs()
    );

    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &job("ha"))
        .await
        .expect("create job");
    let first = eventually(WAIT, "the leader creates 2 pods", || async {
        let a = active_pods(&pods, "ha").await;
        (a.len() == 2).then_some(a)
    })
    .await;

    // The leader dies without releasing the lease: the standby waits out the lease and
    // takes over the same Job, counting what finished meanwhile exactly once.
    let dead = replicas.remove(leader);
    drop(dead);
    for p in &first {
        succeed(&pods, p).await;
    }
    let new_holder = eventually(WAIT, "the standby takes the lease", || async {
        let l = leases.get_opt("kbatch-controller-manager").await.ok()??;
        l.spec?
            .holder_identity
            .filter(|h| !h.is_empty() && *h != holder)
    })
    .await;
    assert_ne!(new_holder, holder);
    let second = eventually(
        WAIT,
        "the new leader creates the remaining pods",
        || async {
            let a = active_pods(&pods, "ha").await;
            (a.len() == 2).then_some(a)
        },
    )
    .await;
    for p in &second {
        succeed(&pods, p).await;
    }
    let done = common::wait_job_complete(&jobs, "ha", WAIT).await;
    assert_eq!(done.status.as_ref().and_then(|s| s.succeeded), Some(4));
    assert_eq!(
        pods.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        4,
        "no pod was created twice across the failover"
    );
}

#[tokio::test]
async fn a_graceful_stop_releases_the_lease() {
    let server = Server::start().await;
    let client = server.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let replica = Replica::start(&server, &dir, 0);
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    eventually(WAIT, "the replica holds the lease", || async {
        let l = leases.get_opt("kbatch-controller-manager").await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    let (status_line, _) = eventually(WAIT, "the metrics endpoint answers", || async {
        replica.get("/healthz")
    })
    .await;
    assert_eq!(status_line, "HTTP/1.1 200 OK");
    let (status_line, body) = replica.get("/metrics").expect("GET /metrics");
    assert_eq!(status_line, "HTTP/1.1 200 OK");
    assert!(
        body.is_empty() || body.contains("# TYPE"),
        "not the Prometheus text format: {body}"
    );
    let (status_line, _) = replica.get("/nope").expect("GET /nope");
    assert_eq!(status_line, "HTTP/1.1 404 Not Found");
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(replica.child.id().to_string())
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let mut replica = replica;
    let exit = eventually(WAIT, "the replica exits", || {
        let r = replica.child.try_wait().expect("poll");
        async move { r }
    })
    .await;
    assert!(exit.success(), "exit status {exit}: {}", replica.logs());
    let l = leases
        .get("kbatch-controller-manager")
        .await
        .expect("lease");
    let spec = l.spec.expect("spec");
    assert_eq!(spec.holder_identity, None, "the lease was released");
    assert_eq!(spec.lease_duration_seconds, Some(1));
}

#[tokio::test]
async fn a_bad_kubeconfig_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope");
    let out = Command::new(env!("CARGO_BIN_EXE_kbatch"))
        .args(["controllers", "--kubeconfig"])
        .arg(&missing)
        .output()
        .expect("run kbatch controllers");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reading kubeconfig"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_kbatch"))
        .args(["controllers", "--controllers", "job,bogus", "--kubeconfig"])
        .arg(&missing)
        .output()
        .expect("run kbatch controllers");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown controller \"bogus\""), "{err}");
}

/// `--kube-api-qps` and `--kube-api-burst` hold the Job controller's client to its rate, as
/// client-go's token bucket: 8 pods at 4 requests per second with a burst of 1 take at least
/// 1.75 s to create, where unlimited they take milliseconds.
#[tokio::test]
async fn the_client_keeps_to_its_rate_limit() {
    let server = Server::start().await;
    let client = server.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("controllers.log");
    let child = Command::new(env!("CARGO_BIN_EXE_kbatch"))
        .args(["controllers", "--controllers", "job", "--kubeconfig"])
        .arg(server.data_dir().join("kubeconfig"))
        .args(["--kube-api-qps", "4", "--kube-api-burst", "1"])
        .env("KBATCH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("create the log"))
        .spawn()
        .expect("spawn kbatch controllers");
    let _replica = Replica {
        child,
        log,
        metrics_port: 0,
    };
    let mut j = common::job_json("limited");
    j["spec"]["parallelism"] = json!(8);
    j["spec"]["completions"] = json!(8);
    let job: Job = serde_json::from_value(j).expect("a Job");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let started = std::time::Instant::now();
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    eventually(WAIT, "the controller creates 8 pods", || async {
        (active_pods(&pods, "limited").await.len() == 8).then_some(())
    })
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "8 pods in {took:?}: the rate limit was not applied"
    );
}

/// A burst that cannot be is refused with client-go's words.
#[tokio::test]
async fn a_negative_burst_with_a_rate_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_kbatch"))
        .args(["controllers", "--kubeconfig", "/nonexistent"])
        .args(["--kube-api-qps", "20", "--kube-api-burst", "-1"])
        .output()
        .expect("run kbatch controllers");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("burst is required to be greater than 0 when QPS is set to greater than 0"),
        "{err}"
    );
}
