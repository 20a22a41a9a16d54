//! One probe attempt, run as kubelet's prober runs it (pkg/kubelet/prober/prober.go and
//! pkg/probe/{exec,http,tcp}): an exec probe is the command run beside the container with its
//! environment and working directory, an httpGet probe a GET from the node, a tcpSocket probe a
//! connect. Results and output texts follow upstream's, including Go's error wording, since
//! they end up verbatim in the `Unhealthy` and `ProbeWarning` events users read.

use kbatch_cron::go_quote;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use kbatch_api::k8s_openapi::api::core::v1::{Container, Probe};
use kbatch_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;

/// Output kept of an exec probe (pkg/probe/exec maxReadLength) and of an HTTP response body
/// (pkg/probe/http maxRespBodyLength).
const MAX_OUTPUT: usize = 10 * 1024;
/// upstream maxProbeRetries.
const MAX_ATTEMPTS: usize = 3;
/// Go's http.Client stops after this many requests in one redirect chain.
const MAX_REQUESTS: usize = 10;
/// kubelet's `kube-probe/<major>.<minor>`, for the release kbatch follows.
const USER_AGENT: &str = "kube-probe/1.37";

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
    fn new(outcome: Outcome, output: impl Into<String>) -> Self {
        Attempt {
            outcome,
            output: output.into(),
            error: None,
        }
    }

    fn failure(output: impl Into<String>) -> Self {
        Attempt::new(Outcome::Failure, output)
    }

    fn errored(outcome: Outcome, error: impl Into<String>) -> Self {
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
    /// A probe that cannot run here (grpc, or a probe with no handler): the message is the error.
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
        });
    }
    if let Some(get) = &probe.http_get {
        let port = resolve_port(&get.port, container)?;
        // HTTP/2 (1.37's alpha `protocol: HTTP2`, h2c) needs a client this node does not have.
        if get.protocol.as_deref().is_some_and(|p| p != "HTTP1") {
            return Ok(Action::Unsupported(format!(
                "httpGet protocol {} is not supported by kbatch's executor",
                get.protocol.as_deref().unwrap_or_default()
            )));
        }
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
    if probe.grpc.is_some() {
        return Ok(Action::Unsupported(
            "gRPC probes are not supported by kbatch's executor".to_string(),
        ));
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
        Action::Exec { argv, env, workdir } => exec_probe(argv, env, workdir, timeout).await,
        Action::Http {
            https,
            host,
            port,
            path,
            headers,
        } => {
            let url = Url::for_probe(*https, host, *port, path);
            http_probe(url, headers, timeout).await
        }
        Action::Tcp { host, port } => tcp_probe(host, *port, timeout).await,
        Action::Unsupported(msg) => Attempt::errored(Outcome::Unknown, msg.clone()),
    }
}

