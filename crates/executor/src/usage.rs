//! What the node and the containers' processes use, read from /proc, for kubelet's resource
//! metrics (`streaming::resource_metrics`). kubelet reads these from cgroups (cAdvisor); a
//! container here is a process group the executor started, not a cgroup, so its usage is the
//! sum over the group's live processes. That misses what no longer counts in the group: a
//! process that left it (setsid, setpgid) and the CPU time of a child that exited unreaped by
//! a member (its time moves to a parent outside the group), so a container's counter can even
//! step back; a cgroup would count both exactly. Nor does it count an exec's command, which
//! runs in a process group of its own (kubelet's would run in the container's cgroup).
//!
//! Everything here tolerates processes vanishing while it reads: a process gone between the
//! listing and the read is skipped.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::sync::OnceLock;

/// Usage of the node as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeUsage {
    /// CPU time spent outside the idle task, all cores together.
    pub cpu_ns: u64,
    pub working_set_bytes: u64,
    /// `None` when /proc/meminfo reports no swap fields.
    pub swap_bytes: Option<u64>,
}

/// Usage of one process group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUsage {
    /// CPU time of the group's processes, with that of their reaped children.
    pub cpu_ns: u64,
    /// Resident memory of the group's processes.
    pub working_set_bytes: u64,
    /// Swapped-out memory of the group's processes.
    pub swap_bytes: u64,
}

/// The fields of a `/proc/PID/stat` line the metrics need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    /// Field 5: the process group.
    pub pgrp: u32,
    /// Fields 14-17, utime + stime + cutime + cstime, in clock ticks.
    pub cpu_ticks: u64,
    /// Field 24: resident pages.
    pub rss_pages: u64,
}

struct Units {
    clk_tck: u64,
    page_size: u64,
}

fn units() -> &'static Units {
    static UNITS: OnceLock<Units> = OnceLock::new();
    UNITS.get_or_init(|| {
        use nix::unistd::{SysconfVar, sysconf};
        let get = |var, default: u64| {
            sysconf(var)
                .ok()
                .flatten()
                .and_then(|v| u64::try_from(v).ok())
                .filter(|v| *v > 0)
                .unwrap_or(default)
        };
        // Linux's USER_HZ and the usual page size, should sysconf ever fail.
        Units {
            clk_tck: get(SysconfVar::CLK_TCK, 100),
            page_size: get(SysconfVar::PAGE_SIZE, 4096),
        }
    })
}

fn ticks_to_ns(ticks: u64, clk_tck: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(clk_tck.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Parse a `/proc/PID/stat` line. The command (field 2) is in parentheses and may itself hold
/// spaces, parentheses and bytes that are not UTF-8: the fields after it start after the last
/// `)`.
pub fn parse_stat(stat: &[u8]) -> Option<StatFields> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    // From field 3 (the state) on.
    let fields: Vec<&[u8]> = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .take(22)
        .collect();
    let field = |n: usize| -> Option<&str> { std::str::from_utf8(fields.get(n - 3)?).ok() };
    let unsigned = |n: usize| -> Option<u64> { field(n)?.parse().ok() };
    // cutime and cstime are signed in the kernel's format; never negative in practice.
    let signed = |n: usize| -> Option<u64> {
        let v: i64 = field(n)?.parse().ok()?;
        Some(u64::try_from(v).unwrap_or(0))
    };
    let cpu_ticks = unsigned(14)?
        .saturating_add(unsigned(15)?)
        .saturating_add(signed(16)?)
        .saturating_add(signed(17)?);
    Some(StatFields {
        pgrp: u32::try_from(field(5)?.parse::<i64>().ok()?).ok()?,
        cpu_ticks,
        rss_pages: signed(24)?,
    })
}

/// Non-idle jiffies of the `cpu` line of /proc/stat: user + nice + system + irq + softirq +
/// steal (guest time is already in user and nice; idle and iowait are idle).
pub fn parse_cpu_line(proc_stat: &str) -> Option<u64> {
    let line = proc_stat.lines().next()?;
    let mut words = line.split_ascii_whitespace();
    if words.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = words
        .take(8)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, _idle, _iowait, irq, softirq, steal] = v[..] else {
        return None;
    };
    Some(
        [user, nice, system, irq, softirq, steal]
            .into_iter()
            .fold(0u64, u64::saturating_add),
    )
}

/// A `Key:   123 kB` line's value in bytes (/proc/meminfo, /proc/PID/status).
fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.split_ascii_whitespace().next()?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    })
}

/// The node's working set and swap use from /proc/meminfo.
pub fn parse_meminfo(meminfo: &str) -> Option<(u64, Option<u64>)> {
    // kubelet's node working set is the root cgroup's usage less its inactive file pages; the
    // cgroup v2 root has no usage file, and the executor's processes live in whatever cgroup
    // it was started in, so the host's own count of memory it cannot simply drop stands in:
    // MemTotal - MemAvailable.
    let total = kib_field(meminfo, "MemTotal")?;
    let available = kib_field(meminfo, "MemAvailable")?;
    let swap = match (
        kib_field(meminfo, "SwapTotal"),
        kib_field(meminfo, "SwapFree"),
    ) {
        (Some(t), Some(f)) => Some(t.saturating_sub(f)),
        _ => None,
    };
    Some((total.saturating_sub(available), swap))
}

/// Read a small /proc file into `buf` (cleared first).
fn read_into(path: &str, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    File::open(path)?.read_to_end(buf).map(|_| ())
}

