//! kube-apiserver's request metrics: `apiserver_request_total` and
//! `apiserver_request_duration_seconds`, with upstream's names, help texts, labels, buckets
//! and label values (the reported verb, the scope, the code as a string), for resource
//! requests and for the non-resource endpoints upstream instruments ([`NonResource`]).
//!
//! A watch's duration is the stream's life, as upstream's handler returns only when the
//! watch ends; every other request's is the time to its response.

use std::time::Instant;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use kbatch_metrics::{CounterVec, GaugeVec, HistogramVec};

use crate::request::{Query, Target};

const COMPONENT: &str = "apiserver";

/// The labels of `apiserver_request_total`; the duration's are the same but the code.
const LABELS: &[&str] = &[
    "verb",
    "dry_run",
    "group",
    "version",
    "resource",
    "subresource",
    "scope",
    "component",
    "code",
];

pub const REQUEST_TOTAL: CounterVec = CounterVec {
    name: "apiserver_request_total",
    help: "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
    labels: LABELS,
};

pub const LONGRUNNING_REQUESTS: GaugeVec = GaugeVec {
    name: "apiserver_longrunning_requests",
    help: "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
    labels: &[
        "verb",
        "group",
        "version",
        "resource",
        "subresource",
        "scope",
        "component",
    ],
};

/// The request latency buckets, which upstream's storage latency shares.
pub fn latency_buckets() -> Vec<f64> {
    vec![
        0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
        10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    ]
}

pub const REQUEST_DURATION: HistogramVec = HistogramVec {
    name: "apiserver_request_duration_seconds",
    help: "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
    labels: LABELS.split_at(LABELS.len() - 1).0,
    buckets: latency_buckets,
};

/// The labels of one request, but its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLabels {
    pub verb: &'static str,
    pub dry_run: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
    pub subresource: String,
    pub scope: &'static str,
    pub component: &'static str,
}

/// The non-resource endpoints upstream counts, each as its handler is wrapped there
/// (`metrics.InstrumentHandlerFunc` with the path as the subresource, no group, version,
/// resource or scope). `/metrics`, `/version` and the unaggregated discovery documents are
/// not wrapped there, and not counted here either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonResource<'a> {
    /// `/healthz`, `/livez`, `/readyz` (the health handlers' own path; component "").
    Health(&'a str),
    /// `/openapi/v2` (subresource `/openapi/v2`, component "").
    OpenApiV2,
    /// `/openapi/v3` (subresource `openapi/v3`, component "").
    OpenApiRoot,
    /// `/openapi/v3/...` (subresource `openapi/v3/`, component "").
    OpenApiGroupVersion,
    /// Aggregated discovery at `/api` or `/apis` (subresource the path, component
    /// "apiserver").
    AggregatedDiscovery(&'static str),
}

/// Upstream's `CanonicalVerb` and `cleanVerb` for a request without a resource: GET and HEAD
/// are `GET`, an apply patch `APPLY`, another known method itself, anything else `other`.
fn non_resource_verb(method: &Method, content_type: &str) -> &'static str {
    match method.as_str() {
        "GET" | "HEAD" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" if content_type == crate::apply::CONTENT_TYPE => "APPLY",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        _ => "other",
    }
}

/// The verb upstream reports: the installer's action (`POST` for a create, `PUT` for an
/// update, `LIST` for a collection read), `WATCH` for watches (also the legacy `/watch/`
/// paths), `APPLY` for a server-side apply patch, `other` for methods nothing serves.
pub fn reported_verb(method: &Method, t: &Target, q: &Query, content_type: &str) -> &'static str {
    // `watch=true` makes a collection read a watch; a named read stays a GET (upstream's
    // request info ignores it there, and so does the server).
    let watching = t.watch_path
        || (t.name.is_none()
            && q.get("watch").and_then(crate::request::parse_go_bool) == Some(true));
    // A streaming subresource is a connect (upstream's installer action `CONNECT`).
    if t.name.is_some()
        && matches!(
            t.subresource.as_deref(),
            Some("exec" | "attach" | "portforward")
        )
    {
        return "CONNECT";
    }
    match (method.as_str(), t.name.is_some()) {
        ("GET", _) if watching => "WATCH",
        ("GET", true) => "GET",
        ("GET", false) => "LIST",
        ("POST", _) => "POST",
        ("PUT", _) => "PUT",
        ("PATCH", _) if content_type == crate::apply::CONTENT_TYPE => "APPLY",
        ("PATCH", _) => "PATCH",
        ("DELETE", true) => "DELETE",
        ("DELETE", false) => "DELETECOLLECTION",
        _ => "other",
    }
}

/// Upstream's `CleanScope`: a named object or a create is `resource`, else a namespace's
/// collection is `namespace`, else `cluster`.
pub fn scope(method: &Method, t: &Target) -> &'static str {
    if t.name.is_some() || (method == Method::POST && t.subresource.is_none()) {
        "resource"
    } else if t.namespace.is_some() {
        "namespace"
    } else {
        "cluster"
    }
}