async fn within<F: Future>(timeout: Duration, fut: F) -> Option<F::Output> {
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

async fn exec_probe(
    argv: &[String],
    env: &[(String, String)],
    workdir: &Path,
    timeout: Duration,
) -> Attempt {
    let Some((program, args)) = argv.split_first() else {
        return Attempt::errored(Outcome::Unknown, "no command to run");
    };
    // A missing directory would otherwise read as a missing program (both are ENOENT).
    if tokio::fs::metadata(workdir).await.is_err() {
        return Attempt::failure(format!(
            "chdir to cwd ({}) set in config.json failed: no such file or directory",
            go_quote(&workdir.to_string_lossy())
        ));
    }
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that everything it starts can be killed with it.
        .process_group(0)
        // Dropped half-way: killed, and reaped by tokio.
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        // A container runtime reports this as the exec's failure, with runc's text.
        Err(e) => return Attempt::failure(crate::process::start_error(program, &e)),
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
        Some((Ok(status), mut output, stderr)) => {
            // CRI's ExecSync returns stdout and stderr apart; kubelet appends stderr to stdout
            // and the exec prober keeps the first 10 KiB.
            output.extend_from_slice(&stderr);
            output.truncate(MAX_OUTPUT);
            let output = String::from_utf8_lossy(&output).into_owned();
            if status.success() {
                Attempt::new(Outcome::Success, output)
            } else {
                Attempt::failure(output)
            }
        }
        Some((Err(e), _, _)) => {
            Attempt::errored(Outcome::Unknown, format!("waiting for the command: {e}"))
        }
        None => {
            group.kill();
            let _ = child.wait().await;
            // CRI's timeout error, which the exec prober returns as the output.
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
async fn dial(host: &str, port: u16, dialing: &mut String) -> Result<TcpStream, String> {
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
fn errno_text(e: &std::io::Error) -> String {
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
fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

// ---- http ----

/// An http(s) URL as Go's net/url keeps it, as far as a probe needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    scheme: String,
    /// Host and port as written (`[v6]:port`): the URL's text and the default Host header.
    authority: String,
    /// Go's `URL.Hostname()`: no brackets, no port; what redirects are compared by.
    host: String,
    /// As written; empty for the scheme's default.
    port: String,
    /// Escaped; may be empty (sent as "/").
    path: String,
    /// Raw, without '?'; `Some("")` for a bare '?'.
    query: Option<String>,
}

impl Url {
    /// upstream formatURL: the probe's path parsed as a URL reference, scheme and host:port set.
    fn for_probe(https: bool, host: &str, port: u16, path: &str) -> Url {
        let (path, query) = match parse_path_and_query(path) {
            Ok(parts) => parts,
            // "Something is busted with the path": kept whole as a path, escaped.
            Err(_) => (escape_path(path.as_bytes()), None),
        };
        let path = if path.is_empty() || path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        Url {
            scheme: if https { "https" } else { "http" }.to_string(),
            authority: join_host_port(host, port),
            host: host.to_string(),
            port: port.to_string(),
            path,
            query,
        }
    }

    fn text(&self) -> String {
        let mut s = format!("{}://{}{}", self.scheme, self.authority, self.path);
        if let Some(q) = &self.query {
            s.push('?');
            s.push_str(q);
        }
        s
    }

    fn request_target(&self) -> String {
        let mut s = if self.path.is_empty() {
            "/".to_string()
        } else {
            self.path.clone()
        };
        if let Some(q) = &self.query {
            s.push('?');
            s.push_str(q);
        }
        s
    }

    /// Go's `URL.Parse(location)`: `location` resolved against this URL (RFC 3986).
    fn resolve(&self, location: &str) -> Result<Url, String> {
        let parse_error = |why: String| format!("parse {}: {why}", go_quote(location));
        if location.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(parse_error(
                "net/url: invalid control character in URL".to_string(),
            ));
        }
        let reference = location.split('#').next().unwrap_or("");
        let (scheme, rest) = split_scheme(reference);
        if let Some(after) = rest.strip_prefix("//") {
            // Absolute, or network-path reference: a new authority.
            let end = after.find(['/', '?']).unwrap_or(after.len());
            let authority = &after[..end];
            // Credentials in a URL are not sent on (Go would turn them into a header).
            let authority = authority.rsplit('@').next().unwrap_or(authority);
            let (host, port) = split_authority(authority).map_err(parse_error)?;
            let (path, query) = parse_path_and_query(&after[end..]).map_err(parse_error)?;
            let path = if path.is_empty() {
                path
            } else {
                resolve_path(&path, "")
            };
            return Ok(Url {
                scheme: scheme.unwrap_or_else(|| self.scheme.clone()),
                authority: authority.to_string(),
                host,
                port,
                path,
                query,
            });
        }
        if let Some(scheme) = scheme {
            // A scheme without an authority ("mailto:x", "http:/x"): no host at all.
            let (path, query) = parse_path_and_query(rest).map_err(parse_error)?;
            return Ok(Url {
                scheme,
                authority: String::new(),
                host: String::new(),
                port: String::new(),
                path,
                query,
            });
        }
        let (path, query) = parse_path_and_query(rest).map_err(parse_error)?;
        let mut url = self.clone();
        if path.is_empty() {
            url.path = resolve_path(&self.path, "");
            if query.is_some() {
                url.query = query;
            }
        } else {
            url.path = resolve_path(&self.path, &path);
            url.query = query;
        }
        Ok(url)
    }

    fn port_number(&self) -> Result<u16, String> {
        if self.port.is_empty() {
            return Ok(if self.scheme == "https" { 443 } else { 80 });
        }
        self.port
            .parse::<u16>()
            .map_err(|_| format!("dial tcp: address {}: invalid port", self.authority))
    }
}

/// A URL's scheme (lower-cased) and the rest, when it starts with one.
fn split_scheme(s: &str) -> (Option<String>, &str) {
    let Some(colon) = s.find(':') else {
        return (None, s);
    };
    let scheme = &s[..colon];
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if valid {
        (Some(scheme.to_ascii_lowercase()), &s[colon + 1..])
    } else {
        (None, s)
    }
}

/// Host (brackets removed) and port (digits, maybe empty) of an authority.
fn split_authority(authority: &str) -> Result<(String, String), String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some(close) = v6.find(']') else {
            return Err("missing ']' in host".to_string());
        };
        let after = &v6[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(port) => port,
            None if after.is_empty() => "",
            None => return Err(format!("invalid port {} after host", go_quote(after))),
        };
        (&v6[..close], port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, port),
            None => (authority, ""),
        }
    };
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid port {} after host",
            go_quote(&format!(":{port}"))
        ));
    }
    Ok((host.to_string(), port.to_string()))
}

