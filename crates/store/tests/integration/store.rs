//! Behaviour of the store through its public interface.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kbatch_store::{EventType, Store, StoreError, StoreOptions, WatchEvent};
use serde_json::json;

fn opts(history: usize) -> StoreOptions {
    StoreOptions {
        history_events: history,
        ..StoreOptions::default()
    }
}

fn open(dir: &Path, history: usize) -> Store {
    Store::open(dir, opts(history)).expect("open store")
}

fn doc(name: &str, n: u64) -> serde_json::Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"n": n}})
}

fn rv_in_doc(raw: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(raw).expect("stored JSON");
    v["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion is a string")
        .to_owned()
}

async fn next_event(w: &mut kbatch_store::Watch) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("event within 10s")
        .expect("watch open")
        .expect("no watch error")
}

#[tokio::test]
async fn crud_with_preconditions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 100);
    let k = "/jobs/default/a".to_owned();

    let a = s.create(k.clone(), doc("a", 1)).await.expect("create");
    assert_eq!(a.rv, 1);
    assert_eq!(rv_in_doc(&a.raw()), "1");
    assert_eq!(s.get(&k).as_deref(), Some(&*a));
    assert!(matches!(
        s.create(k.clone(), doc("a", 2)).await,
        Err(StoreError::AlreadyExists(key)) if key == k
    ));

    let b = s
        .update(k.clone(), doc("a", 2), Some(1))
        .await
        .expect("update");
    assert_eq!(b.rv, 2);
    match s.update(k.clone(), doc("a", 3), Some(1)).await {
        Err(StoreError::Conflict {
            key,
            expected,
            actual,
        }) => assert_eq!((key.as_str(), expected, actual), (k.as_str(), 1, 2)),
        other => panic!("expected conflict, got {other:?}"),
    }
    let c = s
        .update(k.clone(), doc("a", 3), None)
        .await
        .expect("unconditional update");
    assert_eq!(c.rv, 3);
    assert!(matches!(
        s.update("/jobs/default/none".into(), doc("x", 0), None)
            .await,
        Err(StoreError::NotFound(_))
    ));

    assert!(matches!(
        s.delete(k.clone(), Some(2)).await,
        Err(StoreError::Conflict { actual: 3, .. })
    ));
    let d = s.delete(k.clone(), Some(3)).await.expect("delete");
    assert_eq!(d.rv, 4);
    assert_eq!(rv_in_doc(&d.raw()), "4");
    let body: serde_json::Value = serde_json::from_slice(&d.raw()).expect("json");
    assert_eq!(
        body["spec"]["n"], 3,
        "deleted object carries its last state"
    );
    assert!(s.get(&k).is_none());
    assert!(matches!(
        s.delete(k.clone(), None).await,
        Err(StoreError::NotFound(_))
    ));

    // Rejected writes take no revision; bad documents are refused.
    assert_eq!(s.revision(), 4);
    assert!(matches!(
        s.create("/x/y".into(), json!([1, 2])).await,
        Err(StoreError::BadObject)
    ));
    assert!(matches!(
        s.create("/x/y".into(), json!({"metadata": "no"})).await,
        Err(StoreError::BadObject)
    ));
    // A document without metadata gets one.
    let e = s
        .create("/x/y".into(), json!({"kind": "X"}))
        .await
        .expect("create");
    assert_eq!(rv_in_doc(&e.raw()), "5");
    let st = s.stats();
    assert_eq!((st.revision, st.objects, st.writes), (5, 1, 5));
    assert_eq!(st.rejected, 5);
    s.close().await;
}

#[tokio::test]
async fn revisions_are_monotonic_and_stamped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 1000);
    let mut last = 0;
    for i in 0..50u64 {
        let key = format!("/pods/ns/p{}", i % 7);
        let obj = if s.get(&key).is_some() {
            s.update(key, doc("p", i), None).await
        } else {
            s.create(key, doc("p", i)).await
        }
        .expect("write");
        assert!(obj.rv > last, "revision {} after {}", obj.rv, last);
        assert_eq!(rv_in_doc(&obj.raw()), obj.rv.to_string());
        assert_eq!(s.revision(), obj.rv);
        last = obj.rv;
    }
    assert_eq!(last, 50);
}

