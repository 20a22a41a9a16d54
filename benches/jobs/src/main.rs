//! kbatch-bench-jobs: how long `kbatch up` takes to run N single-pod Jobs from the first
//! create to the last `Complete`, and what the server spent doing it (CPU seconds, peak RSS).
//!
//! The server runs as a child process on a temporary data dir with the `simulate` executor by
//! default (pods succeed at once, so the figure is the control plane's own cost: API server,
//! store, Job controller and executor). Jobs are created by `--creators` concurrent clients;
//! completion is followed with one watch.
//!
//! Run: `cargo build --release -p kbatch -p kbatch-bench-jobs &&
//! target/release/kbatch-bench-jobs --jobs 1000` (target: 1,000 Jobs in <= 5 s on 2 cores;
//! `--jobs 10000` for the executor's target of <= 20 s and peak RSS <= 300 MiB).
//!
//! `--repeat N` runs N times, each on a fresh server, and prints the median. Each run prints
//! the Job controller's syncs and how busy its workers were over the run: near 100%, their
//! syncs one after another set the pace.
//!
//! `--pods 1000 --parallelism 50 --executor process` runs one Job of 1,000 `/bin/true` pods
//! 50 at a time instead, then spawns `/bin/true` 1,000 times 50-wide from a shell (`xargs -P`)
//! and prints the ratio of the two times (target: <= 3x). `--repeat N` does it N times, each
//! on a fresh server, and prints the median ratio. Each run also prints the server's mean time
//! per kind of write (from `apiserver_request_duration_seconds`), which shows how much of a
//! sync's round trips is the server's, and the server's CPU per Job or pod split by part (API
//! server, executor, controllers, store writer) from its threads' `/proc` stat, and how fast
//! the machine was just before it (`machine`).

mod latency;
mod machine;
mod threads;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use crate::latency::{WriteLatency, write_latencies};

#[derive(Parser, Debug)]
#[command(about = "Single-pod Jobs through `kbatch up`, create to Complete")]
struct Args {
    /// The kbatch binary [default: $CARGO_TARGET_DIR/release/kbatch, else ./target/release/kbatch]
    #[arg(long)]
    kbatch: Option<PathBuf>,
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 16)]
    creators: usize,
    /// The executor `kbatch up` runs with.
    #[arg(long, default_value = "simulate")]
    executor: String,
    /// Run one Job of this many pods (completions) instead of single-pod Jobs, and compare
    /// with spawning `/bin/true` as many times from a shell.
    #[arg(long)]
    pods: Option<usize>,
    /// The Job's parallelism with `--pods`, and the shell's spawn width.
    #[arg(long, default_value_t = 50)]
    parallelism: usize,
    /// Extra `kbatch up` flags (e.g. `--concurrent-job-syncs=10`), repeatable.
    #[arg(long = "up-arg", allow_hyphen_values = true)]
    up_args: Vec<String>,
    /// Run this many times, each on a fresh server (with `--pods`, each run followed by its
    /// shell spawn), and report the median (time, or ratio), as the machine's speed drifts.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
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

fn job(i: usize) -> anyhow::Result<Job> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("bench-{i}")},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["/bin/true"]}]
        }}}
    }))?)
}

/// One Job of `pods` `/bin/true` pods, `parallelism` at a time.
fn pods_job(pods: usize, parallelism: usize) -> anyhow::Result<Job> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "bench-pods"},
        "spec": {
            "completions": pods,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["/bin/true"]}]
            }}
        }
    }))?)
}

/// Wall time of spawning `/bin/true` `n` times, `width` at a time, from a shell.
fn shell_spawn(n: usize, width: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("seq {n} | xargs -P {width} -I{{}} /bin/true"))
        .status()
        .context("running sh")?;
    if !status.success() {
        bail!("the shell spawn loop failed: {status}");
    }
    Ok(started.elapsed())
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

/// A started `kbatch up` on a fresh data dir, its client, and where the clock starts.
struct Started {
    up: Up,
    // Removed when the run ends.
    _dir: tempfile::TempDir,
    jobs: Api<Job>,
    /// The resourceVersion to watch from.
    rv: String,
    /// The server's CPU seconds when the measurement starts.
    cpu0: f64,
    /// The server's threads' CPU when the run starts.
    threads0: threads::Snapshot,
    /// How fast the machine was just before the server started.
    speed: machine::Speed,
}