/// A reference's path (escaped as Go's `EscapedPath`) and raw query; the fragment dropped.
fn parse_path_and_query(s: &str) -> Result<(String, Option<String>), String> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    let s = s.split('#').next().unwrap_or("");
    let (path, query) = match s.split_once('?') {
        Some((p, q)) => (p, Some(q.to_string())),
        None => (s, None),
    };
    let decoded = percent_decode(path)?;
    let path = if valid_encoded(path) {
        path.to_string()
    } else {
        escape_path(&decoded)
    };
    Ok((path, query))
}

fn percent_decode(s: &str) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => out.push(b),
                None => {
                    let bad: String = s[i..].chars().take(3).collect();
                    return Err(format!("invalid URL escape {}", go_quote(&bad)));
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Bytes a path keeps unescaped (Go's shouldEscape in path mode).
fn path_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'$'
                | b'&'
                | b'+'
                | b','
                | b'/'
                | b':'
                | b';'
                | b'='
                | b'@'
        )
}

/// Go's validEncoded: a path that can be sent as written.
fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|b| {
        path_safe(b) || matches!(b, b'!' | b'\'' | b'(' | b')' | b'*' | b'[' | b']' | b'%')
    })
}

fn escape_path(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if path_safe(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's resolvePath: `reference` against `base`, dot segments removed; always rooted.
fn resolve_path(base: &str, reference: &str) -> String {
    let full = if reference.is_empty() {
        base.to_string()
    } else if reference.starts_with('/') {
        reference.to_string()
    } else {
        let cut = base.rfind('/').map_or(0, |i| i + 1);
        format!("{}{reference}", &base[..cut])
    };
    if full.is_empty() {
        return full;
    }
    let rooted = full.strip_prefix('/').unwrap_or(&full);
    let segments: Vec<&str> = rooted.split('/').collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." => trailing_slash = last,
            ".." => {
                kept.pop();
                trailing_slash = last;
            }
            other => kept.push(other),
        }
    }
    let mut out = format!("/{}", kept.join("/"));
    if trailing_slash && !out.ends_with('/') {
        out.push('/');
    }
    out
}

/// The request headers of a probe as Go's net/http sends them: canonical names, the probe's
/// User-Agent and Host taking the place of the defaults, Accept `*/*` unless set (and none when
/// set empty).
struct RequestHeaders {
    /// The probe's Host header (first value), when not empty.
    host: Option<String>,
    /// None: sent without one (the probe set it empty).
    user_agent: Option<String>,
    /// The probe's Referer (first value, when not empty), which redirects keep.
    referer: Option<String>,
    /// The others, sorted by name as Go writes them; a name's values in order.
    others: Vec<(String, String)>,
}

impl RequestHeaders {
    /// Go's validation of a request's headers, with its error text.
    fn new(probe: &[(String, String)]) -> Result<RequestHeaders, String> {
        let mut all: Vec<(String, String)> = Vec::new();
        for (name, value) in probe {
            if HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!(
                    "net/http: invalid header field name {}",
                    go_quote(name)
                ));
            }
            let canonical = canonical_header_name(name);
            if HeaderValue::from_str(value).is_err() {
                return Err(format!(
                    "net/http: invalid header field value for {}",
                    go_quote(&canonical)
                ));
            }
            all.push((canonical, value.trim_matches([' ', '\t']).to_string()));
        }
        let first = |name: &str| all.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let host = first("Host").filter(|h| !h.is_empty());
        let user_agent = match first("User-Agent") {
            None => Some(USER_AGENT.to_string()),
            Some(ua) if ua.is_empty() => None,
            Some(ua) => Some(ua),
        };
        let referer = first("Referer").filter(|r| !r.is_empty());
        match first("Accept") {
            None => all.push(("Accept".to_string(), "*/*".to_string())),
            Some(accept) if accept.is_empty() => all.retain(|(n, _)| n != "Accept"),
            Some(_) => {}
        }
        let mut others: Vec<(String, String)> = all
            .into_iter()
            .filter(|(n, _)| n != "Host" && n != "User-Agent")
            .collect();
        others.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(RequestHeaders {
            host,
            user_agent,
            referer,
            others,
        })
    }
}

