//! kbatch-apiserver: a Kubernetes-compatible HTTP API server over kbatch-store.
//!
//! Requests are routed by path to discovery documents or to a resource target, then to the
//! verb handlers, which apply kbatch-api's defaulting and validation and write through the store.

pub mod apply;
pub mod authentication;
pub mod authorization;
pub mod connect;
pub mod discovery;
pub mod error;
pub mod event_ttl;
pub mod events;
pub mod eviction;
pub mod gc;
pub mod gojson;
pub mod handlers;
pub mod list_options;
pub mod logs;
pub mod metrics_api;
mod object;
pub mod openapi;
pub mod openapi_v2;
pub mod pdb;
pub mod priority;
pub mod protobuf;
pub mod request;
pub mod request_metrics;
pub mod resources;
pub mod reviews;
pub mod selector;
pub mod serviceaccount;
pub mod smp;
pub mod storage_metrics;
pub mod strategy;
pub mod table;
pub mod watch;
pub mod yaml;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use kbatch_store::Store;
use serde_json::json;

use crate::error::{ApiError, json_response};
use crate::handlers::{Change, MAX_BODY_BYTES};
use crate::request::{Query, Route, Target};
use crate::request_metrics::NonResource;

/// Namespaces that exist from the start, as on a new cluster.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Shared server state.
pub struct ServerState {
    pub store: Store,
    /// `host:port` clients reach the server at (legacy discovery reports it).
    pub address: String,
    ready: AtomicBool,
    shutdown: tokio::sync::watch::Sender<bool>,
    /// Renders the process's Prometheus metrics for `/metrics` (set by the binary, which
    /// knows what else runs in the process).
    metrics: std::sync::OnceLock<MetricsSource>,
    /// Where the local executor writes container logs (`pods/log` reads them); none without
    /// an executor.
    log_dir: RwLock<Option<PathBuf>>,
    /// When set, every request but the health checks and `/version` must carry
    /// `Authorization: Bearer <token>` (served on a non-loopback address).
    bearer_token: std::sync::OnceLock<String>,
    /// The resource metrics API, once its scraper runs (`kbatch up`).
    metrics_api: std::sync::OnceLock<Arc<metrics_api::MetricsApi>>,
}

/// A function that renders metrics in the Prometheus text format.
pub type MetricsSource = Box<dyn Fn() -> String + Send + Sync>;

pub type State = ServerState;

impl ServerState {
    pub fn new(store: Store, address: String) -> Arc<ServerState> {
        let (shutdown, _) = tokio::sync::watch::channel(false);
        Arc::new(ServerState {
            store,
            address,
            ready: AtomicBool::new(false),
            shutdown,
            metrics: std::sync::OnceLock::new(),
            log_dir: RwLock::new(None),
            bearer_token: std::sync::OnceLock::new(),
            metrics_api: std::sync::OnceLock::new(),
        })
    }

    /// Serve `pods/log` from this directory (the executor's `data_dir/logs`).
    /// Require this bearer token from now on (set once; later calls are ignored).
    pub fn require_bearer_token(&self, token: String) {
        let _ = self.bearer_token.set(token);
    }

    /// Whether `req` may go past authentication: no token required, or the right one sent.
    fn authenticated(&self, req: &Request) -> bool {
        self.user(req.headers()).is_some()
    }

