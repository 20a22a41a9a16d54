//! One probe attempt, run as kubelet's prober runs it (pkg/kubelet/prober/prober.go and
//! pkg/probe/{exec,tcp}): an exec probe is the command run beside the container with its
//! environment and working directory, a tcpSocket probe a connect; an httpGet probe, a GET from
//! the node, is `super::http`'s, a grpc probe `super::grpc`'s. Results and output texts follow
//! upstream's, including Go's error wording, since they end up verbatim in the `Unhealthy` and
//! `ProbeWarning` events users read.
//! The helpers both tcp and http need (the timeout, Go's dial and its texts) live here.

use kbatch_cron::go_quote;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{Container, Probe};
use kbatch_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use super::{grpc, http};

/// Output kept of an exec probe (pkg/probe/exec maxReadLength) and of an HTTP response body
/// (pkg/probe/http maxRespBodyLength).
pub(super) const MAX_OUTPUT: usize = 10 * 1024;
/// upstream maxProbeRetries.
const MAX_ATTEMPTS: usize = 3;

/// kubelet's probe.Result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Success, with something worth an event (an HTTP redirect that was not followed).
    Warning,
    Failure,
    Unknown,
}

impl Outcome {
    /// upstream's text for the result, as its events print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Warning => "warning",
            Outcome::Failure => "failure",
            Outcome::Unknown => "unknown",
        }
    }
}

/// One attempt's result: `error` is set when the probe could not be run at all (upstream's
/// non-nil err), which is what makes `run` try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub outcome: Outcome,
    pub output: String,
    pub error: Option<String>,
}

impl Attempt {
    pub(super) fn new(outcome: Outcome, output: impl Into<String>) -> Self {
        Attempt {
            outcome,
            output: output.into(),
            error: None,
        }
    }

    pub(super) fn failure(output: impl Into<String>) -> Self {
        Attempt::new(Outcome::Failure, output)
    }

    pub(crate) fn errored(outcome: Outcome, error: impl Into<String>) -> Self {
        Attempt {
            outcome,
            output: String::new(),
            error: Some(error.into()),
        }
    }
}

/// What one attempt does, resolved once from the probe and its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The command, already expanded; run with the container's env and working directory.
    Exec {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        workdir: PathBuf,
        /// The container's main process, whose mount namespace the command joins (set by
        /// the caller for a container with volumes).
        container_pid: Option<u32>,
    },
    Http {
        https: bool,
        host: String,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: String,
        port: u16,
    },
    /// The gRPC health check of `service` at the pod's IP.
    Grpc {
        host: String,
        port: u16,
        service: String,
    },
    /// A probe with no handler: the message is the error.
    Unsupported(String),
}

