//! The node's streaming endpoint, kubelet's `/exec`, `/attach` and `/portForward`: the API
//! server's `pods/exec`, `pods/attach` and `pods/portforward` proxy the client's upgrade
//! request here, to the port the Node reports as `status.daemonEndpoints.kubeletEndpoint.Port`,
//! and the session runs between this server and the client. Upstream's kubelet hands a
//! WebSocket request to its runtime's streaming server (and kube-apiserver translates a v5
//! client's WebSocket to SPDY first); kbatch's node speaks the WebSocket remote-command
//! protocols, v5 included, itself, and SPDY (`spdy_exec`) for the clients that ask for it.
//!
//! `GET` or `POST /exec/{namespace}/{pod}/{container}` (or `.../{pod}/{uid}/{container}`), with
//! kubelet's query: `command` (repeated, the argv), and `input`, `output`, `error`, `tty`, each
//! on when `1`. Checked in kubelet's order before anything is upgraded, each refusal a plain-text
//! answer worded as kubelet's (pkg/kubelet/server/server.go `getExec`, the CRI streaming
//! server's `remotecommand` options) or Go's WebSocket server's: the streams asked for (400),
//! the pod bound to this node (404), the container running (500), then the WebSocket handshake
//! and its subprotocol (400, 403). Only the process runtime runs containers that can be exec'd
//! into: with the simulate runtime every container is `not found`.
//!
//! `GET` or `POST /attach/{namespace}/{pod}/{container}` (or with the pod UID) joins the
//! container's own streams (`attach`): the same query but no `command`, the same checks and
//! protocols, kubelet's words for a container it cannot find (`GetAttach`). Whether the
//! session has a TTY is the container's `tty`, not the request's (only stderr follows the
//! request's `tty`), as kubelet decides it.
//!
//! `GET` or `POST /portForward/{namespace}/{pod}` (or with the pod UID) forwards connections to
//! the pod's ports (`portforward`): SPDY, SPDY tunnelled through WebSocket, or the WebSocket
//! channel protocol.
//!
//! `GET /metrics/resource` is kubelet's resource metrics (`resource_metrics`), what
//! metrics-server scrapes: the node's and the running containers' CPU and memory in the
//! Prometheus text format.

mod attach;
mod exec;
mod portforward;
mod registry;
mod resource_metrics;
mod session;
mod spdy;
mod spdy_exec;
mod status;
mod ws;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kbatch_cron::go_quote;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use exec::Options;
pub use registry::{ExecTarget, Missing, Published, Registry, RunningContainer};
use session::Protocol;

/// Listen for the streaming endpoint on the node's address; port `None` or 0 lets the OS
/// choose one.
pub async fn bind(port: Option<u16>) -> std::io::Result<TcpListener> {
    let ip: IpAddr = crate::node::HOST_IP
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    TcpListener::bind(SocketAddr::new(ip, port.unwrap_or(0))).await
}