/// Go's textproto.CanonicalMIMEHeaderKey ("x-custom-header" → "X-Custom-Header").
fn canonical_header_name(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// Where an attempt was when its time ran out, for Go's error texts.
struct Progress {
    url: String,
    phase: Phase,
    dialing: String,
}

#[derive(Clone, Copy)]
enum Phase {
    Dial,
    Headers,
    Body,
}

async fn http_probe(first: Url, headers: &[(String, String)], timeout: Duration) -> Attempt {
    let mut progress = Progress {
        url: first.text(),
        phase: Phase::Headers,
        dialing: String::new(),
    };
    let result = within(timeout, http_exchange(first, headers, &mut progress)).await;
    match result {
        Some(attempt) => attempt,
        None => {
            let url = go_quote(&progress.url);
            match progress.phase {
                Phase::Dial => Attempt::failure(format!(
                    "Get {url}: dial tcp {}: i/o timeout (Client.Timeout exceeded while awaiting headers)",
                    progress.dialing
                )),
                Phase::Headers => Attempt::failure(format!(
                    "Get {url}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                )),
                // upstream: a body that cannot be read is an error, not a failure.
                Phase::Body => Attempt::errored(
                    Outcome::Failure,
                    "context deadline exceeded (Client.Timeout or context cancellation while reading body)",
                ),
            }
        }
    }
}

/// upstream DoHTTPProbe with a Go http.Client that follows redirects to the same host name only
/// (followNonLocalRedirects=false), a new connection per request.
async fn http_exchange(
    first: Url,
    probe_headers: &[(String, String)],
    progress: &mut Progress,
) -> Attempt {
    let get_error = |url: &str, e: &str| Attempt::failure(format!("Get {}: {e}", go_quote(url)));
    let headers = match RequestHeaders::new(probe_headers) {
        Ok(h) => h,
        Err(e) => return get_error(&first.text(), &e),
    };
    let mut url = first.clone();
    let mut host_header = headers.host.clone();
    let mut referer: Option<String> = None;
    let mut requests = 0;
    loop {
        progress.url = url.text();
        progress.phase = Phase::Headers;
        requests += 1;
        if url.scheme != "http" && url.scheme != "https" {
            return get_error(
                &progress.url,
                &format!("unsupported protocol scheme {}", go_quote(&url.scheme)),
            );
        }
        let host = host_header.clone().unwrap_or_else(|| url.authority.clone());
        let request = match build_request(&url, &host, &headers, referer.as_deref()) {
            Ok(r) => r,
            Err(e) => return get_error(&progress.url, &e),
        };
        let exchange = match send(&url, request, progress).await {
            Ok(x) => x,
            Err(e) => return get_error(&progress.url, &e),
        };
        let status = exchange.response.status().as_u16();
        let location = exchange
            .response
            .headers()
            .get(hyper::header::LOCATION)
            .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned())
            .filter(|l| !l.is_empty());
        if let (true, Some(location)) = (matches!(status, 301 | 302 | 303 | 307 | 308), location) {
            let next = match url.resolve(&location) {
                Ok(next) => next,
                Err(e) => {
                    let why = format!(
                        "failed to parse Location header {}: {e}",
                        go_quote(&location)
                    );
                    return get_error(&progress.url, &why);
                }
            };
            if next.host == first.host {
                if requests >= MAX_REQUESTS {
                    return get_error(&location, "stopped after 10 redirects");
                }
                // Go keeps a Host of its own only through relative redirects.
                let relative = split_scheme(&location).0.is_none() && !location.starts_with("//");
                host_header = headers
                    .host
                    .clone()
                    .filter(|h| relative && *h != first.authority);
                // Go sets Referer to the probe's own or else the previous URL, unless going
                // from https to http (then the probe's headers go as they are).
                referer = if url.scheme == "https" && next.scheme == "http" {
                    None
                } else {
                    Some(headers.referer.clone().unwrap_or_else(|| url.text()))
                };
                url = next;
                continue;
            }
            // Another host: the redirect itself is the answer (a warning).
        }
        progress.phase = Phase::Body;
        let body = match exchange.body(MAX_OUTPUT).await {
            Ok(body) => String::from_utf8_lossy(&body).into_owned(),
            Err(e) => return Attempt::errored(Outcome::Failure, e),
        };
        return match status {
            200..=299 => Attempt::new(Outcome::Success, body),
            300..=399 => Attempt::new(
                Outcome::Warning,
                format!("Probe terminated redirects, Response body: {body}"),
            ),
            // The body is left out on purpose upstream (https://issue.k8s.io/99425).
            _ => Attempt::failure(format!("HTTP probe failed with statuscode: {status}")),
        };
    }
}

type Request = hyper::Request<Empty<&'static [u8]>>;

fn build_request(
    url: &Url,
    host: &str,
    headers: &RequestHeaders,
    // Set on a redirect, in place of the probe's own.
    referer: Option<&str>,
) -> Result<Request, String> {
    let mut builder = hyper::Request::builder()
        .method(hyper::Method::GET)
        .uri(url.request_target())
        .header(hyper::header::HOST, host);
    if let Some(ua) = &headers.user_agent {
        builder = builder.header(hyper::header::USER_AGENT, ua.as_str());
    }
    // A redirect's Referer replaces the probe's.
    let mut others: Vec<(&str, &str)> = headers
        .others
        .iter()
        .filter(|(n, _)| referer.is_none() || n != "Referer")
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if let Some(referer) = referer {
        others.push(("Referer", referer));
        others.sort_by(|a, b| a.0.cmp(b.0));
    }
    for (name, value) in others {
        builder = builder.header(name, value);
    }
    // No keep-alive, as upstream's transport (DisableKeepAlives).
    builder
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::new())
        .map_err(|e| e.to_string())
}

/// A response whose head has arrived, with its connection still to drive for the body.
struct Exchange {
    response: hyper::Response<Incoming>,
    conn: Pin<Box<dyn Future<Output = ()> + Send>>,
    conn_done: bool,
    _sender: SendRequest<Empty<&'static [u8]>>,
    addrs: (SocketAddr, SocketAddr),
}

impl Exchange {
    /// At most `limit` bytes of the body (the rest is not read).
    async fn body(self, limit: usize) -> Result<Vec<u8>, String> {
        let Exchange {
            response,
            mut conn,
            mut conn_done,
            _sender,
            addrs,
        } = self;
        let mut body = response.into_body();
        let mut kept = Vec::new();
        while kept.len() < limit {
            let frame = tokio::select! {
                frame = body.frame() => frame,
                () = &mut conn, if !conn_done => {
                    conn_done = true;
                    continue;
                }
            };
            match frame {
                None => break,
                Some(Err(e)) if e.is_incomplete_message() => {
                    return Err("unexpected EOF".to_string());
                }
                Some(Err(e)) => return Err(hyper_error_text(&e, addrs)),
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let room = limit - kept.len();
                        kept.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
            }
        }
        Ok(kept)
    }
}

/// Connects (TLS for https) and sends `request`, up to the response's head.
async fn send(url: &Url, request: Request, progress: &mut Progress) -> Result<Exchange, String> {
    let port = url.port_number()?;
    progress.phase = Phase::Dial;
    progress.dialing = join_host_port(&url.host, port);
    let tcp = dial(&url.host, port, &mut progress.dialing).await?;
    progress.phase = Phase::Headers;
    let addrs = match (tcp.local_addr(), tcp.peer_addr()) {
        (Ok(local), Ok(peer)) => (local, peer),
        _ => return Err("EOF".to_string()),
    };
    if url.scheme == "https" {
        let config = tls_config()?;
        let name = rustls::pki_types::ServerName::try_from(url.host.clone())
            // Not a DNS name: no SNI, as for an IP address.
            .unwrap_or_else(|_| rustls::pki_types::ServerName::IpAddress(addrs.1.ip().into()));
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| tls_error_text(&e))?;
        exchange_over(tls, request, addrs).await
    } else {
        exchange_over(tcp, request, addrs).await
    }
}

