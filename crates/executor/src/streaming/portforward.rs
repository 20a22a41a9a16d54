//! kubelet's `/portForward/{namespace}/{pod}[/{uid}]`: what `pods/portforward` reaches. A
//! forwarded connection is a TCP connection to the port on the pod's network, which for this
//! node's pods is the host's own (they run as host processes): `localhost`, IPv4 first, then
//! IPv6, as containerd dials inside a pod's namespace.
//!
//! Three ways in, as upstream serves them:
//! - SPDY/3.1 (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: portforward.k8s.io`): the
//!   client opens a pair of streams per connection, `streamType` `error` and `data`, both
//!   with the `port` and a `requestID` (kubelet's `httpStreamHandler`); the streams of a pair
//!   arrive within 30 s of each other or the pair is dropped;
//! - SPDY tunnelled in WebSocket binary messages (subprotocol `SPDY/3.1+portforward.k8s.io`):
//!   what kubectl >= 1.31 asks for first (kube-apiserver's tunnelling handler; here the node
//!   speaks it itself);
//! - the WebSocket channel protocol (`v4.channel.k8s.io`, its base64 form, or none), with the
//!   ports in the query (`port`, repeated or comma-separated): per port a data channel (2i)
//!   and an error channel (2i+1), each opened with the port in two little-endian bytes, one
//!   connection per port, made at once (kubelet's `handleWebSocketStreams`; the Python client's
//!   `portforward`).
//!
//! A connection that cannot be made, or fails, is reported on the pair's error stream in
//! kubelet's words (`error forwarding port P to pod ...`), which kubectl prints. When one
//! direction of a connection ends the other gets a second to finish, as containerd's
//! forwarder gives it, then both streams are closed.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header;
use hyper::{Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::session::{self, Protocol};
use super::spdy::conn::{Frames, Source, write_out};
use super::spdy::{self, Decoder, Encoder, Frame};
use super::ws;
use super::{
    Shared, header_list, is_websocket, on_upgrade, path_segment, spdy_handshake, spdy_switch, text,
    websocket_accept, websocket_switch,
};

pub const PATH_PREFIX: &str = "/portForward/";
/// The one port-forward protocol there is (`portforward.PortForwardProtocolV1Name`).
const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of SPDY tunnelled through it.
const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The channel protocols kubelet's WebSocket port-forward offers, in its order of preference.
const CHANNEL_PROTOCOLS: [(&str, Protocol); 2] = [
    ("v4.channel.k8s.io", Protocol::V4),
    ("v4.base64.channel.k8s.io", Protocol::V4Base64),
];
/// How long the second stream of a pair may take (kubelet's `streamCreationTimeout`).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the other direction gets once one has ended (containerd's forwarder).
const LINGER: Duration = Duration::from_secs(1);
/// Frames waiting for the client; a slow client holds the backends back.
const OUT_QUEUE: usize = 64;
/// Chunks of client data waiting for a backend connection.
const IN_QUEUE: usize = 16;

/// The pod a session forwards to.
#[derive(Debug, Clone)]
struct Pod {
    uid: String,
}

/// The pod named by a `/portForward/...` path: namespace, name, and the UID when given.
fn parse_path(path: &str) -> Option<(String, String, Option<String>)> {
    let rest = path.strip_prefix(PATH_PREFIX)?;
    let decode = path_segment;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [ns, pod] => Some((decode(ns)?, decode(pod)?, None)),
        [ns, pod, uid] => Some((decode(ns)?, decode(pod)?, Some(decode(uid)?))),
        _ => None,
    }
}

/// kubelet's `NewV4Options`: the ports of a WebSocket request, from its `port` parameters.
fn websocket_ports(query: Option<&str>) -> Result<Vec<u16>, String> {
    let values: Vec<String> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| k == "port")
        .map(|(_, v)| v.into_owned())
        .collect();
    if values.is_empty() {
        return Err("query parameter \"port\" is required".to_string());
    }
    let mut ports = Vec::new();
    for value in &values {
        if value.is_empty() {
            return Err("query parameter \"port\" cannot be empty".to_string());
        }
        for p in value.split(',') {
            let port =
                parse_port(p).map_err(|e| format!("unable to parse {value:?} as a port: {e}"))?;
            if port == 0 {
                return Err(format!("port {value:?} must be > 0"));
            }
            ports.push(port);
        }
    }
    Ok(ports)
}

