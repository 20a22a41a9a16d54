//! `pods/exec`, `pods/attach` and `pods/portforward`, as kube-apiserver's `ExecREST`,
//! `AttachREST` and `PortForwardREST` connect them: the pod and container are resolved (a pod
//! of one container needs none named; a port-forward names none), the pod must be on a node,
//! and the client's upgrade request goes to that node's kubelet endpoint — its InternalIP and
//! `status.daemonEndpoints.kubeletEndpoint.Port` — at kubelet's `/exec/...` or
//! `/attach/{namespace}/{pod}/{container}`, the streams asked for as `input`, `output`,
//! `error` and `tty` (upstream's `streamLocation`), or at `/portForward/{namespace}/{pod}`
//! with the options' `ports` as `port` (`PortForwardLocation`; the node serves SPDY, SPDY
//! tunnelled through WebSocket and the WebSocket channel protocol itself). Once both sides have switched
//! protocols the bytes are copied both ways untouched (upstream's `UpgradeAwareHandler`); an
//! answer other than a switch is passed back as it came.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::ServerState;
use crate::error::ApiError;
use crate::logs::names_of;
use crate::request::{Target, parse_go_bool};

/// kubelet's port when a Node does not say (upstream's `--kubelet-port` default).
const DEFAULT_KUBELET_PORT: u16 = 10250;

/// The request headers a switch of protocols depends on, forwarded to the node.
const UPGRADE_HEADERS: &[HeaderName] = &[
    header::CONNECTION,
    header::UPGRADE,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
    header::SEC_WEBSOCKET_EXTENSIONS,
];

/// SPDY's protocol negotiation, forwarded too.
const STREAM_PROTOCOL_VERSION: &str = "x-stream-protocol-version";

/// Which connection to the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// Run a command beside the container's process (`PodExecOptions`).
    Exec,
    /// Join the container's own stdin and output (`PodAttachOptions`).
    Attach,
    /// Connections to the pod's ports (`PodPortForwardOptions`).
    PortForward,
}

impl Connect {
    /// The subresource, which is also kubelet's path prefix.
    pub fn subresource(self) -> &'static str {
        match self {
            Connect::Exec => "exec",
            Connect::Attach => "attach",
            Connect::PortForward => "portforward",
        }
    }

    pub fn of_subresource(sub: &str) -> Option<Connect> {
        match sub {
            "exec" => Some(Connect::Exec),
            "attach" => Some(Connect::Attach),
            "portforward" => Some(Connect::PortForward),
            _ => None,
        }
    }
}

/// What the request asks of the container, from `PodExecOptions` or `PodAttachOptions`
/// (which has no command) in the query.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExecOptions {
    pub container: Option<String>,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl ExecOptions {
    /// `command` repeats, so the raw query is read rather than the map of single values.
    pub fn from_query(raw: Option<&str>) -> Result<ExecOptions, ApiError> {
        let mut o = ExecOptions::default();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            let flag = |v: &str| {
                parse_go_bool(v).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "invalid value {v:?} for query parameter {k}: must be a boolean"
                    ))
                })
            };
            match k.as_ref() {
                "command" => o.command.push(v.into_owned()),
                "container" if !v.is_empty() => o.container = Some(v.into_owned()),
                "stdin" => o.stdin = flag(&v)?,
                "stdout" => o.stdout = flag(&v)?,
                "stderr" => o.stderr = flag(&v)?,
                "tty" => o.tty = flag(&v)?,
                _ => {}
            }
        }
        Ok(o)
    }

    /// kubelet's query: the streams asked for as `1`, the command in order.
    fn kubelet_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for c in &self.command {
            q.append_pair("command", c);
        }
        for (name, on) in [
            ("error", self.stderr),
            ("input", self.stdin),
            ("output", self.stdout),
            ("tty", self.tty),
        ] {
            if on {
                q.append_pair(name, "1");
            }
        }
        q.finish()
    }
}

/// The container to run in, as upstream's `streamLocation` picks and checks it.
pub fn container_for(pod: &Value, pod_name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let containers = names_of(spec, "containers");
    let init = names_of(spec, "initContainers");
    match asked {
        Some(c) => {
            let known = containers
                .iter()
                .chain(&init)
                .chain(&names_of(spec, "ephemeralContainers"))
                .any(|n| n == c);
            if known {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {pod_name}"
                )))
            }
        }
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}"
            ))),
            _ => {
                let mut msg = format!(
                    "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                    containers.join(" ")
                );
                if !init.is_empty() {
                    msg.push_str(&format!(
                        " or one of the init containers: [{}]",
                        init.join(" ")
                    ));
                }
                Err(ApiError::bad_request(msg))
            }
        },
    }
}