async fn start_up(args: &Args) -> anyhow::Result<Started> {
    let bin = args.kbatch.clone().unwrap_or_else(default_bin);
    if !bin.is_file() {
        bail!(
            "no kbatch binary at {}: build it with cargo build --release -p kbatch",
            bin.display()
        );
    }
    let dir = tempfile::tempdir().context("creating a temporary dir")?;
    let speed = machine::measure(dir.path()).context("measuring the machine")?;
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("kbatch.log")).context("creating the log")?;
    let child = Command::new(&bin)
        .args([
            "up",
            "--executor",
            &args.executor,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
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
    // Let the controllers' informers sync before the clock starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu0, _) = usage(pid)?;
    let threads0 = threads::snapshot(pid);
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let rv = jobs
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    Ok(Started {
        up,
        _dir: dir,
        jobs,
        rv,
        cpu0,
        threads0,
        speed,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(pods) = args.pods {
        return run_pods(&args, pods).await;
    }
    run_jobs(&args).await
}

/// One run of `--jobs` single-pod Jobs.
struct JobsRun {
    created_after: Duration,
    /// Jobs already Complete when the last one was created.
    complete_when_created: usize,
    total: Duration,
    cpu: f64,
    parts: std::collections::BTreeMap<&'static str, f64>,
    peak: f64,
    job_syncs: Option<(f64, Duration)>,
    latencies: Vec<WriteLatency>,
    store_latencies: Vec<WriteLatency>,
    client_latencies: Vec<WriteLatency>,
    speed: machine::Speed,
}

/// `--jobs`: `--repeat` runs, each on a fresh server, then the median time.
async fn run_jobs(args: &Args) -> anyhow::Result<()> {
    let n = args.jobs;
    let mut runs = Vec::new();
    for _ in 0..args.repeat.max(1) {
        runs.push(run_jobs_once(args).await?);
    }
    println!("executor        {}", args.executor);
    println!("jobs            {n}");
    for r in &runs {
        println!("machine         {}", r.speed);
        println!(
            "all created in  {:.2} s  ({} Complete by then)",
            r.created_after.as_secs_f64(),
            r.complete_when_created
        );
        println!(
            "all complete in {:.2} s  ({:.0} jobs/s)",
            r.total.as_secs_f64(),
            n as f64 / r.total.as_secs_f64()
        );
        print_server_use(r.total, r.cpu, r.peak, &r.parts, ("Job", n));
        if let Some((count, mean)) = r.job_syncs {
            let workers = job_sync_workers(&args.up_args);
            println!(
                "job syncs       {count:.0}, {:.2} ms mean; {workers} workers busy {:.0}% of the run",
                mean.as_secs_f64() * 1e3,
                100.0 * busy_share(count, mean, workers, r.total)
            );
        }
        latency::print(&r.latencies, 100.0);
        latency::print_as("store time", &r.store_latencies, 100.0);
        latency::print_as("client time", &r.client_latencies, 100.0);
    }
    if runs.len() > 1 {
        let mut times: Vec<f64> = runs.iter().map(|r| r.total.as_secs_f64()).collect();
        let peak = runs.iter().map(|r| r.peak).fold(0.0, f64::max);
        println!(
            "median          {:.2} s over {} runs (min {:.2} s, max {:.2} s); peak RSS at most {peak:.1} MiB",
            median(&mut times),
            runs.len(),
            times[0],
            times[times.len() - 1]
        );
    }
    Ok(())
}

async fn run_jobs_once(args: &Args) -> anyhow::Result<JobsRun> {
    let server = start_up(args).await?;
    let (pid, jobs, rv, cpu0) = (
        server.up.0.id(),
        server.jobs.clone(),
        server.rv.clone(),
        server.cpu0,
    );

    let started = Instant::now();
    let n = args.jobs;
    let watcher = {
        let jobs = jobs.clone();
        tokio::spawn(async move {
            let mut done: HashSet<String> = HashSet::new();
            let mut times: Vec<Duration> = Vec::with_capacity(n);
            let mut stream = jobs
                .watch(&WatchParams::default().timeout(290), &rv)
                .await?
                .boxed();
            while let Some(ev) = stream.try_next().await? {
                if let WatchEvent::Modified(j) | WatchEvent::Added(j) = ev
                    && is_complete(&j)
                {
                    if done.insert(j.metadata.name.clone().unwrap_or_default()) {
                        times.push(started.elapsed());
                    }
                    if done.len() == n {
                        return Ok::<Vec<Duration>, anyhow::Error>(times);
                    }
                }
            }
            bail!("the watch ended with {} of {n} Jobs complete", done.len())
        })
    };
    let created = futures::stream::iter(0..n)
        .map(|i| {
            let jobs = jobs.clone();
            async move {
                let j = job(i)?;
                jobs.create(&PostParams::default(), &j).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(args.creators.max(1))
        .try_collect::<Vec<()>>();
    created.await?;
    let created_after = started.elapsed();
    let times = watcher.await.context("the watch task failed")??;
    let total = times.last().copied().unwrap_or_default();
    let (cpu1, peak) = usage(pid)?;
    let parts = threads::by_part(&server.threads0, &threads::snapshot(pid));
    let metrics = server_metrics(&jobs).await?;
    Ok(JobsRun {
        created_after,
        complete_when_created: times.partition_point(|t| *t <= created_after),
        total,
        cpu: cpu1 - cpu0,
        parts,
        peak,
        job_syncs: latency::job_syncs(&metrics),
        latencies: write_latencies(&metrics),
        store_latencies: latency::store_latencies(&metrics),
        client_latencies: latency::client_latencies(&metrics),
        speed: server.speed,
    })
}

/// The server's CPU over a run of `total`, its peak RSS, and its CPU per unit of work by part
/// (`("Job", 10000)`).
fn print_server_use(
    total: Duration,
    cpu: f64,
    peak: f64,
    parts: &std::collections::BTreeMap<&'static str, f64>,
    (unit, units): (&str, usize),
) {
    println!(
        "server CPU      {cpu:.2} s  ({:.0}% of one core)",
        100.0 * cpu / total.as_secs_f64()
    );
    println!("server peak RSS {peak:.1} MiB");
    println!(
        "{:<16}{}",
        format!("CPU per {unit}"),
        threads::per_unit(parts, units)
    );
}

/// The Job controller's workers in the `kbatch up` the benchmark starts: its
/// `--concurrent-job-syncs` among `up_args`, else upstream's default of 5.
fn job_sync_workers(up_args: &[String]) -> usize {
    const FLAG: &str = "--concurrent-job-syncs";
    let mut workers = 5;
    let mut args = up_args.iter();
    while let Some(arg) = args.next() {
        let value = match arg.strip_prefix(FLAG) {
            Some("") => args.next().map(String::as_str),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        if let Some(n) = value.and_then(|v| v.parse().ok()) {
            workers = n;
        }
    }
    workers
}

/// The share of `workers` workers' time over a run of `total` that `count` syncs of `mean`
/// each took: near 1, the syncs one after another set the run's pace.
fn busy_share(count: f64, mean: Duration, workers: usize, total: Duration) -> f64 {
    let capacity = workers as f64 * total.as_secs_f64();
    if capacity > 0.0 {
        count * mean.as_secs_f64() / capacity
    } else {
        0.0
    }
}

/// The median of `v`, which it sorts.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => f64::NAN,
        len if len.is_multiple_of(2) => (v[mid - 1] + v[mid]) / 2.0,
        _ => v[mid],
    }
}

/// The server's `/metrics` text.
async fn server_metrics(jobs: &Api<Job>) -> anyhow::Result<String> {
    let metrics = jobs
        .clone()
        .into_client()
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .context("building the /metrics request")?,
        )
        .await
        .context("reading /metrics")?;
    Ok(metrics)
}

/// One `--pods` run: the Job's wall time, the server's CPU seconds and peak RSS, and the
/// shell's time for the same spawns.
struct PodsRun {
    total: Duration,
    cpu: f64,
    /// CPU seconds by part of the server (`threads::by_part`).
    parts: std::collections::BTreeMap<&'static str, f64>,
    peak: f64,
    shell: Duration,
    /// The server's mean time per write, by kind (`apiserver_request_duration_seconds`).
    latencies: Vec<WriteLatency>,
    /// Their time in the store, by operation and resource (`etcd_request_duration_seconds`).
    store_latencies: Vec<WriteLatency>,
    /// The Job controller's syncs of the Job: how many, and their mean duration.
    job_syncs: Option<(f64, Duration)>,
    speed: machine::Speed,
}

impl PodsRun {
    fn ratio(&self) -> f64 {
        self.total.as_secs_f64() / self.shell.as_secs_f64()
    }
}

/// `--pods`: one Job of `pods` pods through `kbatch up`, then the same spawns from a shell,
/// `--repeat` times.
async fn run_pods(args: &Args, pods: usize) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for _ in 0..args.repeat.max(1) {
        runs.push(run_pods_once(args, pods).await?);
    }
    println!("executor        {}", args.executor);
    println!("pods            {pods} (parallelism {})", args.parallelism);
    for r in &runs {
        println!("machine         {}", r.speed);
        println!("job complete in {:.2} s", r.total.as_secs_f64());
        print_server_use(r.total, r.cpu, r.peak, &r.parts, ("pod", pods));
        println!(
            "shell spawn     {:.2} s  (seq {pods} | xargs -P {} /bin/true)",
            r.shell.as_secs_f64(),
            args.parallelism
        );
        println!("ratio           {:.2}x  (target <= 3x)", r.ratio());
        if let Some((count, mean)) = r.job_syncs {
            // One Job's syncs run one at a time: their count times their length is the
            // controller's critical path.
            println!(
                "job syncs       {count:.0}, {:.2} ms mean ({:.2} s in all)",
                mean.as_secs_f64() * 1000.0,
                count * mean.as_secs_f64()
            );
        }
        // One-off writes (the node, its lease, the Job itself) say little.
        latency::print(&r.latencies, 10.0);
        latency::print_as("store time", &r.store_latencies, 10.0);
    }
    if runs.len() > 1 {
        let mut ratios: Vec<f64> = runs.iter().map(PodsRun::ratio).collect();
        let median = median(&mut ratios);
        println!(
            "median ratio    {median:.2}x over {} runs (min {:.2}x, max {:.2}x; target <= 3x)",
            runs.len(),
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
    Ok(())
}

async fn run_pods_once(args: &Args, pods: usize) -> anyhow::Result<PodsRun> {
    let server = start_up(args).await?;
    let (pid, jobs, cpu0) = (server.up.0.id(), &server.jobs, server.cpu0);
    let started = Instant::now();
    let mut stream = jobs
        .watch(&WatchParams::default().timeout(290), &server.rv)
        .await?
        .boxed();
    jobs.create(&PostParams::default(), &pods_job(pods, args.parallelism)?)
        .await?;
    let total = loop {
        match stream.try_next().await? {
            Some(WatchEvent::Added(j) | WatchEvent::Modified(j)) => {
                let failed = j.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
                if failed > 0 {
                    bail!("a pod failed: is the executor `process`?");
                }
                if is_complete(&j) {
                    break started.elapsed();
                }
            }
            Some(_) => {}
            None => bail!("the watch ended before the Job completed"),
        }
    };
    let (cpu1, peak) = usage(pid)?;
    let parts = threads::by_part(&server.threads0, &threads::snapshot(pid));
    let metrics = server_metrics(jobs).await?;
    let latencies = write_latencies(&metrics);
    let job_syncs = latency::job_syncs(&metrics);
    let store_latencies = latency::store_latencies(&metrics);
    // The shell gets the machine to itself: what kbatch still does after the Job completes
    // (events, cleanup) is not charged to it.
    let speed = server.speed;
    drop(stream);
    drop(server);
    let shell = shell_spawn(pods, args.parallelism)?;
    Ok(PodsRun {
        total,
        cpu: cpu1 - cpu0,
        parts,
        peak,
        shell,
        latencies,
        store_latencies,
        job_syncs,
        speed,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{busy_share, job_sync_workers, median};

    #[test]
    fn the_job_sync_workers_come_from_the_last_flag_given_or_upstreams_default() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(job_sync_workers(&[]), 5);
        assert_eq!(job_sync_workers(&args(&["--job-sync-batch-period=0s"])), 5);
        assert_eq!(job_sync_workers(&args(&["--concurrent-job-syncs=10"])), 10);
        assert_eq!(job_sync_workers(&args(&["--concurrent-job-syncs", "8"])), 8);
        assert_eq!(
            job_sync_workers(&args(&[
                "--concurrent-job-syncs=2",
                "--concurrent-job-syncs=3"
            ])),
            3
        );
        assert_eq!(job_sync_workers(&args(&["--concurrent-job-syncsx=9"])), 5);
    }

    #[test]
    fn busy_share_is_the_syncs_time_over_the_workers_time() {
        let ms = Duration::from_millis;
        // 20,000 syncs of 5 ms on 5 workers in 20 s: busy throughout.
        assert!((busy_share(20_000.0, ms(5), 5, ms(20_000)) - 1.0).abs() < 1e-9);
        assert!((busy_share(20_000.0, ms(5), 10, ms(20_000)) - 0.5).abs() < 1e-9);
        assert_eq!(busy_share(3.0, ms(5), 5, Duration::ZERO), 0.0);
    }

    #[test]
    fn the_median_is_the_middle_run_or_the_mean_of_the_two() {
        assert_eq!(median(&mut [21.0, 19.0, 25.0]), 21.0);
        let mut even = [22.0, 18.0, 30.0, 20.0];
        assert_eq!(median(&mut even), 21.0);
        assert_eq!(even, [18.0, 20.0, 22.0, 30.0], "sorted for min and max");
        assert!(median(&mut []).is_nan());
    }
}