async fn exchange_over<S>(
    io: S,
    request: Request,
    addrs: (SocketAddr, SocketAddr),
) -> Result<Exchange, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        // Go writes canonical names ("User-Agent"); hyper's are lower-case otherwise.
        .title_case_headers(true)
        .handshake::<_, Empty<&'static [u8]>>(TokioIo::new(io))
        .await
        .map_err(|e| hyper_error_text(&e, addrs))?;
    let mut conn: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
        let _ = conn.await;
    });
    let mut conn_done = false;
    let response = {
        let exchange = async {
            sender.ready().await?;
            sender.send_request(request).await
        };
        tokio::pin!(exchange);
        loop {
            tokio::select! {
                response = &mut exchange => break response,
                () = &mut conn, if !conn_done => conn_done = true,
            }
        }
    };
    let response = response.map_err(|e| hyper_error_text(&e, addrs))?;
    Ok(Exchange {
        response,
        conn,
        conn_done,
        _sender: sender,
        addrs,
    })
}

/// Go's transport error texts for what hyper reports.
fn hyper_error_text(e: &hyper::Error, (local, peer): (SocketAddr, SocketAddr)) -> String {
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return "EOF".to_string();
    }
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        return "net/http: HTTP/1.x transport connection broken: malformed HTTP response"
            .to_string();
    }
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::UnexpectedEof {
                // A body cut short (Go's io.ErrUnexpectedEOF).
                return "unexpected EOF".to_string();
            }
            let op = if io.kind() == std::io::ErrorKind::BrokenPipe {
                "write"
            } else {
                "read"
            };
            return format!("{op} tcp {local}->{peer}: {op}: {}", errno_text(io));
        }
        source = inner.source();
    }
    e.to_string()
}

