//! gRPC probes, as kubelet's (pkg/probe/grpc): the standard health check
//! `grpc.health.v1.Health/Check` over plaintext HTTP/2 (h2c) to the pod's IP. Like upstream's,
//! every outcome is a success or a failure, never an error (so never retried), and the texts
//! are grpc-go's and kubelet's, since they end up in `Unhealthy` events.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kbatch_cron::{format_go_duration, go_quote};
use tokio::time::Instant;

use super::run::{Attempt, Outcome, dial, join_host_port};

/// kubelet's `kube-probe/<major>.<minor>` (grpc-go appends its own name to it).
const USER_AGENT: &str = "kube-probe/1.37";
const METHOD_PATH: &str = "/grpc.health.v1.Health/Check";
/// grpc-go's reconnect back-off: 1 s, then 1.6 times longer each time.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// A health response is a few bytes; anything much larger is not one.
const MAX_RESPONSE: usize = 64 * 1024;

/// The health check of `service` on `host:port`, all of it (connecting included) within
/// `timeout`, as upstream's `grpcProber.Probe`.
pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Attempt {
    let addr = join_host_port(host, port);
    let deadline = Instant::now() + timeout;
    let within = format_go_duration(i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX));
    // grpc-go's blocking dial: retried until the connection is ready or the deadline passes.
    let Ok(mut send) = tokio::time::timeout_at(deadline, connect(host, port)).await else {
        return Attempt::failure(format!(
            "timeout: failed to connect service {} within {within}: context deadline exceeded",
            go_quote(&addr)
        ));
    };
    // Running out of time is the call's DeadlineExceeded, as the deadline ends it in grpc-go.
    let call = tokio::time::timeout_at(deadline, check(&mut send, &addr, service))
        .await
        .unwrap_or_else(|_| Err(Status::new(Code::DeadlineExceeded, String::new())));
    match call {
        Err(status) if status.code == Code::DeadlineExceeded => Attempt::failure(format!(
            "timeout: health rpc did not complete within {within}"
        )),
        Err(status) if status.code == Code::Unimplemented => Attempt::failure(format!(
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): {}",
            status.message
        )),
        Err(status) => Attempt::failure(format!(
            "error: health rpc probe failed: {}",
            status.error()
        )),
        Ok(1) => Attempt::new(Outcome::Success, "service healthy"),
        Ok(other) => Attempt::failure(format!(
            "service unhealthy (responded with {})",
            go_quote(&serving_status_name(other))
        )),
    }
}

/// A ready HTTP/2 connection to `host:port`: TCP, the client's preface, and an answer in
/// HTTP/2 from the server (a ping's), as grpc-go waits for the server's preface before the
/// connection is ready. A server that does not speak HTTP/2 is a failed attempt, retried.
async fn connect(host: &str, port: u16) -> h2::client::SendRequest<Bytes> {
    let mut wait = FIRST_RETRY;
    loop {
        if let Some(send) = try_connect(host, port).await {
            return send;
        }
        tokio::time::sleep(wait).await;
        wait = wait.mul_f64(1.6).min(Duration::from_secs(120));
    }
}

async fn try_connect(host: &str, port: u16) -> Option<h2::client::SendRequest<Bytes>> {
    let mut dialing = String::new();
    let tcp = dial(host, port, &mut dialing).await.ok()?;
    let _ = tcp.set_nodelay(true);
    let (send, mut connection) = h2::client::handshake(tcp).await.ok()?;
    let mut ping = connection.ping_pong()?;
    // The connection is driven until the probe drops its last handle to it.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    ping.ping(h2::Ping::opaque()).await.ok()?;
    send.ready().await.ok()
}