#[tokio::test]
async fn list_pagination_and_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 1000);
    for ns in ["a", "b"] {
        for i in 0..10 {
            s.create(format!("/jobs/{ns}/j{i:02}"), doc("j", i))
                .await
                .expect("create");
        }
    }
    s.create("/jobsets/a/x".into(), doc("x", 0))
        .await
        .expect("create");
    s.create("/cronjobs/a/c".into(), doc("c", 0))
        .await
        .expect("create");

    let all = s.list("/jobs/", None, None);
    assert_eq!(all.items.len(), 20);
    assert!(!all.more);
    assert_eq!(all.revision, 22);
    let keys: Vec<&str> = all.items.iter().map(|o| o.key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "key order");

    // Page through /jobs/a/ three at a time.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = s.list("/jobs/a/", after.as_deref(), Some(3));
        assert!(page.items.len() <= 3);
        seen.extend(page.items.iter().map(|o| o.key.clone()));
        if !page.more {
            break;
        }
        after = page.items.last().map(|o| o.key.clone());
    }
    let expect: Vec<String> = (0..10).map(|i| format!("/jobs/a/j{i:02}")).collect();
    assert_eq!(seen, expect);

    // Exact last page reports no more; start_after before the prefix starts at the prefix.
    let p = s.list("/jobs/a/", Some("/jobs/a/j06"), Some(3));
    assert_eq!(p.items.len(), 3);
    assert!(!p.more);
    let p = s.list("/jobs/b/", Some("/jobs/a/zzz"), Some(1));
    assert_eq!(p.items[0].key, "/jobs/b/j00");
    assert!(p.more);
    let p = s.list("/jobs/a/", Some("/jobs/b/"), None);
    assert!(p.items.is_empty() && !p.more);
    assert_eq!(s.list("/", None, None).items.len(), 22);
    assert_eq!(s.list("/cronjobs/", None, Some(0)).items.len(), 0);
    assert!(s.list("/cronjobs/", None, Some(0)).more);

    // Counts see the same prefixes ("/jobs/" is not "/jobsets/") and follow deletions.
    assert_eq!(s.count("/jobs/"), 20);
    assert_eq!(s.count("/jobs/a/"), 10);
    assert_eq!(s.count("/jobsets/"), 1);
    assert_eq!(s.count("/"), 22);
    assert_eq!(s.count("/pods/"), 0);
    s.delete("/jobs/a/j00".into(), None).await.expect("delete");
    assert_eq!(s.count("/jobs/"), 19);
}

#[tokio::test]
async fn watch_replays_then_follows_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 1000);
    s.create("/jobs/ns/a".into(), doc("a", 0))
        .await
        .expect("create"); // rv 1
    s.update("/jobs/ns/a".into(), doc("a", 1), None)
        .await
        .expect("update"); // rv 2
    s.create("/jobs/ns/b".into(), doc("b", 0))
        .await
        .expect("create"); // rv 3

    let mut w = s.watch("/jobs/", 1).expect("watch");
    let e = next_event(&mut w).await;
    assert_eq!(
        (e.kind, e.object.rv, e.object.key.as_str()),
        (EventType::Modified, 2, "/jobs/ns/a")
    );
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.object.rv), (EventType::Added, 3));

    let writer = s.clone();
    let live = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer
            .delete("/jobs/ns/a".into(), Some(2))
            .await
            .expect("delete");
    });
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.object.rv), (EventType::Deleted, 4));
    assert_eq!(rv_in_doc(&e.object.raw()), "4");
    live.await.expect("join");

    // From the current revision: only later changes.
    let mut w2 = s.watch("/jobs/", s.revision()).expect("watch");
    s.create("/jobs/ns/c".into(), doc("c", 0))
        .await
        .expect("create");
    let e = next_event(&mut w2).await;
    assert_eq!(e.object.rv, 5);
    assert_eq!(w2.position(), 5);

    // A watch ahead of the store waits for its revision.
    let mut ahead = s.watch("/jobs/", 6).expect("watch");
    s.create("/jobs/ns/d".into(), doc("d", 0))
        .await
        .expect("create"); // rv 6
    s.create("/jobs/ns/e".into(), doc("e", 0))
        .await
        .expect("create"); // rv 7
    assert_eq!(next_event(&mut ahead).await.object.rv, 7);

    // Closing ends watches.
    s.close().await;
    assert!(
        w.next().await.is_some(),
        "events before the close still arrive"
    );
    let mut rest = 0;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("closing ends the watch")
    {
        ev.expect("no error");
        rest += 1;
    }
    assert_eq!(rest, 2);
    assert!(matches!(
        s.create("/jobs/ns/z".into(), doc("z", 0)).await,
        Err(StoreError::Closed)
    ));
}

