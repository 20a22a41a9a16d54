//! Group-commit benchmark of the candidate engines for kbatch-store.
//!
//! For each engine and each number of concurrent writers, a single committer thread drains a
//! queue of ~1 KiB JSON writes and applies everything waiting in one fsync'd transaction, as
//! the store does (each write goes to an objects table by key and to a log table by sequence
//! number). Writers are threads that each submit one write and wait for its commit, in a loop.
//! Prints objects/s, commits/s, the mean batch size and p50/p99 write latency.
//!
//! `store` runs the same load through kbatch-store itself (on fjall), for the end-to-end cost.
//!
//! Runs are interleaved over `--rounds` rounds (so that background load on a shared machine
//! hits every engine alike) and the round with the median objects/s is reported.
//!
//! Usage: store-engines [--secs N] [--rounds R] [--writers 1,8,32] [--engines redb,sqlite,fjall,store]
//!        [--dir D]

use std::error::Error;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

const MAX_BATCH: usize = 1024;

struct Write {
    key: String,
    value: Vec<u8>,
    done: mpsc::Sender<()>,
}

/// One engine, used from the committer thread only.
trait Engine {
    /// Durably apply `batch`; the log rows get sequence numbers `first_seq..`.
    fn commit(&mut self, batch: &[Write], first_seq: u64) -> Res<()>;
}

struct Redb {
    db: redb::Database,
}

const R_OBJECTS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("objects");
const R_LOG: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("log");

impl Redb {
    fn open(dir: &Path) -> Res<Self> {
        let db = redb::Database::create(dir.join("bench.redb"))?;
        Ok(Redb { db })
    }
}

