//! CPU time of `kbatch up` by part, from its threads' `/proc/<pid>/task/<tid>/stat`: the
//! process's total moves with the machine's speed, its split between the API server, the
//! executor and the controllers much less, so comparing builds by part is what shows where a
//! change helped.

use std::collections::BTreeMap;

/// CPU seconds per thread id, with the thread's name.
pub type Snapshot = BTreeMap<u32, (String, f64)>;

/// Which part of `kbatch up` a thread belongs to, by the name its runtime gives it.
pub fn part_of(thread: &str) -> &'static str {
    if thread.starts_with("kbatch-executor") {
        "executor"
    } else if thread.starts_with("kbatch-controll") {
        "controllers"
    } else if thread.starts_with("kbatch-store") {
        "store writer"
    } else if thread.starts_with("fjall") {
        "store background"
    } else if thread.starts_with("tokio-") || thread == "kbatch" {
        // The main runtime (on the main thread when it has one thread): the API server, its
        // garbage collector and event expiry.
        "api server"
    } else {
        "other"
    }
}

/// A thread's name and CPU seconds (user + system) from its stat line.
pub fn parse_stat(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat: 11 and 12 after the name.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    Some((name, (ticks(11)? + ticks(12)?) / 100.0))
}

pub fn snapshot(pid: u32) -> Snapshot {
    let mut out = Snapshot::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(v) = std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
        {
            out.insert(tid, v);
        }
    }
    out
}

/// CPU seconds per part between two snapshots (a thread started in between counts from zero;
/// one that ended in between is missing from both totals).
pub fn by_part(before: &Snapshot, after: &Snapshot) -> BTreeMap<&'static str, f64> {
    let mut parts = BTreeMap::new();
    for (tid, (name, cpu)) in after {
        let start = before.get(tid).map_or(0.0, |(_, c)| *c);
        *parts.entry(part_of(name)).or_insert(0.0) += (cpu - start).max(0.0);
    }
    parts
}

/// `api server 0.55 ms, controllers 0.19 ms, ...` per unit of work, largest first.
pub fn per_unit(parts: &BTreeMap<&'static str, f64>, units: usize) -> String {
    let mut v: Vec<(&str, f64)> = parts.iter().map(|(k, c)| (*k, *c)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.iter()
        .filter(|(_, c)| *c > 0.0)
        .map(|(k, c)| format!("{k} {:.3} ms", 1000.0 * c / units.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_split_by_part() {
        let stat = |name: &str, u: u32, s: u32| {
            format!("7 ({name}) S 1 1 1 0 -1 0 0 0 0 0 {u} {s} 0 0 20 0 1 0 100 0 0")
        };
        assert_eq!(
            parse_stat(&stat("kbatch-executor", 150, 50)),
            Some(("kbatch-executor".to_string(), 2.0))
        );
        assert_eq!(parse_stat("garbage"), None);
        let snap = |rows: &[(u32, &str, f64)]| -> Snapshot {
            rows.iter()
                .map(|(t, n, c)| (*t, (n.to_string(), *c)))
                .collect()
        };
        let before = snap(&[(1, "tokio-rt-worker", 1.0), (2, "kbatch-executor", 0.5)]);
        let after = snap(&[
            (1, "tokio-rt-worker", 3.0),
            (2, "kbatch-executor", 1.5),
            (3, "kbatch-executor", 0.5),
            (4, "kbatch-store-writer", 0.25),
            // The main thread, when it drives the server's one-thread runtime.
            (5, "kbatch", 0.5),
        ]);
        let parts = by_part(&before, &after);
        assert_eq!(parts["api server"], 2.5);
        assert_eq!(parts["executor"], 1.5);
        assert_eq!(parts["store writer"], 0.25);
        assert_eq!(
            per_unit(&parts, 1000),
            "api server 2.500 ms, executor 1.500 ms, store writer 0.250 ms"
        );
    }
}
