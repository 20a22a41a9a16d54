//! Events expire a fixed time after their last write, as with kube-apiserver's `--event-ttl`
//! (default one hour): upstream stores each event under an etcd lease that every create and
//! update renews, so an event nobody touches for the TTL disappears, and watchers see it
//! DELETED. Without it a server that runs CronJobs keeps every event it ever recorded.
//!
//! Here one task follows the events' writes through a store watch and keeps, in write order,
//! when each written revision falls due; at that time the event is deleted with that revision
//! as precondition, so a later write (which has its own, later entry) keeps it. The deletion
//! goes to the store directly, as a lease expiry bypasses the API's delete rules. After a
//! restart, an event's last write is read from the latest of its creation time and its
//! managers' times.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use kbatch_store::{EventType, StoreError};
use serde::Deserialize;
use tokio::time::Instant;

use crate::ServerState;
use crate::resources::{self, Kind};

/// When written revisions of events fall due, oldest first.
#[derive(Debug, Default)]
pub struct Expiry {
    queue: VecDeque<(Instant, String, u64)>,
}

impl Expiry {
    /// `rv` of `key` was written; it expires at `due`. Entries are kept sorted by due time:
    /// writes observed in order with one TTL arrive sorted, so this is an append.
    pub fn written(&mut self, key: String, rv: u64, due: Instant) {
        let at = self.queue.partition_point(|(d, _, _)| *d <= due);
        self.queue.insert(at, (due, key, rv));
    }

    /// When the next entry falls due.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(d, _, _)| *d)
    }

    /// The entries due at `now`, removed from the queue.
    pub fn take_due(&mut self, now: Instant) -> Vec<(String, u64)> {
        let n = self.queue.partition_point(|(d, _, _)| *d <= now);
        self.queue.drain(..n).map(|(_, k, rv)| (k, rv)).collect()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    metadata: Meta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    creation_timestamp: Option<String>,
    #[serde(default)]
    managed_fields: Vec<ManagedTime>,
}

#[derive(Deserialize)]
struct ManagedTime {
    time: Option<String>,
}

/// How long a stored event has left to live at `now`: the TTL from its last write, taken as
/// the latest of its creationTimestamp and its managedFields times (the server sets both, to
/// the second). An event that names no time gets the whole TTL.
pub fn time_left(raw: &[u8], now: jiff::Timestamp, ttl: Duration) -> Duration {
    let Ok(doc) = serde_json::from_slice::<Doc>(raw) else {
        return ttl;
    };
    let last = doc
        .metadata
        .managed_fields
        .iter()
        .filter_map(|m| m.time.as_deref())
        .chain(doc.metadata.creation_timestamp.as_deref())
        .filter_map(|t| t.parse::<jiff::Timestamp>().ok())
        .max();
    let Some(last) = last else {
        return ttl;
    };
    let age = now
        .duration_since(last)
        .try_into()
        .unwrap_or(Duration::ZERO);
    ttl.saturating_sub(age)
}

/// Follow the events and delete each one `ttl` after its last write, until shutdown. A zero
/// TTL keeps events forever, as upstream (no lease is attached then).
pub async fn run(st: Arc<ServerState>, ttl: Duration) {
    if ttl.is_zero() {
        return;
    }
    let prefix = resources::by_kind(Kind::Event).prefix(None);
    let mut shutdown = st.shutdown.subscribe();
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        let page = st.store.list(&prefix, None, None);
        let mut expiry = Expiry::default();
        let (now, wall) = (Instant::now(), jiff::Timestamp::now());
        for o in &page.items {
            let left = time_left(&o.raw(), wall, ttl);
            // A TTL too far away for the clock never falls due.
            if let Some(due) = now.checked_add(left) {
                expiry.written(o.key.clone(), o.rv, due);
            }
        }
        let mut w = match st.store.watch(&prefix, page.revision) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "event expiry could not watch; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            let next = expiry.next_due();
            let sleep = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.changed() => return,
                ev = w.next() => match ev {
                    None => return,
                    Some(Err(StoreError::Expired { .. })) => break,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "event expiry watch failed; re-listing");
                        break;
                    }
                    Some(Ok(ev)) => {
                        if ev.kind != EventType::Deleted
                            && let Some(due) = Instant::now().checked_add(ttl)
                        {
                            expiry.written(ev.object.key.clone(), ev.object.rv, due);
                        }
                    }
                },
                _ = sleep => expire(&st, &mut expiry).await,
            }
        }
    }
}