/// Serve exec requests for the containers `registry` holds until `shutdown` turns true. A
/// session under way then ends too: its command is killed.
pub async fn serve(listener: TcpListener, registry: Registry, mut shutdown: watch::Receiver<bool>) {
    let shared = Arc::new(Shared {
        registry,
        shutdown: shutdown.clone(),
    });
    loop {
        if *shutdown.borrow() {
            return;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, shared.clone()));
                }
                Err(e) => {
                    // Out of file descriptors, most likely: let some close.
                    tracing::warn!(error = %e, "accepting a streaming connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            changed = shutdown.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

struct Shared {
    registry: Registry,
    shutdown: watch::Receiver<bool>,
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move {
            // Any method, as kubelet's handler for it (the Go client's) takes any.
            if req.uri().path() == resource_metrics::PATH {
                return Ok::<_, Infallible>(resource_metrics::serve(shared.registry.clone()).await);
            }
            if req.uri().path().starts_with(portforward::PATH_PREFIX) {
                return Ok(portforward::handle(req, &shared));
            }
            Ok(handle(req, &shared))
        }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await
    {
        tracing::debug!(error = %e, "streaming connection");
    }
}

/// A plain-text answer, as Go's `http.Error` (and go-restful's `WriteError`, without the
/// newline) write one.
fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    if !body.is_empty() {
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp.headers_mut().insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
    resp
}

/// Which session a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
}

/// The request's target in the path: namespace, pod, optional pod UID, container.
struct Target {
    namespace: String,
    pod: String,
    uid: Option<String>,
    container: String,
}

fn parse_path(path: &str) -> Option<(Kind, Target)> {
    let (kind, rest) = if let Some(rest) = path.strip_prefix("/exec/") {
        (Kind::Exec, rest)
    } else {
        (Kind::Attach, path.strip_prefix("/attach/")?)
    };
    let decode = path_segment;
    let parts: Vec<&str> = rest.split('/').collect();
    let (ns, pod, uid, container) = match parts.as_slice() {
        [ns, pod, container] => (ns, pod, None, container),
        [ns, pod, uid, container] => (ns, pod, Some(uid), container),
        _ => return None,
    };
    let target = Target {
        namespace: decode(ns)?,
        pod: decode(pod)?,
        uid: match uid {
            Some(u) => Some(decode(u)?),
            None => None,
        },
        container: decode(container)?,
    };
    Some((kind, target))
}

/// kubelet's reading of the query (`remotecommand.NewOptions`: a stream is on when its
/// parameter is `1`; with a TTY, stderr is folded into it).
fn parse_options(kind: Kind, query: Option<&str>) -> Result<Options, &'static str> {
    let mut o = Options {
        command: Vec::new(),
        stdin: false,
        stdout: false,
        stderr: false,
        tty: false,
    };
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let on = v == "1";
        match k.as_ref() {
            "command" => o.command.push(v.into_owned()),
            "input" => o.stdin = on,
            "output" => o.stdout = on,
            "error" => o.stderr = on,
            "tty" => o.tty = on,
            _ => {}
        }
    }
    if o.tty && o.stderr {
        o.stderr = false;
    }
    if !o.stdin && !o.stdout && !o.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr");
    }
    if kind == Kind::Exec && o.command.is_empty() {
        // kube-apiserver's check, which a request reaching kubelet has passed.
        return Err("you must specify at least one command for the container");
    }
    Ok(o)
}

/// An exec or attach session on `io`.
async fn remote_command<S>(
    io: S,
    kind: Kind,
    protocol: Protocol,
    options: Options,
    target: ExecTarget,
    shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    match kind {
        Kind::Exec => exec::run(io, protocol, options, target, shutdown).await,
        Kind::Attach => {
            let options = attach::Options {
                stdin: options.stdin,
                stdout: options.stdout,
                stderr: options.stderr,
            };
            attach::run(io, protocol, options, target, shutdown).await;
        }
    }
}

/// Run `session` on the connection once the switch of protocols is answered.
fn on_upgrade<F, Fut>(req: &mut Request<Incoming>, session: F)
where
    F: FnOnce(TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => session(TokioIo::new(upgraded)).await,
            Err(e) => tracing::debug!(error = %e, "upgrading a streaming connection"),
        }
    });
}

/// The comma-separated values of header `name`, trimmed, empty ones left out.
fn header_list(headers: &HeaderMap, name: impl header::AsHeaderName) -> Vec<&str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// kubelet's `httpstream.Handshake` and SPDY upgrader checks, in their words: the first
/// protocol the client offers that `served` has, or the refusal.
fn spdy_handshake(
    headers: &HeaderMap,
    served: &[&'static str],
) -> Result<&'static str, Box<Response<Full<Bytes>>>> {
    let offered = header_list(headers, "X-Stream-Protocol-Version");
    if offered.is_empty() {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: X-Stream-Protocol-Version is required\n",
        )));
    }
    let Some(name) = offered
        .iter()
        .find_map(|o| served.iter().find(|s| *s == o).copied())
    else {
        let mut resp = text(
            StatusCode::FORBIDDEN,
            &format!(
                "unable to upgrade: unable to negotiate protocol: client supports [{}], server \
                 accepts [{}]\n",
                offered.join(" "),
                served.join(" ")
            ),
        );
        for p in served {
            resp.headers_mut().append(
                "X-Accepted-Stream-Protocol-Versions",
                HeaderValue::from_static(p),
            );
        }
        return Err(Box::new(resp));
    };
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("SPDY/3.1"))
        && has_token(headers, header::CONNECTION, "upgrade");
    if !upgrade {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request\n",
        )));
    }
    Ok(name)
}

