//! client-go's client-side rate limit (`rest.Config` `QPS` and `Burst`; kube-controller-manager's
//! `--kube-api-qps` and `--kube-api-burst`): every request of a client waits for a token of
//! the client's bucket before it is sent. kube-rs has none, so it is a layer on the client's
//! service.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use kbatch_controllers::runtime::token_bucket::TokenBucket;
use tokio::time::{Instant, Sleep, sleep};
use tower::{Layer, Service};

/// client-go's defaults when QPS or Burst is left at 0.
const DEFAULT_QPS: f32 = 5.0;
const DEFAULT_BURST: i32 = 10;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("burst is required to be greater than 0 when QPS is set to greater than 0")]
pub struct BadBurst;

/// The rate a client keeps to: `None` when unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub qps: f64,
    pub burst: u32,
}

impl Rate {
    /// client-go's reading of `QPS` and `Burst`: 0 means the default (5 and 10), a negative
    /// QPS means no limit, and a positive QPS needs a positive burst.
    pub fn from_flags(qps: f32, burst: i32) -> Result<Option<Rate>, BadBurst> {
        let qps = if qps == 0.0 { DEFAULT_QPS } else { qps };
        let burst = if burst == 0 { DEFAULT_BURST } else { burst };
        if qps <= 0.0 || !qps.is_finite() {
            return Ok(None);
        }
        let burst = u32::try_from(burst).map_err(|_| BadBurst)?;
        Ok(Some(Rate {
            qps: f64::from(qps),
            burst,
        }))
    }
}

/// Makes a service wait for a token of one bucket before each call.
#[derive(Clone)]
pub struct RateLimitLayer(Arc<Mutex<TokenBucket>>);

impl RateLimitLayer {
    pub fn new(rate: Rate) -> RateLimitLayer {
        RateLimitLayer(Arc::new(Mutex::new(TokenBucket::new(rate.qps, rate.burst))))
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: Arc::clone(&self.0),
            wait: None,
            reserved: false,
        }
    }
}

/// A service whose readiness includes its turn in the bucket.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token is taken for the next call.
    reserved: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.reserved {
            let wait = self
                .bucket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .reserve(Instant::now());
            self.reserved = true;
            if !wait.is_zero() {
                self.wait = Some(Box::pin(sleep(wait)));
            }
        }
        if let Some(wait) = self.wait.as_mut() {
            ready!(wait.as_mut().poll(cx));
            self.wait = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::ServiceExt;

    #[test]
    fn flags_read_as_client_go_reads_them() {
        let rate = |qps: f64, burst: u32| Ok(Some(Rate { qps, burst }));
        assert_eq!(Rate::from_flags(20.0, 30), rate(20.0, 30));
        assert_eq!(Rate::from_flags(0.0, 0), rate(5.0, 10));
        assert_eq!(Rate::from_flags(-1.0, 30), Ok(None));
        assert_eq!(Rate::from_flags(-1.0, -1), Ok(None));
        assert_eq!(Rate::from_flags(20.0, -1), Err(BadBurst));
    }

    #[tokio::test(start_paused = true)]
    async fn calls_wait_for_their_token() {
        let svc =
            tower::service_fn(|_: ()| async { Ok::<_, std::convert::Infallible>(Instant::now()) });
        let mut svc = RateLimitLayer::new(Rate {
            qps: 10.0,
            burst: 1,
        })
        .layer(svc);
        let t0 = Instant::now();
        let mut times = Vec::new();
        for _ in 0..4 {
            let at = svc
                .ready()
                .await
                .unwrap_or_else(|e| match e {})
                .call(())
                .await;
            times.push(at.unwrap_or_else(|e| match e {}) - t0);
        }
        let ms = Duration::from_millis;
        assert_eq!(times, [ms(0), ms(100), ms(200), ms(300)]);
    }
}
