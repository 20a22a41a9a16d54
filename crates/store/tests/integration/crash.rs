//! kill -9 in the middle of a write burst loses no acknowledged write.
//!
//! The test re-executes its own binary as the writer (selected by an environment variable).
//! The child prints one line per acknowledged write; the parent kills it with SIGKILL, reopens
//! the store and checks every printed write against the objects and the watch history.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kbatch_store::{EventType, Store, StoreOptions};
use serde_json::json;

const CHILD_ENV: &str = "KBATCH_STORE_CRASH_WRITER_DIR";
// The path the test harness knows this test by (module and name), for `--exact`.
const TEST_NAME: &str = "crash::kill9_keeps_acknowledged_writes";
const WRITERS: usize = 16;
const HISTORY: usize = 1_000_000;

fn store_opts() -> StoreOptions {
    StoreOptions {
        history_events: HISTORY,
        ..StoreOptions::default()
    }
}

/// Child mode: write forever (until killed), printing `ACK <op> <key> <rv>` after each
/// acknowledged write. Each key is created, updated once, and every fifth one deleted.
fn run_writer(dir: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = Store::open(dir, store_opts()).expect("open");
        let mut tasks = Vec::new();
        for t in 0..WRITERS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let ack = |op: &str, key: &str, rv: u64| {
                    let mut out = std::io::stdout().lock();
                    // The parent may already be gone; nothing useful to do about it here.
                    let _ = writeln!(out, "ACK {op} {key} {rv}");
                    let _ = out.flush();
                };
                for i in 0u64.. {
                    let key = format!("/crash/w{t}/k{i}");
                    let body =
                        json!({"metadata": {"name": format!("k{i}")}, "pad": "x".repeat(512)});
                    let Ok(obj) = store.create(key.clone(), body.clone()).await else {
                        return;
                    };
                    ack("create", &key, obj.rv);
                    let Ok(obj) = store.update(key.clone(), body, Some(obj.rv)).await else {
                        return;
                    };
                    ack("update", &key, obj.rv);
                    if i % 5 == 0 {
                        let Ok(obj) = store.delete(key.clone(), Some(obj.rv)).await else {
                            return;
                        };
                        ack("delete", &key, obj.rv);
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

#[test]
fn kill9_keeps_acknowledged_writes() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        run_writer(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary path");
    let mut child = Command::new(exe)
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn writer");
    let stdout = child.stdout.take().expect("child stdout");
    // Read on a thread so that a writer that stalls cannot hang the test.
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });

    let parse = |line: &str, acks: &mut Vec<(String, String, u64)>| {
        let mut parts = line.split(' ');
        if parts.next() != Some("ACK") {
            return;
        }
        let (Some(op), Some(key), Some(rv)) = (parts.next(), parts.next(), parts.next()) else {
            return;
        };
        // A line cut short by the kill has no valid revision; the write may or may not be in.
        if let Ok(rv) = rv.parse() {
            acks.push((op.to_owned(), key.to_owned(), rv));
        }
    };
    // Let the burst run until a few thousand writes are acknowledged, then kill it mid-flight.
    let mut acks: Vec<(String, String, u64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acks.len() < 3000 {
        let left = deadline.saturating_duration_since(Instant::now());
        match line_rx.recv_timeout(left) {
            Ok(line) => parse(&line, &mut acks),
            Err(_) => break,
        }
    }
    child.kill().expect("SIGKILL the writer");
    // Lines already written before the kill were acknowledged too; the reader stops at EOF.
    reader.join().expect("reader thread");
    for line in line_rx.try_iter() {
        parse(&line, &mut acks);
    }
    let status = child.wait().expect("reap writer");
    assert!(!status.success(), "writer was killed, not finished");
    assert!(
        acks.len() >= 1000,
        "only {} acknowledged writes",
        acks.len()
    );

    let store = Store::open(dir.path(), store_opts()).expect("reopen after kill -9");
    let revision = store.revision();
    let max_acked = acks.iter().map(|a| a.2).max().unwrap_or(0);
    assert!(
        revision >= max_acked,
        "revision {revision} < acknowledged {max_acked}"
    );
    eprintln!(
        "{} acknowledged writes (last at {max_acked}); {revision} committed at the kill",
        acks.len()
    );

    // Every acknowledged write is in the history, with its key and kind, in revision order.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let history: HashMap<u64, (EventType, String)> = rt.block_on(async {
        let mut w = store.watch("/crash/", 0).expect("watch from the start");
        let mut seen = HashMap::new();
        let mut expect = 1;
        while expect <= revision {
            let ev = tokio::time::timeout(Duration::from_secs(10), w.next())
                .await
                .expect("replay does not stall")
                .expect("watch open")
                .expect("no error");
            assert_eq!(ev.object.rv, expect, "replay in order without gaps");
            seen.insert(ev.object.rv, (ev.kind, ev.object.key.clone()));
            expect += 1;
        }
        seen
    });
    let mut last_by_key: HashMap<&str, (&str, u64)> = HashMap::new();
    for (op, key, rv) in &acks {
        let kind = match op.as_str() {
            "create" => EventType::Added,
            "update" => EventType::Modified,
            _ => EventType::Deleted,
        };
        assert_eq!(
            history.get(rv),
            Some(&(kind, key.clone())),
            "acknowledged {op} {key} at {rv}"
        );
        let e = last_by_key.entry(key).or_insert((op, *rv));
        if *rv >= e.1 {
            *e = (op, *rv);
        }
    }
    // And the objects reflect them: a key whose last acknowledged write was not a delete is
    // present at that revision or later (a later unacknowledged write may have landed).
    for (key, (op, rv)) in last_by_key {
        let cur = store.get(key);
        if op == "delete" {
            assert!(cur.is_none(), "{key} was deleted at {rv}");
        } else if let Some(cur) = cur {
            assert!(cur.rv >= rv, "{key} at {} < acknowledged {rv}", cur.rv);
        } else {
            let deleted_later = history
                .iter()
                .any(|(r, (k, name))| *r > rv && *k == EventType::Deleted && name == key);
            assert!(deleted_later, "{key} acknowledged at {rv} is missing");
        }
    }
}