#[tokio::test]
async fn watch_filters_by_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 1000);
    let mut jobs = s.watch("/jobs/ns1/", 0).expect("watch");
    let mut pods = s.watch("/pods/", 0).expect("watch");
    for i in 0..30u64 {
        let key = match i % 3 {
            0 => format!("/jobs/ns1/j{i}"),
            1 => format!("/jobs/ns2/j{i}"),
            _ => format!("/pods/ns1/p{i}"),
        };
        s.create(key, doc("x", i)).await.expect("create");
    }
    for i in 0..10u64 {
        let e = next_event(&mut jobs).await;
        assert_eq!(e.object.key, format!("/jobs/ns1/j{}", i * 3));
        assert_eq!(e.object.rv, i * 3 + 1);
        let e = next_event(&mut pods).await;
        assert!(e.object.key.starts_with("/pods/"));
        assert_eq!(e.object.rv, i * 3 + 3);
    }
    // Nothing else pending for /jobs/ns1/.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), jobs.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn history_in_memory_is_bounded_by_bytes_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Stored documents are compressed: pad with digits that do not repeat.
    let padding = |i: u64| {
        let mut x = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..1000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                char::from(b'0' + ((x >> 33) % 10) as u8)
            })
            .collect::<String>()
    };
    let big = |i: u64| json!({"metadata": {"name": "b"}, "spec": {"n": i, "pad": padding(i)}});
    let opts = StoreOptions {
        history_events: 1000,
        history_bytes: 10_000,
        ..StoreOptions::default()
    };
    let s = Store::open(dir.path(), opts.clone()).expect("open store");
    for i in 0..30u64 {
        s.create(format!("/jobs/ns/b{i:02}"), big(i))
            .await
            .expect("create");
    }
    // Each object weighs a little over 1,000 bytes: fewer than ten fit in 10,000.
    let stats = s.stats();
    assert!(
        (5..10).contains(&stats.history_len),
        "history of {} events",
        stats.history_len
    );
    assert_eq!(stats.oldest_watchable, 30 - stats.history_len as u64);
    assert!(matches!(
        s.watch("/", 1),
        Err(StoreError::Expired { requested: 1, .. })
    ));
    let mut w = s
        .watch("/", stats.oldest_watchable)
        .expect("a watch within the window");
    assert_eq!(
        next_event(&mut w).await.object.rv,
        stats.oldest_watchable + 1
    );
    drop(w);
    drop(s);

    // Reopened, the loaded history is bounded the same way.
    let s = Store::open(dir.path(), opts).expect("reopen store");
    assert!(s.stats().history_len < 10);
    assert_eq!(
        s.stats().oldest_watchable,
        30 - s.stats().history_len as u64
    );
}

#[tokio::test]
async fn watch_expired_beyond_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 10);
    for i in 0..25u64 {
        s.create(format!("/jobs/ns/j{i}"), doc("j", i))
            .await
            .expect("create");
    }
    // Window holds revisions 16..=25: a watch can start from 15.
    assert_eq!(s.stats().oldest_watchable, 15);
    assert_eq!(s.stats().history_len, 10);
    match s.watch("/", 5) {
        Err(e @ StoreError::Expired { .. }) => {
            assert!(matches!(
                e,
                StoreError::Expired {
                    requested: 5,
                    oldest: 15
                }
            ));
            assert_eq!(e.to_string(), "too old resource version: 5 (15)");
        }
        Err(e) => panic!("expected Expired, got {e}"),
        Ok(_) => panic!("expected Expired, got a watch"),
    }
    let mut w = s.watch("/", 15).expect("oldest watchable revision works");
    assert_eq!(next_event(&mut w).await.object.rv, 16);
}