    /// Who a request with these headers is, as kube-apiserver would see it; none when it is
    /// not authenticated. Without a bearer token (plain HTTP on loopback) everyone is the
    /// user of kube-apiserver's old insecure port; with one, its holder is a static-token
    /// admin and nobody else is anyone.
    pub fn user(&self, headers: &axum::http::HeaderMap) -> Option<&'static authentication::User> {
        if self.bearer_token.get().is_none() {
            return Some(&authentication::UNSECURED);
        }
        let sent = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)?;
        self.token_user(sent)
    }

    /// Whose bearer token `token` is: the admin's when it is the instance's token, else
    /// nobody's (also when no token is configured).
    pub fn token_user(&self, token: &str) -> Option<&'static authentication::User> {
        let want = self.bearer_token.get()?;
        // Compared in time independent of where they differ.
        let same = token.len() == want.len()
            && token
                .bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        same.then_some(&authentication::ADMIN)
    }

    pub fn set_log_dir(&self, dir: PathBuf) {
        if let Ok(mut d) = self.log_dir.write() {
            *d = Some(dir);
        }
    }

    pub fn log_dir(&self) -> Option<PathBuf> {
        self.log_dir.read().ok().and_then(|d| d.clone())
    }

    pub fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    /// What `/metrics` serves (the first source set wins).
    pub fn set_metrics_source(&self, source: MetricsSource) {
        let _ = self.metrics.set(source);
    }

    /// `/readyz` answers 200 from now on.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// Start the in-process garbage collector (standalone mode only: on a real cluster
    /// kube-controller-manager does this).
    pub fn start_garbage_collector(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(gc::run(self.clone()))
    }

    /// Delete each event `ttl` after its last write (kube-apiserver's `--event-ttl`).
    pub fn start_event_expiry(
        self: &Arc<Self>,
        ttl: std::time::Duration,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(event_ttl::run(self.clone(), ttl))
    }

    /// Serve metrics.k8s.io from now on, scraping every node's kubelet each `resolution`
    /// (metrics-server's `--metric-resolution`) until shutdown; once only.
    pub fn start_metrics_api(
        self: &Arc<Self>,
        resolution: std::time::Duration,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let api = Arc::new(metrics_api::MetricsApi::new(resolution));
        self.metrics_api.set(api.clone()).ok()?;
        Some(tokio::spawn(metrics_api::scrape::run(self.clone(), api)))
    }

    /// The metrics API, when it is served.
    pub fn metrics_api(&self) -> Option<&metrics_api::MetricsApi> {
        self.metrics_api.get().map(|a| a.as_ref())
    }

    /// End every open watch (graceful shutdown).
    pub fn begin_shutdown(&self) {
        self.ready.store(false, Ordering::SeqCst);
        let _ = self.shutdown.send(true);
    }

    /// Create the system namespaces that are missing, concurrently so they share a commit,
    /// then the system PriorityClasses.
    pub async fn bootstrap(&self) -> Result<(), ApiError> {
        let nsres = resources::by_kind(resources::Kind::Namespace);
        let creates = SYSTEM_NAMESPACES
            .iter()
            .filter(|ns| self.store.get(&nsres.key("", ns)).is_none())
            .map(|ns| {
                let obj = json!({
                    "kind": "Namespace", "apiVersion": "v1",
                    "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(),
                        "creationTimestamp": object::rfc3339(self.now()),
                        "labels": {"kubernetes.io/metadata.name": ns}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                });
                async move {
                    let create = storage_metrics::create(&self.store, nsres.key("", ns), obj);
                    (ns, create.await)
                }
            });
        for (ns, result) in futures::future::join_all(creates).await {
            match result {
                Ok(_) | Err(kbatch_store::StoreError::AlreadyExists(_)) => {}
                Err(e) => return Err(handlers::store_err(nsres, ns, e)),
            }
        }
        priority::bootstrap(self).await
    }
}

/// The HTTP application.
pub fn router(state: Arc<ServerState>) -> Router {
    Router::new().fallback(move |req: Request| {
        let state = state.clone();
        async move { dispatch(&state, req).await }
    })
}

/// Serve the connections `listener` accepts (plain TCP, or TLS streams) until `shutdown`
/// resolves.
pub async fn serve<L>(
    listener: L,
    state: Arc<ServerState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, router(state).into_make_service())
        .with_graceful_shutdown(shutdown)
        .await
}

/// `/healthz`, `/livez` and `/readyz` with the checks of kube-apiserver's that apply here:
/// `ping`, `etcd` (the store takes writes: after a failed commit it does not) and, for
/// `/readyz` only, the end of startup (503 until then, as before any check can pass).
/// Failing checks are listed as upstream lists them, reasons withheld.
fn health(path: &str, ready: bool, store: Result<(), String>) -> (StatusCode, String) {
    let name = path.trim_start_matches('/');
    if name == "readyz" && !ready {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready".into());
    }
    match store {
        Ok(()) => (StatusCode::OK, "ok".into()),
        // The reason is in the log, where each failed commit is.
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("[+]ping ok\n[-]etcd failed: reason withheld\n{name} check failed\n"),
        ),
    }
}

/// Serves one request inside its `request` span (entered only while the request's future runs,
/// never across its awaits, so other tasks' logs are not attributed to it).
async fn dispatch(st: &ServerState, req: Request) -> Response {
    use tracing::Instrument;
    let span = tracing::debug_span!("request", method = %req.method(), path = %req.uri().path());
    dispatch_in_span(st, req).instrument(span).await
}

