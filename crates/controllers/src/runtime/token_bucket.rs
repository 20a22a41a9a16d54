//! client-go's token-bucket rate limiter (golang.org/x/time/rate's `Limiter`): `burst` tokens
//! to begin with, refilled at `qps` per second up to `burst`; each request takes one, and when
//! there is none it reserves the next (the count goes negative) and waits for its time, so
//! waiters go in turn. Used by the event writers and by the clients' request rate limit.

use std::time::Duration;

use tokio::time::Instant;

pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            at: Instant::now(),
        }
    }

    /// Takes a token at `now`; returns how long to wait before using it.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bucket_allows_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut b = TokenBucket::new(50.0, 100);
        b.at = start;
        for _ in 0..100 {
            assert_eq!(b.reserve(start), Duration::ZERO);
        }
        // The 101st waits one fiftieth of a second; the next one two.
        assert_eq!(b.reserve(start), Duration::from_millis(20));
        assert_eq!(b.reserve(start), Duration::from_millis(40));
        // A second later, 50 tokens came back, less the two owed.
        let later = start + Duration::from_secs(1);
        for _ in 0..48 {
            assert_eq!(b.reserve(later), Duration::ZERO);
        }
        assert!(b.reserve(later) > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_one_per_interval() {
        let mut bucket = TokenBucket::new(2.0, 3);
        let now = Instant::now();
        let waits: Vec<Duration> = (0..6).map(|_| bucket.reserve(now)).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            waits,
            [ms(0), ms(0), ms(0), ms(500), ms(1000), ms(1500)],
            "waiters are served in turn"
        );
        // Idle time refills the bucket, up to the burst.
        tokio::time::advance(Duration::from_secs(10)).await;
        let now = Instant::now();
        let waits: Vec<Duration> = (0..4).map(|_| bucket.reserve(now)).collect();
        assert_eq!(waits, [ms(0), ms(0), ms(0), ms(500)]);
    }
}
