//! The httpGet probe, as kubelet's pkg/probe/http runs it with Go's net/http client: the
//! probe's path parsed and escaped as Go's net/url does, Go's request headers, redirects
//! followed to the same host only, no keep-alive, https without certificate verification, the
//! body kept up to 10 KiB. Errors are Go's texts ("Get \"url\": ..."), since they end up
//! verbatim in the `Unhealthy` and `ProbeWarning` events users read. Kept apart from `run`
//! (which calls `probe`), being most of an attempt's code: a URL type, an HTTP/1.1 exchange over
//! hyper and rustls, a certificate verifier that accepts any certificate.

use kbatch_cron::go_quote;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::run::{Attempt, MAX_OUTPUT, Outcome, dial, errno_text, join_host_port, within};

/// Go's http.Client stops after this many requests in one redirect chain.
const MAX_REQUESTS: usize = 10;
/// kubelet's `kube-probe/<major>.<minor>`, for the release kbatch follows.
const USER_AGENT: &str = "kube-probe/1.37";
/// What kubelet's lifecycle hooks send instead (`kube-lifecycle/<major>.<minor>`).
pub(crate) const LIFECYCLE_USER_AGENT: &str = "kube-lifecycle/1.37";

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

/// One httpGet attempt: a GET of `path` on `host:port` (https: over TLS), bounded by `timeout`
/// (zero: none), its response judged as upstream's DoHTTPProbe judges it.
pub(super) async fn probe(
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Attempt {
    let (status, body) = match get(https, host, port, path, headers, timeout).await {
        Ok(response) => response,
        Err(failed) => return failed,
    };
    match status {
        200..=299 => Attempt::new(Outcome::Success, body),
        300..=399 => Attempt::new(
            Outcome::Warning,
            format!("Probe terminated redirects, Response body: {body}"),
        ),
        // The body is left out on purpose upstream (https://issue.k8s.io/99425).
        _ => Attempt::failure(format!("HTTP probe failed with statuscode: {status}")),
    }
}

/// The GET a probe (or a lifecycle hook, for which any response will do) sends: the final
/// response's status and body (its first 10 KiB), or the attempt as the request failed.
pub(crate) async fn get(
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<(u16, String), Attempt> {
    let first = Url::for_probe(https, host, port, path);
    let mut progress = Progress {
        url: first.text(),
        phase: Phase::Headers,
        dialing: String::new(),
    };
    let result = within(timeout, http_exchange(first, headers, &mut progress)).await;
    match result {
        Some(response) => response,
        None => {
            let url = go_quote(&progress.url);
            Err(match progress.phase {
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
            })
        }
    }
}

/// upstream DoHTTPProbe's request with a Go http.Client that follows redirects to the same host
/// name only (followNonLocalRedirects=false), a new connection per request.
async fn http_exchange(
    first: Url,
    probe_headers: &[(String, String)],
    progress: &mut Progress,
) -> Result<(u16, String), Attempt> {
    let get_error =
        |url: &str, e: &str| Err(Attempt::failure(format!("Get {}: {e}", go_quote(url))));
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
        return match exchange.body(MAX_OUTPUT).await {
            Ok(body) => Ok((status, String::from_utf8_lossy(&body).into_owned())),
            Err(e) => Err(Attempt::errored(Outcome::Failure, e)),
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
pub(super) mod test_support {
    //! A scripted HTTP server and an httpGet action, for the tests of `http` and of `run`.

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::probe::run::Action;

    pub(crate) type Seen = Arc<Mutex<Vec<String>>>;

    /// A server answering each request head with what `answer` gives (None: never answers),
    /// recording the heads.
    pub(crate) async fn serve<F>(answer: F) -> (u16, Seen)
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

    pub(crate) fn http(port: u16, path: &str, headers: &[(&str, &str)]) -> Action {
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
}

#[cfg(test)]
mod tests {
    use super::test_support::{http, serve};
    use super::*;
    use crate::probe::run::{Action, run_once};
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const SECOND: Duration = Duration::from_secs(1);

    fn response(status: &str, extra: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn target(head: &str) -> &str {
        head.split(' ').nth(1).unwrap_or("")
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
}