impl Engine for Redb {
    fn commit(&mut self, batch: &[Write], first_seq: u64) -> Res<()> {
        // Durability::Immediate is the default: fsync before commit() returns.
        let tx = self.db.begin_write()?;
        {
            let mut objects = tx.open_table(R_OBJECTS)?;
            let mut log = tx.open_table(R_LOG)?;
            for (i, w) in batch.iter().enumerate() {
                objects.insert(w.key.as_str(), w.value.as_slice())?;
                log.insert(first_seq + i as u64, w.value.as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

struct Sqlite {
    conn: rusqlite::Connection,
}

impl Sqlite {
    fn open(dir: &Path) -> Res<Self> {
        let conn = rusqlite::Connection::open(dir.join("bench.sqlite"))?;
        // WAL + synchronous=FULL: the WAL is fsync'd at every commit.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE objects (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
             CREATE TABLE log (rv INTEGER PRIMARY KEY, value BLOB NOT NULL);",
        )?;
        Ok(Sqlite { conn })
    }
}

impl Engine for Sqlite {
    fn commit(&mut self, batch: &[Write], first_seq: u64) -> Res<()> {
        let tx = self.conn.transaction()?;
        {
            let mut obj = tx.prepare_cached("INSERT OR REPLACE INTO objects VALUES (?1, ?2)")?;
            let mut log = tx.prepare_cached("INSERT INTO log VALUES (?1, ?2)")?;
            for (i, w) in batch.iter().enumerate() {
                obj.execute(rusqlite::params![w.key, w.value])?;
                log.execute(rusqlite::params![(first_seq + i as u64) as i64, w.value])?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

struct Fjall {
    db: fjall::Database,
    objects: fjall::Keyspace,
    log: fjall::Keyspace,
}

impl Fjall {
    fn open(dir: &Path) -> Res<Self> {
        let db = fjall::Database::builder(dir.join("bench.fjall")).open()?;
        let objects = db.keyspace("objects", fjall::KeyspaceCreateOptions::default)?;
        let log = db.keyspace("log", fjall::KeyspaceCreateOptions::default)?;
        Ok(Fjall { db, objects, log })
    }
}

impl Engine for Fjall {
    fn commit(&mut self, batch: &[Write], first_seq: u64) -> Res<()> {
        // fjall buffers the journal by default; ask for an fsync of this batch.
        let mut b = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncAll));
        for (i, w) in batch.iter().enumerate() {
            b.insert(&self.objects, w.key.as_str(), w.value.as_slice());
            b.insert(
                &self.log,
                (first_seq + i as u64).to_be_bytes(),
                w.value.as_slice(),
            );
        }
        b.commit()?;
        Ok(())
    }
}

fn open_engine(name: &str, dir: &Path) -> Res<Box<dyn Engine + Send>> {
    Ok(match name {
        "redb" => Box::new(Redb::open(dir)?),
        "sqlite" => Box::new(Sqlite::open(dir)?),
        "fjall" => Box::new(Fjall::open(dir)?),
        other => return Err(format!("unknown engine {other}").into()),
    })
}

/// A JSON document of about 1 KiB, shaped like a small pod.
fn value(writer: usize, i: u64) -> Vec<u8> {
    let head = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"job-{writer}-{i}","namespace":"default","uid":"{writer:08x}-{i:016x}","labels":{{"batch.kubernetes.io/job-name":"job-{writer}"}}}},"spec":{{"restartPolicy":"Never","containers":[{{"name":"main","image":"busybox","command":["sh","-c","#,
    );
    let pad = 1024usize.saturating_sub(head.len() + 8);
    format!("{head}\"{}\"]}}]}}}}", "x".repeat(pad)).into_bytes()
}

struct Outcome {
    writes: u64,
    commits: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

fn run(engine_name: &str, writers: usize, secs: f64, base: &Path) -> Res<Outcome> {
    let dir = tempfile::tempdir_in(base)?;
    let mut engine = open_engine(engine_name, dir.path())?;
    let (tx, rx) = mpsc::channel::<Write>();

    let committer = std::thread::spawn(move || -> Res<(u64, u64)> {
        let mut seq = 1u64;
        let mut commits = 0u64;
        let mut batch: Vec<Write> = Vec::with_capacity(MAX_BATCH);
        while let Ok(first) = rx.recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            engine.commit(&batch, seq)?;
            commits += 1;
            seq += batch.len() as u64;
            for w in batch.drain(..) {
                let _ = w.done.send(());
            }
        }
        Ok((seq - 1, commits))
    });

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut clients = Vec::new();
    for wr in 0..writers {
        let tx = tx.clone();
        clients.push(std::thread::spawn(move || -> Vec<Duration> {
            let (done_tx, done_rx) = mpsc::channel();
            let mut lat = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let w = Write {
                    key: format!("/pods/default/job-{wr}-{i}"),
                    value: value(wr, i),
                    done: done_tx.clone(),
                };
                let t0 = Instant::now();
                if tx.send(w).is_err() || done_rx.recv().is_err() {
                    break;
                }
                lat.push(t0.elapsed());
                i += 1;
            }
            lat
        }));
    }
    drop(tx);
    let mut latencies = Vec::new();
    for c in clients {
        latencies.extend(c.join().map_err(|_| "writer thread panicked")?);
    }
    let elapsed = start.elapsed();
    let (writes, commits) = committer
        .join()
        .map_err(|_| "committer thread panicked")??;
    latencies.sort_unstable();
    Ok(Outcome {
        writes,
        commits,
        elapsed,
        latencies,
    })
}

/// The same load through kbatch-store's own API (JSON stamping, index, watch history
/// included), with the writers as tasks on a two-thread tokio runtime.
fn run_store(writers: usize, secs: f64, base: &Path) -> Res<Outcome> {
    let dir = tempfile::tempdir_in(base)?;
    let store = kbatch_store::Store::open(dir.path(), kbatch_store::StoreOptions::default())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let latencies = rt.block_on(async {
        let mut tasks = Vec::new();
        for wr in 0..writers {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let value: serde_json::Value = serde_json::from_slice(&value(wr, i))?;
                    let t0 = Instant::now();
                    store
                        .create(format!("/pods/default/job-{wr}-{i}"), value)
                        .await?;
                    lat.push(t0.elapsed());
                    i += 1;
                }
                Ok::<_, Box<dyn Error + Send + Sync>>(lat)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await??);
        }
        store.close().await;
        Ok::<_, Box<dyn Error + Send + Sync>>(all)
    })?;
    let elapsed = start.elapsed();
    let stats = store.stats();
    let commits = stats.commits.max(1) as f64;
    eprintln!(
        "store x{writers}: writer busy {:.0}% of the run; per commit {:.0} us in the engine, {:.0} us in all",
        stats.busy_micros as f64 / 1e4 / elapsed.as_secs_f64(),
        stats.commit_micros as f64 / commits,
        stats.busy_micros as f64 / commits,
    );
    let mut latencies = latencies;
    latencies.sort_unstable();
    Ok(Outcome {
        writes: stats.writes,
        commits: stats.commits,
        elapsed,
        latencies,
    })
}

/// kbatch-store driven like the bare engines: one OS thread per writer, each blocking on its
/// own write (a current-thread runtime per thread), so only the store differs.
fn run_store_threads(writers: usize, secs: f64, base: &Path) -> Res<Outcome> {
    let dir = tempfile::tempdir_in(base)?;
    let store = kbatch_store::Store::open(dir.path(), kbatch_store::StoreOptions::default())?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut clients = Vec::new();
    for wr in 0..writers {
        let store = store.clone();
        clients.push(std::thread::spawn(move || -> Res<Vec<Duration>> {
            let rt = tokio::runtime::Builder::new_current_thread().build()?;
            let mut lat = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let value: serde_json::Value = serde_json::from_slice(&value(wr, i))?;
                let t0 = Instant::now();
                rt.block_on(store.create(format!("/pods/default/job-{wr}-{i}"), value))?;
                lat.push(t0.elapsed());
                i += 1;
            }
            Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for c in clients {
        latencies.extend(c.join().map_err(|_| "writer thread panicked")??);
    }
    let elapsed = start.elapsed();
    let stats = store.stats();
    latencies.sort_unstable();
    Ok(Outcome {
        writes: stats.writes,
        commits: stats.commits,
        elapsed,
        latencies,
    })
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

fn main() -> Res<()> {
    let mut secs = 3.0;
    let mut rounds = 3usize;
    let mut writers = vec![1usize, 8, 32];
    let mut engines: Vec<String> = ["redb", "sqlite", "fjall", "store"]
        .map(String::from)
        .to_vec();
    let mut dir = std::env::temp_dir();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--secs" => secs = val()?.parse()?,
            "--writers" => {
                writers = val()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--engines" => engines = val()?.split(',').map(String::from).collect(),
            "--dir" => dir = val()?.into(),
            "--rounds" => rounds = val()?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    // results[engine][writers] = one row per round: (objects/s, commits/s, avg batch, p50, p99)
    let mut results = vec![vec![Vec::new(); writers.len()]; engines.len()];
    for round in 0..rounds.max(1) {
        for (wi, &w) in writers.iter().enumerate() {
            for (ei, e) in engines.iter().enumerate() {
                let o = if e == "store" {
                    run_store(w, secs, &dir)?
                } else if e == "store-threads" {
                    run_store_threads(w, secs, &dir)?
                } else {
                    run(e, w, secs, &dir)?
                };
                let s = o.elapsed.as_secs_f64();
                let row = [
                    o.writes as f64 / s,
                    o.commits as f64 / s,
                    o.writes as f64 / o.commits.max(1) as f64,
                    pct(&o.latencies, 0.50),
                    pct(&o.latencies, 0.99),
                ];
                eprintln!(
                    "round {round}: {e} x{w}: {:.0} objects/s, p50 {:.3} ms",
                    row[0], row[3]
                );
                results[ei][wi].push(row);
            }
        }
    }
    println!(
        "{:<7} {:>7} {:>10} {:>10} {:>9} {:>8} {:>8}   objects/s per round",
        "engine", "writers", "objects/s", "commits/s", "avg batch", "p50 ms", "p99 ms",
    );
    for (ei, e) in engines.iter().enumerate() {
        for (wi, &w) in writers.iter().enumerate() {
            let mut rows = results[ei][wi].clone();
            let all: Vec<String> = rows.iter().map(|r| format!("{:.0}", r[0])).collect();
            rows.sort_by(|a, b| a[0].total_cmp(&b[0]));
            let r = rows[rows.len() / 2];
            println!(
                "{:<7} {:>7} {:>10.0} {:>10.0} {:>9.1} {:>8.3} {:>8.3}   {}",
                e,
                w,
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                all.join(" ")
            );
        }
    }
    Ok(())
}