/// The unary call `Check(HealthCheckRequest{service})`: the response's serving status.
async fn check(
    send: &mut h2::client::SendRequest<Bytes>,
    addr: &str,
    service: &str,
) -> Result<i64, Status> {
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{addr}{METHOD_PATH}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(http::header::USER_AGENT, USER_AGENT)
        .body(())
        .map_err(|e| Status::new(Code::Internal, e.to_string()))?;
    let (response, mut body) = send
        .send_request(request, false)
        .map_err(Status::transport)?;
    body.send_data(frame(&health_check_request(service)), true)
        .map_err(Status::transport)?;
    let response = response.await.map_err(Status::transport)?;
    let (head, mut stream) = response.into_parts();
    if head.status != http::StatusCode::OK {
        return Err(Status::from_http(head.status));
    }
    // A "trailers-only" response carries the status in its headers.
    if let Some(status) = Status::from_headers(&head.headers) {
        return Err(status.or_ok_without_message());
    }
    let mut data = BytesMut::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.map_err(Status::transport)?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        if data.len() + chunk.len() > MAX_RESPONSE {
            return Err(Status::new(
                Code::ResourceExhausted,
                "grpc: received message larger than max".to_string(),
            ));
        }
        data.put(chunk);
    }
    let trailers = stream.trailers().await.map_err(Status::transport)?;
    match trailers.as_ref().and_then(Status::from_headers) {
        Some(status) if status.code != Code::Ok => return Err(status),
        Some(_) => {}
        None => {
            return Err(Status::new(
                Code::Internal,
                "server closed the stream without sending trailers".to_string(),
            ));
        }
    }
    let message = unframe(data.freeze())?;
    Ok(serving_status(&message))
}

/// `HealthCheckRequest{service}` in protobuf: field 1, a string (left out when empty).
fn health_check_request(service: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if !service.is_empty() {
        out.push(0x0a);
        put_varint(&mut out, service.len() as u64);
        out.extend_from_slice(service.as_bytes());
    }
    out
}

/// A gRPC message on the wire: not compressed, its length, itself.
fn frame(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u8(0);
    b.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    b.put_slice(message);
    b.freeze()
}

/// The one message of a unary response.
fn unframe(mut data: Bytes) -> Result<Bytes, Status> {
    let internal = |m: &str| Status::new(Code::Internal, m.to_string());
    if data.len() < 5 {
        return Err(internal("grpc: no response message"));
    }
    let compressed = data.get_u8();
    let len = data.get_u32() as usize;
    if compressed != 0 {
        return Err(internal(
            "grpc: compressed flag set with identity or empty encoding",
        ));
    }
    if data.len() < len {
        return Err(internal("grpc: truncated response message"));
    }
    Ok(data.split_to(len))
}

/// `HealthCheckResponse.status` (field 1, a varint enum; 0 when absent).
fn serving_status(mut message: &[u8]) -> i64 {
    let mut status = 0;
    while !message.is_empty() {
        let Some(key) = get_varint(&mut message) else {
            break;
        };
        let skipped = match key & 7 {
            0 => {
                let Some(v) = get_varint(&mut message) else {
                    break;
                };
                if key >> 3 == 1 {
                    // An enum is an int32 on the wire.
                    status = i64::from(v as i32);
                }
                0
            }
            1 => 8,
            2 => match get_varint(&mut message) {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                None => break,
            },
            5 => 4,
            _ => break,
        };
        if skipped > message.len() {
            break;
        }
        message = &message[skipped..];
    }
    status
}

/// The enum's name as Go's generated `String()` gives it: the number for an unknown value.
fn serving_status_name(status: i64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// gRPC's status codes, named as grpc-go prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    Ok,
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    const ALL: [Code; 17] = [
        Code::Ok,
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    fn from_number(n: u32) -> Option<Code> {
        Code::ALL.get(n as usize).copied()
    }
}

/// A call's non-OK outcome: its code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    code: Code,
    /// The code's number when it is not one of the known codes (grpc-go prints it so).
    number: Option<u32>,
    message: String,
}

impl Status {
    fn new(code: Code, message: String) -> Status {
        Status {
            code,
            number: None,
            message,
        }
    }

    /// A broken connection or stream, as grpc-go reports it.
    fn transport(e: h2::Error) -> Status {
        Status::new(Code::Unavailable, e.to_string())
    }

    /// grpc-go's status for a response that is not HTTP 200.
    fn from_http(status: http::StatusCode) -> Status {
        let code = match status.as_u16() {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        };
        let text = match status.canonical_reason() {
            Some(reason) => format!("{} ({reason})", status.as_u16()),
            None => status.as_u16().to_string(),
        };
        Status::new(
            code,
            format!("unexpected HTTP status code received from server: {text}"),
        )
    }

