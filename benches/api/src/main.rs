//! kbatch-bench-api: end-to-end figures for `kbatch up` against the foundation targets.
//!
//! 1. API write throughput: pod creations over HTTP/1.1 keep-alive connections at several
//!    concurrency levels, with objects/s and latency percentiles (target: >= 5,000/s with 32
//!    clients on 2 cores, fsync on).
//! 2. Resident memory of the server: idle after start, after the writes, and idle after a
//!    restart on the filled data dir (target: idle <= 30 MiB).
//! 3. Start-to-ready time on a fresh and on a filled data dir (target: <= 200 ms).
//!
//! The server runs as a child process on temporary data dirs and is stopped at the end. The
//! load generator runs on one thread so it takes as little as possible of the CPU the server
//! is measured on; its own CPU use is printed next to the server's, and so is the CPU every
//! other process on the machine took, because figures from a shared machine mean little
//! without it.
//!
//! Run: `cargo build --release -p kbatch && cargo run --release -p kbatch-bench-api --
//! --kbatch target/release/kbatch` (add `--commit-stats` for group-commit batch sizes).

mod load;
mod server;
mod stats;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use crate::load::{PodTemplate, Window};
use crate::server::{Cpu, Launch, Server};
use crate::stats::{CommitStats, median, percentile};

const MIB: f64 = 1024.0 * 1024.0;
const TARGET_CREATES_PER_S: f64 = 5000.0;
const TARGET_IDLE_RSS_MIB: f64 = 30.0;
const TARGET_READY: Duration = Duration::from_millis(200);

#[derive(Parser, Debug)]
#[command(about = "Pod-create throughput, RSS and start-to-ready time of `kbatch up`")]
struct Args {
    /// The kbatch binary [default: $CARGO_TARGET_DIR/release/kbatch, else ./target/release/kbatch]
    #[arg(long)]
    kbatch: Option<PathBuf>,
    /// Concurrency levels: clients, each on its own keep-alive connection.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    clients: Vec<usize>,
    /// Measured seconds per concurrency level.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Warm-up seconds before each measured window (sent, not counted).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Start-to-ready runs per data dir.
    #[arg(long, default_value_t = 10)]
    ready_runs: usize,
    /// Where the temporary data dirs go; its filesystem decides what fsync costs.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Run the server with the store writer's debug log and report group-commit batch sizes
    /// and commit times per level (one log line per commit, so the cost is small).
    #[arg(long)]
    commit_stats: bool,
}

