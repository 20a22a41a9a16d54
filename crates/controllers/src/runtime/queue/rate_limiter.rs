//! Per-key retry delays for [`WorkQueue::add_rate_limited`](super::WorkQueue::add_rate_limited),
//! with the semantics of client-go's `default_rate_limiters.go`.
//!
//! The Job controller uses [`ItemExponentialFailureRateLimiter`] alone (1 s doubling to 60 s) for
//! both of its queues, not client-go's `DefaultControllerRateLimiter`, so no token bucket is
//! provided here.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Decides how long a key waits before it is retried, and tracks its failures.
pub trait RateLimiter<K>: Send + Sync {
    /// The delay before `key` is retried; counts one more failure for it.
    fn when(&self, key: &K) -> Duration;
    /// Stops tracking `key`: its next failure starts from the first delay again.
    fn forget(&self, key: &K);
    /// How many failures are counted for `key`.
    fn num_requeues(&self, key: &K) -> usize;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves a plain counter map behind: still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `base * 2^failures`, capped at `max`.
pub struct ItemExponentialFailureRateLimiter<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, usize>>,
}

impl<K> ItemExponentialFailureRateLimiter<K> {
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialFailureRateLimiter {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn delay_for(&self, exp: usize) -> Duration {
        // client-go caps anything beyond i64 nanoseconds at max; so do we, without floats.
        if exp >= 128 {
            return self.max;
        }
        let factor = 1u128 << exp;
        match self.base.as_nanos().checked_mul(factor) {
            Some(nanos) if nanos <= i64::MAX as u128 => {
                Duration::from_nanos(nanos as u64).min(self.max)
            }
            _ => self.max,
        }
    }
}

impl<K: Eq + Hash + Clone + Send> RateLimiter<K> for ItemExponentialFailureRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let exp = {
            let mut failures = lock(&self.failures);
            let n = failures.entry(key.clone()).or_insert(0);
            let exp = *n;
            *n += 1;
            exp
        };
        self.delay_for(exp)
    }

    fn forget(&self, key: &K) {
        lock(&self.failures).remove(key);
    }

    fn num_requeues(&self, key: &K) -> usize {
        lock(&self.failures).get(key).copied().unwrap_or(0)
    }
}

/// `fast` for the first `max_fast_attempts` failures of a key, `slow` after that.
pub struct ItemFastSlowRateLimiter<K> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: usize,
    attempts: Mutex<HashMap<K, usize>>,
}

impl<K> ItemFastSlowRateLimiter<K> {
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: usize) -> Self {
        ItemFastSlowRateLimiter {
            fast,
            slow,
            max_fast_attempts,
            attempts: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone + Send> RateLimiter<K> for ItemFastSlowRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let mut attempts = lock(&self.attempts);
        let n = attempts.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, key: &K) {
        lock(&self.attempts).remove(key);
    }

    fn num_requeues(&self, key: &K) -> usize {
        lock(&self.attempts).get(key).copied().unwrap_or(0)
    }
}