/// Builds the action of `probe` for `container`: ports resolved as upstream's
/// `probe.ResolveContainerPort`, the host defaulting to `pod_ip`, the exec command expanded
/// against the container's static env only (upstream's ExpandContainerCommandOnlyStatic: the
/// probe runs outside the container's own resolution of env sources). A port that cannot be
/// resolved is `Err` with upstream's message: the caller reports an errored probe.
pub fn action(
    probe: &Probe,
    container: &Container,
    pod_ip: &str,
    env: &[(String, String)],
    workdir: &Path,
) -> Result<Action, String> {
    if let Some(exec) = &probe.exec {
        // Every `env` entry by name, later ones winning, `valueFrom` ones as "".
        let mut statics: Vec<(&str, &str)> = Vec::new();
        for var in container.env.iter().flatten() {
            statics.push((var.name.as_str(), var.value.as_deref().unwrap_or("")));
        }
        let lookup = |name: &str| {
            statics
                .iter()
                .rev()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        let argv = exec
            .command
            .iter()
            .flatten()
            .map(|arg| crate::expand::expand(arg, lookup))
            .collect();
        return Ok(Action::Exec {
            argv,
            env: env.to_vec(),
            workdir: workdir.to_path_buf(),
            container_pid: None,
        });
    }
    if let Some(get) = &probe.http_get {
        let port = resolve_port(&get.port, container)?;
        // `protocol: HTTP2` (h2c) is 1.37's alpha `H2CContainerProbe`: with its feature gate
        // off, as by default, the probe is an HTTP/1.1 GET whatever the field says.
        let https = get
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        return Ok(Action::Http {
            https,
            host: host_or(get.host.as_deref(), pod_ip),
            port,
            path: get.path.clone().unwrap_or_default(),
            headers: get
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        });
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = resolve_port(&tcp.port, container)?;
        return Ok(Action::Tcp {
            host: host_or(tcp.host.as_deref(), pod_ip),
            port,
        });
    }
    if let Some(g) = &probe.grpc {
        // A number only: resolved as any other numeric port.
        let port = resolve_port(&IntOrString::Int(g.port), container)?;
        return Ok(Action::Grpc {
            host: pod_ip.to_string(),
            port,
            service: g.service.clone().unwrap_or_default(),
        });
    }
    Ok(Action::Unsupported(format!(
        "missing probe handler for container {}",
        container.name
    )))
}

fn host_or(host: Option<&str>, pod_ip: &str) -> String {
    match host {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => pod_ip.to_string(),
    }
}

/// upstream probe.ResolveContainerPort: a number, or a port name of the container, or (last
/// ditch) a number written as a string.
fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number: i64 = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => {
            let named = container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()));
            match named {
                Some(p) => i64::from(p.container_port),
                None => go_atoi(name)?,
            }
        }
    };
    match u16::try_from(number) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("invalid port number: {number}")),
    }
}

/// Go's strconv.Atoi, with its error text.
fn go_atoi(s: &str) -> Result<i64, String> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {}: {why}", go_quote(s))
    })
}

/// upstream runProbeWithRetries: an attempt that errored is tried again, up to 3 attempts; the
/// first error-free result, else the last attempt's.
pub async fn run(action: &Action, timeout: Duration) -> Attempt {
    let mut attempt = run_once(action, timeout).await;
    for _ in 1..MAX_ATTEMPTS {
        if attempt.error.is_none() {
            break;
        }
        attempt = run_once(action, timeout).await;
    }
    attempt
}

/// One attempt, bounded by the probe's timeout (zero: none, as Go's zero timeouts).
pub async fn run_once(action: &Action, timeout: Duration) -> Attempt {
    match action {
        Action::Exec {
            argv,
            env,
            workdir,
            container_pid,
        } => exec_probe(argv, env, workdir, *container_pid, timeout).await,
        Action::Http {
            https,
            host,
            port,
            path,
            headers,
        } => http::probe(*https, host, *port, path, headers, timeout).await,
        Action::Tcp { host, port } => tcp_probe(host, *port, timeout).await,
        Action::Grpc {
            host,
            port,
            service,
        } => grpc::probe(host, *port, service, timeout).await,
        Action::Unsupported(msg) => Attempt::errored(Outcome::Unknown, msg.clone()),
    }
}

/// `fut`, unless `timeout` (zero: none) runs out first.
pub(super) async fn within<F: Future>(timeout: Duration, fut: F) -> Option<F::Output> {
    if timeout.is_zero() {
        Some(fut.await)
    } else {
        tokio::time::timeout(timeout, fut).await.ok()
    }
}

// ---- exec ----

/// SIGKILLs a process group once: after the command exits (what it left behind ends with it,
/// as in a container), on timeout, or when the attempt is dropped half-way.
struct GroupKill {
    pgid: i32,
    done: AtomicBool,
}