/// A port as Go's `strconv.ParseUint(s, 10, 16)` reads it, with its error's words.
fn parse_port(s: &str) -> Result<u16, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseUint: parsing {s:?}: invalid syntax"));
    }
    s.parse::<u16>()
        .map_err(|_| format!("strconv.ParseUint: parsing {s:?}: value out of range"))
}

/// How a session's bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Spdy,
    Tunnel,
    Channels(Protocol),
}

/// Answer a `/portForward/...` request: upgrade it and serve the session, or refuse it.
pub fn handle(mut req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let Some((namespace, name, uid)) = parse_path(req.uri().path()) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n");
    };
    if req.method() != Method::GET && req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let headers = req.headers();
    let websocket = is_websocket(headers);
    let offered = header_list(headers, header::SEC_WEBSOCKET_PROTOCOL);
    let tunnel = websocket && offered.contains(&TUNNEL_PROTOCOL);
    let ports = if websocket && !tunnel {
        match websocket_ports(req.uri().query()) {
            Ok(p) => p,
            Err(e) => return text(StatusCode::BAD_REQUEST, &e),
        }
    } else {
        Vec::new()
    };
    let Some(pod_uid) = shared.registry.pod_uid(&namespace, &name) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    if uid.as_deref().is_some_and(|u| u != pod_uid) {
        return text(StatusCode::NOT_FOUND, "pod not found");
    }
    let (resp, way) = if websocket {
        let accept = match websocket_accept(headers) {
            Ok(a) => a,
            Err(refusal) => return *refusal,
        };
        let (name, way) = if tunnel {
            (Some(TUNNEL_PROTOCOL), Way::Tunnel)
        } else if offered.is_empty() {
            (None, Way::Channels(Protocol::V1))
        } else {
            match offered
                .iter()
                .find_map(|p| CHANNEL_PROTOCOLS.iter().find(|(n, _)| n == p))
            {
                Some((name, protocol)) => (Some(*name), Way::Channels(*protocol)),
                None => return text(StatusCode::FORBIDDEN, ""),
            }
        };
        (websocket_switch(accept, name), way)
    } else {
        match spdy_handshake(headers, &[PROTOCOL]) {
            Ok(name) => (spdy_switch(name), Way::Spdy),
            Err(refusal) => return *refusal,
        }
    };
    tracing::debug!(%namespace, pod = %name, ?way, ?ports, "port-forward");
    let pod = Pod { uid: pod_uid };
    let shutdown = shared.shutdown.clone();
    on_upgrade(&mut req, move |io| async move {
        match way {
            Way::Spdy | Way::Tunnel => {
                spdy_session(io, way == Way::Tunnel, pod, shutdown).await;
            }
            Way::Channels(protocol) => {
                channel_session(io, protocol, ports, pod, shutdown).await;
            }
        }
    });
    resp
}

/// Go's words for an OS error (`syscall.Errno`'s strings are strerror's, lower-cased).
fn go_errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => {
            let desc = nix::errno::Errno::from_raw(n).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => desc.to_string(),
            }
        }
        None => e.to_string(),
    }
}

/// A connection to the port on the pod's network, or the error stream's message.
async fn dial(pod: &Pod, port: u16) -> Result<TcpStream, String> {
    let v4 = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(c) => return Ok(c),
        Err(e) => go_errno_text(&e),
    };
    let v6 = match TcpStream::connect(("::1", port)).await {
        Ok(c) => return Ok(c),
        Err(e) => go_errno_text(&e),
    };
    // The pod's UID stands for containerd's sandbox ID (and kubelet's UID is empty then).
    Err(format!(
        "error forwarding port {port} to pod {uid}, uid : failed to connect to localhost:{port} \
         inside namespace \"{uid}\", IPv4: dial tcp4 127.0.0.1:{port}: connect: {v4} IPv6 dial \
         tcp6 [::1]:{port}: connect: {v6} ",
        uid = pod.uid
    ))
}

fn forward_error(pod: &Pod, port: u16, e: &std::io::Error) -> String {
    format!(
        "error forwarding port {port} to pod {}, uid : {}",
        pod.uid,
        go_errno_text(e)
    )
}

/// Where a forwarded connection's output goes and how its end is told.
trait Sink: Send + Sync + 'static {
    /// Bytes from the backend; false once the client is gone.
    fn data(&self, data: &[u8]) -> impl Future<Output = bool> + Send;
    /// The error stream's message.
    fn error(&self, message: &str) -> impl Future<Output = ()> + Send;
    /// The backend sent all it will.
    fn done(&self) -> impl Future<Output = ()> + Send;
}