/// The longest delay of several limiters; every limiter counts every failure.
pub struct MaxOfRateLimiter<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOfRateLimiter<K> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        MaxOfRateLimiter { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        // Every limiter must see the failure, so no short-circuiting max().
        let mut longest = Duration::ZERO;
        for l in &self.limiters {
            longest = longest.max(l.when(key));
        }
        longest
    }

    fn forget(&self, key: &K) {
        for l in &self.limiters {
            l.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

/// Another limiter's delay, never longer than `max_wait`.
pub struct WithMaxWaitRateLimiter<K> {
    inner: Box<dyn RateLimiter<K>>,
    max_wait: Duration,
}

impl<K> WithMaxWaitRateLimiter<K> {
    pub fn new(inner: Box<dyn RateLimiter<K>>, max_wait: Duration) -> Self {
        WithMaxWaitRateLimiter { inner, max_wait }
    }
}

impl<K> RateLimiter<K> for WithMaxWaitRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        self.inner.when(key).min(self.max_wait)
    }

    fn forget(&self, key: &K) {
        self.inner.forget(key);
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.inner.num_requeues(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);
    const MIN: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn exponential_doubles_per_key_and_forget_resets() {
        let l = ItemExponentialFailureRateLimiter::new(MS, SEC);
        for want in [1, 2, 4, 8, 16] {
            assert_eq!(l.when(&"one"), want * MS);
        }
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(l.when(&"two"), MS);
        assert_eq!(l.when(&"two"), 2 * MS);
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(l.when(&"one"), MS);
    }

    #[test]
    fn exponential_caps_at_max_and_survives_overflow() {
        let l = ItemExponentialFailureRateLimiter::new(MS, 1000 * SEC);
        for _ in 0..5 {
            l.when(&"one");
        }
        assert_eq!(l.when(&"one"), 32 * MS);
        for _ in 0..1000 {
            l.when(&"overflow1");
        }
        assert_eq!(l.when(&"overflow1"), 1000 * SEC);

        let l = ItemExponentialFailureRateLimiter::new(MIN, 1000 * HOUR);
        for _ in 0..2 {
            l.when(&"two");
        }
        assert_eq!(l.when(&"two"), 4 * MIN);
        for _ in 0..1000 {
            l.when(&"overflow2");
        }
        assert_eq!(l.when(&"overflow2"), 1000 * HOUR);
    }

    #[test]
    fn exponential_job_controller_api_backoff() {
        // DefaultJobApiBackOff=1s, MaxJobApiBackOff=1m.
        let l = ItemExponentialFailureRateLimiter::new(SEC, MIN);
        let got: Vec<_> = (0..8).map(|_| l.when(&"ns/job").as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 60, 60]);
    }

    #[test]
    fn exponential_zero_base_is_always_zero() {
        let l = ItemExponentialFailureRateLimiter::new(Duration::ZERO, SEC);
        for _ in 0..100 {
            assert_eq!(l.when(&1), Duration::ZERO);
        }
    }

    #[test]
    fn fast_slow_switches_after_max_fast_attempts() {
        let l = ItemFastSlowRateLimiter::new(5 * MS, 10 * SEC, 3);
        for want in [5 * MS, 5 * MS, 5 * MS, 10 * SEC, 10 * SEC] {
            assert_eq!(l.when(&"one"), want);
        }
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(l.when(&"two"), 5 * MS);
        assert_eq!(l.when(&"two"), 5 * MS);
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(l.when(&"one"), 5 * MS);
    }

    #[test]
    fn max_of_takes_the_longest_delay() {
        let l: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
            Box::new(ItemFastSlowRateLimiter::new(5 * MS, 3 * SEC, 3)),
            Box::new(ItemExponentialFailureRateLimiter::new(MS, SEC)),
        ]);
        for want in [5 * MS, 5 * MS, 5 * MS, 3 * SEC, 3 * SEC] {
            assert_eq!(l.when(&"one"), want);
        }
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(l.when(&"two"), 5 * MS);
        assert_eq!(l.when(&"two"), 5 * MS);
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(l.when(&"one"), 5 * MS);
    }

    /// Base delay for the first `threshold` calls (any key), max after.
    struct Step {
        count: AtomicUsize,
        threshold: usize,
        base: Duration,
        max: Duration,
    }

    impl RateLimiter<usize> for Step {
        fn when(&self, _: &usize) -> Duration {
            if self.count.fetch_add(1, Ordering::SeqCst) < self.threshold {
                self.base
            } else {
                self.max
            }
        }
        fn forget(&self, _: &usize) {}
        fn num_requeues(&self, _: &usize) -> usize {
            0
        }
    }

    #[test]
    fn with_max_wait_caps_the_inner_delay() {
        let step = Step {
            count: AtomicUsize::new(0),
            threshold: 100,
            base: 5 * MS,
            max: 1000 * SEC,
        };
        let l = WithMaxWaitRateLimiter::new(Box::new(step), 500 * SEC);
        for i in 0..100 {
            assert_eq!(l.when(&i), 5 * MS);
        }
        for i in 100..200 {
            assert_eq!(l.when(&i), 500 * SEC);
        }
    }
}