fn tls_error_text(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return "EOF".to_string();
    }
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return errno_text(e);
    };
    match tls {
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            "tls: first record does not look like a TLS handshake".to_string()
        }
        rustls::Error::AlertReceived(alert) => {
            format!("remote error: tls: {}", words(&format!("{alert:?}")))
        }
        other => format!("tls: {other}"),
    }
}

/// "HandshakeFailure" → "handshake failure".
fn words(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// rustls with certificate verification off, as upstream's InsecureSkipVerify: any
/// certificate is accepted, handshake signatures are still checked.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = Arc::new(AnyServerCert(provider.clone()));
            let builder = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("tls: {e}"))?;
            Ok(Arc::new(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(verifier)
                    .with_no_client_auth(),
            ))
        })
        .clone()
}

#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_api::k8s_openapi::api::core::v1::{
        ContainerPort, EnvVar, EnvVarSource, ExecAction, GRPCAction, HTTPGetAction, HTTPHeader,
        ObjectFieldSelector, TCPSocketAction,
    };
    use std::sync::Mutex;
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;
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
        assert!(matches!(
            action(&grpc, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Unsupported(_))
        ));
        let h2 = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(8080),
                protocol: Some("HTTP2".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(
            action(&h2, &container, "10.0.0.1", &env, Path::new("/w")),
            Ok(Action::Unsupported(_))
        ));
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

    // ---- http ----

    type Seen = Arc<Mutex<Vec<String>>>;

    /// A server answering each request head with what `answer` gives (None: never answers),
    /// recording the heads.
    async fn serve<F>(answer: F) -> (u16, Seen)
    where
        F: Fn(&str, u16) -> Option<String> + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let answer = Arc::new(answer);
        let record = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let answer = answer.clone();
                let record = record.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    record.lock().unwrap().push(head.clone());
                    match answer(&head, port) {
                        Some(response) => {
                            let _ = stream.write_all(response.as_bytes()).await;
                            let _ = stream.shutdown().await;
                        }
                        None => tokio::time::sleep(Duration::from_secs(30)).await,
                    }
                });
            }
        });
        (port, seen)
    }

    fn response(status: &str, extra: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn target(head: &str) -> &str {
        head.split(' ').nth(1).unwrap_or("")
    }

    fn http(port: u16, path: &str, headers: &[(&str, &str)]) -> Action {
        Action::Http {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[tokio::test]
    async fn http_success_and_failure() {
        let (port, seen) = serve(|head, _| {
            Some(match target(head) {
                "/ok" => response("200 OK", "", "all good"),
                "/created" => response("201 Created", "", ""),
                "/chunked" => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".to_string(),
                _ => response("500 Internal Server Error", "", "oops"),
            })
        })
        .await;
        assert_eq!(
            run_once(&http(port, "/ok", &[]), SECOND).await,
            Attempt::new(Outcome::Success, "all good")
        );
        assert_eq!(
            run_once(&http(port, "/created", &[]), SECOND).await,
            Attempt::new(Outcome::Success, "")
        );
        assert_eq!(
            run_once(&http(port, "/chunked", &[]), SECOND).await,
            Attempt::new(Outcome::Success, "abcde")
        );
        assert_eq!(
            run_once(&http(port, "/fail", &[]), SECOND).await,
            Attempt::failure("HTTP probe failed with statuscode: 500")
        );
        // An empty path is "/".
        run_once(&http(port, "", &[]), SECOND).await;
        let heads = seen.lock().unwrap().clone();
        assert!(
            heads.last().unwrap().starts_with("GET / HTTP/1.1\r\n"),
            "{heads:?}"
        );
    }

    #[tokio::test]
    async fn http_body_is_truncated_to_10_kib() {
        let big = "x".repeat(20_000);
        let (port, _) = serve(move |_, _| Some(response("200 OK", "", &big))).await;
        let a = run_once(&http(port, "/", &[]), SECOND).await;
        assert_eq!(a.outcome, Outcome::Success);
        assert_eq!(a.output.len(), 10240);
    }

    #[tokio::test]
    async fn http_follows_same_host_redirects_only() {
        let (port, seen) = serve(|head, port| {
            Some(match target(head) {
                "/relative" => response("302 Found", "Location: /ok\r\n", ""),
                "/absolute" => response(
                    "301 Moved Permanently",
                    &format!("Location: http://127.0.0.1:{port}/a/b/../ok?x=1\r\n"),
                    "",
                ),
                "/elsewhere" => response(
                    "302 Found",
                    &format!("Location: http://localhost:{port}/ok\r\n"),
                    "moved",
                ),
                "/no-location" => response("307 Temporary Redirect", "", "stay"),
                "/loop" => response("302 Found", "Location: /loop\r\n", ""),
                "/ok" | "/a/ok?x=1" => response("200 OK", "", "landed"),
                _ => response("404 Not Found", "", ""),
            })
        })
        .await;
        assert_eq!(
            run_once(&http(port, "/relative", &[]), SECOND).await,
            Attempt::new(Outcome::Success, "landed")
        );
        assert_eq!(
            run_once(&http(port, "/absolute", &[]), SECOND).await,
            Attempt::new(Outcome::Success, "landed")
        );
        {
            let heads = seen.lock().unwrap();
            let last = heads.last().unwrap();
            assert!(last.starts_with("GET /a/ok?x=1 HTTP/1.1\r\n"), "{last}");
            assert!(
                last.contains(&format!("Referer: http://127.0.0.1:{port}/absolute\r\n")),
                "{last}"
            );
        }
        let before = seen.lock().unwrap().len();
        assert_eq!(
            run_once(&http(port, "/elsewhere", &[]), SECOND).await,
            Attempt::new(
                Outcome::Warning,
                "Probe terminated redirects, Response body: moved"
            )
        );
        // The other host was not asked.
        assert_eq!(seen.lock().unwrap().len(), before + 1);
        assert_eq!(
            run_once(&http(port, "/no-location", &[]), SECOND).await,
            Attempt::new(
                Outcome::Warning,
                "Probe terminated redirects, Response body: stay"
            )
        );
        let before = seen.lock().unwrap().len();
        assert_eq!(
            run_once(&http(port, "/loop", &[]), SECOND).await,
            Attempt::failure("Get \"/loop\": stopped after 10 redirects")
        );
        assert_eq!(seen.lock().unwrap().len(), before + 10);
    }

    #[tokio::test]
    async fn http_headers_as_upstream() {
        let (port, seen) = serve(|_, _| Some(response("200 OK", "", ""))).await;
        run_once(
            &http(port, "/h", &[("x-custom", "one"), ("X-Custom", "two")]),
            SECOND,
        )
        .await;
        run_once(
            &http(
                port,
                "/h",
                &[
                    ("user-agent", "mine/1"),
                    ("Accept", "text/plain"),
                    ("Host", "example.com"),
                    ("referer", "http://me/"),
                ],
            ),
            SECOND,
        )
        .await;
        run_once(&http(port, "/h", &[("Accept", "")]), SECOND).await;
        let heads = seen.lock().unwrap().clone();
        let default = &heads[0];
        assert!(
            default.contains("\r\nUser-Agent: kube-probe/1.37\r\n"),
            "{default}"
        );
        assert!(default.contains("\r\nAccept: */*\r\n"), "{default}");
        assert!(
            default.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")),
            "{default}"
        );
        assert!(
            default.contains("\r\nX-Custom: one\r\nX-Custom: two\r\n"),
            "{default}"
        );
        let set = &heads[1];
        assert!(set.contains("\r\nUser-Agent: mine/1\r\n"), "{set}");
        assert!(!set.contains("kube-probe"), "{set}");
        assert!(set.contains("\r\nAccept: text/plain\r\n"), "{set}");
        assert!(!set.contains("*/*"), "{set}");
        assert!(set.contains("\r\nHost: example.com\r\n"), "{set}");
        assert_eq!(set.matches("Host:").count(), 1, "{set}");
        assert!(set.contains("\r\nReferer: http://me/\r\n"), "{set}");
        assert!(!heads[2].contains("Accept:"), "{}", heads[2]);
    }

    #[tokio::test]
    async fn http_invalid_header_is_a_failure() {
        let a = run_once(&http(1, "/", &[("bad name", "x")]), SECOND).await;
        assert_eq!(
            a,
            Attempt::failure(
                "Get \"http://127.0.0.1:1/\": net/http: invalid header field name \"bad name\""
            )
        );
    }

    async fn closed_port() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn http_connection_refused() {
        let port = closed_port().await;
        let a = run_once(&http(port, "/healthz", &[]), SECOND).await;
        assert_eq!(
            a,
            Attempt::failure(format!(
                "Get \"http://127.0.0.1:{port}/healthz\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
    }

    #[tokio::test]
    async fn http_timeout() {
        let (port, _) = serve(|_, _| None).await;
        let started = Instant::now();
        let a = run_once(&http(port, "/slow", &[]), Duration::from_millis(300)).await;
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
            "{elapsed:?}"
        );
        assert_eq!(
            a,
            Attempt::failure(format!(
                "Get \"http://127.0.0.1:{port}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ))
        );
    }

    #[tokio::test]
    async fn http_server_closing_without_answer() {
        let (port, _) = serve(|_, _| Some(String::new())).await;
        let a = run_once(&http(port, "/", &[]), SECOND).await;
        assert_eq!(
            a,
            Attempt::failure(format!("Get \"http://127.0.0.1:{port}/\": EOF"))
        );
    }

    #[tokio::test]
    async fn https_without_verification() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    let _ = tls.read(&mut buf).await;
                    let _ = tls
                        .write_all(response("200 OK", "", "secure").as_bytes())
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        for host in ["127.0.0.1", "localhost"] {
            let action = Action::Http {
                https: true,
                host: host.into(),
                port,
                path: "/".into(),
                headers: vec![],
            };
            assert_eq!(
                run_once(&action, 5 * SECOND).await,
                Attempt::new(Outcome::Success, "secure"),
                "{host}"
            );
        }
        // An https probe of a plain HTTP server (which answers at once).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let _ = tcp
                    .write_all(response("400 Bad Request", "", "").as_bytes())
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        let action = Action::Http {
            https: true,
            host: "127.0.0.1".into(),
            port: plain,
            path: "/".into(),
            headers: vec![],
        };
        assert_eq!(
            run_once(&action, 5 * SECOND).await,
            Attempt::failure(format!(
                "Get \"https://127.0.0.1:{plain}/\": tls: first record does not look like a TLS handshake"
            ))
        );
    }

    #[test]
    fn urls_as_go_builds_them() {
        let u = Url::for_probe(false, "10.0.0.1", 8080, "healthz?a=b#frag");
        assert_eq!(u.text(), "http://10.0.0.1:8080/healthz?a=b");
        assert_eq!(u.request_target(), "/healthz?a=b");
        let u = Url::for_probe(true, "::1", 443, "");
        assert_eq!(u.text(), "https://[::1]:443");
        assert_eq!(u.request_target(), "/");
        assert_eq!(u.host, "::1");
        let u = Url::for_probe(false, "h", 80, "/a b/%41/ü");
        assert_eq!(u.request_target(), "/a%20b/A/%C3%BC");
        let u = Url::for_probe(false, "h", 80, "/a%2Fb(c)");
        assert_eq!(u.request_target(), "/a%2Fb(c)");
        let u = Url::for_probe(false, "h", 80, "/bad%zz?q");
        assert_eq!(u.request_target(), "/bad%25zz%3Fq");

        let base = Url::for_probe(false, "h", 80, "/a/b/c?q=1");
        let resolved = |loc: &str| base.resolve(loc).map(|u| u.text());
        assert_eq!(resolved("d"), Ok("http://h:80/a/b/d".into()));
        assert_eq!(resolved("../d"), Ok("http://h:80/a/d".into()));
        assert_eq!(resolved("/x/./y/.."), Ok("http://h:80/x/".into()));
        assert_eq!(resolved("?z"), Ok("http://h:80/a/b/c?z".into()));
        assert_eq!(resolved("#f"), Ok("http://h:80/a/b/c?q=1".into()));
        assert_eq!(resolved("//other:81/p"), Ok("http://other:81/p".into()));
        assert_eq!(resolved("HTTPS://h/p"), Ok("https://h/p".into()));
        assert_eq!(
            base.resolve("https://[::1]:9/").map(|u| u.host),
            Ok("::1".into())
        );
        assert_eq!(base.resolve("mailto:x").map(|u| u.host), Ok(String::new()));
        assert!(base.resolve("http://h:x/").is_err());
        assert!(base.resolve("/%zz").is_err());
        assert!(base.resolve("/%+f").is_err());
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