/// One forwarded connection: the backend's bytes to `sink`, the client's (`from_client`, until
/// it ends) to the backend. Returns once both directions are done, or one is and the other had
/// its second.
async fn forward<S: Sink>(
    pod: Pod,
    port: u16,
    mut from_client: mpsc::Receiver<Bytes>,
    sink: S,
    mut closed: watch::Receiver<bool>,
) {
    let conn = match dial(&pod, port).await {
        Ok(c) => c,
        Err(message) => {
            tracing::debug!(port, %message, "port-forward");
            sink.error(&message).await;
            sink.done().await;
            return;
        }
    };
    let _ = conn.set_nodelay(true);
    let (mut rd, mut wr) = conn.into_split();
    let up = async {
        while let Some(chunk) = from_client.recv().await {
            wr.write_all(&chunk).await?;
        }
        wr.shutdown().await
    };
    let down = async {
        let mut buf = vec![0u8; spdy::MAX_DATA];
        loop {
            let n = rd.read(&mut buf).await?;
            if n == 0 || !sink.data(&buf[..n]).await {
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    tokio::pin!(up, down);
    let (first, rest_up) = tokio::select! {
        r = &mut up => (r, false),
        r = &mut down => (r, true),
        _ = closed.wait_for(|c| *c) => return,
    };
    let mut failure = first.err();
    let rest = async { if rest_up { up.await } else { down.await } };
    if let Ok(Err(e)) = tokio::time::timeout(LINGER, rest).await
        && failure.is_none()
    {
        failure = Some(e);
    }
    if let Some(e) = failure {
        sink.error(&forward_error(&pod, port, &e)).await;
    }
    sink.done().await;
}

// ---- SPDY ----

/// A pair's side of the client: its data and error streams.
struct PairSink {
    frames: Frames,
    data: u32,
    error: u32,
}

impl Sink for PairSink {
    async fn data(&self, data: &[u8]) -> bool {
        self.frames.send(spdy::data(self.data, false, data)).await
    }
    async fn error(&self, message: &str) {
        self.frames
            .send(spdy::data(self.error, false, message.as_bytes()))
            .await;
    }
    async fn done(&self) {
        // kubelet closes the error stream, then the data stream.
        self.frames.send(spdy::data(self.error, true, &[])).await;
        self.frames.send(spdy::data(self.data, true, &[])).await;
    }
}

/// A pair of streams being put together.
struct Pair {
    port: u16,
    data: Option<(u32, mpsc::Receiver<Bytes>)>,
    error: Option<u32>,
    created: Instant,
}

async fn spdy_session<S>(io: S, tunneled: bool, pod: Pod, mut shutdown: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let writer = tokio::spawn(write_out(wr, rx, tunneled));
    let mut source = if tunneled {
        Source::Tunnel(ws::Reader::new(rd), tx.clone())
    } else {
        Source::Raw(rd)
    };
    let frames = Frames(tx);
    let (closed_tx, closed_rx) = watch::channel(false);
    let mut decoder = Decoder::new();
    let mut encoder = Encoder::new();
    // Client data for each data stream whose pair is forwarding (or waiting for its error
    // stream).
    let mut inbound: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut buf = Vec::new();
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    'session: loop {
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "port-forward: SPDY");
                    frames.send(spdy::goaway(0, 1)).await;
                    break 'session;
                }
            };
            match frame {
                Frame::SynStream {
                    stream, headers, ..
                } => {
                    let accepted = accept_stream(&headers);
                    let reply = encoder.syn_reply(stream, accepted.is_err(), &[]);
                    frames.send(reply).await;
                    let (kind, port) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::debug!(stream, error = %e, "port-forward: stream refused");
                            continue;
                        }
                    };
                    let request = request_id(stream, kind, &headers);
                    let pair = pairs.entry(request.clone()).or_insert_with(|| Pair {
                        port,
                        data: None,
                        error: None,
                        created: Instant::now(),
                    });
                    match kind {
                        StreamKind::Data if pair.data.is_none() => {
                            let (tx, rx) = mpsc::channel(IN_QUEUE);
                            inbound.insert(stream, tx);
                            pair.data = Some((stream, rx));
                        }
                        StreamKind::Error if pair.error.is_none() => pair.error = Some(stream),
                        _ => {
                            // kubelet: "data/error stream already assigned".
                            frames
                                .send(spdy::rst_stream(stream, spdy::RST_PROTOCOL_ERROR))
                                .await;
                            continue;
                        }
                    }
                    if pair.data.is_some()
                        && pair.error.is_some()
                        && let Some(Pair {
                            port,
                            data: Some((data, rx)),
                            error: Some(error),
                            ..
                        }) = pairs.remove(&request)
                    {
                        let sink = PairSink {
                            frames: frames.clone(),
                            data,
                            error,
                        };
                        tokio::spawn(forward(pod.clone(), port, rx, sink, closed_rx.clone()));
                    }
                }
                Frame::Data { stream, fin, data } => {
                    if let Some(tx) = inbound.get(&stream)
                        && !data.is_empty()
                        && tx.send(data).await.is_err()
                    {
                        inbound.remove(&stream);
                    }
                    if fin {
                        inbound.remove(&stream);
                    }
                }
                Frame::RstStream { stream, .. } => {
                    inbound.remove(&stream);
                }
                Frame::Ping(id) => {
                    frames.send(spdy::ping(id)).await;
                }
                Frame::GoAway { .. } => break 'session,
                Frame::SynReply { .. } | Frame::Other(_) => {}
            }
        }
        tokio::select! {
            n = source.next(&mut buf) => match n {
                Some(n) => decoder.extend(&buf[..n]),
                None => break,
            },
            _ = sweep.tick() => {
                // A pair whose other stream never came: kubelet's monitorStreamPair.
                let now = Instant::now();
                let expired: Vec<String> = pairs
                    .iter()
                    .filter(|(_, p)| now.duration_since(p.created) >= STREAM_CREATION_TIMEOUT)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in expired {
                    if let Some(p) = pairs.remove(&k) {
                        if let Some(error) = p.error {
                            let message = format!("timed out waiting for streams (request={k}, port={})", p.port);
                            frames.send(spdy::data(error, false, message.as_bytes())).await;
                            frames.send(spdy::data(error, true, &[])).await;
                        }
                        if let Some((data, _)) = p.data {
                            inbound.remove(&data);
                            frames.send(spdy::rst_stream(data, spdy::RST_CANCEL)).await;
                        }
                    }
                }
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    let _ = closed_tx.send(true);
    drop(inbound);
    drop(frames);
    drop(source);
    let _ = writer.await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamKind {
    Data,
    Error,
}

/// kubelet's checks of a new stream's headers (`httpStreamReceived`).
fn accept_stream(headers: &spdy::Headers) -> Result<(StreamKind, u16), String> {
    let port = spdy::header(headers, "port").unwrap_or("");
    if port.is_empty() {
        return Err("\"port\" header is required".to_string());
    }
    let port = parse_port(port).map_err(|e| format!("unable to parse {port:?} as a port: {e}"))?;
    if port == 0 {
        return Err(format!("port \"{port}\" must be > 0"));
    }
    match spdy::header(headers, "streamtype").unwrap_or("") {
        "" => Err("\"streamType\" header is required".to_string()),
        "data" => Ok((StreamKind::Data, port)),
        "error" => Ok((StreamKind::Error, port)),
        other => Err(format!("invalid stream type {other:?}")),
    }
}

/// The pair a stream belongs to: its `requestID`, or, from a client too old to send one,
/// kubelet's guess from the stream ids (a pair's error stream first, its data stream next).
fn request_id(stream: u32, kind: StreamKind, headers: &spdy::Headers) -> String {
    match spdy::header(headers, "requestid") {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => match kind {
            StreamKind::Error => stream.to_string(),
            StreamKind::Data => stream.saturating_sub(2).to_string(),
        },
    }
}

// ---- WebSocket channels ----

/// A port's channels in a channel-protocol session.
struct ChannelSink {
    out: session::Out,
    data: u8,
}

impl Sink for ChannelSink {
    async fn data(&self, data: &[u8]) -> bool {
        self.out.data(self.data, data).await
    }
    async fn error(&self, message: &str) {
        self.out.data(self.data + 1, message.as_bytes()).await;
    }
    async fn done(&self) {}
}

async fn channel_session<S>(
    io: S,
    protocol: Protocol,
    ports: Vec<u16>,
    pod: Pod,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (out, writer) = session::writer(wr, protocol);
    let mut reader = ws::Reader::new(rd);
    // Channels 2i and 2i+1 belong to the i-th port; a byte holds channel numbers up to 255.
    let ports: Vec<u16> = ports.into_iter().take(128).collect();
    let (closed_tx, closed_rx) = watch::channel(false);
    let mut inbound = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, port) in ports.iter().enumerate() {
        let channel = (2 * i) as u8;
        out.data(channel, &port.to_le_bytes()).await;
        out.data(channel + 1, &port.to_le_bytes()).await;
        let (tx, rx) = mpsc::channel(IN_QUEUE);
        inbound.push(Some(tx));
        let sink = ChannelSink {
            out: out.clone(),
            data: channel,
        };
        tasks.spawn(forward(pod.clone(), *port, rx, sink, closed_rx.clone()));
    }
    loop {
        tokio::select! {
            m = reader.next() => match session::incoming(protocol, m, &out).await {
                session::Incoming::Data(channel, data) => {
                    let i = usize::from(channel / 2);
                    if channel % 2 == 0
                        && let Some(slot) = inbound.get_mut(i)
                        && let Some(tx) = slot
                        && tx.send(Bytes::from(data)).await.is_err()
                    {
                        *slot = None;
                    }
                }
                session::Incoming::Nothing => {}
                session::Incoming::Gone => break,
            },
            done = tasks.join_next() => {
                if done.is_none() {
                    // Every connection ended: kubelet closes the session.
                    out.frame(ws::close_frame(ws::CLOSE_NORMAL)).await;
                    break;
                }
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    let _ = closed_tx.send(true);
    drop(inbound);
    while tasks.join_next().await.is_some() {}
    drop(out);
    let _ = writer.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_kubelet_routes_them() {
        assert_eq!(
            parse_path("/portForward/ns/web"),
            Some(("ns".into(), "web".into(), None))
        );
        assert_eq!(
            parse_path("/portForward/ns/web/u-1"),
            Some(("ns".into(), "web".into(), Some("u-1".into())))
        );
        assert_eq!(parse_path("/portForward/ns"), None);
        assert_eq!(parse_path("/portForward/ns//u"), None);
    }

    #[test]
    fn websocket_ports_as_new_v4_options_reads_them() {
        assert_eq!(
            websocket_ports(Some("port=80&port=81,82")),
            Ok(vec![80, 81, 82])
        );
        assert_eq!(
            websocket_ports(None),
            Err("query parameter \"port\" is required".into())
        );
        assert_eq!(
            websocket_ports(Some("port=")),
            Err("query parameter \"port\" cannot be empty".into())
        );
        assert_eq!(
            websocket_ports(Some("port=http")),
            Err(
                "unable to parse \"http\" as a port: strconv.ParseUint: parsing \"http\": \
                 invalid syntax"
                    .into()
            )
        );
        assert_eq!(
            websocket_ports(Some("port=70000")),
            Err(
                "unable to parse \"70000\" as a port: strconv.ParseUint: parsing \"70000\": \
                 value out of range"
                    .into()
            )
        );
        assert_eq!(
            websocket_ports(Some("port=0")),
            Err("port \"0\" must be > 0".into())
        );
    }

    #[test]
    fn stream_headers_as_kubelet_checks_them() {
        let h = |pairs: &[(&str, &str)]| -> spdy::Headers {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            accept_stream(&h(&[("streamtype", "data"), ("port", "80")])),
            Ok((StreamKind::Data, 80))
        );
        assert_eq!(
            accept_stream(&h(&[("streamtype", "data")])),
            Err("\"port\" header is required".into())
        );
        assert_eq!(
            accept_stream(&h(&[("port", "80")])),
            Err("\"streamType\" header is required".into())
        );
        assert_eq!(
            accept_stream(&h(&[("port", "80"), ("streamtype", "x")])),
            Err("invalid stream type \"x\"".into())
        );
        // Without a requestID: the error stream's own id, the data stream's minus two.
        let none = h(&[]);
        assert_eq!(request_id(5, StreamKind::Error, &none), "5");
        assert_eq!(request_id(7, StreamKind::Data, &none), "5");
        assert_eq!(
            request_id(7, StreamKind::Data, &h(&[("requestid", "3")])),
            "3"
        );
    }

    #[test]
    fn os_errors_in_gos_words() {
        let e = std::io::Error::from_raw_os_error(nix::libc::ECONNREFUSED);
        assert_eq!(go_errno_text(&e), "connection refused");
    }
}
