//! client-go's request metrics, as kube-controller-manager and kubelet export them:
//! `rest_client_requests_total` by status code, method and host, and
//! `rest_client_request_duration_seconds` by verb (the method) and host. kube-rs has none, so
//! they are a layer on the client's service, under any rate limit (client-go times a request
//! from after its wait for the rate limiter) and timed to the response's headers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use kbatch_controllers::runtime::metrics::{CounterVec, HistogramVec};
use tower::{Layer, Service};

pub const REQUEST_DURATION_SECONDS: HistogramVec = HistogramVec {
    name: "rest_client_request_duration_seconds",
    help: "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
    labels: &["verb", "host"],
    buckets: || {
        vec![
            0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
        ]
    },
};

pub const REQUESTS_TOTAL: CounterVec = CounterVec {
    name: "rest_client_requests_total",
    help: "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
    labels: &["code", "method", "host"],
};

/// What client-go counts for a request that got no response: errors are arbitrary strings,
/// so they share one label value.
const ERROR_CODE: &str = "<error>";

/// Records every call of a client whose server is `host` (`127.0.0.1:6443`, the `host`
/// label: the server's, as client-go takes it from the client's base URL).
#[derive(Clone)]
pub struct RestMetricsLayer {
    host: Arc<str>,
}

impl RestMetricsLayer {
    pub fn new(host: &str) -> RestMetricsLayer {
        RestMetricsLayer { host: host.into() }
    }

    /// The layer for a client of `config`.
    pub fn for_config(config: &kube::Config) -> RestMetricsLayer {
        let uri = &config.cluster_url;
        RestMetricsLayer::new(uri.authority().map_or("none", |a| a.as_str()))
    }
}

impl<S> Layer<S> for RestMetricsLayer {
    type Service = RestMetrics<S>;

    fn layer(&self, inner: S) -> RestMetrics<S> {
        RestMetrics {
            inner,
            host: Arc::clone(&self.host),
        }
    }
}

#[derive(Clone)]
pub struct RestMetrics<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B, RB> Service<http::Request<B>> for RestMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Observed<S::Future> {
        let method = req.method().clone();
        Observed {
            inner: Box::pin(self.inner.call(req)),
            started: Instant::now(),
            method,
            host: Arc::clone(&self.host),
        }
    }
}

/// A call's response, recorded when it comes.
pub struct Observed<F> {
    inner: Pin<Box<F>>,
    started: Instant,
    method: http::Method,
    host: Arc<str>,
}

impl<F, RB, E> Future for Observed<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let out = ready!(self.inner.as_mut().poll(cx));
        let status = out.as_ref().ok().map(http::Response::status);
        let code = status.as_ref().map_or(ERROR_CODE, http::StatusCode::as_str);
        let (method, host) = (self.method.as_str(), &*self.host);
        REQUEST_DURATION_SECONDS.observe(&[method, host], self.started.elapsed().as_secs_f64());
        REQUESTS_TOTAL.inc(&[code, method, host]);
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_controllers::runtime::metrics::registry;
    use tower::ServiceExt;

    /// The `_count` of the duration histogram's series for `verb` and `host`.
    fn durations_observed(verb: &str, host: &str) -> f64 {
        let text = registry().render();
        let series = format!(
            "rest_client_request_duration_seconds_count{{verb=\"{verb}\",host=\"{host}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    #[tokio::test]
    async fn responses_are_counted_by_code_and_timed_by_verb() {
        let host = "answers.test:6443";
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            let status = if req.method() == http::Method::POST {
                201
            } else {
                404
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(())
                    .expect("a response"),
            )
        });
        let svc = RestMetricsLayer::new(host).layer(svc);
        for method in [http::Method::POST, http::Method::POST, http::Method::GET] {
            let req = http::Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/default/pods")
                .body(())
                .expect("a request");
            svc.clone().oneshot(req).await.expect("answered");
        }
        let r = registry();
        assert_eq!(
            r.counter_value(REQUESTS_TOTAL.name, &["201", "POST", host]),
            2.0
        );
        assert_eq!(
            r.counter_value(REQUESTS_TOTAL.name, &["404", "GET", host]),
            1.0
        );
        assert_eq!(durations_observed("POST", host), 2.0);
        assert_eq!(durations_observed("GET", host), 1.0);
    }

    #[tokio::test]
    async fn a_call_without_a_response_counts_as_an_error() {
        let host = "unreachable.test:6443";
        let svc = tower::service_fn(|_: http::Request<()>| async {
            Err::<http::Response<()>, _>(std::io::Error::other("connection refused"))
        });
        let req = http::Request::builder()
            .method(http::Method::PUT)
            .uri("/apis/batch/v1/namespaces/default/jobs/j/status")
            .body(())
            .expect("a request");
        let out = RestMetricsLayer::new(host).layer(svc).oneshot(req).await;
        assert!(out.is_err());
        assert_eq!(
            registry().counter_value(REQUESTS_TOTAL.name, &["<error>", "PUT", host]),
            1.0
        );
        assert_eq!(durations_observed("PUT", host), 1.0);
    }

    #[test]
    fn the_host_is_the_servers() {
        let config = kube::Config::new("https://10.0.0.1:6443".parse().expect("a URL"));
        assert_eq!(
            &*RestMetricsLayer::for_config(&config).host,
            "10.0.0.1:6443"
        );
    }
}