/// Where a Node's kubelet listens: its InternalIP (then ExternalIP, then Hostname) and its
/// advertised port (kube-apiserver's `--kubelet-preferred-address-types`, with the
/// addresses a one-machine node can be reached at first).
pub fn kubelet_address(node: &Value) -> Option<(String, u16)> {
    let addresses = node.pointer("/status/addresses")?.as_array()?;
    let address = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|want| {
            addresses
                .iter()
                .find(|a| a.get("type").and_then(Value::as_str) == Some(want))
                .and_then(|a| a.get("address").and_then(Value::as_str))
                .filter(|a| !a.is_empty())
        })?
        .to_string();
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Some((address, port))
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    let has = |name: &HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .any(|part| part.trim().eq_ignore_ascii_case(token))
            })
        })
    };
    has(&header::CONNECTION, "upgrade") && headers.contains_key(header::UPGRADE)
}

/// `PodPortForwardOptions` from the query (`ports`, repeated or comma-separated, each a
/// 16-bit unsigned number: upstream's `Convert_Slice_string_To_Slice_int32`) as kubelet's query
/// has them (`port`); one that does not parse is a 400 in the conversion's words.
pub fn port_forward_query(raw: Option<&str>) -> Result<String, ApiError> {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if k != "ports" {
            continue;
        }
        for p in v.split(',') {
            let port: u16 = p.parse().map_err(|_| {
                // strconv.ParseUint(p, 10, 16)'s two errors.
                let why = if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                    "value out of range"
                } else {
                    "invalid syntax"
                };
                ApiError::bad_request(format!(
                    "cannot convert to []int32: strconv.ParseUint: parsing {p:?}: {why}"
                ))
            })?;
            q.append_pair("port", &port.to_string());
        }
    }
    Ok(q.finish())
}

