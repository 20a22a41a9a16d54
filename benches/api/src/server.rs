//! Running `kbatch up` as a child process and reading what the kernel knows about it.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How often readiness is polled; the figure is only as fine as this.
const POLL: Duration = Duration::from_millis(2);
/// A server that is not ready by then is broken, not slow.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// SIGTERM is given this long before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `kbatch up`. Dropping it kills the process, so an early error return never
/// leaves a server behind.
pub struct Server {
    child: Option<Child>,
    pub pid: u32,
    pub addr: SocketAddr,
    /// From spawn to the first 200 on /readyz.
    pub ready_after: Duration,
    pub log: PathBuf,
}

pub struct Launch<'a> {
    pub bin: &'a Path,
    pub data_dir: &'a Path,
    pub log: &'a Path,
    /// Value of KBATCH_LOG (the server's tracing filter).
    pub log_filter: &'a str,
}

impl Server {
    pub fn start(l: &Launch<'_>) -> anyhow::Result<Server> {
        // A restart on an existing data dir would otherwise find the previous run's port.
        let kubeconfig = l.data_dir.join("kubeconfig");
        match std::fs::remove_file(&kubeconfig) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context(format!("removing {}", kubeconfig.display())),
        }
        let stderr =
            File::create(l.log).with_context(|| format!("creating {}", l.log.display()))?;
        let started = Instant::now();
        let child = Command::new(l.bin)
            .arg("up")
            .arg("--executor")
            .arg("none")
            .arg("--data-dir")
            .arg(l.data_dir)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .env("KBATCH_LOG", l.log_filter)
            // Plain log lines: the commit statistics are parsed from them.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", l.bin.display()))?;
        let pid = child.id();
        let mut server = Server {
            child: Some(child),
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            ready_after: Duration::ZERO,
            log: l.log.to_path_buf(),
        };
        let mut addr = None;
        loop {
            if let Some(child) = server.child.as_mut()
                && let Some(status) = child.try_wait().context("waiting for kbatch")?
            {
                server.child = None;
                bail!(
                    "kbatch exited ({status}) before it was ready; its log ends with:\n{}",
                    log_tail(l.log)
                );
            }
            if addr.is_none() {
                addr = read_server_addr(&kubeconfig);
            }
            if let Some(a) = addr
                && readyz(a)
            {
                server.addr = a;
                server.ready_after = started.elapsed();
                return Ok(server);
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "kbatch was not ready after {READY_TIMEOUT:?}; its log ends with:\n{}",
                    log_tail(l.log)
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM and wait, so the store closes cleanly and the next start on the same data dir
    /// measures a normal open rather than a crash recovery. Returns how long shutdown took.
    pub fn stop(mut self) -> anyhow::Result<Duration> {
        let Some(mut child) = self.child.take() else {
            bail!("kbatch is not running");
        };
        let started = Instant::now();
        // SAFETY: kill(2) on the pid of a child this process spawned and has not reaped.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            let _ = child.kill();
            let _ = child.wait();
            return Err(err).context("sending SIGTERM to kbatch");
        }
        loop {
            if let Some(status) = child.try_wait().context("waiting for kbatch")? {
                if !status.success() {
                    bail!(
                        "kbatch exited with {status} on SIGTERM; its log ends with:\n{}",
                        log_tail(&self.log)
                    );
                }
                return Ok(started.elapsed());
            }
            if started.elapsed() > STOP_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                bail!("kbatch did not stop within {STOP_TIMEOUT:?} of SIGTERM; killed it");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `server: http://HOST:PORT` line of the kubeconfig, once the file exists.
fn read_server_addr(kubeconfig: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: http://"))
        .and_then(|a| a.trim_end_matches('/').parse().ok())
}

/// One GET /readyz on a fresh connection; any failure counts as not ready yet.
fn readyz(addr: SocketAddr) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: kbatch\r\nConnection: close\r\n\r\n")?;
        let mut buf = [0u8; 16];
        let mut n = 0;
        while n < 12 {
            let got = s.read(&mut buf[n..])?;
            if got == 0 {
                break;
            }
            n += got;
        }
        Ok(buf[..n].starts_with(b"HTTP/1.1 200"))
    };
    attempt().unwrap_or(false)
}

/// The last lines of a server log, for error messages.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Resident set size in bytes (VmRSS) and its peak (VmHWM).
pub fn rss(pid: u32) -> anyhow::Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("{name} missing from {path}"))?;
        let kib: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("parsing {name} in {path}"))?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time (user + system) of a process, split by thread role, plus what it wrote to disk.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cpu {
    pub total: Duration,
    /// The store's single writer thread (group commit, fsync).
    pub writer: Duration,
    /// Time the writer thread was runnable but waiting for a core (schedstat): on a busy
    /// machine this, not fsync, can be what holds commits back.
    pub writer_runq: Duration,
    /// Tokio worker threads (HTTP, decoding, validation, encoding).
    pub workers: Duration,
    /// Bytes the process caused to be sent to the block layer (`write_bytes` in /proc/PID/io).
    pub disk_write: u64,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            total: self.total.saturating_sub(o.total),
            writer: self.writer.saturating_sub(o.writer),
            writer_runq: self.writer_runq.saturating_sub(o.writer_runq),
            workers: self.workers.saturating_sub(o.workers),
            disk_write: self.disk_write.saturating_sub(o.disk_write),
        }
    }
}