/// The node's usage now.
pub fn node() -> std::io::Result<NodeUsage> {
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let stat = std::fs::read_to_string("/proc/stat")?;
    let jiffies = parse_cpu_line(&stat).ok_or_else(|| invalid("no cpu line in /proc/stat"))?;
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let (working_set_bytes, swap_bytes) =
        parse_meminfo(&meminfo).ok_or_else(|| invalid("no MemAvailable in /proc/meminfo"))?;
    Ok(NodeUsage {
        cpu_ns: ticks_to_ns(jiffies, units().clk_tck),
        working_set_bytes,
        swap_bytes,
    })
}

/// The usage of the process groups led by `leaders`, in one pass over /proc. A group with no
/// live process left is not in the answer.
pub fn groups(leaders: &[u32]) -> std::io::Result<HashMap<u32, GroupUsage>> {
    let mut usage: HashMap<u32, GroupUsage> = HashMap::new();
    if leaders.is_empty() {
        return Ok(usage);
    }
    let wanted: HashSet<u32> = leaders.iter().copied().collect();
    let units = units();
    let mut ticks: HashMap<u32, u64> = HashMap::new();
    let mut buf = Vec::with_capacity(1024);
    let mut path = String::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        path.clear();
        path.push_str("/proc/");
        path.push_str(pid);
        path.push_str("/stat");
        if read_into(&path, &mut buf).is_err() {
            continue;
        }
        let Some(stat) = parse_stat(&buf) else {
            continue;
        };
        if !wanted.contains(&stat.pgrp) {
            continue;
        }
        let swap = {
            path.truncate(path.len() - "stat".len());
            path.push_str("status");
            match read_into(&path, &mut buf) {
                Ok(()) => kib_field(&String::from_utf8_lossy(&buf), "VmSwap").unwrap_or(0),
                Err(_) => 0,
            }
        };
        let g = usage.entry(stat.pgrp).or_default();
        g.working_set_bytes = g
            .working_set_bytes
            .saturating_add(stat.rss_pages.saturating_mul(units.page_size));
        g.swap_bytes = g.swap_bytes.saturating_add(swap);
        let t = ticks.entry(stat.pgrp).or_default();
        *t = t.saturating_add(stat.cpu_ticks);
    }
    for (pgrp, t) in ticks {
        if let Some(g) = usage.get_mut(&pgrp) {
            g.cpu_ns = ticks_to_ns(t, units.clk_tck);
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_the_last_parenthesis() {
        // A command with spaces and parentheses, even a `) ` that looks like the end of it.
        let line = b"4242 (my (odd) cmd) R 1 4240 4240 0 -1 4194560 120 0 0 0 \
            250 50 7 3 20 0 1 0 123456 10485760 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 \
            0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(line),
            Some(StatFields {
                pgrp: 4240,
                cpu_ticks: 250 + 50 + 7 + 3,
                rss_pages: 2048,
            })
        );
        let tricky = b"7 (a) b ) S 1 99 99 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 5 6 7 8\n";
        assert_eq!(
            parse_stat(tricky),
            Some(StatFields {
                pgrp: 99,
                cpu_ticks: 10,
                rss_pages: 7,
            })
        );
        // Bytes that are not UTF-8 in the command are fine.
        let mut raw = b"8 (\xff\xfe) S 1 5 5 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5 6 9 8".to_vec();
        raw.push(b'\n');
        assert_eq!(
            parse_stat(&raw).map(|s| (s.pgrp, s.rss_pages)),
            Some((5, 9))
        );
        // Negative child times (never seen in practice) count as nothing.
        let neg = b"9 (x) S 1 5 5 0 -1 0 0 0 0 0 4 1 -2 0 20 0 1 0 5 6 3 8";
        assert_eq!(parse_stat(neg).map(|s| s.cpu_ticks), Some(5));
        // Cut short, or no command at all: nothing.
        assert_eq!(parse_stat(b"10 (x) S 1 5 5 0 -1 0 0 0 0 0 4 1"), None);
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b""), None);
    }

    #[test]
    fn node_cpu_and_memory() {
        let stat = "cpu  100 5 50 9000 40 3 2 1 7 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\n";
        assert_eq!(parse_cpu_line(stat), Some(100 + 5 + 50 + 3 + 2 + 1));
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_cpu_line("cpu 1 2 3\n"), None);
        assert_eq!(ticks_to_ns(123, 100), 1_230_000_000);
        let meminfo = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n\
            MemAvailable:    12000000 kB\nSwapTotal:       2000000 kB\nSwapFree:        1500000 kB\n";
        assert_eq!(
            parse_meminfo(meminfo),
            Some((4_000_000 * 1024, Some(500_000 * 1024)))
        );
        assert_eq!(
            parse_meminfo("MemTotal: 10 kB\nMemAvailable: 4 kB\n"),
            Some((6 * 1024, None))
        );
        assert_eq!(parse_meminfo("MemTotal: 10 kB\n"), None);
        assert_eq!(
            kib_field("Name:\tsh\nVmSwap:\t      12 kB\n", "VmSwap"),
            Some(12 * 1024)
        );
    }

    #[test]
    fn reads_this_process_and_the_node() {
        let me = std::process::id();
        let stat = std::fs::read(format!("/proc/{me}/stat")).unwrap();
        let fields = parse_stat(&stat).unwrap();
        let usage = groups(&[fields.pgrp]).unwrap();
        let g = usage.get(&fields.pgrp).unwrap();
        assert!(g.working_set_bytes > 0, "{g:?}");
        let node = node().unwrap();
        assert!(node.cpu_ns > 0 && node.working_set_bytes > 0, "{node:?}");
        // No group asked for: no scan, nothing.
        assert!(groups(&[]).unwrap().is_empty());
    }
}