#[tokio::test]
async fn slow_watcher_catches_up_or_expires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 500);
    let mut slow = s.watch("/", 0).expect("watch");
    let mut lost = s.watch("/", 0).expect("watch");
    s.create("/k/0000".into(), doc("k", 0))
        .await
        .expect("create");
    assert_eq!(
        next_event(&mut lost).await.object.rv,
        1,
        "reads one, then stalls"
    );
    // 400 writes while neither watcher reads: the slow one catches up from the history.
    for i in 1..400u64 {
        s.create(format!("/k/{i:04}"), doc("k", i))
            .await
            .expect("create");
    }
    for rv in 1..=400u64 {
        assert_eq!(next_event(&mut slow).await.object.rv, rv);
    }
    // 300 more push revision 2 out of the window for the stalled watcher (buffers aside).
    for i in 400..700u64 {
        s.create(format!("/k/{i:04}"), doc("k", i))
            .await
            .expect("create");
    }
    let mut got = Vec::new();
    let err = loop {
        match tokio::time::timeout(Duration::from_secs(10), lost.next())
            .await
            .expect("no hang")
        {
            Some(Ok(ev)) => got.push(ev.object.rv),
            Some(Err(e)) => break e,
            None => panic!("watch ended without Expired"),
        }
    };
    assert!(
        matches!(
            err,
            StoreError::Expired {
                requested: 1,
                oldest: 200
            }
        ),
        "{err:?}"
    );
    assert!(
        got.is_empty(),
        "nothing delivered out of a window it fell out of"
    );
    for rv in 401..=700u64 {
        assert_eq!(next_event(&mut slow).await.object.rv, rv);
    }
}