async fn dispatch_in_span(st: &ServerState, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    let started = std::time::Instant::now();
    // The non-resource endpoints upstream counts in its request metrics.
    let counted = |endpoint, resp: Response| {
        let ct = handlers::content_type(req.headers());
        request_metrics::RequestLabels::non_resource(endpoint, &method, &query, &ct)
            .record_response(resp, started)
    };
    match path.as_str() {
        "/healthz" | "/livez" | "/readyz" => {
            let ready = st.ready.load(Ordering::SeqCst);
            let resp = health(&path, ready, st.store.health()).into_response();
            return counted(NonResource::Health(&path), resp);
        }
        "/version" => return json_response(StatusCode::OK, &discovery::version()),
        _ if !st.authenticated(&req) => {
            return error::ApiError::new(401, "Unauthorized", "Unauthorized").into_response();
        }
        "/metrics" => {
            storage_metrics::record(&st.store);
            let body = st.metrics.get().map(|f| f()).unwrap_or_default();
            return (
                StatusCode::OK,
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                body,
            )
                .into_response();
        }
        "/openapi/v2" => {
            let resp = openapi_v2::serve(&method, req.headers());
            return counted(NonResource::OpenApiV2, resp);
        }
        "/openapi/v3" => {
            let resp = json_response(StatusCode::OK, &openapi::root());
            return counted(NonResource::OpenApiRoot, resp);
        }
        p if p.starts_with("/openapi/v3/") => {
            let resp = match openapi::for_path(&p["/openapi/v3/".len()..]) {
                Ok(doc) => json_response(StatusCode::OK, doc),
                Err(e) => e.into_response(),
            };
            return counted(NonResource::OpenApiGroupVersion, resp);
        }
        _ => {}
    }
    // pods/exec, pods/attach and pods/portforward need the whole request: the connection
    // they upgrade comes with it.
    if (path.ends_with("/exec") || path.ends_with("/attach") || path.ends_with("/portforward"))
        && let Ok(Route::Resource(t)) = request::route(&path)
        && let Some(what) = t
            .subresource
            .as_deref()
            .and_then(connect::Connect::of_subresource)
        && t.resource.has_subresource(what.subresource())
        && t.name.is_some()
    {
        let labels = request_metrics::RequestLabels::new(&method, &t, &query, "");
        let resp = if method == Method::GET || method == Method::POST {
            connect::connect(st, &t, what, req).await
        } else {
            Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ))
        };
        return labels.record_response(resp.unwrap_or_else(error_response), started);
    }
    let (parts, body) = req.into_parts();
    let result = match request::route(&path) {
        Err(e) => Err(e),
        Ok(Route::Discovery {
            group,
            version,
            legacy_root,
        }) => {
            let accept = parts
                .headers
                .get(axum::http::header::ACCEPT)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            match discovery::aggregated_version(accept) {
                Some(v) if group.is_none() && version.is_none() && method == Method::GET => {
                    let mut resp = json_response(
                        StatusCode::OK,
                        &discovery::aggregated(v, legacy_root, st.metrics_api().is_some()),
                    );
                    if let Ok(ct) =
                        axum::http::HeaderValue::from_str(&discovery::aggregated_content_type(v))
                    {
                        resp.headers_mut()
                            .insert(axum::http::header::CONTENT_TYPE, ct);
                    }
                    let root = if legacy_root { "/api" } else { "/apis" };
                    let labels = request_metrics::RequestLabels::non_resource(
                        NonResource::AggregatedDiscovery(root),
                        &method,
                        &query,
                        "",
                    );
                    return labels.record_response(resp, started);
                }
                _ => discovery_doc(st, &method, group, version, legacy_root),
            }
        }
        Ok(Route::Review(t)) => {
            let labels = request_metrics::RequestLabels::review(
                &method,
                &t,
                &query,
                &handlers::content_type(&parts.headers),
            );
            let resp = if method == Method::POST {
                match read_body(body).await {
                    Ok(bytes) => authorization::create(st, &t, &query, &parts.headers, &bytes),
                    Err(e) => Err(e),
                }
            } else {
                Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ))
            };
            return labels.record_response(resp.unwrap_or_else(error_response), started);
        }
        Ok(Route::AuthenticationReview(review)) => {
            let labels = request_metrics::RequestLabels::authentication_review(
                &method,
                review,
                &query,
                &handlers::content_type(&parts.headers),
            );
            let resp = if method == Method::POST {
                match read_body(body).await {
                    Ok(bytes) => authentication::create(st, review, &query, &parts.headers, &bytes),
                    Err(e) => Err(e),
                }
            } else {
                Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ))
            };
            return labels.record_response(resp.unwrap_or_else(error_response), started);
        }
        Ok(Route::Metrics(t)) => {
            let Some(api) = st.metrics_api() else {
                return error_response(ApiError::no_route());
            };
            let labels = request_metrics::RequestLabels::metrics_api(&method, &t, &query);
            let tr = handlers::table_request(&parts.headers, &query);
            let resp = metrics_api::serve::serve(st, api, &method, &t, &query, tr);
            return labels.record_response(resp.unwrap_or_else(error_response), started);
        }
        Ok(Route::Resource(t)) => {
            let started = std::time::Instant::now();
            let labels = request_metrics::RequestLabels::new(
                &method,
                &t,
                &query,
                &handlers::content_type(&parts.headers),
            );
            let resp = resource(st, &method, &t, &query, &parts.headers, body)
                .await
                .unwrap_or_else(error_response);
            return labels.record_response(resp, started);
        }
    };
    result.unwrap_or_else(error_response)
}