fn default_kbatch() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let p = PathBuf::from(dir).join("release").join("kbatch");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("target/release/kbatch")
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.clients.is_empty() || args.clients.contains(&0) {
        bail!("--clients needs one or more positive counts");
    }
    if !(args.duration > 0.0 && args.warmup >= 0.0) {
        bail!("--duration must be positive and --warmup not negative");
    }
    let bin = args.kbatch.clone().unwrap_or_else(default_kbatch);
    if !bin.is_file() {
        bail!(
            "{} not found: build it with `cargo build --release -p kbatch` or pass --kbatch PATH",
            bin.display()
        );
    }
    let work = match &args.work_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("kbatch-bench-")
            .tempdir_in(d),
        None => tempfile::Builder::new().prefix("kbatch-bench-").tempdir(),
    }
    .context("creating the work dir")?;
    let log_filter = if args.commit_stats {
        "info,kbatch_store::writer=debug"
    } else {
        "info"
    };
    let bench = Bench {
        bin: &bin,
        work: work.path(),
        log_filter,
        args: &args,
    };

    let machine = server::machine(work.path())?;
    let template = PodTemplate::new();
    println!("kbatch API benchmark");
    println!("  binary     {}", bin.display());
    println!(
        "  machine    {} cores available; {}; Linux {}; load average {} at start",
        machine.cores,
        machine.cpu_model,
        machine.kernel,
        server::loadavg()
    );
    println!(
        "  work dir   {} on {}; write + fdatasync median: 4 KiB {:.2} ms, 256 KiB {:.2} ms",
        work.path().display(),
        machine.work_fs,
        ms(machine.fsync),
        ms(machine.fsync_256k)
    );
    println!(
        "  pod body   {} bytes of JSON (labels, annotations, one container with command, args, env, resources)",
        template.body("bench-0-0-0").len()
    );
    println!();

    // Start-to-ready on fresh data dirs first, while nothing else has warmed the page cache
    // for the store files (the binary itself is cached after the first run either way).
    let fresh = bench.ready_runs("fresh", |i| work.path().join(format!("fresh-{i}")))?;

    let data = work.path().join("filled");
    let srv = bench.start(&data, "main")?;
    std::thread::sleep(Duration::from_secs(1));
    let (idle_rss, _) = server::rss(srv.pid)?;

    let levels = bench.write_levels(&srv, &template)?;
    let created: u64 = levels.iter().map(|l| l.created).sum();
    let (after_rss, after_hwm) = server::rss(srv.pid)?;
    srv.stop()?;
    let store_bytes = dir_size(&data.join("store"));

    let filled = bench.ready_runs("filled", |_| data.clone())?;

    report_writes(&args, &levels);
    println!();
    println!("2. Resident memory of `kbatch up` (VmRSS from /proc/PID/status)");
    println!(
        "  idle 1 s after start, fresh data dir         {:>7.1} MiB   target <= {TARGET_IDLE_RSS_MIB} MiB: {}",
        idle_rss as f64 / MIB,
        verdict(idle_rss as f64 / MIB <= TARGET_IDLE_RSS_MIB)
    );
    println!(
        "  right after the write benchmark ({created} pods) {:>7.1} MiB   (peak VmHWM {:.1} MiB)",
        after_rss as f64 / MIB,
        after_hwm as f64 / MIB
    );
    println!(
        "  idle 1 s after restart on that data dir      {:>7.1} MiB   (store files on disk: {:.1} MiB)",
        filled.idle_rss as f64 / MIB,
        store_bytes as f64 / MIB
    );
    println!();
    println!(
        "3. Start to ready (spawn until the first 200 on /readyz, polled every 2 ms; {} runs each)",
        args.ready_runs
    );
    println!(
        "  {:<28} {:>8} {:>8} {:>8} {:>16} {:>10}",
        "data dir", "median", "min", "max", "server-reported", "shutdown"
    );
    for (label, r) in [
        ("fresh (empty)".to_string(), &fresh),
        (format!("filled ({created} pods)"), &filled),
    ] {
        println!(
            "  {:<28} {:>5.1} ms {:>5.1} ms {:>5.1} ms {:>13.1} ms {:>7.1} ms",
            label,
            ms(r.median),
            ms(r.min),
            ms(r.max),
            ms(r.reported),
            ms(r.shutdown),
        );
    }
    println!(
        "  target <= {} ms: fresh {}, filled {}",
        TARGET_READY.as_millis(),
        verdict(fresh.median <= TARGET_READY),
        verdict(filled.median <= TARGET_READY)
    );
    println!("  (server-reported: the `startup_ms` the server logs, from main to ready, median)");
    Ok(())
}

struct Bench<'a> {
    bin: &'a Path,
    work: &'a Path,
    log_filter: &'a str,
    args: &'a Args,
}

struct ReadyRuns {
    median: Duration,
    min: Duration,
    max: Duration,
    reported: Duration,
    shutdown: Duration,
    /// VmRSS 1 s after the last start.
    idle_rss: u64,
}

struct Level {
    clients: usize,
    created: u64,
    response_bytes: u64,
    window: Duration,
    latencies_us: Vec<u32>,
    server: Cpu,
    bench: Duration,
    /// CPU that other processes on the machine used during the window.
    others: Duration,
    commits: Option<CommitStats>,
}