impl GroupKill {
    fn kill(&self) {
        // Never 0 or 1: killpg would reach our own group or init's.
        if self.pgid > 1 && !self.done.swap(true, Ordering::SeqCst) {
            // ESRCH: the group is already gone.
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a command run beside a container ended (what CRI's ExecSync tells kubelet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExecEnd {
    /// It ran to its end: its exit code (128 + the signal when one killed it), its stdout and
    /// its stderr (the first `MAX_OUTPUT` bytes of each).
    Exited {
        code: i32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// It could not be started, in runc's words.
    NotStarted(String),
    /// The timeout ran out: it was killed (its whole group).
    TimedOut,
    /// Waiting for it failed.
    Errored(String),
}

/// Runs `argv` with `env` in `workdir`, in a process group of its own that is killed once it
/// exits, on timeout (zero: none), or when this is dropped half-way; in the mount namespace
/// of `container_pid` when that container has one of its own.
pub(crate) async fn exec(
    argv: &[String],
    env: &[(String, String)],
    workdir: &Path,
    container_pid: Option<u32>,
    timeout: Duration,
) -> ExecEnd {
    let Some((program, args)) = argv.split_first() else {
        return ExecEnd::NotStarted("no command to run".to_string());
    };
    let mut cmd = tokio::process::Command::new(program);
    let joined = match crate::volume::mount::in_container(&mut cmd, container_pid, workdir) {
        Ok(joined) => joined,
        Err(e) => return ExecEnd::NotStarted(e),
    };
    // A missing directory would otherwise read as a missing program (both are ENOENT).
    if !joined && tokio::fs::metadata(workdir).await.is_err() {
        return ExecEnd::NotStarted(format!(
            "chdir to cwd ({}) set in config.json failed: no such file or directory",
            go_quote(&workdir.to_string_lossy())
        ));
    }
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that everything it starts can be killed with it.
        .process_group(0)
        // Dropped half-way: killed, and reaped by tokio.
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return ExecEnd::NotStarted(crate::process::start_error(program, &e)),
    };
    let group = GroupKill {
        pgid: child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0),
        done: AtomicBool::new(false),
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let finished = within(timeout, async {
        let wait = async {
            let status = child.wait().await;
            group.kill();
            status
        };
        tokio::join!(wait, read_capped(stdout), read_capped(stderr))
    })
    .await;
    match finished {
        Some((Ok(status), stdout, stderr)) => {
            use std::os::unix::process::ExitStatusExt;
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(128);
            ExecEnd::Exited {
                code,
                stdout,
                stderr,
            }
        }
        Some((Err(e), _, _)) => ExecEnd::Errored(format!("waiting for the command: {e}")),
        None => {
            group.kill();
            let _ = child.wait().await;
            ExecEnd::TimedOut
        }
    }
}

async fn exec_probe(
    argv: &[String],
    env: &[(String, String)],
    workdir: &Path,
    container_pid: Option<u32>,
    timeout: Duration,
) -> Attempt {
    match exec(argv, env, workdir, container_pid, timeout).await {
        ExecEnd::Exited {
            code,
            stdout: mut output,
            stderr,
        } => {
            // CRI's ExecSync returns stdout and stderr apart; kubelet appends stderr to stdout
            // and the exec prober keeps the first 10 KiB.
            output.extend_from_slice(&stderr);
            output.truncate(MAX_OUTPUT);
            let output = String::from_utf8_lossy(&output).into_owned();
            if code == 0 {
                Attempt::new(Outcome::Success, output)
            } else {
                Attempt::failure(output)
            }
        }
        // A container runtime reports this as the exec's failure, with runc's text.
        ExecEnd::NotStarted(message) => Attempt::failure(message),
        ExecEnd::Errored(e) => Attempt::errored(Outcome::Unknown, e),
        // CRI's timeout error, which the exec prober returns as the output.
        ExecEnd::TimedOut => {
            Attempt::failure(format!("command {} timed out", go_quote(&argv.join(" "))))
        }
    }
}

/// Everything `pipe` yields until EOF, of which the first `MAX_OUTPUT` bytes are kept.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return kept;
    };
    let mut chunk = [0u8; 4096];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

// ---- tcp ----

async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Attempt {
    let mut dialing = join_host_port(host, port);
    match within(timeout, dial(host, port, &mut dialing)).await {
        // Closed at once: only the connect is the check.
        Some(Ok(_stream)) => Attempt::new(Outcome::Success, ""),
        Some(Err(e)) => Attempt::failure(e),
        None => Attempt::failure(format!("dial tcp {dialing}: i/o timeout")),
    }
}

/// Go's net.Dial("tcp", host:port): each address of `host` in turn, the first error reported;
/// `dialing` is the address being dialed (for a timeout's message). Errors in Go's words.
pub(super) async fn dial(host: &str, port: u16, dialing: &mut String) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = if host.is_empty() {
        // Go: an empty host is the local system.
        vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)]
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        match tokio::net::lookup_host((host, port)).await {
            Ok(addrs) => addrs.collect(),
            Err(_) => Vec::new(),
        }
    };
    if addrs.is_empty() {
        return Err(format!("dial tcp: lookup {host}: no such host"));
    }
    let mut first_error = None;
    for addr in addrs {
        *dialing = addr.to_string();
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                first_error.get_or_insert(format!("dial tcp {addr}: connect: {}", errno_text(&e)));
            }
        }
    }
    Err(first_error.unwrap_or_else(|| format!("dial tcp {}: connect", join_host_port(host, port))))
}