/// Serves one `pods/exec`, `pods/attach` or `pods/portforward` request.
pub async fn connect(
    st: &ServerState,
    t: &Target,
    what: Connect,
    mut req: Request,
) -> Result<Response, ApiError> {
    let res = t.resource;
    let name = t.name.clone().unwrap_or_default();
    let ns = t.namespace.clone().unwrap_or_default();
    let (mut opts, forward_query) = match what {
        Connect::PortForward => (
            ExecOptions::default(),
            port_forward_query(req.uri().query())?,
        ),
        _ => (ExecOptions::from_query(req.uri().query())?, String::new()),
    };
    if what == Connect::Attach {
        opts.command.clear();
    }
    let obj = st
        .store
        .get(&res.key(&ns, &name))
        .ok_or_else(|| ApiError::not_found(res.plural, res.group, &name))?;
    let pod = crate::handlers::parse_stored(&obj)?;
    let container = match what {
        Connect::PortForward => None,
        _ => Some(container_for(&pod, &name, opts.container.as_deref())?),
    };
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(format!("pod {name} does not have a host assigned"))
        })?;
    let nodes = crate::resources::find("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("nodes are not served"))?;
    let node = st
        .store
        .get(&nodes.key("", node_name))
        .ok_or_else(|| ApiError::not_found(nodes.plural, nodes.group, node_name))?;
    let node = crate::handlers::parse_stored(&node)?;
    let (host, port) = kubelet_address(&node).ok_or_else(|| {
        ApiError::internal(format!("node {node_name} has no address to reach it at"))
    })?;
    if !is_upgrade(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }

    let path = match &container {
        Some(container) => format!(
            "/{}/{}/{}/{}?{}",
            what.subresource(),
            enc(&ns),
            enc(&name),
            enc(container),
            opts.kubelet_query()
        ),
        None => format!("/portForward/{}/{}?{forward_query}", enc(&ns), enc(&name)),
    };
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| ApiError::internal(format!("error dialing backend: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake::<_, Body>(TokioIo::new(stream))
        .await
        .map_err(|e| ApiError::internal(format!("error dialing backend: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "kubelet stream connection ended");
        }
    });
    let mut out = hyper::Request::builder()
        .method(req.method().clone())
        .uri(path)
        .header(header::HOST, format!("{host}:{port}"));
    for h in UPGRADE_HEADERS {
        for v in req.headers().get_all(h) {
            out = out.header(h, v);
        }
    }
    for v in req.headers().get_all(STREAM_PROTOCOL_VERSION) {
        out = out.header(STREAM_PROTOCOL_VERSION, v);
    }
    let out = out
        .body(Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut node_resp = sender
        .send_request(out)
        .await
        .map_err(|e| ApiError::internal(format!("error dialing backend: {e}")))?;

    if node_resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // kubelet's refusal (an unknown container, a stopped one) goes back as it came.
        let status = node_resp.status();
        let headers = node_resp.headers().clone();
        let body = Body::new(node_resp.into_body());
        let mut resp = (status, body).into_response();
        if let Some(ct) = headers.get(header::CONTENT_TYPE) {
            resp.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
        }
        return Ok(resp);
    }
    let client_side = hyper::upgrade::on(&mut req);
    let node_side = hyper::upgrade::on(&mut node_resp);
    tokio::spawn(async move {
        match (client_side.await, node_side.await) {
            (Ok(client), Ok(node)) => {
                let (mut client, mut node) = (TokioIo::new(client), TokioIo::new(node));
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut node).await {
                    tracing::debug!(error = %e, "container stream ended");
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!(error = %e, "container stream upgrade failed")
            }
        }
    });
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (k, v) in node_resp.headers() {
        resp.headers_mut().append(k, v.clone());
    }
    Ok(resp)
}

/// A path segment, escaped as Go's `url.URL` writes it.
fn enc(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    #[test]
    fn port_forward_options_as_upstreams_conversion_reads_them() {
        assert_eq!(
            port_forward_query(Some("ports=80&ports=81,8080")).unwrap(),
            "port=80&port=81&port=8080"
        );
        assert_eq!(port_forward_query(None).unwrap(), "");
        for (q, message) in [
            (
                "ports=http",
                "cannot convert to []int32: strconv.ParseUint: parsing \"http\": invalid syntax",
            ),
            (
                "ports=80,70000",
                "cannot convert to []int32: strconv.ParseUint: parsing \"70000\": value out \
                 of range",
            ),
            (
                "ports=-1",
                "cannot convert to []int32: strconv.ParseUint: parsing \"-1\": invalid syntax",
            ),
        ] {
            let e = port_forward_query(Some(q)).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (400, message), "{q}");
        }
    }

    #[test]
    fn options_from_the_query_and_kubelets_form_of_them() {
        let o = ExecOptions::from_query(Some(
            "command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&tty=false&container=main",
        ))
        .expect("options");
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert_eq!(o.container.as_deref(), Some("main"));
        assert!(o.stdin && o.stdout && !o.stderr && !o.tty);
        assert_eq!(
            o.kubelet_query(),
            "command=sh&command=-c&command=echo+hi&input=1&output=1"
        );
        assert_eq!(
            ExecOptions::from_query(Some("stdout=maybe"))
                .expect_err("bad bool")
                .code,
            400
        );
    }

    #[test]
    fn containers_are_chosen_as_upstream() {
        let one = json!({"spec": {"containers": [{"name": "main"}]}});
        assert_eq!(container_for(&one, "p", None).expect("default"), "main");
        let two = json!({"spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "a"}, {"name": "b"}],
        }});
        assert_eq!(
            container_for(&two, "p", None)
                .expect_err("ambiguous")
                .message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [setup]"
        );
        assert_eq!(
            container_for(&two, "p", Some("setup")).expect("init"),
            "setup"
        );
        let bad = container_for(&two, "p", Some("nope")).expect_err("unknown");
        assert_eq!(bad.code, 400);
        assert_eq!(bad.message, "container nope is not valid for pod p");
    }

    #[test]
    fn kubelet_address_prefers_the_internal_ip_and_the_advertised_port() {
        let node = json!({"status": {
            "addresses": [
                {"type": "Hostname", "address": "kbatch-node"},
                {"type": "InternalIP", "address": "127.0.0.1"},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 41234}},
        }});
        assert_eq!(
            kubelet_address(&node),
            Some(("127.0.0.1".to_string(), 41234))
        );
        let no_port = json!({"status": {"addresses": [{"type": "Hostname", "address": "h"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}});
        assert_eq!(kubelet_address(&no_port), Some(("h".to_string(), 10250)));
        assert_eq!(kubelet_address(&json!({"status": {}})), None);
    }

    #[test]
    fn only_upgrade_requests_are_proxied() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&h));
    }
}
