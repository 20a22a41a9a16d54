//! Writing container output to its log file as CRI records (`kbatch_api::podlog`'s format):
//! each stream is split into lines, long lines into partial records, and every record is
//! appended with one write so that stdout and stderr records never interleave mid-record.
//!
//! A run's file (and its directories) is created with its first output: a run that prints
//! nothing leaves no file, which the log endpoint serves as an empty log, as kubelet serves an
//! empty file. Most short runs print nothing, and on a journaled filesystem the two
//! directories and the file were ~15% of the executor's time for such a pod.
//!
//! Attached sessions (`kubectl attach`) get the output live as well, from the moment they
//! attach: each is a tap on the run's log, sent each piece after it is in the file.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kbatch_api::podlog::{self, MAX_RECORD_CONTENT, Selection, Stream, encode_record};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// How many of a run's last log lines, and of their last bytes, make a termination message
/// when it falls back to the logs (kubelet's `MaxContainerTerminationMessageLogLines` and
/// `MaxContainerTerminationMessageLogLength`).
const TERMINATION_LOG_LINES: u64 = 80;
const TERMINATION_LOG_BYTES: usize = 2048;
/// The part of the file's end read for it: the last 80 records' last 2 KiB of content lie
/// within it (a record's framing is ~45 bytes, its content at most `MAX_RECORD_CONTENT`).
const TERMINATION_LOG_WINDOW: u64 = 64 * 1024;

/// kubelet's termination message from a run's log (`FallbackToLogsOnError`): its last 80
/// lines, of those the last 2,048 bytes. `None` when the run logged nothing.
pub fn termination_message_from_log(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(TERMINATION_LOG_WINDOW);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut data = Vec::new();
    f.read_to_end(&mut data).ok()?;
    if start > 0 {
        // The window began inside a record.
        let cut = data
            .iter()
            .position(|b| *b == b'\n')
            .map_or(data.len(), |p| p + 1);
        data.drain(..cut);
    }
    let selection = Selection {
        tail_lines: Some(TERMINATION_LOG_LINES),
        ..Selection::default()
    };
    let out = podlog::render(&data, &selection);
    if out.is_empty() {
        return None;
    }
    let tail = &out[out.len().saturating_sub(TERMINATION_LOG_BYTES)..];
    Some(String::from_utf8_lossy(tail).into_owned())
}

/// An attached session's share of a run's output: each piece as read, with its stream.
pub type Tap = mpsc::Sender<(Stream, Bytes)>;

/// Splits a byte stream into records: `(partial, content)`.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Take `data`; complete lines (and over-long pieces) come out as records.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<(bool, Vec<u8>)>) {
        let mut rest = data;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            self.pending.extend_from_slice(&rest[..i]);
            self.flush_long(out);
            out.push((false, std::mem::take(&mut self.pending)));
            rest = &rest[i + 1..];
        }
        self.pending.extend_from_slice(rest);
        self.flush_long(out);
    }

    /// Pieces of a line longer than a record holds go out as partial records.
    fn flush_long(&mut self, out: &mut Vec<(bool, Vec<u8>)>) {
        while self.pending.len() > MAX_RECORD_CONTENT {
            let tail = self.pending.split_off(MAX_RECORD_CONTENT);
            out.push((true, std::mem::replace(&mut self.pending, tail)));
        }
    }

    /// End of stream: output without a final newline stays a partial record, so the log
    /// reproduces exactly what was written.
    pub fn finish(&mut self, out: &mut Vec<(bool, Vec<u8>)>) {
        if !self.pending.is_empty() {
            out.push((true, std::mem::take(&mut self.pending)));
        }
    }
}

/// A container run's log file, opened (with its directories) on the first write.
#[derive(Debug)]
pub struct LazyLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Opening failed once (reported then); the output is dropped.
    failed: bool,
    /// The attached sessions (empty, unallocated, unless someone attaches).
    taps: Vec<Tap>,
}

impl LazyLog {
    pub fn new(path: PathBuf) -> LazyLog {
        LazyLog {
            path,
            file: None,
            failed: false,
            taps: Vec::new(),
        }
    }

    /// Send the output from now on to `tap` too (sessions that have left are let go).
    pub fn tap(&mut self, tap: Tap) {
        self.taps.retain(|t| !t.is_closed());
        self.taps.push(tap);
    }

    fn file(&mut self) -> Option<&mut std::fs::File> {
        if self.file.is_none() && !self.failed {
            match open_log(&self.path) {
                Ok(f) => self.file = Some(f),
                Err(e) => {
                    self.failed = true;
                    tracing::warn!(path = %self.path.display(), error = %e, "opening a container log");
                }
            }
        }
        self.file.as_mut()
    }
}

fn open_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// A container run's log, shared by its stdout and stderr pumps.
pub type LogFile = Arc<Mutex<LazyLog>>;