#[tokio::test]
async fn restart_keeps_objects_revision_and_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let s = open(dir.path(), 20);
        for i in 0..30u64 {
            let key = format!("/jobs/ns/j{}", i % 10);
            if s.get(&key).is_some() {
                s.update(key, doc("j", i), None).await.expect("update");
            } else {
                s.create(key, doc("j", i)).await.expect("create");
            }
        }
        s.delete("/jobs/ns/j3".into(), None).await.expect("delete"); // rv 31
        s.close().await;
    }
    let s = open(dir.path(), 20);
    assert_eq!(s.revision(), 31);
    assert_eq!(s.list("/jobs/", None, None).items.len(), 9);
    let j5 = s.get("/jobs/ns/j5").expect("j5 survives");
    assert_eq!(j5.rv, 26);
    assert_eq!(rv_in_doc(&j5.raw()), "26");
    assert_eq!(s.stats().oldest_watchable, 11);
    assert!(matches!(
        s.watch("/", 10),
        Err(StoreError::Expired { oldest: 11, .. })
    ));
    let mut w = s.watch("/jobs/", 25).expect("resume");
    for rv in 26..=30u64 {
        let e = next_event(&mut w).await;
        assert_eq!((e.kind, e.object.rv), (EventType::Modified, rv));
    }
    let e = next_event(&mut w).await;
    assert_eq!(
        (e.kind, e.object.rv, e.object.key.as_str()),
        (EventType::Deleted, 31, "/jobs/ns/j3")
    );
    // Revisions continue after the restart, and the live part of the watch follows.
    let n = s
        .create("/jobs/ns/new".into(), doc("n", 0))
        .await
        .expect("create");
    assert_eq!(n.rv, 32);
    assert_eq!(next_event(&mut w).await.object.rv, 32);
    drop(w);
    drop(s);

    // Reopening with a smaller window keeps the newest events.
    let s = open(dir.path(), 5);
    assert_eq!(s.stats().oldest_watchable, 27);
    let mut w = s.watch("/", 27).expect("watch");
    assert_eq!(next_event(&mut w).await.object.rv, 28);
    drop(w);
    s.close().await;
    let s = open(dir.path(), 100);
    assert_eq!(s.stats().history_len, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 100_000);
    let tasks = 64;
    let per_task = 40u64;
    // A live watcher running alongside the writers sees every revision once, in order.
    let mut live = s.watch("/", 0).expect("watch");
    let live_task = tokio::spawn(async move {
        let mut rvs = Vec::new();
        while let Some(ev) = live.next().await {
            rvs.push(ev.expect("no watch error").object.rv);
        }
        rvs
    });
    let mut handles = Vec::new();
    for t in 0..tasks {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            for i in 0..per_task {
                // Half the tasks fight over a shared key to exercise conflicts within a batch.
                let key = if t % 2 == 0 {
                    format!("/pods/ns/t{t}-{i}")
                } else {
                    "/pods/ns/shared".to_owned()
                };
                let r = match s.get(&key) {
                    None => s.create(key.clone(), doc("p", i)).await,
                    Some(cur) => s.update(key.clone(), doc("p", i), Some(cur.rv)).await,
                };
                match r {
                    Ok(obj) => acks.push((key, obj.rv)),
                    Err(StoreError::Conflict { .. } | StoreError::AlreadyExists(_)) => {}
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            acks
        }));
    }
    let mut acks = Vec::new();
    for h in handles {
        acks.extend(h.await.expect("join"));
    }
    let stats = s.stats();
    let rvs: HashSet<u64> = acks.iter().map(|(_, rv)| *rv).collect();
    assert_eq!(
        rvs.len(),
        acks.len(),
        "every acknowledged write has its own revision"
    );
    assert_eq!(stats.writes, acks.len() as u64);
    assert_eq!(stats.revision, acks.len() as u64);
    assert_eq!(*rvs.iter().max().expect("some writes"), stats.revision);
    assert!(acks.len() as u64 >= per_task * tasks / 2);
    assert!(
        stats.commits < stats.writes && stats.max_batch > 1,
        "group commit: {} commits for {} writes",
        stats.commits,
        stats.writes
    );

    // The history replays exactly the acknowledged writes, in revision order.
    let mut w = s.watch("/", 0).expect("watch");
    let mut shared_last = 0;
    for rv in 1..=stats.revision {
        let e = next_event(&mut w).await;
        assert_eq!(e.object.rv, rv);
        if e.object.key == "/pods/ns/shared" {
            shared_last = rv;
        }
    }
    assert_eq!(s.get("/pods/ns/shared").map(|o| o.rv), Some(shared_last));

    s.close().await;
    let live_rvs = tokio::time::timeout(Duration::from_secs(10), live_task)
        .await
        .expect("live watcher ends on close")
        .expect("join");
    assert_eq!(live_rvs, (1..=stats.revision).collect::<Vec<_>>());
}

#[tokio::test]
async fn close_is_idempotent_and_store_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 10);
    let mut w = s.watch("/", 0).expect("watch");
    s.create("/a".into(), doc("a", 0)).await.expect("create");
    s.close().await;
    s.close().await;
    assert_eq!(next_event(&mut w).await.object.rv, 1);
    assert!(w.next().await.is_none());
    assert!(matches!(
        s.delete("/a".into(), None).await,
        Err(StoreError::Closed)
    ));
    // The file lock is released on close even while handles remain.
    let again = open(dir.path(), 10);
    assert_eq!(again.get("/a").map(|o| o.rv), Some(1));
    drop(again);
    // ... and when the last handle is dropped without close.
    let again = open(dir.path(), 10);
    drop(again);
    let _ = Arc::new(open(dir.path(), 10));
}

#[tokio::test]
async fn non_durable_store_persists_on_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let s = Store::open(
            dir.path(),
            StoreOptions {
                durable: false,
                ..opts(10)
            },
        )
        .expect("open");
        s.create("/a".into(), doc("a", 0)).await.expect("create");
        s.close().await;
    }
    let s = open(dir.path(), 10);
    assert_eq!(s.revision(), 1);
}

