//! client-go's client-side rate limit (`rest.Config` `QPS` and `Burst`; kube-controller-manager's
//! `--kube-api-qps` and `--kube-api-burst`): every request of a client waits for a token of
//! the client's bucket before it is sent. kube-rs has none, so it is a layer on the client's
//! service.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep, sleep_until};
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

/// A token bucket as golang.org/x/time/rate's `Limiter`: `burst` tokens to begin with, `qps`
/// more each second up to `burst`; a request takes one, and when there is none it reserves
/// the next (the count goes negative) and waits for its time, so waiters go in turn.
pub struct TokenBucket {
    rate: Rate,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn new(rate: Rate) -> TokenBucket {
        TokenBucket {
            rate,
            state: Mutex::new((f64::from(rate.burst), Instant::now())),
        }
    }

    /// Takes a token; returns when it may be used.
    pub fn reserve(&self) -> Instant {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = &mut *state;
        let now = Instant::now();
        let burst = f64::from(self.rate.burst);
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate.qps).min(burst);
        *at = now;
        *tokens -= 1.0;
        if *tokens >= 0.0 {
            now
        } else {
            now + Duration::from_secs_f64(-*tokens / self.rate.qps)
        }
    }
}

/// Makes a service wait for a token of one bucket before each call.
#[derive(Clone)]
pub struct RateLimitLayer(Arc<TokenBucket>);

impl RateLimitLayer {
    pub fn new(rate: Rate) -> RateLimitLayer {
        RateLimitLayer(Arc::new(TokenBucket::new(rate)))
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
    bucket: Arc<TokenBucket>,
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
            let at = self.bucket.reserve();
            self.reserved = true;
            if at > Instant::now() {
                self.wait = Some(Box::pin(sleep_until(at)));
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
    async fn a_burst_goes_at_once_then_one_per_interval() {
        let bucket = TokenBucket::new(Rate { qps: 2.0, burst: 3 });
        let t0 = Instant::now();
        let at: Vec<Duration> = (0..6).map(|_| bucket.reserve() - t0).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            at,
            [ms(0), ms(0), ms(0), ms(500), ms(1000), ms(1500)],
            "waiters are served in turn"
        );
        // Idle time refills the bucket, up to the burst.
        tokio::time::advance(Duration::from_secs(10)).await;
        let t1 = Instant::now();
        let at: Vec<Duration> = (0..4).map(|_| bucket.reserve() - t1).collect();
        assert_eq!(at, [ms(0), ms(0), ms(0), ms(500)]);
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