/// utime + stime from a /proc .../stat line.
fn stat_cpu(text: &str) -> Option<Duration> {
    // The command name (field 2) may hold spaces and parentheses; fields after it are plain.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks_to_duration(ticks))
}

fn ticks_to_duration(ticks: u64) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

pub fn cpu(pid: u32) -> anyhow::Result<Cpu> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let total = stat_cpu(&text).with_context(|| format!("parsing {path}"))?;
    let mut out = Cpu {
        total,
        ..Cpu::default()
    };
    let tasks = format!("/proc/{pid}/task");
    for entry in std::fs::read_dir(&tasks).with_context(|| format!("reading {tasks}"))? {
        let dir = entry?.path();
        // Threads come and go (tokio's blocking pool); a vanished one is simply skipped.
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        let Some(t) = stat_cpu(&stat) else { continue };
        // Thread names are cut to 15 bytes by the kernel.
        match comm.trim() {
            "kbatch-store-wr" => {
                out.writer += t;
                out.writer_runq += std::fs::read_to_string(dir.join("schedstat"))
                    .ok()
                    .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
                    .map(Duration::from_nanos)
                    .unwrap_or_default();
            }
            // Tokio's worker thread name changed between releases.
            "tokio-rt-worker" | "tokio-runtime-w" => out.workers += t,
            _ => {}
        }
    }
    out.disk_write = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    Ok(out)
}

/// Busy CPU time of the whole machine (all cores) from /proc/stat: everything but idle and
/// iowait. Less the server and the load generator, it is what other processes took.
pub fn machine_busy() -> anyhow::Result<Duration> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy: u64 = f
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Ok(ticks_to_duration(busy))
}

/// The 1-minute load average, to show how busy the machine was around the run.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// CPU time of this process (the load generator).
pub fn self_cpu() -> anyhow::Result<Duration> {
    let text = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    stat_cpu(&text).context("parsing /proc/self/stat")
}

/// Facts about the machine that decide what the figures mean.
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub work_fs: String,
    /// Median time of a 4 KiB write + fdatasync in the work dir: the floor under each commit.
    pub fsync: Duration,
    /// The same with 256 KiB, about what a commit of a few dozen pods writes.
    pub fsync_256k: Duration,
}

pub fn machine(work_dir: &Path) -> anyhow::Result<Machine> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Ok(Machine {
        cores,
        cpu_model,
        kernel,
        work_fs: filesystem_of(work_dir),
        fsync: fsync_probe(work_dir, 4096)?,
        fsync_256k: fsync_probe(work_dir, 256 * 1024)?,
    })
}

/// Type and device of the mount that holds `dir` (longest matching mount point).
fn filesystem_of(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && dir.starts_with(f[1]))
                .then(|| (f[1].len(), format!("{} ({})", f[2], f[0])))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, s)| s)
        .unwrap_or_else(|| "unknown".into())
}

fn fsync_probe(dir: &Path, size: usize) -> anyhow::Result<Duration> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("fsync-probe");
    let f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0x5au8; size];
    // Overwrite in place, as the store does with its preallocated file: appending would add
    // the cost of a size change to every sync.
    f.write_all_at(&block, 0)?;
    f.sync_all()?;
    let mut times = Vec::with_capacity(50);
    for _ in 0..50 {
        let t = Instant::now();
        f.write_all_at(&block, 0)?;
        f.sync_data()?;
        times.push(t.elapsed());
    }
    drop(f);
    std::fs::remove_file(&path).ok();
    times.sort();
    Ok(times[times.len() / 2])
}
