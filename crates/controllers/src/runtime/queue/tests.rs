//! Scenarios of client-go's queue_test.go, delaying_queue_test.go and rate_limiting_queue_test.go,
//! on paused tokio time.

use super::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::task::JoinHandle;
use tokio::time::advance;

const MS: Duration = Duration::from_millis(1);

fn queue<K: Clone + Eq + Hash + Send + 'static>() -> WorkQueue<K> {
    WorkQueue::new(
        "test",
        ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1)),
    )
}

/// Lets spawned tasks run until they all wait (time is paused, so nothing advances it).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[derive(Clone, Copy, Debug)]
enum Shutdown {
    Plain,
    Drain,
}

async fn shut(q: &WorkQueue<String>, how: Shutdown) {
    match how {
        Shutdown::Plain => q.shut_down(),
        Shutdown::Drain => q.shut_down_with_drain().await,
    }
}

/// Processing set shared by the workers, to catch a key handed to two workers at once.
#[derive(Clone, Default)]
struct InFlight(Arc<Mutex<HashSet<String>>>, Arc<AtomicBool>);

impl InFlight {
    fn begin(&self, key: &str) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !set.insert(key.to_string()) {
            self.1.store(true, Ordering::SeqCst);
        }
    }
    fn end(&self, key: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
    fn saw_overlap(&self) -> bool {
        self.1.load(Ordering::SeqCst)
    }
}

#[tokio::test(start_paused = true)]
async fn basic_producers_and_consumers() {
    for how in [Shutdown::Plain, Shutdown::Drain] {
        let q = queue::<String>();
        let in_flight = InFlight::default();
        let producers: Vec<JoinHandle<()>> = (0..50)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        q.add(i.to_string());
                        tokio::time::sleep(MS).await;
                    }
                })
            })
            .collect();
        let consumers: Vec<JoinHandle<()>> = (0..10)
            .map(|_| {
                let q = q.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    while let Some(key) = q.get().await {
                        assert_ne!(key, "added after shutdown!");
                        in_flight.begin(&key);
                        tokio::time::sleep(3 * MS).await;
                        in_flight.end(&key);
                        q.done(&key);
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.expect("producer");
        }
        shut(&q, how).await;
        q.add("added after shutdown!".to_string());
        for c in consumers {
            c.await.expect("consumer");
        }
        assert_eq!(q.len(), 0, "{how:?}");
        assert!(
            !in_flight.saw_overlap(),
            "a key was processed twice at once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn add_while_processing_is_deferred_until_done() {
    for how in [Shutdown::Plain, Shutdown::Drain] {
        let q = queue::<String>();
        let in_flight = InFlight::default();
        for i in 0..50 {
            q.add(i.to_string());
        }
        let consumers: Vec<JoinHandle<()>> = (0..10)
            .map(|_| {
                let q = q.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    // Every worker re-adds every key it gets, up to twice.
                    let mut counters: HashMap<String, usize> = HashMap::new();
                    while let Some(key) = q.get().await {
                        in_flight.begin(&key);
                        let n = counters.entry(key.clone()).or_default();
                        *n += 1;
                        if *n < 2 {
                            q.add(key.clone());
                        }
                        tokio::task::yield_now().await;
                        in_flight.end(&key);
                        q.done(&key);
                    }
                })
            })
            .collect();
        settle().await;
        shut(&q, how).await;
        for c in consumers {
            c.await.expect("consumer");
        }
        assert_eq!(q.len(), 0, "{how:?}");
        assert!(
            !in_flight.saw_overlap(),
            "a key was processed twice at once"
        );
    }
}

#[tokio::test]
async fn len_counts_each_key_once() {
    let q = queue::<&str>();
    q.add("foo");
    assert_eq!(q.len(), 1);
    q.add("bar");
    assert_eq!(q.len(), 2);
    q.add("foo");
    assert_eq!(q.len(), 2);
}