/// Append the records to the log, in one hold of the lock so that the other stream's records
/// never come between them; the attached sessions to send the piece to, if any.
fn append(log: &LogFile, stream: Stream, records: &mut Vec<(bool, Vec<u8>)>) -> Option<Vec<Tap>> {
    let Ok(mut log) = log.lock() else {
        records.clear();
        return None;
    };
    if !records.is_empty() {
        let now = jiff::Timestamp::now();
        let mut buf = Vec::new();
        for (partial, content) in records.drain(..) {
            buf.clear();
            encode_record(now, stream, partial, &content, &mut buf);
            // Breaking out drops the rest of the drained records.
            let Some(f) = log.file() else {
                break;
            };
            if let Err(e) = f.write_all(&buf) {
                tracing::warn!(error = %e, "writing a container log");
                break;
            }
        }
    }
    // Cloned out of the lock: a session slow to take its share holds back this stream (as a
    // runtime's attached writers do), never the other one or the log.
    (!log.taps.is_empty()).then(|| log.taps.clone())
}

/// Copy one output stream of a process into its log file, and to the attached sessions, until
/// the stream closes.
pub async fn pump(mut reader: impl AsyncRead + Unpin, stream: Stream, file: LogFile) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 8192];
    let mut records = Vec::new();
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                splitter.feed(&buf[..n], &mut records);
                if let Some(taps) = append(&file, stream, &mut records) {
                    let piece = Bytes::copy_from_slice(&buf[..n]);
                    let mut left = false;
                    for tap in taps {
                        // Fails once the session has left.
                        left |= tap.send((stream, piece.clone())).await.is_err();
                    }
                    if left && let Ok(mut log) = file.lock() {
                        log.taps.retain(|t| !t.is_closed());
                    }
                }
            }
        }
    }
    splitter.finish(&mut records);
    if !records.is_empty() {
        append(&file, stream, &mut records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_termination_message_is_the_logs_last_80_lines_at_most_2_kib() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        assert_eq!(termination_message_from_log(&path), None, "no file");
        let t: jiff::Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut data = Vec::new();
        for i in 0..100 {
            let stream = if i % 2 == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            encode_record(t, stream, false, format!("l{i}").as_bytes(), &mut data);
        }
        std::fs::write(&path, &data).unwrap();
        let expected: String = (20..100).map(|i| format!("l{i}\n")).collect();
        assert_eq!(termination_message_from_log(&path), Some(expected));
        // Long lines: only the last 2,048 bytes, even from far into a large file.
        let mut data = Vec::new();
        for i in 0..200 {
            let line = format!("{i:04}").repeat(250);
            encode_record(t, Stream::Stdout, false, line.as_bytes(), &mut data);
        }
        std::fs::write(&path, &data).unwrap();
        let m = termination_message_from_log(&path).unwrap();
        assert_eq!(m.len(), 2048);
        assert!(m.ends_with("0199\n"), "{}", &m[m.len() - 10..]);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(termination_message_from_log(&path), None, "an empty log");
    }

    fn split(chunks: &[&[u8]]) -> Vec<(bool, Vec<u8>)> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn splits_lines_across_reads() {
        let out = split(&[b"hel", b"lo\nwor", b"ld\n\nend"]);
        assert_eq!(
            out,
            vec![
                (false, b"hello".to_vec()),
                (false, b"world".to_vec()),
                (false, b"".to_vec()),
                (true, b"end".to_vec()),
            ]
        );
    }

    #[test]
    fn long_lines_become_partial_records() {
        let long = vec![b'x'; MAX_RECORD_CONTENT * 2 + 5];
        let mut input = long.clone();
        input.push(b'\n');
        let out = split(&[&input]);
        assert_eq!(out.len(), 3);
        assert!(out[0].0 && out[1].0 && !out[2].0);
        assert_eq!(out[2].1.len(), 5);
        let joined: Vec<u8> = out.iter().flat_map(|(_, c)| c.clone()).collect();
        assert_eq!(joined, long);
    }

    #[tokio::test]
    async fn pump_writes_cri_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c/0.log");
        let file = Arc::new(Mutex::new(LazyLog::new(path.clone())));
        pump(&b"a\nb"[..], Stream::Stderr, file).await;
        let text = std::fs::read(&path).unwrap();
        let rendered = kbatch_api::podlog::render(&text, &Default::default());
        assert_eq!(rendered, b"a\nb");
        let first = String::from_utf8(text).unwrap();
        assert!(
            first.lines().next().unwrap().ends_with(" stderr F a"),
            "{first}"
        );
    }

    #[tokio::test]
    async fn no_output_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c/0.log");
        let file = Arc::new(Mutex::new(LazyLog::new(path.clone())));
        pump(&b""[..], Stream::Stdout, file.clone()).await;
        pump(&b""[..], Stream::Stderr, file).await;
        assert!(!path.exists());
        assert!(!dir.path().join("c").exists());
    }

    #[tokio::test]
    async fn a_log_that_cannot_be_opened_drops_the_output() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the log's directory should be.
        std::fs::write(dir.path().join("c"), b"").unwrap();
        let file = Arc::new(Mutex::new(LazyLog::new(dir.path().join("c/0.log"))));
        pump(&b"x\ny\n"[..], Stream::Stdout, file.clone()).await;
        let log = file.lock().unwrap();
        assert!(log.failed && log.file.is_none());
    }
}
