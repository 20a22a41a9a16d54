//! What survives the executor: a journal of the pods that have (or had) processes, with the
//! pid and kernel start time of each running container process. A restarted executor uses it
//! to find processes a previous run left and to stop them (a pid alone could name a new,
//! unrelated process; the start time rules that out).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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

/// The executor's state journal: one append-only file for all pods (`journal` in the state
/// dir), kept open, one JSON line per change — a pod begins, a process started, a process
/// exited, a pod is done — and the live records in memory. One file appended to costs no inode
/// per pod: a file per pod cost a create, an open per change and an unlink per pod, which on a
/// journaled filesystem was most of the executor's time per short pod. The file is rewritten
/// with only the live records when it opens and whenever the dead lines outnumber the live
/// ones by far. A crash in the middle of an append leaves a torn last line, which is skipped:
/// its process is either not started yet or found again by the start time of a line that did
/// land.
#[derive(Debug)]
pub struct Journal {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    file: Option<File>,
    pods: HashMap<String, PodRecord>,
    /// Lines in the file since it was last rewritten.
    lines: usize,
}

/// One line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Line {
    Pod {
        namespace: String,
        name: String,
        uid: String,
    },
    Started {
        uid: String,
        #[serde(flatten)]
        process: ProcessRecord,
    },
    Exited {
        uid: String,
        pid: u32,
    },
    Done {
        uid: String,
    },
}

const JOURNAL: &str = "journal";
const JOURNAL_TMP: &str = "journal.tmp";
/// The file is rewritten once it has this many lines and four times as many as live ones.
const REWRITE_AFTER: usize = 4096;

impl Line {
    fn apply(self, pods: &mut HashMap<String, PodRecord>) {
        match self {
            Line::Pod {
                namespace,
                name,
                uid,
            } => {
                pods.insert(
                    uid.clone(),
                    PodRecord {
                        namespace,
                        name,
                        uid,
                        processes: Vec::new(),
                    },
                );
            }
            Line::Started { uid, process } => {
                if let Some(r) = pods.get_mut(&uid) {
                    r.processes.push(process);
                }
            }
            Line::Exited { uid, pid } => {
                if let Some(r) = pods.get_mut(&uid) {
                    r.processes.retain(|p| p.pid != pid);
                }
            }
            Line::Done { uid } => {
                pods.remove(&uid);
            }
        }
    }

    fn encode(&self) -> std::io::Result<Vec<u8>> {
        let mut line = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        line.push(b'\n');
        Ok(line)
    }
}

/// The live records a journal's bytes describe; lines that do not parse (a torn line) are
/// skipped.
pub fn replay(bytes: &[u8]) -> HashMap<String, PodRecord> {
    let mut pods = HashMap::new();
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(line) = serde_json::from_slice::<Line>(line) {
            line.apply(&mut pods);
        }
    }
    pods
}