#[tokio::test]
async fn reinsert_while_processing_comes_back_after_done() {
    let q = queue::<&str>();
    q.add("foo");
    let k = q.get().await;
    assert_eq!(k, Some("foo"));
    q.add("foo");
    // Not handed out again while processing.
    assert_eq!(q.len(), 0);
    q.done(&"foo");
    assert_eq!(q.get().await, Some("foo"));
    q.done(&"foo");
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn get_waits_for_an_add() {
    let q = queue::<&str>();
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    settle().await;
    assert!(!getter.is_finished());
    q.add("x");
    assert_eq!(getter.await.expect("getter"), Some("x"));
}

#[tokio::test(start_paused = true)]
async fn get_is_cancel_safe() {
    let q = queue::<&str>();
    // A get dropped while waiting loses nothing.
    let r = tokio::time::timeout(10 * MS, q.get()).await;
    assert!(r.is_err());
    q.add("x");
    assert_eq!(q.get().await, Some("x"));
}

#[tokio::test(start_paused = true)]
async fn drain_waits_for_processing_keys() {
    let q = queue::<String>();
    q.add("foo".into());
    q.add("bar".into());
    let first = q.get().await.expect("first");
    let second = q.get().await.expect("second");
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    // Shutting down: get reports it although two keys are still processing.
    assert_eq!(q.get().await, None);
    assert!(!drain.is_finished());
    q.done(&first);
    settle().await;
    assert!(!drain.is_finished());
    q.done(&second);
    drain.await.expect("drain");
}

#[tokio::test(start_paused = true)]
async fn plain_shut_down_does_not_wait() {
    let q = queue::<&str>();
    q.add("foo");
    q.add("bar");
    let _ = q.get().await;
    let _ = q.get().await;
    q.shut_down();
    assert!(q.is_shutting_down());
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn shut_down_releases_a_pending_drain() {
    let q = queue::<&str>();
    q.add("foo");
    q.add("bar");
    let _ = q.get().await;
    let _ = q.get().await;
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    assert_eq!(q.get().await, None);
    assert!(!drain.is_finished());
    // A second signal forces the shutdown without the keys being done.
    q.shut_down();
    drain.await.expect("drain");
}

#[tokio::test(start_paused = true)]
async fn drain_hands_out_a_key_re_added_during_processing() {
    let q = queue::<&str>();
    q.add("foo");
    let gotten = q.get().await.expect("foo");
    q.add("foo");
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    assert_eq!(q.get().await, None);
    q.done(&gotten);
    // done put the dirty key back, so the queue is not finished yet.
    let again = q.get().await.expect("foo again");
    q.done(&again);
    assert_eq!(q.get().await, None);
    drain.await.expect("drain");
}

#[tokio::test(start_paused = true)]
async fn keys_queued_before_shut_down_are_still_handed_out() {
    let q = queue::<&str>();
    q.add("a");
    q.add("b");
    q.shut_down();
    q.add("c");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, None);
}

// --- delaying queue ---

#[tokio::test(start_paused = true)]
async fn delayed_key_is_added_when_ready() {
    let q = queue::<&str>();
    q.add_after("foo", 50 * MS);
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(q.len(), 0);
    advance(60 * MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
    let k = q.get().await.expect("foo");
    q.done(&k);
    // Long after: nothing more shows up.
    advance(Duration::from_secs(10)).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn delayed_adds_keep_the_earliest_time() {
    let q = queue::<&str>();
    q.add_after("foo", 50 * MS);
    q.add_after("foo", 70 * MS);
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(q.len(), 0);
    advance(60 * MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
    let k = q.get().await.expect("foo");
    q.done(&k);
    // The later request was merged into the earlier one.
    advance(20 * MS).await;
    assert_eq!(q.len(), 0);

    // This time the later call asks for the earlier time, which wins.
    q.add_after("foo", 50 * MS);
    q.add_after("foo", 30 * MS);
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(q.len(), 0);
    advance(40 * MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
    let k = q.get().await.expect("foo");
    q.done(&k);
    advance(20 * MS).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn earlier_delay_fires_first() {
    let q = queue::<&str>();
    q.add_after("foo", Duration::from_secs(1));
    q.add_after("bar", 50 * MS);
    assert_eq!(q.delayed_len(), 2);
    assert_eq!(q.len(), 0);

    advance(60 * MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(q.get().await, Some("bar"));

    q.add_after("baz", Duration::from_secs(2));
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(q.get().await, Some("foo"));

    advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
    assert_eq!(q.get().await, Some("baz"));
}

#[tokio::test(start_paused = true)]
async fn ready_keys_enter_in_ready_order() {
    let q = queue::<&str>();
    q.add_after("foo", Duration::from_secs(1));
    q.add_after("bar", 500 * MS);
    q.add_after("baz", 250 * MS);
    assert_eq!(q.delayed_len(), 3);
    assert_eq!(q.len(), 0);
    advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 3);
    assert_eq!(q.get().await, Some("baz"));
    assert_eq!(q.get().await, Some("bar"));
    assert_eq!(q.get().await, Some("foo"));
}

#[tokio::test(start_paused = true)]
async fn waiting_get_wakes_at_the_ready_time() {
    let q = queue::<&str>();
    let start = Instant::now();
    q.add_after("foo", Duration::from_secs(5));
    // With paused time the runtime jumps straight to the timer a waiting get sets.
    assert_eq!(q.get().await, Some("foo"));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn waiting_get_wakes_earlier_for_an_earlier_delay() {
    let q = queue::<&str>();
    let start = Instant::now();
    q.add_after("late", Duration::from_secs(60));
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    settle().await;
    q.add_after("early", Duration::from_secs(1));
    assert_eq!(getter.await.expect("getter"), Some("early"));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn zero_delay_adds_at_once() {
    let q = queue::<&str>();
    q.add_after("foo", Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn delayed_key_of_a_processing_key_waits_for_done() {
    let q = queue::<&str>();
    q.add("foo");
    let k = q.get().await.expect("foo");
    q.add_after("foo", 10 * MS);
    advance(20 * MS).await;
    assert_eq!(q.len(), 0, "still processing");
    q.done(&k);
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("foo"));
}

#[tokio::test(start_paused = true)]
async fn delayed_add_of_a_queued_key_comes_back_later() {
    // As client-go: the waiting entry is independent of the queue, so the key is processed
    // now and once more when the delay has passed.
    let q = queue::<&str>();
    q.add("foo");
    q.add_after("foo", 10 * MS);
    assert_eq!(q.get().await, Some("foo"));
    q.done(&"foo");
    assert_eq!(q.len(), 0);
    advance(10 * MS).await;
    assert_eq!(q.get().await, Some("foo"));
}

#[tokio::test(start_paused = true)]
async fn shut_down_drops_delayed_keys() {
    let q = queue::<&str>();
    q.add_after("foo", 10 * MS);
    q.shut_down();
    q.add_after("bar", 10 * MS);
    assert_eq!(q.delayed_len(), 0);
    advance(20 * MS).await;
    assert_eq!(q.get().await, None);
}

// --- rate limiting ---

/// Delay until the waiting entry of `key` is ready.
fn waits_for(q: &WorkQueue<&'static str>, key: &'static str) -> Option<Duration> {
    let st = q.lock();
    st.waiting_at
        .get(&key)
        .map(|(at, _)| at.saturating_duration_since(Instant::now()))
}

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_back_off_per_key() {
    let q = queue::<&'static str>();
    q.add_rate_limited("one");
    assert_eq!(waits_for(&q, "one"), Some(MS));
    q.add_rate_limited("one");
    // The second delay is 2ms, but the pending 1ms entry is earlier and stays.
    assert_eq!(waits_for(&q, "one"), Some(MS));
    assert_eq!(q.num_requeues(&"one"), 2);

    q.add_rate_limited("two");
    assert_eq!(waits_for(&q, "two"), Some(MS));
    advance(MS).await;
    assert_eq!(q.len(), 2);
    q.add_rate_limited("two");
    assert_eq!(waits_for(&q, "two"), Some(2 * MS));

    q.forget(&"one");
    assert_eq!(q.num_requeues(&"one"), 0);
    advance(2 * MS).await;
    q.add_rate_limited("one");
    // "one" is still queued from before; the new waiting entry starts from the base delay.
    assert_eq!(waits_for(&q, "one"), Some(MS));
}

#[tokio::test(start_paused = true)]
async fn worker_loop_retries_with_backoff_and_forgets_on_success() {
    // The Job controller's worker: error means add_rate_limited, success means forget.
    let q: WorkQueue<String> = WorkQueue::new(
        "job",
        ItemExponentialFailureRateLimiter::new(Duration::from_secs(1), Duration::from_secs(60)),
    );
    let start = Instant::now();
    q.add("ns/job".into());
    let mut seen = Vec::new();
    for attempt in 0..4 {
        let key = q.get().await.expect("key");
        seen.push(start.elapsed().as_secs());
        if attempt < 3 {
            q.add_rate_limited(key.clone());
        } else {
            q.forget(&key);
        }
        q.done(&key);
    }
    assert_eq!(seen, [0, 1, 3, 7]);
    assert_eq!(q.num_requeues(&"ns/job".to_string()), 0);
}

#[tokio::test(start_paused = true)]
async fn re_adds_during_processing_coalesce_into_one() {
    let q = queue::<&str>();
    q.add("foo");
    let k = q.get().await.expect("foo");
    for _ in 0..10 {
        q.add("foo");
    }
    q.done(&k);
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("foo"));
    q.done(&"foo");
    assert_eq!(q.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_workers_never_share_a_key() {
    // Real threads, no timers: checks the locking and wake-ups rather than timing.
    let q = queue::<String>();
    let in_flight = InFlight::default();
    let processed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let consumers: Vec<JoinHandle<()>> = (0..8)
        .map(|_| {
            let q = q.clone();
            let in_flight = in_flight.clone();
            let processed = Arc::clone(&processed);
            tokio::spawn(async move {
                while let Some(key) = q.get().await {
                    in_flight.begin(&key);
                    tokio::task::yield_now().await;
                    in_flight.end(&key);
                    processed.fetch_add(1, Ordering::SeqCst);
                    q.done(&key);
                }
            })
        })
        .collect();
    let producers: Vec<JoinHandle<()>> = (0..8)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for i in 0..500 {
                    q.add(format!("k{}", (i * 7 + p) % 20));
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.expect("producer");
    }
    q.shut_down_with_drain().await;
    for c in consumers {
        c.await.expect("consumer");
    }
    assert!(
        !in_flight.saw_overlap(),
        "a key was processed twice at once"
    );
    assert!(
        processed.load(Ordering::SeqCst) >= 20,
        "every key processed"
    );
    assert_eq!(q.len(), 0);
}

/// Counts the wake-ups of the gets it is handed to.
struct WakeCount(std::sync::atomic::AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn an_added_key_wakes_one_idle_worker_and_shut_down_wakes_all() {
    let q = queue::<&'static str>();
    let count = Arc::new(WakeCount(std::sync::atomic::AtomicUsize::new(0)));
    let waker = std::task::Waker::from(Arc::clone(&count));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut gets: Vec<_> = (0..100).map(|_| Box::pin(q.get())).collect();
    for g in &mut gets {
        assert!(g.as_mut().poll(&mut cx).is_pending());
    }
    let woken = || count.0.load(Ordering::SeqCst);
    q.add("a");
    assert_eq!(woken(), 1, "one key, one worker");
    // A done without a re-add wakes nobody; with one, one worker.
    q.add("b");
    assert_eq!(woken(), 2);
    let taken: Vec<_> = gets
        .iter_mut()
        .filter_map(|g| match g.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(k) => k,
            std::task::Poll::Pending => None,
        })
        .collect();
    assert_eq!(taken.len(), 2, "{taken:?}");
    q.done(&taken[0]);
    assert_eq!(woken(), 2);
    q.add(taken[1]);
    q.done(&taken[1]);
    assert_eq!(woken(), 3);
    q.shut_down();
    assert!(
        woken() >= 3 + 97,
        "every waiting get wakes on shut down: {}",
        woken()
    );
}

/// Many workers, keys added, re-added while processing and delayed from several producers:
/// every key is handed out (no wake-up is lost between the gets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_lose_no_key() {
    let q = queue::<u32>();
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let workers: Vec<JoinHandle<()>> = (0..200)
        .map(|_| {
            let (q, seen) = (q.clone(), Arc::clone(&seen));
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    seen.lock().unwrap_or_else(|e| e.into_inner()).insert(k);
                    if k % 7 == 0 {
                        tokio::task::yield_now().await;
                    }
                    q.done(&k);
                }
            })
        })
        .collect();
    let producers: Vec<JoinHandle<()>> = (0..4u32)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for i in 0..2_000u32 {
                    let k = p * 2_000 + i;
                    match i % 3 {
                        0 => q.add_after(k, Duration::from_millis(u64::from(i % 20))),
                        _ => q.add(k),
                    }
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.expect("producer");
    }
    let all_seen = async {
        while seen.lock().unwrap_or_else(|e| e.into_inner()).len() < 8_000 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), all_seen)
        .await
        .expect("every key handed out");
    q.shut_down();
    for w in workers {
        w.await.expect("worker");
    }
}

/// A worker retries a failing key with the rate limiter's back-off (1 ms, then 2 ms), forgets
/// its history once it succeeds, and returns when the queue shuts down.
#[tokio::test(start_paused = true)]
async fn a_worker_retries_failures_rate_limited_and_forgets_successes() {
    let q: WorkQueue<String> = queue();
    let attempts = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let worker = {
        let (q, attempts) = (q.clone(), Arc::clone(&attempts));
        tokio::spawn(async move {
            q.run_worker("test sync failed", |key| {
                let attempts = Arc::clone(&attempts);
                async move {
                    let mut seen = attempts.lock().expect("attempts");
                    seen.push((key.clone(), Instant::now()));
                    let tries = seen.iter().filter(|(k, _)| *k == key).count();
                    if key == "flaky" && tries < 3 {
                        Err(format!("attempt {tries} failed"))
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
        })
    };
    let t0 = Instant::now();
    q.add("flaky".to_string());
    q.add("fine".to_string());
    settle().await;
    advance(MS).await;
    settle().await;
    advance(2 * MS).await;
    settle().await;
    let seen: Vec<(String, Duration)> = attempts
        .lock()
        .expect("attempts")
        .iter()
        .map(|(k, at)| (k.clone(), *at - t0))
        .collect();
    assert_eq!(
        seen,
        [
            ("flaky".to_string(), Duration::ZERO),
            ("fine".to_string(), Duration::ZERO),
            ("flaky".to_string(), MS),
            ("flaky".to_string(), 3 * MS),
        ]
    );
    assert_eq!(q.num_requeues(&"flaky".to_string()), 0, "forgotten");
    q.shut_down();
    worker.await.expect("the worker returns");
}
