//! Container log files: where the executor writes them and how each line is framed, so that the
//! API server's `pods/log` can serve them. Both sides use this module and nothing else.
//!
//! Layout: `<root>/<namespace>_<pod>_<uid>/<container>/<run>.log`, where `run` is the
//! container's restartCount when that run started (0 for the first run), as kubelet keeps one
//! file per container instance. Each record is a CRI log line:
//! `<RFC3339Nano time> <stdout|stderr> <F|P> <content>\n`. `F` ends a line; `P` is part of a
//! line (a long line is split, and output that ends without a newline stays partial).

use std::path::{Path, PathBuf};

use jiff::Timestamp;

/// Longest content of one record; longer lines are split into partial records (as CRI).
pub const MAX_RECORD_CONTENT: usize = 16 * 1024;

/// The directory holding every log of one pod.
pub fn pod_dir(root: &Path, namespace: &str, pod: &str, uid: &str) -> PathBuf {
    root.join(format!("{namespace}_{pod}_{uid}"))
}

/// The file of one run of one container.
pub fn log_file(
    root: &Path,
    namespace: &str,
    pod: &str,
    uid: &str,
    container: &str,
    run: u32,
) -> PathBuf {
    pod_dir(root, namespace, pod, uid)
        .join(container)
        .join(format!("{run}.log"))
}

/// The `containerID` reported for one run of a container: it names the run, and so its file.
pub fn container_id(uid: &str, container: &str, run: u32) -> String {
    format!("kbatch://{uid}/{container}/{run}")
}

/// The run a `containerID` written by [`container_id`] names.
pub fn run_of_container_id(id: &str) -> Option<u32> {
    let rest = id.strip_prefix("kbatch://")?;
    let (_, run) = rest.rsplit_once('/')?;
    run.parse().ok()
}

/// Which output stream a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// `time.RFC3339Nano`: trailing zeros of the fraction dropped (as CRI runtimes write).
pub fn rfc3339_nano(t: Timestamp) -> String {
    let secs = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.subsec_nanosecond();
    if nanos == 0 {
        return format!("{secs}Z");
    }
    let frac = format!("{nanos:09}");
    format!("{secs}.{}Z", frac.trim_end_matches('0'))
}

/// Nine fractional digits always: kubelet's `timestamps=true` prefix, so columns line up.
pub fn rfc3339_fixed_nano(t: Timestamp) -> String {
    let secs = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    format!("{secs}.{:09}Z", t.subsec_nanosecond())
}

/// Append one record (with its newline) to `out`.
pub fn encode_record(
    time: Timestamp,
    stream: Stream,
    partial: bool,
    content: &[u8],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(rfc3339_nano(time).as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.extend_from_slice(if partial { b" P " } else { b" F " });
    out.extend_from_slice(content);
    out.push(b'\n');
}

/// One parsed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: Timestamp,
    pub stream: Stream,
    pub partial: bool,
    pub content: &'a [u8],
}

/// Parse one record, without its trailing newline. `None` for a malformed line.
pub fn parse_record(line: &[u8]) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let stream = match parts.next()? {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match parts.next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    Some(Record {
        time,
        stream,
        partial,
        content: parts.next().unwrap_or(b""),
    })
}

/// What part of a log a client asked for (`PodLogOptions`, minus container and follow).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Records older than this are left out.
    pub since: Option<Timestamp>,
    /// Only the last N records of what is already written.
    pub tail_lines: Option<u64>,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<u64>,
    /// Prefix each line with its time.
    pub timestamps: bool,
}