/// Go's text for a system error: strerror's, starting lower-case ("connection refused").
pub(super) fn errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let desc = nix::errno::Errno::from_raw(code).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => e.to_string(),
            }
        }
        None => e.to_string(),
    }
}

/// Go's net.JoinHostPort.
pub(super) fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::http::test_support::{http, serve};
    use kbatch_api::k8s_openapi::api::core::v1::{
        ContainerPort, EnvVar, EnvVarSource, ExecAction, GRPCAction, HTTPGetAction, HTTPHeader,
        ObjectFieldSelector, TCPSocketAction,
    };
    use std::time::Instant;
    use tokio::net::TcpListener;

    fn container_with_ports(ports: &[(&str, i32)]) -> Container {
        Container {
            name: "c".to_string(),
            ports: Some(
                ports
                    .iter()
                    .map(|(name, port)| ContainerPort {
                        name: Some(name.to_string()),
                        container_port: *port,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn tcp_probe_on(port: IntOrString) -> Probe {
        Probe {
            tcp_socket: Some(TCPSocketAction { host: None, port }),
            ..Default::default()
        }
    }

    /// upstream TestResolveContainerPort / TestFindPortByName, through `action`.
    #[test]
    fn resolves_ports_as_upstream() {
        let ports = container_with_ports(&[("foo", 8080), ("bar", 9000)]);
        let only_bar = container_with_ports(&[("bar", 9000)]);
        let none = Container::default();
        let cases: Vec<(&str, IntOrString, &Container, Result<u16, String>)> = vec![
            ("int port", IntOrString::Int(443), &none, Ok(443)),
            (
                "int port out of range",
                IntOrString::Int(66666),
                &none,
                Err("invalid port number: 66666".to_string()),
            ),
            (
                "zero",
                IntOrString::Int(0),
                &none,
                Err("invalid port number: 0".to_string()),
            ),
            (
                "negative",
                IntOrString::Int(-1),
                &none,
                Err("invalid port number: -1".to_string()),
            ),
            (
                "named port",
                IntOrString::String("foo".into()),
                &ports,
                Ok(8080),
            ),
            (
                "second named port",
                IntOrString::String("bar".into()),
                &ports,
                Ok(9000),
            ),
            (
                "unknown name",
                IntOrString::String("foo".into()),
                &only_bar,
                Err("strconv.Atoi: parsing \"foo\": invalid syntax".to_string()),
            ),
            (
                "number in a string",
                IntOrString::String("8081".into()),
                &none,
                Ok(8081),
            ),
            (
                "number in a string out of range",
                IntOrString::String("70000".into()),
                &none,
                Err("invalid port number: 70000".to_string()),
            ),
            (
                "huge number in a string",
                IntOrString::String("99999999999999999999".into()),
                &none,
                Err(
                    "strconv.Atoi: parsing \"99999999999999999999\": value out of range"
                        .to_string(),
                ),
            ),
            (
                "empty string",
                IntOrString::String(String::new()),
                &none,
                Err("strconv.Atoi: parsing \"\": invalid syntax".to_string()),
            ),
        ];
        for (name, port, container, want) in cases {
            let got = action(
                &tcp_probe_on(port.clone()),
                container,
                "10.0.0.1",
                &[],
                Path::new("/"),
            )
            .map(|a| match a {
                Action::Tcp { port, .. } => port,
                other => panic!("{name}: not a tcp action: {other:?}"),
            });
            assert_eq!(got, want, "{name}");
            // The same resolution for httpGet.
            let http = Probe {
                http_get: Some(HTTPGetAction {
                    port,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let got = action(&http, container, "10.0.0.1", &[], Path::new("/")).map(|a| match a {
                Action::Http { port, .. } => port,
                other => panic!("{name}: not an http action: {other:?}"),
            });
            assert_eq!(got, want, "{name} (httpGet)");
        }
    }

    #[test]
    fn builds_actions() {
        let container = Container {
            name: "app".to_string(),
            env: Some(vec![
                EnvVar {
                    name: "GREETING".into(),
                    value: Some("hello".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "FROM_FIELD".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "GREETING".into(),
                    value: Some("hi".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let exec = Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    "echo".into(),
                    "$(GREETING)".into(),
                    "[$(FROM_FIELD)]".into(),
                    "$(UNKNOWN)".into(),
                    "$$(GREETING)".into(),
                ]),
            }),
            ..Default::default()
        };
        let env = vec![("PATH".to_string(), "/bin".to_string())];
        assert_eq!(
            action(&exec, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Exec {
                // Static values only, the last definition winning; valueFrom ones are empty.
                argv: vec![
                    "echo".into(),
                    "hi".into(),
                    "[]".into(),
                    "$(UNKNOWN)".into(),
                    "$(GREETING)".into()
                ],
                env: env.clone(),
                workdir: PathBuf::from("/w"),
                container_pid: None,
            })
        );

        let http = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(8080),
                scheme: Some("HTTPS".into()),
                path: Some("/healthz".into()),
                http_headers: Some(vec![HTTPHeader {
                    name: "X-A".into(),
                    value: "1".into(),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            action(&http, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Http {
                https: true,
                host: "10.0.0.1".into(),
                port: 8080,
                path: "/healthz".into(),
                headers: vec![("X-A".into(), "1".into())],
            })
        );

        let tcp = Probe {
            tcp_socket: Some(TCPSocketAction {
                host: Some("example.internal".into()),
                port: IntOrString::Int(22),
            }),
            ..Default::default()
        };
        assert_eq!(
            action(&tcp, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Tcp {
                host: "example.internal".into(),
                port: 22
            })
        );

        let grpc = Probe {
            grpc: Some(GRPCAction {
                port: 9090,
                ..Default::default()
            }),
            ..Default::default()
        };
        // The pod's IP, the port, the service ("" when not set).
        assert_eq!(
            action(&grpc, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Grpc {
                host: "10.0.0.1".into(),
                port: 9090,
                service: String::new(),
            })
        );
        let named = Probe {
            grpc: Some(GRPCAction {
                port: 9090,
                service: Some("liveness".into()),
                // 1.37's alpha TLS mode: its feature gate is off, so kubelet dials plaintext.
                mode: Some("TLS".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            action(&named, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Grpc {
                host: "10.0.0.1".into(),
                port: 9090,
                service: "liveness".into(),
            })
        );
        let bad = Probe {
            grpc: Some(GRPCAction {
                port: 70000,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            action(&bad, &container, "10.0.0.1", &env, Path::new("/w")),
            Err("invalid port number: 70000".into())
        );
        let h2 = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(8080),
                protocol: Some("HTTP2".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            action(&h2, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Http {
                https: false,
                host: "10.0.0.1".into(),
                port: 8080,
                path: String::new(),
                headers: Vec::new(),
            })
        );
        assert!(matches!(
            action(
                &Probe::default(),
                &container,
                "10.0.0.1",
                &env,
                Path::new("/w")
            ),
            Ok(Action::Unsupported(_))
        ));
    }

    // ---- exec ----

    fn exec(argv: &[&str], workdir: &Path) -> Action {
        Action::Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![(
                "PATH".to_string(),
                "/usr/local/bin:/usr/bin:/bin".to_string(),
            )],
            workdir: workdir.to_path_buf(),
            container_pid: None,
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn exec_success_and_failure_keep_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let ok = run_once(
            &exec(&["sh", "-c", "echo out; echo err >&2"], dir.path()),
            5 * SECOND,
        )
        .await;
        // stdout, then stderr (kubelet appends CRI's stderr to its stdout).
        assert_eq!(ok, Attempt::new(Outcome::Success, "out\nerr\n"));
        let failed = run_once(
            &exec(&["sh", "-c", "echo bad; exit 1"], dir.path()),
            5 * SECOND,
        )
        .await;
        assert_eq!(failed, Attempt::failure("bad\n"));
        let killed = run_once(
            &exec(&["sh", "-c", "echo x; kill -9 $$"], dir.path()),
            5 * SECOND,
        )
        .await;
        assert_eq!(killed, Attempt::failure("x\n"));
    }

    #[tokio::test]
    async fn exec_output_is_truncated_to_10_kib() {
        let dir = tempfile::tempdir().unwrap();
        let script = "head -c 30000 /dev/zero | tr '\\0' a; head -c 100 /dev/zero | tr '\\0' b >&2";
        let a = run_once(&exec(&["sh", "-c", script], dir.path()), 5 * SECOND).await;
        assert_eq!(a.outcome, Outcome::Success);
        assert_eq!(a.output.len(), 10240);
        assert!(a.output.bytes().all(|b| b == b'a'));
    }

    #[tokio::test]
    async fn exec_timeout_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let script = "sleep 5 & echo $! > bg; echo $$ > main; wait";
        let started = Instant::now();
        let a = run_once(
            &exec(&["sh", "-c", script], dir.path()),
            Duration::from_millis(300),
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            a,
            Attempt::failure(format!("command \"sh -c {script}\" timed out"))
        );
        for file in ["main", "bg"] {
            let pid = std::fs::read_to_string(dir.path().join(file)).unwrap();
            assert_gone(pid.trim()).await;
        }
    }

    #[tokio::test]
    async fn exec_leftovers_end_with_the_command() {
        let dir = tempfile::tempdir().unwrap();
        // The background sleep holds the output pipe: it is killed once sh exits.
        let started = Instant::now();
        let a = run_once(
            &exec(
                &["sh", "-c", "sleep 5 & echo $! > bg; echo done"],
                dir.path(),
            ),
            10 * SECOND,
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(a, Attempt::new(Outcome::Success, "done\n"));
        let pid = std::fs::read_to_string(dir.path().join("bg")).unwrap();
        assert_gone(pid.trim()).await;
    }

    /// Gone, or a zombie waiting for init (no longer ours to reap).
    async fn assert_gone(pid: &str) {
        for _ in 0..50 {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => return,
                Ok(stat) => {
                    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                    if state.starts_with('Z') {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("process {pid} still running");
    }

    #[tokio::test]
    async fn exec_uses_env_and_workdir() {
        let dir = tempfile::tempdir().unwrap();
        let action = Action::Exec {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo \"$GREETING\"; pwd; env | wc -l".into(),
            ],
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("GREETING".into(), "hello there".into()),
            ],
            workdir: dir.path().to_path_buf(),
            container_pid: None,
        };
        let a = run_once(&action, 5 * SECOND).await;
        assert_eq!(a.outcome, Outcome::Success);
        let lines: Vec<&str> = a.output.lines().collect();
        assert_eq!(lines[0], "hello there");
        assert_eq!(
            std::fs::canonicalize(lines[1]).unwrap(),
            std::fs::canonicalize(dir.path()).unwrap()
        );
        // Only what was given (sh adds PWD, and maybe SHLVL and _).
        let count: usize = lines[2].trim().parse().unwrap();
        assert!(count <= 5, "{count} variables");
    }

    #[tokio::test]
    async fn exec_static_expansion_end_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let container = Container {
            name: "c".into(),
            env: Some(vec![EnvVar {
                name: "WORD".into(),
                value: Some("expanded".into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let probe = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["echo".into(), "$(WORD)".into()]),
            }),
            ..Default::default()
        };
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let a = action(&probe, &container, "", &env, dir.path()).unwrap();
        assert_eq!(
            run_once(&a, 5 * SECOND).await,
            Attempt::new(Outcome::Success, "expanded\n")
        );
    }

    #[tokio::test]
    async fn exec_missing_program_fails_with_runc_text() {
        let dir = tempfile::tempdir().unwrap();
        let a = run_once(&exec(&["no-such-program-kbatch"], dir.path()), 5 * SECOND).await;
        assert_eq!(
            a,
            Attempt::failure(
                "exec: \"no-such-program-kbatch\": executable file not found in $PATH"
            )
        );
    }

    #[test]
    fn go_quoting() {
        assert_eq!(
            go_quote("a \"b\"\\\n\u{1}é"),
            "\"a \\\"b\\\"\\\\\\n\\x01é\""
        );
    }

    // ---- tcp ----

    #[tokio::test]
    async fn tcp_open_and_closed_ports() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().port();
        let tcp = |port| Action::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        assert_eq!(
            run_once(&tcp(open), SECOND).await,
            Attempt::new(Outcome::Success, "")
        );
        drop(listener);
        let a = run_once(&tcp(open), SECOND).await;
        assert_eq!(
            a,
            Attempt::failure(format!(
                "dial tcp 127.0.0.1:{open}: connect: connection refused"
            ))
        );
        let a = run_once(
            &Action::Tcp {
                host: "no-such-host.invalid".into(),
                port: 80,
            },
            5 * SECOND,
        )
        .await;
        assert_eq!(
            a,
            Attempt::failure("dial tcp: lookup no-such-host.invalid: no such host")
        );
    }

    // ---- retries ----

    #[tokio::test]
    async fn run_retries_only_errors() {
        let a = run(&Action::Unsupported("nope".into()), SECOND).await;
        assert_eq!(a, Attempt::errored(Outcome::Unknown, "nope"));

        // An error-free attempt is not repeated, even a failing one.
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let script = format!("echo x >> {}; exit 1", count.display());
        let a = run(&exec(&["sh", "-c", &script], dir.path()), 5 * SECOND).await;
        assert_eq!(a, Attempt::failure(""));
        assert_eq!(std::fs::read_to_string(&count).unwrap(), "x\n");

        // Errors are: three attempts (the exec attempts count themselves).
        let (port, seen) =
            serve(|_, _| Some("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort".to_string()))
                .await;
        let a = run(&http(port, "/", &[]), SECOND).await;
        assert_eq!(a, Attempt::errored(Outcome::Failure, "unexpected EOF"));
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn attempts_can_move_between_threads() {
        fn is_send<T: Send>(_: &T) {}
        let action = Action::Unsupported(String::new());
        is_send(&run(&action, SECOND));
    }
}