#[tokio::test]
async fn events_carry_the_previous_state_live_and_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let k = "/jobs/default/p".to_owned();
    {
        let s = open(dir.path(), 100);
        s.create(k.clone(), doc("p", 1)).await.expect("create");
        s.update(k.clone(), doc("p", 2), None)
            .await
            .expect("update");
        s.delete(k.clone(), None).await.expect("delete");
        let mut w = s.watch("/jobs/", 0).expect("watch");
        let added = next_event(&mut w).await;
        assert_eq!(added.kind, EventType::Added);
        assert!(added.prev.is_none());
        let modified = next_event(&mut w).await;
        assert_eq!(modified.prev.as_ref().map(|p| p.rv), Some(1));
        let deleted = next_event(&mut w).await;
        assert_eq!(deleted.kind, EventType::Deleted);
        assert_eq!(deleted.prev.as_ref().map(|p| p.rv), Some(2));
        s.close().await;
    }
    let s = open(dir.path(), 100);
    let mut w = s.watch("/jobs/", 0).expect("watch after restart");
    assert!(next_event(&mut w).await.prev.is_none());
    let modified = next_event(&mut w).await;
    assert_eq!(
        modified.prev.as_ref().map(|p| p.rv),
        Some(1),
        "rebuilt from the history"
    );
    assert_eq!(
        next_event(&mut w).await.prev.as_ref().map(|p| p.rv),
        Some(2)
    );
}

fn spec_n(o: &kbatch_store::Object) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&o.raw()).expect("stored JSON");
    v["spec"]["n"].as_u64().expect("n")
}

#[tokio::test]
async fn list_at_a_past_revision_undoes_the_later_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 100);
    let a = s.create("/jobs/ns/a".into(), doc("a", 1)).await.expect("a");
    s.create("/jobs/ns/b".into(), doc("b", 1)).await.expect("b");
    s.create("/pods/ns/p".into(), doc("p", 1)).await.expect("p");
    let at = s.revision();
    // After `at`: a changes, b goes, c comes (and a pod changes, outside the prefix).
    s.update("/jobs/ns/a".into(), doc("a", 2), Some(a.rv))
        .await
        .expect("update a");
    s.delete("/jobs/ns/b".into(), None).await.expect("delete b");
    s.create("/jobs/ns/c".into(), doc("c", 1)).await.expect("c");
    s.update("/pods/ns/p".into(), doc("p", 2), None)
        .await
        .expect("update p");

    let then = s.list_at("/jobs/", at).await.expect("list at");
    assert_eq!(then.revision, at);
    let keys: Vec<&str> = then.items.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["/jobs/ns/a", "/jobs/ns/b"]);
    assert_eq!(spec_n(&then.items[0]), 1);
    assert_eq!(then.items[0].rv, a.rv);

    // Every revision in between reads as it was.
    let mid = s.list_at("/jobs/", at + 2).await.expect("list mid");
    let keys: Vec<&str> = mid.items.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["/jobs/ns/a"]);
    assert_eq!(spec_n(&mid.items[0]), 2);

    // The current revision (or a later one) is the current state.
    let now = s.list_at("/jobs/", s.revision()).await.expect("list now");
    let keys: Vec<&str> = now.items.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["/jobs/ns/a", "/jobs/ns/c"]);
}

#[tokio::test]
async fn list_at_a_revision_older_than_the_history_is_expired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 5);
    for i in 0..12u64 {
        s.create(format!("/jobs/ns/j{i}"), doc("j", i))
            .await
            .expect("create");
    }
    // The window holds revisions 8..=12: lists from 7 on can be rebuilt.
    assert_eq!(s.list_at("/jobs/", 7).await.expect("at 7").items.len(), 7);
    match s.list_at("/jobs/", 3).await {
        Err(StoreError::Expired { requested: 3, .. }) => {}
        other => panic!("expected Expired, got {:?}", other.map(|l| l.revision)),
    }
}

#[tokio::test]
async fn waiting_for_a_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(dir.path(), 100);
    s.create("/jobs/ns/a".into(), doc("a", 1)).await.expect("a");
    let now = s.revision();
    assert!(s.wait_for_revision(now, Duration::from_millis(1)).await);
    assert!(
        !s.wait_for_revision(now + 1, Duration::from_millis(50))
            .await
    );
    let writer = s.clone();
    let later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer
            .create("/jobs/ns/b".into(), doc("b", 1))
            .await
            .expect("b");
    });
    assert!(s.wait_for_revision(now + 1, Duration::from_secs(10)).await);
    later.await.expect("writer");
}