/// Upstream's `cleanDryRun`: the request's `dryRun` (`All`), `invalid` for any other value
/// (which the request is then refused for), empty without one.
fn dry_run(q: &Query) -> &'static str {
    match q.get("dryRun") {
        None => "",
        Some("All") => "All",
        Some(_) => "invalid",
    }
}

impl RequestLabels {
    pub fn new(method: &Method, t: &Target, q: &Query, content_type: &str) -> RequestLabels {
        RequestLabels {
            verb: reported_verb(method, t, q, content_type),
            dry_run: dry_run(q),
            group: t.resource.group,
            version: t.resource.version,
            resource: t.resource.plural,
            subresource: t.subresource.clone().unwrap_or_default(),
            scope: scope(method, t),
            component: COMPONENT,
        }
    }

    /// An access review (authorization.k8s.io): a collection path, only ever created.
    pub fn review(
        method: &Method,
        t: &crate::authorization::ReviewTarget,
        q: &Query,
        content_type: &str,
    ) -> RequestLabels {
        let gvr = (
            crate::authorization::GROUP,
            crate::authorization::VERSION,
            t.review.plural,
        );
        Self::create_only(method, gvr, t.namespace.is_some(), q, content_type)
    }

    /// An authentication.k8s.io review: as an access review, never in a namespace.
    pub fn authentication_review(
        method: &Method,
        review: &crate::authentication::Review,
        q: &Query,
        content_type: &str,
    ) -> RequestLabels {
        let gvr = (
            crate::authentication::GROUP,
            crate::authentication::VERSION,
            review.plural,
        );
        Self::create_only(method, gvr, false, q, content_type)
    }

    /// A metrics.k8s.io read (kube-apiserver counts what it proxies to metrics-server as
    /// any resource request).
    pub fn metrics_api(
        method: &Method,
        t: &crate::metrics_api::Target,
        q: &Query,
    ) -> RequestLabels {
        let watching = q.get("watch").and_then(crate::request::parse_go_bool) == Some(true);
        let verb = match (method.as_str(), t.name.is_some()) {
            ("GET", true) => "GET",
            ("GET", false) if watching => "WATCH",
            ("GET", false) => "LIST",
            _ => non_resource_verb(method, ""),
        };
        let scope = scope_of(t.name.is_some(), t.namespace.is_some());
        RequestLabels {
            verb,
            dry_run: dry_run(q),
            group: crate::metrics_api::GROUP,
            version: crate::metrics_api::VERSION,
            resource: t.resource.plural(),
            subresource: String::new(),
            scope,
            component: COMPONENT,
        }
    }

    /// A create-only resource's collection path (`in_namespace`: the URL names one).
    fn create_only(
        method: &Method,
        (group, version, resource): (&'static str, &'static str, &'static str),
        in_namespace: bool,
        q: &Query,
        content_type: &str,
    ) -> RequestLabels {
        let verb = match method.as_str() {
            "GET" if q.get("watch").and_then(crate::request::parse_go_bool) == Some(true) => {
                "WATCH"
            }
            "GET" => "LIST",
            "DELETE" => "DELETECOLLECTION",
            _ => non_resource_verb(method, content_type),
        };
        let scope = scope_of(method == Method::POST, in_namespace);
        RequestLabels {
            verb,
            dry_run: dry_run(q),
            group,
            version,
            resource,
            subresource: String::new(),
            scope,
            component: COMPONENT,
        }
    }

    pub fn non_resource(
        endpoint: NonResource<'_>,
        method: &Method,
        q: &Query,
        content_type: &str,
    ) -> RequestLabels {
        let (subresource, component) = match endpoint {
            NonResource::Health(path) => (path, ""),
            NonResource::OpenApiV2 => ("/openapi/v2", ""),
            NonResource::OpenApiRoot => ("openapi/v3", ""),
            NonResource::OpenApiGroupVersion => ("openapi/v3/", ""),
            NonResource::AggregatedDiscovery(path) => (path, COMPONENT),
        };
        RequestLabels {
            verb: non_resource_verb(method, content_type),
            dry_run: dry_run(q),
            group: "",
            version: "",
            resource: "",
            subresource: subresource.to_string(),
            scope: "",
            component,
        }
    }

    fn values(&self) -> [&str; 8] {
        [
            self.verb,
            self.dry_run,
            self.group,
            self.version,
            self.resource,
            &self.subresource,
            self.scope,
            self.component,
        ]
    }

    /// The long-running gauge's labels: the request's but `dry_run`.
    fn longrunning_values(&self) -> [&str; 7] {
        let v = self.values();
        [v[0], v[2], v[3], v[4], v[5], v[6], v[7]]
    }

    fn record(&self, code: StatusCode, started: Instant) {
        let v = self.values();
        let code = code.as_u16().to_string();
        REQUEST_TOTAL.inc(&[v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], &code]);
        REQUEST_DURATION.observe(&v, started.elapsed().as_secs_f64());
    }