/// How many expired events are deleted at once: they then share commits, as a backlog (after a
/// restart, or a burst an hour ago) would otherwise take a commit each.
const DELETES_AT_ONCE: usize = 64;

async fn expire(st: &ServerState, expiry: &mut Expiry) {
    use futures::StreamExt;
    let due = expiry.take_due(Instant::now());
    let deletes = due.into_iter().map(|(key, rv)| async move {
        // A later write of the event has an entry of its own: this one is stale.
        if st.store.get(&key).is_none_or(|o| o.rv != rv) {
            return false;
        }
        match crate::storage_metrics::delete(&st.store, key.clone(), Some(rv)).await {
            Ok(_) => true,
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => false,
            Err(e) => {
                tracing::warn!(%key, error = %e, "deleting an expired event");
                false
            }
        }
    });
    let expired = futures::stream::iter(deletes)
        .buffer_unordered(DELETES_AT_ONCE)
        .filter(|deleted| std::future::ready(*deleted))
        .count()
        .await;
    if expired > 0 {
        tracing::debug!(expired, waiting = expiry.len(), "events expired");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_fall_due_in_time_order() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut e = Expiry::default();
        assert_eq!(e.next_due(), None);
        e.written("/events/a/x".into(), 5, at(10));
        e.written("/events/a/y".into(), 6, at(12));
        // A restart's entries arrive out of order.
        e.written("/events/a/z".into(), 3, at(4));
        assert_eq!(e.next_due(), Some(at(4)));
        assert!(e.take_due(at(3)).is_empty());
        assert_eq!(
            e.take_due(at(10)),
            vec![
                ("/events/a/z".to_string(), 3),
                ("/events/a/x".to_string(), 5)
            ]
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e.next_due(), Some(at(12)));
        assert_eq!(e.take_due(at(100)), vec![("/events/a/y".to_string(), 6)]);
        assert!(e.is_empty());
    }

    #[test]
    fn time_left_counts_from_the_last_write() {
        let ttl = Duration::from_secs(3600);
        let now: jiff::Timestamp = "2024-01-01T12:00:00Z".parse().unwrap();
        let doc = |v: serde_json::Value| serde_json::to_vec(&v).unwrap();
        let created_only = doc(serde_json::json!({"metadata": {
            "creationTimestamp": "2024-01-01T11:30:00Z"}}));
        assert_eq!(
            time_left(&created_only, now, ttl),
            Duration::from_secs(1800)
        );
        // A later update (a repeat counted) renews it.
        let updated = doc(serde_json::json!({"metadata": {
            "creationTimestamp": "2024-01-01T11:00:00Z",
            "managedFields": [
                {"manager": "a", "time": "2024-01-01T11:10:00Z"},
                {"manager": "b", "time": "2024-01-01T11:50:00Z"},
                {"manager": "c"}]}}));
        assert_eq!(time_left(&updated, now, ttl), Duration::from_secs(3000));
        let old = doc(serde_json::json!({"metadata": {
            "creationTimestamp": "2024-01-01T09:00:00Z"}}));
        assert_eq!(time_left(&old, now, ttl), Duration::ZERO);
        // No time to go by, or no JSON: the whole TTL.
        assert_eq!(time_left(&doc(serde_json::json!({})), now, ttl), ttl);
        assert_eq!(time_left(b"not json", now, ttl), ttl);
        let future = doc(serde_json::json!({"metadata": {
            "creationTimestamp": "2024-01-01T13:00:00Z"}}));
        assert_eq!(time_left(&future, now, ttl), ttl);
    }
}
