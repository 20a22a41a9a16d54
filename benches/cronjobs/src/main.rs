//! kbatch-bench-cronjobs: N CronJobs on `* * * * *` through `kbatch up --executor simulate`
//! (pods succeed at once), observed over M firings: job creation skew (scheduled time to the
//! Job seen created), how long each firing takes to create and complete its Jobs, and the
//! server's CPU during firings and between them.
//!
//! Skew is measured from outside: the time this benchmark's watch receives a Job's ADDED event
//! minus the `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation, so it includes
//! watch delivery (an upper bound of the controller's own skew). The server's own histogram,
//! `cronjob_controller_job_creation_skew_duration_seconds`, is scraped from `/metrics` at the
//! end as a second view, with the server's mean time per kind of write
//! (`apiserver_request_duration_seconds`: the Job creates and CronJob status writes a firing
//! waits on). For each firing it also prints each part's CPU per Job (API server, controllers,
//! store writer, executor; from the threads' `/proc` stat) and the server's writes by kind
//! between the boundary and the firing's last Job seen created: what creating them cost.
//!
//! Run: `cargo build --release -p kbatch -p kbatch-bench-cronjobs &&
//! target/release/kbatch-bench-cronjobs --cronjobs 10000 --minutes 3` (with 1,000 CronJob
//! controller workers unless `--cron-workers` says otherwise)
//! (targets: p99 skew <= 1 s, mean CPU <= 25% of one core between firings).

#[path = "../../jobs/src/latency.rs"]
mod latency;
#[path = "../../jobs/src/threads.rs"]
mod threads;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

#[derive(Parser, Debug)]
#[command(about = "N CronJobs on `* * * * *` through `kbatch up`: creation skew and CPU")]
struct Args {
    /// The kbatch binary [default: $CARGO_TARGET_DIR/release/kbatch, else ./target/release/kbatch]
    #[arg(long)]
    kbatch: Option<PathBuf>,
    #[arg(long, default_value_t = 10_000)]
    cronjobs: usize,
    /// Firings to observe.
    #[arg(long, default_value_t = 3)]
    minutes: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 16)]
    creators: usize,
    /// The CronJob controller's workers (`kbatch up --concurrent-cron-job-syncs`; upstream's
    /// default, and kbatch's, is 5). With 5, a firing of 10,000 waits on the store's commits
    /// (two sequential durable writes per CronJob and worker); with enough workers the group
    /// commit takes hundreds of writes at once and the firing is bound by CPU instead.
    #[arg(long, default_value_t = 1000)]
    cron_workers: u32,
    /// Extra `kbatch up` flags (e.g. `--job-sync-batch-period=0s`), repeatable.
    #[arg(long = "up-arg", allow_hyphen_values = true)]
    up_args: Vec<String>,
}

fn default_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("release").join("kbatch")
}

/// The kbatch child; killed on drop.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU seconds (user + system) and peak RSS in MiB of a process, from /proc.
fn usage(pid: u32) -> anyhow::Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading stat")?;
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the command name.
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading status")?;
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok((cpu, hwm_kib / 1024.0))
}

fn cronjob(i: usize) -> anyhow::Result<CronJob> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": format!("cron-{i}")},
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["/bin/true"]}]
            }}}}
        }
    }))?)
}

fn is_complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// Seconds since the Unix epoch.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The scheduled time of a Job created by a CronJob, in Unix seconds.
fn scheduled_of(j: &Job) -> Option<i64> {
    let text = j.metadata.annotations.as_ref()?.get(SCHEDULED_ANNOTATION)?;
    let ts: jiff::Timestamp = text.parse().ok()?;
    Some(ts.as_second())
}