fn error_response(e: ApiError) -> Response {
    if e.code >= 500 {
        tracing::warn!(code = e.code, message = %e.message, "request failed");
    }
    e.into_response()
}

fn discovery_doc(
    st: &ServerState,
    method: &Method,
    group: Option<String>,
    version: Option<String>,
    legacy_root: bool,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let metrics = st.metrics_api().is_some();
    let doc = match (group, version) {
        (None, None) if legacy_root => discovery::api_versions(&st.address),
        (None, None) => discovery::api_group_list(metrics),
        (Some(g), None) => discovery::api_group(&g, metrics)?,
        (Some(g), Some(v)) => discovery::api_resource_list(&g, &v, metrics)?,
        (None, Some(_)) => return Err(ApiError::no_route()),
    };
    Ok(json_response(StatusCode::OK, &doc))
}

async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
    to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::too_large(MAX_BODY_BYTES))
}

async fn resource(
    st: &ServerState,
    method: &Method,
    t: &Target,
    q: &Query,
    headers: &axum::http::HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let not_allowed = || {
        ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
    };
    if let Some(sub) = &t.subresource
        && !t.resource.has_subresource(sub)
    {
        return Err(ApiError::no_route());
    }
    let tr = handlers::table_request(headers, q);
    match (method.clone(), t.name.as_deref(), t.subresource.as_deref()) {
        (Method::GET, None, _) => {
            if t.watch_path || q.bool("watch")? {
                watch::watch(st, t, q, tr).await
            } else {
                handlers::list(st, t, q, tr).await
            }
        }
        (Method::GET, Some(_), Some("log")) => logs::pod_log(st, t, q).await,
        (Method::GET, Some(name), _) if t.watch_path => {
            // Legacy `/watch/.../NAME`: a watch narrowed to one name.
            let mut narrowed = t.clone();
            narrowed.name = None;
            let mut q2 = Query::parse(Some(&format!("fieldSelector=metadata.name%3D{name}")));
            q2.merge_from(q);
            watch::watch(st, &narrowed, &q2, tr).await
        }
        (Method::GET, Some(name), _) => handlers::get(st, t, name, tr).await,
        (Method::POST, None, None) => {
            handlers::create(st, t, q, headers, &read_body(body).await?).await
        }
        (Method::POST, Some(_), Some("binding")) => {
            handlers::bind(st, t, headers, &read_body(body).await?).await
        }
        (Method::POST, Some(_), Some("eviction")) => {
            eviction::evict(st, t, q, headers, &read_body(body).await?).await
        }
        (Method::PUT, Some(_), _) => {
            let v = handlers::decode_body(headers, &read_body(body).await?)?;
            handlers::update(st, t, q, headers, Change::Replace(v)).await
        }
        (Method::PATCH, Some(_), _) => {
            let ct = handlers::content_type(headers);
            let patch = read_body(body).await?;
            handlers::update(
                st,
                t,
                q,
                headers,
                Change::Patch {
                    content_type: &ct,
                    patch: &patch,
                },
            )
            .await
        }
        (Method::DELETE, Some(_), None) => {
            let opts = handlers::delete_options(q, headers, &read_body(body).await?)?;
            handlers::delete(st, t, &opts).await
        }
        (Method::DELETE, None, None) => {
            let opts = handlers::delete_options(q, headers, &read_body(body).await?)?;
            handlers::delete_collection(st, t, q, &opts).await
        }
        _ => Err(not_allowed()),
    }
}

#[cfg(test)]
mod health_tests {
    use super::*;

    #[test]
    fn health_checks_report_the_store_and_startup() {
        for path in ["/healthz", "/livez", "/readyz"] {
            assert_eq!(health(path, true, Ok(())), (StatusCode::OK, "ok".into()));
            let name = &path[1..];
            assert_eq!(
                health(path, true, Err("commit: Poisoned".into())),
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("[+]ping ok\n[-]etcd failed: reason withheld\n{name} check failed\n")
                ),
                "{path}"
            );
        }
        // Startup gates readiness only.
        assert_eq!(
            health("/readyz", false, Ok(())),
            (StatusCode::SERVICE_UNAVAILABLE, "not ready".into())
        );
        assert_eq!(health("/livez", false, Ok(())).0, StatusCode::OK);
    }
}