    /// Records `resp`: now, or for a watch once its stream ends (counted meanwhile in
    /// `apiserver_longrunning_requests`, as upstream counts a watch being served).
    pub fn record_response(self, resp: Response, started: Instant) -> Response {
        let code = resp.status();
        if self.verb != "WATCH" || !code.is_success() {
            self.record(code, started);
            return resp;
        }
        LONGRUNNING_REQUESTS.add(&self.longrunning_values(), 1.0);
        let done = RecordOnDrop {
            labels: self,
            code,
            started,
        };
        let (parts, body) = resp.into_parts();
        let stream = body.into_data_stream().map(move |chunk| {
            let _ = &done;
            chunk
        });
        Response::from_parts(parts, Body::from_stream(stream))
    }
}

/// Records a watch when its stream is dropped: ended, or its client gone.
struct RecordOnDrop {
    labels: RequestLabels,
    code: StatusCode,
    started: Instant,
}

impl Drop for RecordOnDrop {
    fn drop(&mut self) {
        LONGRUNNING_REQUESTS.add(&self.labels.longrunning_values(), -1.0);
        self.labels.record(self.code, self.started);
    }
}

/// A request's `scope` label: one object, a namespace's collection, or the cluster's.
fn scope_of(one_object: bool, in_namespace: bool) -> &'static str {
    if one_object {
        "resource"
    } else if in_namespace {
        "namespace"
    } else {
        "cluster"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Route, route};

    fn target(path: &str) -> Target {
        match route(path) {
            Ok(Route::Resource(t)) => t,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn verbs_and_scopes_as_upstream_reports_them() {
        let q = |s: &str| Query::parse(Some(s));
        let none = Query::parse(None);
        let pods = "/api/v1/namespaces/default/pods";
        let rows: &[(&str, &str, &Query, &str, &str, &str)] = &[
            (
                "GET",
                "/api/v1/namespaces/default/pods/p",
                &none,
                "",
                "GET",
                "resource",
            ),
            (
                "GET",
                "/api/v1/namespaces/default/pods/p",
                &q("watch=true"),
                "",
                "GET",
                "resource",
            ),
            (
                "GET",
                "/api/v1/watch/namespaces/default/pods/p",
                &none,
                "",
                "WATCH",
                "resource",
            ),
            ("GET", pods, &none, "", "LIST", "namespace"),
            ("GET", "/api/v1/pods", &none, "", "LIST", "cluster"),
            ("GET", pods, &q("watch=true"), "", "WATCH", "namespace"),
            ("GET", pods, &q("watch=1"), "", "WATCH", "namespace"),
            ("GET", pods, &q("watch=false"), "", "LIST", "namespace"),
            ("GET", "/api/v1/watch/pods", &none, "", "WATCH", "cluster"),
            ("POST", pods, &none, "", "POST", "resource"),
            (
                "POST",
                "/api/v1/namespaces/default/pods/p/binding",
                &none,
                "",
                "POST",
                "resource",
            ),
            (
                "PUT",
                "/apis/batch/v1/namespaces/d/jobs/j/status",
                &none,
                "",
                "PUT",
                "resource",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/p",
                &none,
                "application/merge-patch+json",
                "PATCH",
                "resource",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/p",
                &none,
                "application/apply-patch+yaml",
                "APPLY",
                "resource",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/default/pods/p",
                &none,
                "",
                "DELETE",
                "resource",
            ),
            ("DELETE", pods, &none, "", "DELETECOLLECTION", "namespace"),
            ("GET", "/api/v1/nodes", &none, "", "LIST", "cluster"),
            ("OPTIONS", pods, &none, "", "other", "namespace"),
        ];
        for (method, path, query, ct, verb, scope) in rows {
            let m = Method::from_bytes(method.as_bytes()).unwrap();
            let l = RequestLabels::new(&m, &target(path), query, ct);
            assert_eq!((l.verb, l.scope), (*verb, *scope), "{method} {path}");
        }
        let l = RequestLabels::new(
            &Method::PUT,
            &target("/apis/batch/v1/namespaces/d/jobs/j/status"),
            &q("dryRun=All"),
            "",
        );
        assert_eq!(
            l.values(),
            [
                "PUT",
                "All",
                "batch",
                "v1",
                "jobs",
                "status",
                "resource",
                "apiserver"
            ]
        );
    }

    #[test]
    fn the_dry_run_label_is_upstreams_clean_dry_run() {
        let t = target("/api/v1/namespaces/default/pods");
        let label = |query: Option<&str>| {
            RequestLabels::new(&Method::POST, &t, &Query::parse(query), "").dry_run
        };
        assert_eq!(label(None), "");
        assert_eq!(label(Some("dryRun=All")), "All");
        assert_eq!(label(Some("dryRun=Some")), "invalid");
        let health = RequestLabels::non_resource(
            NonResource::Health("/healthz"),
            &Method::GET,
            &Query::parse(Some("dryRun=x")),
            "",
        );
        assert_eq!(health.dry_run, "invalid");
    }
}