/// The switch to SPDY speaking protocol `name`.
fn spdy_switch(name: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert("X-Stream-Protocol-Version", HeaderValue::from_static(name));
    resp
}

/// An exec or attach request that is not a WebSocket one: SPDY, as kubelet's
/// `httpstream.Handshake` and SPDY upgrader take it (`spdy_exec`).
fn spdy_upgrade(
    mut req: Request<Incoming>,
    kind: Kind,
    options: Options,
    target: ExecTarget,
    shared: &Shared,
) -> Response<Full<Bytes>> {
    let served: Vec<&'static str> = spdy_exec::PROTOCOLS.iter().map(|p| p.0).collect();
    let name = match spdy_handshake(req.headers(), &served) {
        Ok(name) => name,
        Err(refusal) => return *refusal,
    };
    let Some(&(_, format, resize)) = spdy_exec::PROTOCOLS.iter().find(|p| p.0 == name) else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "");
    };
    tracing::debug!(?kind, protocol = name, command = ?options.command, "SPDY stream session");
    let shutdown = shared.shutdown.clone();
    on_upgrade(&mut req, move |io| {
        spdy_exec::run(io, kind, format, resize, options, target, shutdown)
    });
    spdy_switch(name)
}

/// Whether the request asks to switch to WebSocket.
fn is_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
        && has_token(headers, header::CONNECTION, "upgrade")
}

/// Go's WebSocket server's checks of the handshake, in its words: the `Sec-WebSocket-Accept`
/// for the client's key, or the refusal.
fn websocket_accept(headers: &HeaderMap) -> Result<HeaderValue, Box<Response<Full<Bytes>>>> {
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        != Some("13")
    {
        let mut resp = text(StatusCode::BAD_REQUEST, "missing or bad WebSocket Version");
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return Err(Box::new(resp));
    }
    headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.trim().is_empty())
        .and_then(|k| HeaderValue::from_str(&ws::accept_key(k)).ok())
        .ok_or_else(|| Box::new(text(StatusCode::BAD_REQUEST, "mismatch challenge/response")))
}

/// A path segment, percent-decoded; `None` when empty or not UTF-8.
fn path_segment(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
        .filter(|s| !s.is_empty())
}

/// Whether one of the comma-separated values of `name` is `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The subprotocol to speak. A client offering v5 gets it wherever it put it in its list:
/// kube-apiserver sends such a request through its stream translator, which speaks v5 only.
/// Otherwise the first the client offered that kubelet serves, as Go's wsstream negotiates it; a
/// client that offered none gets the unversioned channel protocol. `Err` when none is served.
fn negotiate(headers: &HeaderMap) -> Result<(Option<&'static str>, Protocol), ()> {
    let offered = header_list(headers, header::SEC_WEBSOCKET_PROTOCOL);
    if offered.is_empty() {
        return Ok((None, Protocol::V1));
    }
    if offered.contains(&Protocol::NAMES[0].0) {
        return Ok((Some(Protocol::NAMES[0].0), Protocol::V5));
    }
    for p in offered {
        if let Some((name, protocol)) = Protocol::NAMES.iter().find(|(n, _)| *n == p) {
            return Ok((Some(name), *protocol));
        }
    }
    Err(())
}

