//! What survives the executor: one small file per pod that has (or had) processes, listing the
//! pid and kernel start time of each running container process. A restarted executor uses it
//! to find processes a previous run left and to stop them (a pid alone could name a new,
//! unrelated process; the start time rules that out).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessRecord {
    pub container: String,
    pub run: u32,
    pub pid: u32,
    /// Field 22 of /proc/<pid>/stat: clock ticks after boot when the process started.
    pub start_ticks: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub processes: Vec<ProcessRecord>,
}

/// The state file of one pod, kept in memory too. On disk: the record as one JSON line when
/// the pod starts, then one appended line per change (`{"started":{...}}`,
/// `{"exited":{"pid":N}}`). Appending allocates no inode and renames nothing, where
/// rewriting a temporary file per change cost three new inodes per pod (ext4 without a
/// journal scans the inode table past recently deleted inodes on every create). A crash in
/// the middle of an append leaves a torn last line, which is ignored: its process is either
/// not started yet or found again by the start time of a record that did land.
#[derive(Debug)]
pub struct PodState {
    path: PathBuf,
    pub record: PodRecord,
}

/// One appended change of a pod's state file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Change {
    Started(ProcessRecord),
    Exited { pid: u32 },
}

pub fn path_for(dir: &Path, uid: &str) -> PathBuf {
    dir.join(format!("{uid}.json"))
}

impl PodState {
    pub fn new(dir: &Path, namespace: &str, name: &str, uid: &str) -> PodState {
        PodState {
            path: path_for(dir, uid),
            record: PodRecord {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: uid.to_string(),
                processes: Vec::new(),
            },
        }
    }

    /// Write the whole record as the file's first and only line.
    pub fn save(&self) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(&self.record).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        std::fs::write(&self.path, bytes)
    }

    fn append(&self, change: &Change) -> std::io::Result<()> {
        use std::io::Write;
        let mut line = serde_json::to_vec(change).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write of the whole line: appends never interleave within it.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)?
            .write_all(&line)
    }

    pub fn add(&mut self, p: ProcessRecord) -> std::io::Result<()> {
        self.append(&Change::Started(p.clone()))?;
        self.record.processes.push(p);
        Ok(())
    }

    pub fn remove_pid(&mut self, pid: u32) -> std::io::Result<()> {
        self.record.processes.retain(|p| p.pid != pid);
        self.append(&Change::Exited { pid })
    }
}

/// The record a state file describes: its first line, then its changes in order.
pub fn parse(bytes: &[u8]) -> Option<PodRecord> {
    let mut lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let mut record: PodRecord = serde_json::from_slice(lines.next()?).ok()?;
    for line in lines {
        match serde_json::from_slice::<Change>(line) {
            Ok(Change::Started(p)) => record.processes.push(p),
            Ok(Change::Exited { pid }) => record.processes.retain(|p| p.pid != pid),
            // A torn last line: the change did not happen as far as the file knows.
            Err(_) => break,
        }
    }
    Some(record)
}

pub fn load(path: &Path) -> Option<PodRecord> {
    parse(&std::fs::read(path).ok()?)
}

pub fn remove(dir: &Path, uid: &str) {
    let _ = std::fs::remove_file(path_for(dir, uid));
}

/// Every pod record in `dir` (unreadable files are skipped).
pub fn load_all(dir: &Path) -> Vec<PodRecord> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| load(&p))
        .collect()
}

/// The start time of a live (not zombie) process, from `/proc/<pid>/stat`.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Fields after the command (which may hold spaces and parentheses) start after the last `)`:
/// field 3 is the state, field 22 the start time.
pub fn parse_stat(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The recorded process is still the one that was started (not gone, not a reused pid).
pub fn is_alive(p: &ProcessRecord) -> bool {
    start_ticks(p.pid) == Some(p.start_ticks)
}

/// Kill the process group of a recorded process left by a previous executor run and wait
/// (briefly) until its leader is gone. Returns whether it was still running.
pub async fn kill_leftover(p: &ProcessRecord) -> bool {
    if !is_alive(p) {
        return false;
    }
    // A damaged record must not make us signal init's group or our own.
    let Ok(pid) = i32::try_from(p.pid) else {
        return false;
    };
    if pid <= 1 || p.pid == std::process::id() {
        return false;
    }
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    for _ in 0..100 {
        if !is_alive(p) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat() {
        let stat = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(stat), Some(987654));
        let zombie = "1234 (sh) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(parse_stat(zombie), None);
        assert_eq!(parse_stat("garbage"), None);
        assert!(start_ticks(std::process::id()).is_some());
    }

    #[tokio::test]
    async fn damaged_records_never_signal_ourselves_or_init() {
        for pid in [1, std::process::id()] {
            let Some(start_ticks) = start_ticks(pid) else {
                continue;
            };
            let rec = ProcessRecord {
                container: "main".into(),
                run: 0,
                pid,
                start_ticks,
            };
            assert!(!kill_leftover(&rec).await);
        }
    }

    #[test]
    fn records_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = PodState::new(dir.path(), "ns", "p", "u1");
        s.save().unwrap();
        s.add(ProcessRecord {
            container: "main".into(),
            run: 0,
            pid: 42,
            start_ticks: 7,
        })
        .unwrap();
        let all = load_all(dir.path());
        assert_eq!(all, vec![s.record.clone()]);
        s.remove_pid(42).unwrap();
        assert!(load_all(dir.path())[0].processes.is_empty());
        remove(dir.path(), "u1");
        assert!(load_all(dir.path()).is_empty());
    }

    #[test]
    fn changes_are_appended_and_replayed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = PodState::new(dir.path(), "ns", "p", "u1");
        s.save().unwrap();
        let rec = |container: &str, run, pid| ProcessRecord {
            container: container.into(),
            run,
            pid,
            start_ticks: 100 + u64::from(pid),
        };
        s.add(rec("init", 0, 10)).unwrap();
        s.remove_pid(10).unwrap();
        s.add(rec("main", 0, 11)).unwrap();
        s.add(rec("side", 0, 12)).unwrap();
        s.remove_pid(11).unwrap();
        s.add(rec("main", 1, 13)).unwrap();
        let text = std::fs::read_to_string(path_for(dir.path(), "u1")).unwrap();
        assert_eq!(text.lines().count(), 7, "{text}");
        let loaded = load(&path_for(dir.path(), "u1")).unwrap();
        assert_eq!(
            loaded.processes,
            vec![rec("side", 0, 12), rec("main", 1, 13)]
        );
        assert_eq!(loaded, s.record);
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_a_torn_first_line_is_no_record() {
        let first = br#"{"namespace":"ns","name":"p","uid":"u1","processes":[]}"#;
        let started = br#"{"started":{"container":"main","run":0,"pid":42,"startTicks":7}}"#;
        let mut bytes = first.to_vec();
        bytes.push(b'\n');
        bytes.extend_from_slice(started);
        bytes.push(b'\n');
        bytes.extend_from_slice(&br#"{"exited":{"pi"#[..]);
        let rec = parse(&bytes).unwrap();
        assert_eq!(rec.processes.len(), 1);
        assert_eq!(rec.processes[0].pid, 42);
        assert_eq!(parse(&first[..20]), None);
        assert_eq!(parse(b""), None);
    }

    #[test]
    fn a_record_written_whole_by_an_earlier_version_still_loads() {
        let old = br#"{"namespace":"ns","name":"p","uid":"u1","processes":[{"container":"main","run":2,"pid":42,"startTicks":7}]}"#;
        let rec = parse(old).unwrap();
        assert_eq!((rec.uid.as_str(), rec.processes.len()), ("u1", 1));
    }
}
