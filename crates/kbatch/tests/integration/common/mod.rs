//! Test harness: runs the real `kbatch up` binary (`--executor none` unless a test picks one)
//! on a temporary data dir and hands out clients for it.
//!
//! Every test binary includes this module but uses only part of it.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How long a start (including opening the store) may take before the test fails.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long a graceful shutdown may take before the process is killed and the test fails.
const STOP_DEADLINE: Duration = Duration::from_secs(15);

/// A running `kbatch up`. Dropping it kills the process, so a failing test leaks nothing.
pub struct Server {
    child: Option<Child>,
    // Holds the data dir and logs; removed when the server is dropped.
    dir: tempfile::TempDir,
    data_dir: PathBuf,
    extra_args: Vec<String>,
    /// `http://127.0.0.1:PORT` of the current process (the port changes on restart).
    pub url: String,
    starts: usize,
}

impl Server {
    /// Start on a fresh data dir.
    pub async fn start() -> Server {
        Server::start_with(&[]).await
    }

    /// Start on a fresh data dir with extra `kbatch up` flags.
    pub async fn start_with(extra_args: &[&str]) -> Server {
        Server::start_on("127.0.0.1:0", extra_args).await
    }

    /// Start on a fresh data dir, listening on `listen`, with extra `kbatch up` flags.
    pub async fn start_on(listen: &str, extra_args: &[&str]) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("kbatch-e2e-")
            .tempdir()
            .expect("create a temporary data dir");
        let data_dir = dir.path().join("data");
        let mut server = Server {
            child: None,
            data_dir,
            dir,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            url: String::new(),
            starts: 0,
        };
        server.spawn_on(listen).await;
        server
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn kubeconfig_path(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }

    fn log_path(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!("kbatch-{n}.log"))
    }

    /// The server's stderr (all runs so far), for failure messages.
    pub fn logs(&self) -> String {
        (0..self.starts)
            .map(|n| std::fs::read_to_string(self.log_path(n)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n--- restart ---\n")
    }

    async fn spawn(&mut self) {
        self.spawn_on("127.0.0.1:0").await;
    }

    async fn spawn_on(&mut self, listen: &str) {
        assert!(self.child.is_none(), "server already running");
        // A kubeconfig left by the previous run names the previous port: remove it so that
        // waiting for the file means waiting for this run.
        let _ = std::fs::remove_file(self.kubeconfig_path());
        let log = File::create(self.log_path(self.starts)).expect("create the server log file");
        self.starts += 1;
        // `--executor none` unless the test picks an executor.
        let executor = if self.extra_args.iter().any(|a| a == "--executor") {
            &[][..]
        } else {
            &["--executor", "none"][..]
        };
        let child = Command::new(env!("CARGO_BIN_EXE_kbatch"))
            .arg("up")
            .args(executor)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(listen)
            .args(&self.extra_args)
            // API tests run without controllers unless they ask for some, so that nothing but
            // the test changes the objects; but for the service account controller: pods need
            // their namespace's default account.
            .args(
                (!self
                    .extra_args
                    .iter()
                    .any(|a| a.starts_with("--controllers")))
                .then_some("--controllers=serviceaccount"),
            )
            .env("KBATCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn kbatch up");
        self.child = Some(child);
        self.wait_ready().await;
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_DEADLINE;
        // 1. The kubeconfig appears once the port is bound.
        let url = loop {
            self.assert_running("while starting");
            if let Ok(text) = std::fs::read_to_string(self.kubeconfig_path())
                && let Some(url) = text.lines().find_map(|l| {
                    l.trim()
                        .strip_prefix("server:")
                        .map(|u| u.trim().to_string())
                })
            {
                break url;
            }
            assert!(
                Instant::now() < deadline,
                "no kubeconfig after {START_DEADLINE:?}; logs:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.url = url;
        // 2. /readyz answers 200.
        let client = self.client().await;
        loop {
            self.assert_running("while waiting for /readyz");
            let req = http::Request::get("/readyz")
                .body(kube::client::Body::empty())
                .expect("build /readyz request");
            if let Ok(resp) = client.send(req).await
                && resp.status() == http::StatusCode::OK
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz not 200 after {START_DEADLINE:?}; logs:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn assert_running(&mut self, when: &str) {
        let child = self.child.as_mut().expect("server not running");
        if let Some(status) = child.try_wait().expect("poll the server process") {
            self.child = None;
            panic!("kbatch up exited {when}: {status}; logs:\n{}", self.logs());
        }
    }

    /// A kube client built from the kubeconfig the server wrote (as a user would).
    pub async fn client(&self) -> Client {
        self.client_with_retries(true).await
    }

    /// A kube client that hands 429, 503 and 504 answers back instead of retrying them (kube's
    /// default), for tests of those answers.
    pub async fn client_without_retries(&self) -> Client {
        self.client_with_retries(false).await
    }

    async fn client_with_retries(&self, retries: bool) -> Client {
        let kubeconfig =
            Kubeconfig::read_from(self.kubeconfig_path()).expect("read the kubeconfig");
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("load the kubeconfig");
        config.default_retry = retries;
        assert_eq!(config.default_namespace, "default");
        assert_eq!(
            config.cluster_url.to_string().trim_end_matches('/'),
            self.url
        );
        Client::try_from(config).expect("build a kube client")
    }

    /// Graceful stop (SIGTERM); asserts the process exits cleanly and in time.
    pub async fn stop(&mut self) {
        let mut child = self.child.take().expect("server not running");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("run kill -TERM");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + STOP_DEADLINE;
        loop {
            if let Some(status) = child.try_wait().expect("poll the server process") {
                assert!(
                    status.success(),
                    "kbatch up exited with {status} after SIGTERM; logs:\n{}",
                    self.logs()
                );
                return;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "kbatch up did not exit within {STOP_DEADLINE:?} of SIGTERM; logs:\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Crash stop (SIGKILL): no chance to flush anything.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server not running");
        child.kill().expect("SIGKILL the server");
        child.wait().expect("reap the server");
    }

    /// Start again on the same data dir (after `stop` or `kill`), on a new port.
    pub async fn restart(&mut self) {
        self.spawn().await;
    }

    /// Start again on the same data dir, listening on `listen`.
    pub async fn restart_on(&mut self, listen: &str) {
        self.spawn_on(listen).await;
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.kubeconfig_path()
    }

    /// Runs kubectl against this server: its exit code, stdout and stderr.
    #[allow(dead_code)] // Not every test binary that includes this module runs kubectl.
    pub fn kubectl(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new("kubectl");
        cmd.args(args).env("KUBECONFIG", self.kubeconfig());
        let out = run_captured(cmd, None);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Start again on the same data dir and the same port, so that clients created before
    /// the restart (watchers, reflectors) reconnect by themselves.
    pub async fn restart_same_port(&mut self) {
        let addr = self
            .url
            .strip_prefix("http://")
            .expect("plain HTTP server URL")
            .to_string();
        self.spawn_on(&addr).await;
    }
}

impl Drop for Server {
    /// Stops the server as a user would (SIGTERM), so that its executor stops the pods'
    /// processes: a SIGKILL would leave them running (a busy loop would burn a core for the
    /// rest of the run). SIGKILL only if it has not stopped by the deadline.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_ok() {
            let deadline = Instant::now() + STOP_DEADLINE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A raw HTTP response: status, headers and the body as text.
pub struct Raw {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Raw {
    /// The body parsed as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.body))
    }
}

/// Send one request with full control over method, path, headers and body.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<Vec<u8>>,
) -> Raw {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("accept", "application/json");
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req
        .body(kube::client::Body::from(body.into()))
        .expect("build request");
    let resp = client
        .send(req)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: transport error {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp
        .into_body()
        .collect_bytes()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: reading the body: {e}"));
    Raw {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Send `body` as JSON.
#[allow(dead_code)] // Not every test binary that includes this module sends JSON bodies.
pub async fn send_json(client: &Client, method: &str, path: &str, body: &serde_json::Value) -> Raw {
    let bytes = serde_json::to_vec(body).expect("encode a JSON body");
    raw(client, method, path, Some("application/json"), bytes).await
}

/// Poll `f` until it returns `Some`, or panic with `what` after `timeout`.
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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the Job `name` has condition Complete=True, and returns it.
pub async fn wait_job_complete(
    jobs: &kube::Api<k8s_openapi::api::batch::v1::Job>,
    name: &str,
    timeout: Duration,
) -> k8s_openapi::api::batch::v1::Job {
    eventually(timeout, &format!("Job {name} completes"), || async {
        let j = jobs.get(name).await.ok()?;
        let complete = j
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        complete.then_some(j)
    })
    .await
}

/// A minimal valid Job (restartPolicy Never, one container) as JSON.
pub fn job_json(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
                }
            }
        }
    })
}

/// A minimal valid Pod as JSON.
pub fn pod_json(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
        }
    })
}

/// A minimal valid CronJob as JSON.
pub fn cronjob_json(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
            }}}}
        }
    })
}

/// Parse a resourceVersion (kbatch's are decimal revision numbers; clients must treat them as
/// opaque, but the ordering invariant is what these tests check).
pub fn rv_num(rv: &str) -> u64 {
    rv.parse()
        .unwrap_or_else(|_| panic!("resourceVersion {rv:?} is not a number"))
}

/// Runs `cmd` to its end with its stdout and stderr captured and `stdin`, when given, written
/// to it; panics naming the program when it cannot start (kubectl missing from PATH).
pub fn run_captured(mut cmd: Command, stdin: Option<&str>) -> std::process::Output {
    use std::io::Write;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} is needed on PATH for this test: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait for the process")
}