/// Offset in `data` where its last `n` complete records start (kubelet counts file lines).
pub fn tail_offset(data: &[u8], n: u64) -> usize {
    if n == 0 {
        return complete_len(data);
    }
    let end = complete_len(data);
    let mut seen = 0u64;
    // Walk back over newlines; the record after the n-th newline from the end starts there.
    let mut i = end;
    while i > 0 {
        i -= 1;
        if data[i] == b'\n' && i + 1 != end {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
}

/// Length of the prefix of `data` made of complete (newline-terminated) records.
pub fn complete_len(data: &[u8]) -> usize {
    data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
}

/// Turns records into what a client sees; keeps its state between calls so that a followed
/// log is rendered in pieces exactly as it would be in one go.
#[derive(Debug, Clone)]
pub struct Renderer {
    selection: Selection,
    written: u64,
    previous_partial: bool,
}

impl Renderer {
    pub fn new(selection: Selection) -> Renderer {
        Renderer {
            selection,
            written: 0,
            previous_partial: false,
        }
    }

    /// `limitBytes` is reached: nothing more will be written.
    pub fn is_done(&self) -> bool {
        self.selection
            .limit_bytes
            .is_some_and(|limit| self.written >= limit)
    }

    /// Render the complete records at the start of `data` into `out`; returns how many bytes
    /// of `data` were consumed (a trailing incomplete record is left for the next call).
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> usize {
        let consumed = complete_len(data);
        for line in data[..consumed].split(|b| *b == b'\n') {
            if self.is_done() {
                break;
            }
            if line.is_empty() {
                continue;
            }
            let Some(rec) = parse_record(line) else {
                continue;
            };
            let first_of_line = !self.previous_partial;
            self.previous_partial = rec.partial;
            if self.selection.since.is_some_and(|since| rec.time < since) {
                continue;
            }
            let mut piece = Vec::with_capacity(rec.content.len() + 32);
            if self.selection.timestamps && first_of_line {
                piece.extend_from_slice(rfc3339_fixed_nano(rec.time).as_bytes());
                piece.push(b' ');
            }
            piece.extend_from_slice(rec.content);
            if !rec.partial {
                piece.push(b'\n');
            }
            self.emit(&piece, out);
        }
        consumed
    }

    fn emit(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        let take = match self.selection.limit_bytes {
            Some(limit) => {
                let room = limit.saturating_sub(self.written);
                piece.len().min(usize::try_from(room).unwrap_or(usize::MAX))
            }
            None => piece.len(),
        };
        out.extend_from_slice(&piece[..take]);
        self.written += take as u64;
    }
}

/// Render a whole file's content (no follow): tail first, then since, timestamps and limit.
pub fn render(data: &[u8], selection: &Selection) -> Vec<u8> {
    let start = selection.tail_lines.map_or(0, |n| tail_offset(data, n));
    let mut out = Vec::new();
    Renderer::new(selection.clone()).feed(&data[start..], &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn file(records: &[(&str, Stream, bool, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (t, s, p, c) in records {
            encode_record(ts(t), *s, *p, c.as_bytes(), &mut out);
        }
        out
    }

    fn sample() -> Vec<u8> {
        file(&[
            ("2024-01-01T00:00:01Z", Stream::Stdout, false, "one"),
            ("2024-01-01T00:00:02.5Z", Stream::Stderr, false, "two"),
            (
                "2024-01-01T00:00:03.000000001Z",
                Stream::Stdout,
                true,
                "thr",
            ),
            (
                "2024-01-01T00:00:03.000000002Z",
                Stream::Stdout,
                false,
                "ee",
            ),
            ("2024-01-01T00:00:04Z", Stream::Stdout, false, "four"),
        ])
    }

    #[test]
    fn layout_and_container_ids() {
        let p = log_file(Path::new("/d/logs"), "default", "pi", "u-1", "main", 3);
        assert_eq!(p, Path::new("/d/logs/default_pi_u-1/main/3.log"));
        let id = container_id("u-1", "main", 3);
        assert_eq!(id, "kbatch://u-1/main/3");
        assert_eq!(run_of_container_id(&id), Some(3));
        assert_eq!(run_of_container_id("containerd://abc"), None);
        assert_eq!(run_of_container_id("kbatch://u/main/x"), None);
    }

    #[test]
    fn record_format_is_cri() {
        let mut out = Vec::new();
        encode_record(
            ts("2006-01-02T15:04:05.999999999Z"),
            Stream::Stdout,
            false,
            b"hello world",
            &mut out,
        );
        encode_record(
            ts("2006-01-02T15:04:05.5Z"),
            Stream::Stderr,
            true,
            b"x",
            &mut out,
        );
        encode_record(
            ts("2006-01-02T15:04:05Z"),
            Stream::Stdout,
            false,
            b"",
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "2006-01-02T15:04:05.999999999Z stdout F hello world\n\
             2006-01-02T15:04:05.5Z stderr P x\n\
             2006-01-02T15:04:05Z stdout F \n"
        );
        let first = out.split(|b| *b == b'\n').next().unwrap();
        let rec = parse_record(first).unwrap();
        assert_eq!(rec.content, b"hello world");
        assert_eq!(rec.stream, Stream::Stdout);
        assert!(!rec.partial);
        assert_eq!(rec.time, ts("2006-01-02T15:04:05.999999999Z"));
        assert!(parse_record(b"garbage").is_none());
        assert!(parse_record(b"2006-01-02T15:04:05Z stdin F x").is_none());
    }

    #[test]
    fn renders_lines_and_joins_partials() {
        let out = render(&sample(), &Selection::default());
        assert_eq!(String::from_utf8(out).unwrap(), "one\ntwo\nthree\nfour\n");
    }

    #[test]
    fn timestamps_prefix_each_line_once_with_nine_digits() {
        let sel = Selection {
            timestamps: true,
            ..Selection::default()
        };
        let out = String::from_utf8(render(&sample(), &sel)).unwrap();
        assert_eq!(
            out,
            "2024-01-01T00:00:01.000000000Z one\n\
             2024-01-01T00:00:02.500000000Z two\n\
             2024-01-01T00:00:03.000000001Z three\n\
             2024-01-01T00:00:04.000000000Z four\n"
        );
    }

    #[test]
    fn tail_counts_records_from_the_end() {
        let data = sample();
        let tail = |n| {
            let sel = Selection {
                tail_lines: Some(n),
                ..Selection::default()
            };
            String::from_utf8(render(&data, &sel)).unwrap()
        };
        assert_eq!(tail(0), "");
        assert_eq!(tail(1), "four\n");
        assert_eq!(tail(2), "ee\nfour\n");
        assert_eq!(tail(5), "one\ntwo\nthree\nfour\n");
        assert_eq!(tail(100), "one\ntwo\nthree\nfour\n");
        // An incomplete last record is not counted or shown.
        let mut cut = data.clone();
        cut.extend_from_slice(b"2024-01-01T00:00:05Z stdout F fi");
        assert_eq!(tail_offset(&cut, 1), tail_offset(&data, 1));
    }

    #[test]
    fn since_drops_older_records() {
        let sel = Selection {
            since: Some(ts("2024-01-01T00:00:02.5Z")),
            ..Selection::default()
        };
        assert_eq!(
            String::from_utf8(render(&sample(), &sel)).unwrap(),
            "two\nthree\nfour\n"
        );
        let sel = Selection {
            since: Some(ts("2030-01-01T00:00:00Z")),
            ..Selection::default()
        };
        assert!(render(&sample(), &sel).is_empty());
    }

    #[test]
    fn limit_bytes_cuts_mid_line() {
        let sel = Selection {
            limit_bytes: Some(6),
            ..Selection::default()
        };
        assert_eq!(
            String::from_utf8(render(&sample(), &sel)).unwrap(),
            "one\ntw"
        );
        let sel = Selection {
            limit_bytes: Some(1),
            timestamps: true,
            ..Selection::default()
        };
        assert_eq!(String::from_utf8(render(&sample(), &sel)).unwrap(), "2");
    }

    #[test]
    fn feeding_in_pieces_matches_one_go() {
        let data = sample();
        let sel = Selection {
            timestamps: true,
            limit_bytes: Some(70),
            ..Selection::default()
        };
        let whole = render(&data, &sel);
        for cut in 0..data.len() {
            let mut r = Renderer::new(sel.clone());
            let mut out = Vec::new();
            let used = r.feed(&data[..cut], &mut out);
            r.feed(&data[used..], &mut out);
            assert_eq!(out, whole, "cut at {cut}");
        }
    }

    #[test]
    fn nano_formats() {
        assert_eq!(
            rfc3339_nano(ts("2024-01-01T00:00:00Z")),
            "2024-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339_nano(ts("2024-01-01T00:00:00.120Z")),
            "2024-01-01T00:00:00.12Z"
        );
        assert_eq!(
            rfc3339_fixed_nano(ts("2024-01-01T00:00:00.12Z")),
            "2024-01-01T00:00:00.120000000Z"
        );
    }
}