impl Journal {
    /// Load the journal in `dir` (and the per-pod files of earlier versions, which are folded
    /// into it and removed), then rewrite it with the live records only.
    pub fn open(dir: &Path) -> std::io::Result<Journal> {
        let mut pods = match std::fs::read(dir.join(JOURNAL)) {
            Ok(bytes) => replay(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => return Err(e),
        };
        let legacy = legacy_files(dir);
        for (_, rec) in &legacy {
            pods.insert(rec.uid.clone(), rec.clone());
        }
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            file: None,
            pods,
            lines: 0,
        };
        inner.rewrite()?;
        for (path, _) in legacy {
            let _ = std::fs::remove_file(path);
        }
        Ok(Journal {
            inner: Mutex::new(inner),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the map as consistent as the file: go on.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every live record.
    pub fn records(&self) -> Vec<PodRecord> {
        self.lock().pods.values().cloned().collect()
    }

    pub fn record(&self, uid: &str) -> Option<PodRecord> {
        self.lock().pods.get(uid).cloned()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.lock().pods.contains_key(uid)
    }

    /// A pod is about to start its containers (written before any starts, so a crash right
    /// after a start is noticed).
    pub fn begin(&self, namespace: &str, name: &str, uid: &str) -> std::io::Result<()> {
        self.lock().append(Line::Pod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        })
    }

    pub fn started(&self, uid: &str, process: ProcessRecord) -> std::io::Result<()> {
        self.lock().append(Line::Started {
            uid: uid.to_string(),
            process,
        })
    }

    pub fn exited(&self, uid: &str, pid: u32) -> std::io::Result<()> {
        self.lock().append(Line::Exited {
            uid: uid.to_string(),
            pid,
        })
    }

    /// The pod has no process left to find after a restart (nothing is written for a pod the
    /// journal does not hold).
    pub fn done(&self, uid: &str) -> std::io::Result<()> {
        let mut inner = self.lock();
        if !inner.pods.contains_key(uid) {
            return Ok(());
        }
        inner.append(Line::Done {
            uid: uid.to_string(),
        })
    }
}

impl Inner {
    fn append(&mut self, line: Line) -> std::io::Result<()> {
        use std::io::Write;
        let bytes = line.encode()?;
        line.apply(&mut self.pods);
        let rewrite_due = self.lines >= REWRITE_AFTER && self.lines >= 4 * self.live();
        let file = match self.file.as_mut() {
            Some(file) if !rewrite_due => file,
            // Also after an earlier append failed, maybe halfway: start over from the live
            // records rather than glue this line to a partial one.
            _ => return self.rewrite(),
        };
        // One write of the whole line: appends never interleave within it.
        if let Err(e) = file.write_all(&bytes) {
            self.file = None;
            return Err(e);
        }
        self.lines += 1;
        Ok(())
    }

    /// How many lines the live records take: a pod line and a line per process.
    fn live(&self) -> usize {
        self.pods.len() + self.pods.values().map(|r| r.processes.len()).sum::<usize>()
    }

    /// Replace the file with the live records: written aside, then renamed over it.
    fn rewrite(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        self.file = None;
        let mut bytes = Vec::new();
        let mut lines = 0;
        for r in self.pods.values() {
            bytes.extend(
                Line::Pod {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    uid: r.uid.clone(),
                }
                .encode()?,
            );
            lines += 1;
            for p in &r.processes {
                bytes.extend(
                    Line::Started {
                        uid: r.uid.clone(),
                        process: p.clone(),
                    }
                    .encode()?,
                );
                lines += 1;
            }
        }
        let tmp = self.dir.join(JOURNAL_TMP);
        let path = self.dir.join(JOURNAL);
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        drop(f);
        std::fs::rename(&tmp, &path)?;
        self.file = Some(OpenOptions::new().append(true).open(&path)?);
        self.lines = lines;
        Ok(())
    }
}

/// The per-pod state files (`<uid>.json`) of earlier versions: the record as the first line,
/// then `{"started":{...}}` / `{"exited":{"pid":N}}` changes.
fn legacy_files(dir: &Path) -> Vec<(PathBuf, PodRecord)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let rec = parse_legacy(&std::fs::read(&p).ok()?)?;
            Some((p, rec))
        })
        .collect()
}

/// A change line of an earlier version's per-pod file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
enum LegacyChange {
    Started(ProcessRecord),
    Exited { pid: u32 },
}

/// The record an earlier version's per-pod state file describes.
fn parse_legacy(bytes: &[u8]) -> Option<PodRecord> {
    let mut lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let mut record: PodRecord = serde_json::from_slice(lines.next()?).ok()?;
    for line in lines {
        match serde_json::from_slice::<LegacyChange>(line) {
            Ok(LegacyChange::Started(p)) => record.processes.push(p),
            Ok(LegacyChange::Exited { pid }) => record.processes.retain(|p| p.pid != pid),
            Err(_) => break,
        }
    }
    Some(record)
}

/// The start time of a live (not zombie) process, from `/proc/<pid>/stat`: one open and one
/// read into a buffer on the stack (read per container start).
pub fn start_ticks(pid: u32) -> Option<u64> {
    use std::io::Read;
    let mut path = [0u8; 32];
    let path = {
        use std::io::Write;
        let mut w = &mut path[..];
        write!(w, "/proc/{pid}/stat").ok()?;
        let len = 32 - w.len();
        std::str::from_utf8(&path[..len]).ok()?
    };
    let mut f = File::open(path).ok()?;
    let mut buf = [0u8; 1024];
    let mut len = 0;
    // The kernel hands the line over whole on the first read; loop in case it does not.
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(&buf[..len])
}