impl Bench<'_> {
    fn start(&self, data_dir: &Path, log_name: &str) -> anyhow::Result<Server> {
        Server::start(&Launch {
            bin: self.bin,
            data_dir,
            log: &self.work.join(format!("{log_name}.log")),
            log_filter: self.log_filter,
        })
    }

    fn ready_runs(
        &self,
        label: &str,
        data_dir: impl Fn(usize) -> PathBuf,
    ) -> anyhow::Result<ReadyRuns> {
        let runs = self.args.ready_runs.max(1);
        let (mut ready, mut reported, mut shutdown) = (Vec::new(), Vec::new(), Vec::new());
        let mut idle_rss = 0;
        for i in 0..runs {
            let srv = self.start(&data_dir(i), &format!("{label}-{i}"))?;
            ready.push(srv.ready_after);
            reported.extend(stats::reported_startup(&srv.log));
            if i + 1 == runs {
                std::thread::sleep(Duration::from_secs(1));
                idle_rss = server::rss(srv.pid)?.0;
            }
            shutdown.push(srv.stop()?);
        }
        Ok(ReadyRuns {
            min: ready.iter().copied().min().unwrap_or_default(),
            max: ready.iter().copied().max().unwrap_or_default(),
            median: median(ready),
            reported: median(reported),
            shutdown: median(shutdown),
            idle_rss,
        })
    }

    fn write_levels(&self, srv: &Server, template: &PodTemplate) -> anyhow::Result<Vec<Level>> {
        // One thread for every client: the server is what is measured, and on a small machine
        // each extra load thread would compete with it for the same cores.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the client runtime")?;
        let warmup = Duration::from_secs_f64(self.args.warmup);
        let duration = Duration::from_secs_f64(self.args.duration);
        let mut out = Vec::new();
        for (idx, &n) in self.args.clients.iter().enumerate() {
            let level = rt.block_on(async {
                let clients = load::connect(srv.addr, n).await?;
                let measure_from = Instant::now() + warmup;
                let w = Window {
                    measure_from,
                    until: measure_from + duration,
                };
                // Readings at the window's edges, taken on the same thread between requests.
                let edges = async {
                    load::sleep_until(w.measure_from).await;
                    let before = (
                        server::cpu(srv.pid)?,
                        server::self_cpu()?,
                        stats::file_len(&srv.log),
                        Instant::now(),
                        server::machine_busy()?,
                    );
                    load::sleep_until(w.until).await;
                    let after = (
                        server::cpu(srv.pid)?,
                        server::self_cpu()?,
                        stats::file_len(&srv.log),
                        Instant::now(),
                        server::machine_busy()?,
                    );
                    anyhow::Ok((before, after))
                };
                let tag = idx.to_string();
                let (res, edges) = tokio::join!(load::run(clients, &tag, template, w), edges);
                let (res, (before, after)) = (res?, edges?);
                let commits = if self.args.commit_stats {
                    Some(stats::commit_stats(&srv.log, before.2, after.2)?)
                } else {
                    None
                };
                let server = after.0 - before.0;
                let bench = after.1.saturating_sub(before.1);
                anyhow::Ok(Level {
                    clients: n,
                    created: res.created,
                    response_bytes: res.response_bytes,
                    window: after.3 - before.3,
                    latencies_us: res.latencies_us,
                    server,
                    bench,
                    others: after
                        .4
                        .saturating_sub(before.4)
                        .saturating_sub(server.total)
                        .saturating_sub(bench),
                    commits,
                })
            })?;
            out.push(level);
        }
        Ok(out)
    }
}