fn handle(mut req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let Some((kind, target)) = parse_path(req.uri().path()) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n");
    };
    if req.method() != Method::GET && req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let options = match parse_options(kind, req.uri().query()) {
        Ok(o) => o,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let found = shared.registry.find(
        &target.namespace,
        &target.pod,
        target.uid.as_deref(),
        &target.container,
    );
    let exec_target = match found {
        // Only a host process can be attached to.
        Ok(t) if kind == Kind::Exec || t.attach.is_some() => t,
        Err(Missing::Pod) => return text(StatusCode::NOT_FOUND, "pod does not exist"),
        Ok(_) | Err(Missing::Container) => {
            let message = match kind {
                Kind::Exec => format!("container not found ({})", go_quote(&target.container)),
                // kubelet's GetAttach names the pod by its full name, `name_namespace`.
                Kind::Attach => format!(
                    "container {} not found in pod {}_{}",
                    target.container, target.pod, target.namespace
                ),
            };
            return text(StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
    };
    let headers = req.headers();
    if !is_websocket(headers) {
        return spdy_upgrade(req, kind, options, exec_target, shared);
    }
    let accept = match websocket_accept(headers) {
        Ok(a) => a,
        Err(refusal) => return *refusal,
    };
    let Ok((name, protocol)) = negotiate(headers) else {
        return text(StatusCode::FORBIDDEN, "");
    };
    tracing::debug!(
        namespace = %target.namespace, pod = %target.pod, container = %target.container,
        command = ?options.command, protocol = name.unwrap_or(""), tty = options.tty,
        "{kind:?}"
    );
    let shutdown = shared.shutdown.clone();
    on_upgrade(&mut req, move |io| {
        remote_command(io, kind, protocol, options, exec_target, shutdown)
    });
    websocket_switch(accept, name)
}

/// The switch to WebSocket, speaking subprotocol `name` when one was negotiated.
fn websocket_switch(accept: HeaderValue, name: Option<&'static str>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    if let Some(name) = name {
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(name),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_options_as_kubelet_reads_them() {
        let (kind, t) = parse_path("/exec/ns/p/c").unwrap();
        assert_eq!(kind, Kind::Exec);
        assert_eq!(
            (t.namespace.as_str(), t.pod.as_str(), t.container.as_str()),
            ("ns", "p", "c")
        );
        assert_eq!(t.uid, None);
        let (_, t) = parse_path("/exec/ns/p/u-1/c%2Dx").unwrap();
        assert_eq!(
            (t.uid.as_deref(), t.container.as_str()),
            (Some("u-1"), "c-x")
        );
        assert!(parse_path("/exec/ns/p").is_none());
        assert!(parse_path("/exec/ns//c").is_none());
        assert_eq!(parse_path("/attach/ns/p/c").unwrap().0, Kind::Attach);
        assert_eq!(
            parse_path("/attach/ns/p/u/c").unwrap().1.uid.as_deref(),
            Some("u")
        );
        assert!(parse_path("/attach/ns/p").is_none());
        assert!(parse_path("/logs/ns/p/c").is_none());
        // Attach takes no command.
        let o = parse_options(Kind::Attach, Some("input=1&output=1&tty=1")).unwrap();
        assert!(o.stdin && o.stdout && o.tty && o.command.is_empty());
        assert_eq!(
            parse_options(Kind::Attach, Some("tty=1")).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );

        let o = parse_options(
            Kind::Exec,
            Some("command=sh&command=-c&command=echo+a%20b&input=1&output=1&error=true"),
        )
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo a b"]);
        assert!(o.stdin && o.stdout && !o.stderr && !o.tty);
        // With a TTY, stderr goes with stdout.
        let o = parse_options(Kind::Exec, Some("command=sh&output=1&error=1&tty=1")).unwrap();
        assert!(o.stdout && !o.stderr && o.tty);
        assert_eq!(
            parse_options(Kind::Exec, Some("command=sh&error=1&tty=1")).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert_eq!(
            parse_options(Kind::Exec, Some("output=1")).unwrap_err(),
            "you must specify at least one command for the container"
        );
    }

    #[test]
    fn negotiation_takes_the_clients_first_served_protocol() {
        let mut h = HeaderMap::new();
        assert_eq!(negotiate(&h), Ok((None, Protocol::V1)));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(
                "v3.channel.k8s.io, v4.base64.channel.k8s.io,v4.channel.k8s.io",
            ),
        );
        assert_eq!(
            negotiate(&h),
            Ok((Some("v4.base64.channel.k8s.io"), Protocol::V4Base64))
        );
        // v5 wherever it is (the API server's translator takes the request).
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v4.channel.k8s.io"),
        );
        h.append(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v5.channel.k8s.io"),
        );
        assert_eq!(negotiate(&h), Ok((Some("v5.channel.k8s.io"), Protocol::V5)));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v2.channel.k8s.io"),
        );
        assert_eq!(negotiate(&h), Err(()));
    }
}