/// What one firing did.
#[derive(Default)]
struct Firing {
    /// Names of the Jobs seen.
    seen: HashSet<String>,
    /// Skew of each Job, seconds.
    skews: Vec<f64>,
    /// Unix seconds of the last Job seen created, and of the last seen Complete.
    last_created: f64,
    last_complete: f64,
    completed: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The skew histogram the server exports: (count, sum, p99 upper bound from the buckets).
fn server_skew(metrics: &str) -> Option<(f64, f64, String)> {
    let name = "cronjob_controller_job_creation_skew_duration_seconds";
    let value = |line: &str| line.rsplit(' ').next()?.parse::<f64>().ok();
    let mut count = None;
    let mut sum = None;
    let mut buckets = Vec::new();
    for line in metrics.lines() {
        if let Some(rest) = line.strip_prefix(&format!("{name}_bucket{{le=\"")) {
            let le = rest.split('"').next().unwrap_or_default().to_string();
            buckets.push((le, value(line)?));
        } else if line.starts_with(&format!("{name}_count")) {
            count = value(line);
        } else if line.starts_with(&format!("{name}_sum")) {
            sum = value(line);
        }
    }
    let count = count?;
    let p99 = buckets
        .iter()
        .find(|(_, c)| *c >= 0.99 * count)
        .map(|(le, _)| format!("<= {le} s"))
        .unwrap_or_else(|| "n/a".into());
    Some((count, sum?, p99))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = args.kbatch.clone().unwrap_or_else(default_bin);
    if !bin.is_file() {
        bail!(
            "no kbatch binary at {}: build it with cargo build --release -p kbatch",
            bin.display()
        );
    }
    let dir = tempfile::tempdir().context("creating a temporary dir")?;
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("kbatch.log")).context("creating the log")?;
    let child = Command::new(&bin)
        .args([
            "up",
            "--executor",
            "simulate",
            "--max-pods",
            "1000000",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .arg(format!("--concurrent-cron-job-syncs={}", args.cron_workers))
        .args(&args.up_args)
        .env("KBATCH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let up = Up(child);
    let pid = up.0.id();

    let kubeconfig = data.join("kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        if let Ok(kc) = Kubeconfig::read_from(&kubeconfig) {
            let config =
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
            let client = kube::Client::try_from(config)?;
            if client.apiserver_version().await.is_ok() {
                break client;
            }
        }
        if Instant::now() > deadline {
            bail!("kbatch up did not come up within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let rv = jobs
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();

    let create_started = Instant::now();
    futures::stream::iter(0..args.cronjobs)
        .map(|i| {
            let cronjobs = cronjobs.clone();
            async move {
                cronjobs
                    .create(&PostParams::default(), &cronjob(i)?)
                    .await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(args.creators.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    let created_in = create_started.elapsed();
    // Firings observed: the next M minute boundaries after every CronJob exists.
    let first = (unix_now() / 60.0).floor() as i64 * 60 + 60;
    let boundaries: Vec<i64> = (0..args.minutes as i64).map(|m| first + 60 * m).collect();
    let end = first + 60 * args.minutes as i64;
    println!(
        "{} CronJobs created in {:.2} s ({} CronJob controller workers); observing the firings at {} ...",
        args.cronjobs,
        created_in.as_secs_f64(),
        args.cron_workers,
        boundaries
            .iter()
            .map(|b| jiff::Timestamp::from_second(*b)
                .map(|t| t.to_string())
                .unwrap_or_default())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // CPU readings at each boundary and at the end of each firing's work.
    let mut cpu_at: BTreeMap<i64, f64> = BTreeMap::new();
    let mut firings: BTreeMap<i64, Firing> =
        boundaries.iter().map(|b| (*b, Firing::default())).collect();
    // Jobs of firings before the observed ones (CronJobs created just before a boundary).
    let mut earlier: HashSet<String> = HashSet::new();
    let mut stream = jobs
        .watch(&WatchParams::default().timeout(290), &rv)
        .await?
        .boxed();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut cpu_done: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
    // Each part's CPU from a boundary until its firing's last Job is seen created.
    let mut threads_at: BTreeMap<i64, threads::Snapshot> = BTreeMap::new();
    let mut creating_cpu: BTreeMap<i64, BTreeMap<&'static str, f64>> = BTreeMap::new();
    // And the server's writes by kind over the same span.
    let mut writes_at: BTreeMap<i64, Vec<latency::WriteLatency>> = BTreeMap::new();
    let mut creating_writes: BTreeMap<i64, String> = BTreeMap::new();
    let mut last_rv = rv.clone();
    let mut complete: HashSet<String> = HashSet::new();
    loop {
        let now = unix_now();
        for b in &boundaries {
            if now >= *b as f64 && !cpu_at.contains_key(b) {
                cpu_at.insert(*b, usage(pid)?.0);
                threads_at.insert(*b, threads::snapshot(pid));
                let text = client
                    .request_text(http_get("/metrics")?)
                    .await
                    .unwrap_or_default();
                writes_at.insert(*b, latency::write_latencies(&text));
            }
        }
        // A firing is done once all its Jobs are Complete: note the CPU then.
        for (b, f) in &firings {
            if f.completed == args.cronjobs && !cpu_done.contains_key(b) {
                cpu_done.insert(*b, (unix_now(), usage(pid)?.0));
            }
        }
        if now >= end as f64 && cpu_done.len() == boundaries.len() {
            break;
        }
        if now >= end as f64 + 55.0 {
            println!("stopping 55 s after the last firing with work still outstanding");
            break;
        }
        tokio::select! {
            ev = stream.try_next() => {
                let ev = match ev {
                    Ok(Some(ev)) => ev,
                    // The watch timed out or broke: resume from the last revision seen.
                    Ok(None) | Err(_) => {
                        stream = jobs
                            .watch(&WatchParams::default().timeout(290), &last_rv)
                            .await?
                            .boxed();
                        continue;
                    }
                };
                let seen = unix_now();
                match ev {
                    WatchEvent::Added(j) | WatchEvent::Modified(j) => {
                        last_rv = j.metadata.resource_version.clone().unwrap_or(last_rv);
                        let Some(s) = scheduled_of(&j) else { continue };
                        let name = j.metadata.name.clone().unwrap_or_default();
                        let Some(f) = firings.get_mut(&s) else {
                            earlier.insert(name);
                            continue;
                        };
                        if j.metadata.resource_version.is_some() && !f.seen.contains(&name) {
                            f.seen.insert(name.clone());
                            f.skews.push(seen - s as f64);
                            f.last_created = f.last_created.max(seen);
                            if f.seen.len() == args.cronjobs
                                && let Some(before) = threads_at.get(&s)
                            {
                                creating_cpu
                                    .insert(s, threads::by_part(before, &threads::snapshot(pid)));
                                let text = client
                                    .request_text(http_get("/metrics")?)
                                    .await
                                    .unwrap_or_default();
                                if let Some(before) = writes_at.get(&s) {
                                    creating_writes.insert(
                                        s,
                                        latency::count_since(before, &latency::write_latencies(&text)),
                                    );
                                }
                            }
                        }
                        if is_complete(&j) && complete.insert(name) {
                            f.completed += 1;
                            f.last_complete = f.last_complete.max(seen);
                        }
                    }
                    WatchEvent::Deleted(j) => {
                        last_rv = j.metadata.resource_version.clone().unwrap_or(last_rv);
                    }
                    WatchEvent::Bookmark(b) => last_rv = b.metadata.resource_version,
                    WatchEvent::Error(e) => bail!("watch error: {e:?}"),
                }
            }
            _ = tick.tick() => {}
        }
    }
    let (_, peak) = usage(pid)?;
    let metrics = client
        .request_text(http_get("/metrics")?)
        .await
        .unwrap_or_default();

    println!();
    println!(
        "firing                 jobs   p50 s   p90 s   p99 s   max s   last created   last complete   CPU busy   CPU between"
    );
    let mut all: Vec<f64> = Vec::new();
    let mut between_cpu = 0.0;
    let mut between_wall = 0.0;
    for (i, b) in boundaries.iter().enumerate() {
        let f = firings.get_mut(b).context("firing")?;
        f.skews.sort_by(f64::total_cmp);
        all.extend(&f.skews);
        let start_cpu = cpu_at.get(b).copied().unwrap_or(f64::NAN);
        let (done_at, done_cpu) = cpu_done.get(b).copied().unwrap_or((f64::NAN, f64::NAN));
        let busy = done_at - *b as f64;
        let busy_pct = 100.0 * (done_cpu - start_cpu) / busy;
        // Between firings: from this firing's last Complete to the next boundary.
        let next = boundaries.get(i + 1).copied().unwrap_or(end);
        let next_cpu = cpu_at.get(&next).copied();
        let between = match next_cpu {
            Some(c) if done_at < next as f64 => {
                let wall = next as f64 - done_at;
                between_cpu += c - done_cpu;
                between_wall += wall;
                format!("{:>6.1}%", 100.0 * (c - done_cpu) / wall)
            }
            _ => "   n/a".into(),
        };
        println!(
            "{:<20} {:>6}  {:>6.3}  {:>6.3}  {:>6.3}  {:>6.3}   {:>10.2} s   {:>11.2} s   {:>6.1}%   {between}",
            jiff::Timestamp::from_second(*b)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            f.skews.len(),
            percentile(&f.skews, 50.0),
            percentile(&f.skews, 90.0),
            percentile(&f.skews, 99.0),
            f.skews.last().copied().unwrap_or(f64::NAN),
            f.last_created - *b as f64,
            f.last_complete - *b as f64,
            busy_pct,
        );
    }
    for (b, parts) in &creating_cpu {
        println!(
            "CPU per Job until the last of {} was created: {}",
            jiff::Timestamp::from_second(*b)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            threads::per_unit(parts, args.cronjobs)
        );
        if let Some(w) = creating_writes.get(b) {
            println!("  writes meanwhile: {w}");
        }
    }
    all.sort_by(f64::total_cmp);
    println!();
    println!(
        "overall skew           p50 {:.3} s  p90 {:.3} s  p99 {:.3} s  max {:.3} s  ({} Jobs; target p99 <= 1 s)",
        percentile(&all, 50.0),
        percentile(&all, 90.0),
        percentile(&all, 99.0),
        all.last().copied().unwrap_or(f64::NAN),
        all.len()
    );
    if between_wall > 0.0 {
        println!(
            "CPU between firings    {:.1}% of one core over {:.1} s  (target <= 25%)",
            100.0 * between_cpu / between_wall,
            between_wall
        );
    }
    println!("server peak RSS        {peak:.1} MiB");
    latency::print(&latency::write_latencies(&metrics), 100.0);
    if !earlier.is_empty() {
        println!(
            "(Jobs of earlier firings seen and not counted: {})",
            earlier.len()
        );
    }
    match server_skew(&metrics) {
        Some((count, sum, p99)) => println!(
            "server's own histogram {count} Jobs, mean {:.3} s, p99 {p99}",
            sum / count.max(1.0)
        ),
        None => println!("server's own histogram: not found on /metrics"),
    }
    let missing: Vec<String> = firings
        .iter()
        .filter(|(_, f)| f.skews.len() < args.cronjobs)
        .map(|(b, f)| format!("{b}: {} of {}", f.skews.len(), args.cronjobs))
        .collect();
    if !missing.is_empty() {
        bail!("firings with missing Jobs: {}", missing.join(", "));
    }
    Ok(())
}

fn http_get(path: &str) -> anyhow::Result<http::Request<Vec<u8>>> {
    Ok(http::Request::get(path).body(Vec::new())?)
}
