//! Percentiles, and the group-commit statistics read back from the server's debug log.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

/// Nearest-rank percentile of sorted values (`q` in 0..=1).
pub fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    percentile(&v, 0.5)
}

/// What the store's writer did in a slice of the log: one `batch committed` line per commit.
#[derive(Debug, Default)]
pub struct CommitStats {
    pub commits: u64,
    pub writes: u64,
    /// Writer time per commit (apply, encode, redb transaction and fsync), µs, sorted.
    pub micros: Vec<u64>,
    pub max_writes: u64,
}

impl CommitStats {
    pub fn mean_writes(&self) -> f64 {
        if self.commits == 0 {
            0.0
        } else {
            self.writes as f64 / self.commits as f64
        }
    }

    pub fn busy(&self) -> Duration {
        Duration::from_micros(self.micros.iter().sum())
    }
}

/// Parse the `batch committed` lines between two byte offsets of the server log.
///
/// The server writes each event with one write to its stderr, which is this file, so the
/// file's length at an instant splits the log at that instant.
pub fn commit_stats(log: &Path, from: u64, to: u64) -> anyhow::Result<CommitStats> {
    let bytes = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    let end = (to as usize).min(bytes.len());
    let start = (from as usize).min(end);
    let text = strip_ansi(&String::from_utf8_lossy(&bytes[start..end]));
    let mut out = CommitStats::default();
    for line in text.lines().filter(|l| l.contains("batch committed")) {
        let (Some(writes), Some(micros)) = (field(line, "writes"), field(line, "micros")) else {
            continue;
        };
        out.commits += 1;
        out.writes += writes;
        out.max_writes = out.max_writes.max(writes);
        out.micros.push(micros);
    }
    out.micros.sort_unstable();
    Ok(out)
}

/// The numeric value of ` name=123` in a tracing fmt line.
fn field(line: &str, name: &str) -> Option<u64> {
    let pat = format!(" {name}=");
    let at = line.find(&pat)? + pat.len();
    let digits: String = line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// `startup_ms=N` of the server's `kbatch is up` line: its own view of startup, which leaves
/// out exec, dynamic loading and runtime setup.
pub fn reported_startup(log: &Path) -> Option<Duration> {
    let text = strip_ansi(&std::fs::read_to_string(log).ok()?);
    let line = text.lines().find(|l| l.contains("kbatch is up"))?;
    field(line, "startup_ms").map(Duration::from_millis)
}

/// Drop terminal colour sequences (`ESC [ ... m`), in case the server colours its log
/// despite NO_COLOR.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7u32], 0.99), 7);
        assert_eq!(percentile::<u32>(&[], 0.5), 0);
    }

    #[test]
    fn log_fields() {
        let line = "2026-01-01T00:00:00Z DEBUG request: kbatch_store::writer: batch committed \
                    writes=12 rejected=0 revision=345 micros=2100";
        assert_eq!(field(line, "writes"), Some(12));
        assert_eq!(field(line, "micros"), Some(2100));
        assert_eq!(field(line, "revision"), Some(345));
        assert_eq!(field(line, "absent"), None);
        let coloured = "\u{1b}[2mkbatch::up\u{1b}[0m kbatch is up \u{1b}[3mstartup_ms\u{1b}[0m\u{1b}[2m=\u{1b}[0m71";
        assert_eq!(field(&strip_ansi(coloured), "startup_ms"), Some(71));
    }
}