/// Fields after the command (which may hold spaces, parentheses and bytes that are not UTF-8)
/// start after the last `)`: field 3 is the state, field 22 the start time.
pub fn parse_stat(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let mut fields = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty());
    if matches!(fields.next()?, b"Z" | b"X") {
        return None;
    }
    std::str::from_utf8(fields.nth(18)?).ok()?.parse().ok()
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
        assert_eq!(parse_stat(stat.as_bytes()), Some(987654));
        let zombie = "1234 (sh) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(parse_stat(zombie.as_bytes()), None);
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) S 1 2"), None);
        let odd = b"77 (a\xff) b) R 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0";
        assert_eq!(parse_stat(odd), Some(4242));
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

    fn rec(container: &str, run: u32, pid: u32) -> ProcessRecord {
        ProcessRecord {
            container: container.into(),
            run,
            pid,
            start_ticks: 100 + u64::from(pid),
        }
    }

    fn journal_text(dir: &Path) -> String {
        std::fs::read_to_string(dir.join(JOURNAL)).unwrap()
    }

    #[test]
    fn records_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        assert!(j.records().is_empty());
        j.begin("ns", "p", "u1").unwrap();
        j.started("u1", rec("main", 0, 42)).unwrap();
        j.begin("ns", "q", "u2").unwrap();
        assert!(j.contains("u1") && j.contains("u2") && !j.contains("u3"));
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        let u1 = j.record("u1").unwrap();
        assert_eq!(
            (
                u1.namespace.as_str(),
                u1.name.as_str(),
                u1.processes.clone()
            ),
            ("ns", "p", vec![rec("main", 0, 42)])
        );
        assert!(j.record("u2").unwrap().processes.is_empty());
        j.exited("u1", 42).unwrap();
        j.done("u2").unwrap();
        // Nothing is written for a pod the journal does not hold.
        j.done("u3").unwrap();
        assert_eq!(journal_text(dir.path()).lines().count(), 5);
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.records().len(), 1);
        assert!(j.record("u1").unwrap().processes.is_empty());
        // Opening rewrote the file with the live records only.
        assert_eq!(journal_text(dir.path()).lines().count(), 1);
    }

    #[test]
    fn changes_of_interleaved_pods_replay_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        j.begin("ns", "a", "ua").unwrap();
        j.begin("ns", "b", "ub").unwrap();
        j.started("ua", rec("init", 0, 10)).unwrap();
        j.started("ub", rec("main", 0, 20)).unwrap();
        j.exited("ua", 10).unwrap();
        j.started("ua", rec("main", 0, 11)).unwrap();
        j.started("ua", rec("side", 0, 12)).unwrap();
        j.exited("ua", 11).unwrap();
        j.started("ua", rec("main", 1, 13)).unwrap();
        j.done("ub").unwrap();
        let replayed = replay(journal_text(dir.path()).as_bytes());
        assert_eq!(replayed.len(), 1);
        assert_eq!(
            replayed["ua"].processes,
            vec![rec("side", 0, 12), rec("main", 1, 13)]
        );
        assert_eq!(Some(&replayed["ua"]), j.record("ua").as_ref());
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_gone_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        j.begin("ns", "p", "u1").unwrap();
        j.started("u1", rec("main", 0, 42)).unwrap();
        drop(j);
        let mut bytes = std::fs::read(dir.path().join(JOURNAL)).unwrap();
        bytes.extend_from_slice(br#"{"exited":{"uid":"u1","pi"#);
        std::fs::write(dir.path().join(JOURNAL), &bytes).unwrap();
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.record("u1").unwrap().processes, vec![rec("main", 0, 42)]);
        // The next line is not glued to the torn one.
        j.exited("u1", 42).unwrap();
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert!(j.record("u1").unwrap().processes.is_empty());
    }

    #[test]
    fn the_file_is_rewritten_once_dead_lines_dominate() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        j.begin("ns", "kept", "keep").unwrap();
        j.started("keep", rec("main", 0, 1)).unwrap();
        for i in 0..3000u32 {
            let uid = format!("u{i}");
            j.begin("ns", "p", &uid).unwrap();
            j.started(&uid, rec("main", 0, i + 2)).unwrap();
            j.exited(&uid, i + 2).unwrap();
            j.done(&uid).unwrap();
        }
        let lines = journal_text(dir.path()).lines().count();
        assert!(lines <= REWRITE_AFTER + 2, "{lines} lines");
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.records().len(), 1);
        assert_eq!(j.record("keep").unwrap().processes, vec![rec("main", 0, 1)]);
    }

    #[test]
    fn per_pod_files_of_earlier_versions_are_folded_in_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        // A record written whole, and one with appended changes and a torn last line.
        let whole = br#"{"namespace":"ns","name":"p","uid":"u1","processes":[{"container":"main","run":2,"pid":42,"startTicks":7}]}"#;
        std::fs::write(dir.path().join("u1.json"), whole).unwrap();
        let appended = concat!(
            r#"{"namespace":"ns","name":"q","uid":"u2","processes":[]}"#,
            "\n",
            r#"{"started":{"container":"main","run":0,"pid":50,"startTicks":150}}"#,
            "\n",
            r#"{"started":{"container":"side","run":0,"pid":51,"startTicks":151}}"#,
            "\n",
            r#"{"exited":{"pid":50}}"#,
            "\n",
            r#"{"exited":{"pi"#
        );
        std::fs::write(dir.path().join("u2.json"), appended).unwrap();
        std::fs::write(dir.path().join("u3.json"), r#"{"namespace":"ns","na"#).unwrap();
        let j = Journal::open(dir.path()).unwrap();
        let u1 = j.record("u1").unwrap();
        assert_eq!((u1.name.as_str(), u1.processes.len()), ("p", 1));
        assert_eq!(u1.processes[0].run, 2);
        assert_eq!(j.record("u2").unwrap().processes, vec![rec("side", 0, 51)]);
        assert!(!j.contains("u3"));
        assert!(!dir.path().join("u1.json").exists());
        assert!(!dir.path().join("u2.json").exists());
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.records().len(), 2);
    }
}