    /// `grpc-status` and `grpc-message` (percent-encoded) from headers or trailers.
    fn from_headers(headers: &http::HeaderMap) -> Option<Status> {
        let number: u32 = headers
            .get("grpc-status")?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let message = headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .map(|m| {
                percent_encoding::percent_decode_str(m)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        Some(match Code::from_number(number) {
            Some(code) => Status::new(code, message),
            None => Status {
                code: Code::Unknown,
                number: Some(number),
                message,
            },
        })
    }

    /// A trailers-only response that says OK sent no message at all.
    fn or_ok_without_message(self) -> Status {
        if self.code == Code::Ok && self.number.is_none() {
            Status::new(Code::Internal, "grpc: no response message".to_string())
        } else {
            self
        }
    }

    /// grpc-go's `status.Error` text.
    fn error(&self) -> String {
        let code = match self.number {
            Some(n) => format!("Code({n})"),
            None => format!("{:?}", self.code),
        };
        format!("rpc error: code = {code} desc = {}", self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::net::TcpListener;

    /// What the test server answers.
    #[derive(Clone)]
    enum Answer {
        /// A response message with this serving status, then OK trailers.
        Serving(i64),
        /// Trailers-only: this grpc-status and grpc-message.
        Status(u32, &'static str),
        /// Accepts the call and never answers it.
        Silent,
    }

    /// What the server saw of the request: its path, content type, TE, User-Agent and body.
    type Seen = Arc<Mutex<Vec<(String, String, String, String, Vec<u8>)>>>;

    async fn server(answer: Answer) -> (u16, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let answer = answer.clone();
                let record = Arc::clone(&record);
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.unwrap();
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        let (head, mut body) = request.into_parts();
                        let mut data = Vec::new();
                        while let Some(Ok(chunk)) = body.data().await {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            data.extend_from_slice(&chunk);
                        }
                        let header = |name: &str| {
                            head.headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string()
                        };
                        record.lock().unwrap().push((
                            head.uri.path().to_string(),
                            header("content-type"),
                            header("te"),
                            header("user-agent"),
                            data,
                        ));
                        let ok = http::Response::builder()
                            .status(200)
                            .header("content-type", "application/grpc");
                        match &answer {
                            Answer::Serving(status) => {
                                let mut stream =
                                    respond.send_response(ok.body(()).unwrap(), false).unwrap();
                                let mut msg = vec![0x08];
                                put_varint(&mut msg, *status as u64);
                                stream.send_data(frame(&msg), false).unwrap();
                                let mut trailers = http::HeaderMap::new();
                                trailers.insert("grpc-status", "0".parse().unwrap());
                                stream.send_trailers(trailers).unwrap();
                            }
                            Answer::Status(code, message) => {
                                let response = ok
                                    .header("grpc-status", code.to_string())
                                    .header("grpc-message", *message)
                                    .body(())
                                    .unwrap();
                                respond.send_response(response, true).unwrap();
                            }
                            Answer::Silent => {
                                tokio::time::sleep(Duration::from_secs(30)).await;
                            }
                        }
                    }
                });
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn a_serving_service_is_healthy_and_the_call_is_grpc_gos() {
        let (port, seen) = server(Answer::Serving(1)).await;
        let got = probe("127.0.0.1", port, "my.Service", Duration::from_secs(1)).await;
        assert_eq!(got, Attempt::new(Outcome::Success, "service healthy"));
        let seen = seen.lock().unwrap();
        let (path, content_type, te, agent, body) = &seen[0];
        assert_eq!(path, "/grpc.health.v1.Health/Check");
        assert_eq!(
            (content_type.as_str(), te.as_str()),
            ("application/grpc", "trailers")
        );
        assert_eq!(agent, "kube-probe/1.37");
        // Not compressed, 12 bytes: field 1, length 10, the service's name.
        assert_eq!(&body[..], b"\0\0\0\0\x0c\x0a\x0amy.Service");
    }

    #[tokio::test]
    async fn an_empty_service_name_is_left_out_of_the_request() {
        let (port, seen) = server(Answer::Serving(1)).await;
        let got = probe("127.0.0.1", port, "", Duration::from_secs(1)).await;
        assert_eq!(got.outcome, Outcome::Success);
        assert_eq!(seen.lock().unwrap()[0].4, vec![0, 0, 0, 0, 0]);
    }

    #[tokio::test]
    async fn a_service_not_serving_fails_with_its_status_name() {
        for (status, name) in [
            (2, "NOT_SERVING"),
            (3, "SERVICE_UNKNOWN"),
            (0, "UNKNOWN"),
            (9, "9"),
        ] {
            let (port, _) = server(Answer::Serving(status)).await;
            let got = probe("127.0.0.1", port, "", Duration::from_secs(1)).await;
            assert_eq!(
                got,
                Attempt::failure(format!("service unhealthy (responded with \"{name}\")"))
            );
        }
    }

    #[tokio::test]
    async fn error_statuses_are_worded_as_upstreams() {
        let cases = [
            (
                12,
                "unknown service grpc.health.v1.Health",
                "error: this server does not implement the grpc health protocol \
                 (grpc.health.v1.Health): unknown service grpc.health.v1.Health",
            ),
            (
                5,
                "unknown%20service",
                "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service",
            ),
            (4, "slow", "timeout: health rpc did not complete within 1s"),
            (
                42,
                "odd",
                "error: health rpc probe failed: rpc error: code = Code(42) desc = odd",
            ),
        ];
        for (code, message, want) in cases {
            let (port, _) = server(Answer::Status(code, message)).await;
            let got = probe("127.0.0.1", port, "", Duration::from_secs(1)).await;
            assert_eq!(got, Attempt::failure(want), "grpc-status {code}");
            assert_eq!(got.error, None, "never an error: not retried");
        }
    }

    /// The failure of a connection never ready within 300 ms.
    fn connect_timeout(port: u16) -> Attempt {
        Attempt::failure(format!(
            "timeout: failed to connect service \"127.0.0.1:{port}\" within 300ms: \
             context deadline exceeded"
        ))
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_timeout() {
        // A port that was just free.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let started = std::time::Instant::now();
        let got = probe("127.0.0.1", port, "", Duration::from_millis(300)).await;
        assert_eq!(got, connect_timeout(port));
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_server_that_does_not_speak_http2_is_never_connected() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut tcp, _)) = listener.accept().await {
                let _ = tcp.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let got = probe("127.0.0.1", port, "", Duration::from_millis(300)).await;
        assert_eq!(got, connect_timeout(port));
    }

    #[tokio::test]
    async fn a_call_left_unanswered_times_out() {
        let (port, _) = server(Answer::Silent).await;
        let got = probe("127.0.0.1", port, "", Duration::from_millis(300)).await;
        assert_eq!(
            got,
            Attempt::failure("timeout: health rpc did not complete within 300ms")
        );
    }

    #[test]
    fn serving_status_skips_unknown_fields() {
        // field 2 (a string), field 3 (fixed64), then field 1 = 2.
        let msg = [
            0x12, 0x02, b'h', b'i', 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x02,
        ];
        assert_eq!(serving_status(&msg), 2);
        assert_eq!(serving_status(&[]), 0);
        // Truncated: what was read so far.
        assert_eq!(serving_status(&[0x08, 0x01, 0x12, 0x05, b'a']), 1);
    }

    #[test]
    fn non_200_responses_map_as_grpc_gos() {
        let s = Status::from_http(http::StatusCode::NOT_FOUND);
        assert_eq!(s.code, Code::Unimplemented);
        assert_eq!(
            s.message,
            "unexpected HTTP status code received from server: 404 (Not Found)"
        );
        assert_eq!(
            Status::from_http(http::StatusCode::SERVICE_UNAVAILABLE).code,
            Code::Unavailable
        );
        assert_eq!(
            Status::from_http(http::StatusCode::IM_A_TEAPOT).code,
            Code::Unknown
        );
    }
}