fn report_writes(args: &Args, levels: &[Level]) {
    println!(
        "1. API write throughput: POST /api/v1/namespaces/default/pods, fsync on, \
         {:.0} s warm-up + {:.0} s measured per level",
        args.warmup, args.duration
    );
    println!(
        "  {:>7} {:>10} {:>8} {:>8} {:>8} {:>8}",
        "clients", "creates/s", "p50 ms", "p99 ms", "max ms", "samples"
    );
    let mut at_32 = None;
    for l in levels {
        let mut lat = l.latencies_us.clone();
        lat.sort_unstable();
        let rate = lat.len() as f64 / l.window.as_secs_f64();
        println!(
            "  {:>7} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8}",
            l.clients,
            rate,
            percentile(&lat, 0.50) as f64 / 1000.0,
            percentile(&lat, 0.99) as f64 / 1000.0,
            lat.last().copied().unwrap_or(0) as f64 / 1000.0,
            lat.len(),
        );
        if l.clients == 32 {
            at_32 = Some(rate);
        }
    }
    if let Some(rate) = at_32 {
        println!(
            "  target >= {TARGET_CREATES_PER_S:.0}/s with 32 clients: {} ({:.0}% of target)",
            verdict(rate >= TARGET_CREATES_PER_S),
            100.0 * rate / TARGET_CREATES_PER_S
        );
    }
    let (created, bytes) = levels
        .iter()
        .fold((0, 0), |(c, b), l| (c + l.created, b + l.response_bytes));
    if let Some(mean) = bytes.checked_div(created) {
        println!("  stored pod as returned by the create: {mean} bytes of JSON on average");
    }

    println!();
    println!("  where the time goes (CPU as % of one core over the measured window)");
    println!(
        "  {:>7} {:>7} {:>7} {:>8} {:>8} {:>11} {:>12} {:>7} {:>7}",
        "clients",
        "server",
        "writer",
        "wr runq",
        "workers",
        "CPU/create",
        "disk/create",
        "bench",
        "others"
    );
    for l in levels {
        let secs = l.window.as_secs_f64();
        let pct = |d: Duration| 100.0 * d.as_secs_f64() / secs;
        let n = l.latencies_us.len().max(1) as f64;
        println!(
            "  {:>7} {:>6.0}% {:>6.0}% {:>7.0}% {:>7.0}% {:>8.0} µs {:>8.1} KiB {:>6.0}% {:>6.0}%",
            l.clients,
            pct(l.server.total),
            pct(l.server.writer),
            pct(l.server.writer_runq),
            pct(l.server.workers),
            l.server.total.as_secs_f64() * 1e6 / n,
            l.server.disk_write as f64 / 1024.0 / n,
            pct(l.bench),
            pct(l.others),
        );
    }
    println!(
        "  (server = whole process; writer = store writer thread on CPU; wr runq = writer \
         runnable but waiting for a core;\n   workers = tokio workers; disk = bytes the server \
         sent to the block layer; bench = this load generator; others = every other process)"
    );

    if levels.iter().any(|l| l.commits.is_some()) {
        println!();
        println!("  group commit (from the store writer's debug log, measured window only)");
        println!(
            "  {:>7} {:>10} {:>14} {:>10} {:>14} {:>14} {:>12}",
            "clients",
            "commits/s",
            "writes/commit",
            "max batch",
            "commit p50 ms",
            "commit p99 ms",
            "writer busy"
        );
        for l in levels {
            let Some(c) = &l.commits else { continue };
            let secs = l.window.as_secs_f64();
            println!(
                "  {:>7} {:>10.0} {:>14.1} {:>10} {:>14.2} {:>14.2} {:>11.0}%",
                l.clients,
                c.commits as f64 / secs,
                c.mean_writes(),
                c.max_writes,
                percentile(&c.micros, 0.50) as f64 / 1000.0,
                percentile(&c.micros, 0.99) as f64 / 1000.0,
                100.0 * c.busy().as_secs_f64() / secs,
            );
        }
        println!(
            "  (commit time: the writer's wall time per batch: apply, encode, redb transaction, fsync)"
        );
    }
}

/// Total size of the regular files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn verdict(met: bool) -> &'static str {
    if met { "MET" } else { "NOT MET" }
}
