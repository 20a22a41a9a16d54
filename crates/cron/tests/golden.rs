//! Differential test against golden vectors produced by the real robfig/cron v3 (see
//! `oracle/README.md`): every parse error text and every activation time must match exactly.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use kbatch_cron::Schedule;

const GOLDEN: &str = include_str!("data/robfig_golden.tsv");

/// Inverse of Go's `strconv.Quote` (and of JSON string escaping, used by the case generator).
fn unquote(s: &str) -> String {
    let inner = s
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not a quoted string: {s}"));
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let esc = chars.next().expect("dangling backslash");
        let hex = |chars: &mut std::str::Chars, n: usize| {
            let h: String = chars.by_ref().take(n).collect();
            let v = u32::from_str_radix(&h, 16).expect("hex escape");
            char::from_u32(v).expect("valid char")
        };
        out.push(match esc {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            'x' => hex(&mut chars, 2),
            'u' => hex(&mut chars, 4),
            'U' => hex(&mut chars, 8),
            c => c,
        });
    }
    out
}

/// Go's `time.RFC3339` rendering of an instant in a zone.
fn rfc3339(ts: Timestamp, tz: &TimeZone) -> String {
    let zoned = ts.to_zoned(tz.clone());
    let secs = zoned.offset().seconds();
    let offset = if secs == 0 {
        "Z".to_string()
    } else {
        let sign = if secs < 0 { '-' } else { '+' };
        let a = secs.abs();
        format!("{sign}{:02}:{:02}", a / 3600, a / 60 % 60)
    };
    format!("{}{offset}", zoned.strftime("%Y-%m-%dT%H:%M:%S"))
}

#[test]
fn matches_robfig_golden_vectors() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for (lineno, line) in GOLDEN.lines().enumerate() {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 6, "line {}: {line}", lineno + 1);
        let expr = unquote(cols[0]);
        let zone = if cols[1] == "UTC" {
            TimeZone::UTC
        } else {
            TimeZone::get(cols[1]).expect("start zone")
        };
        let start: Timestamp = cols[2].parse().expect("start time");
        let n: usize = cols[3].parse().expect("count");

        let want = match cols[4] {
            "ERR" => format!("ERR\t{}", unquote(cols[5])),
            "OK" => format!("OK\t{}", cols[5]),
            // robfig's Next never returned after these times (a zone skipped a whole day);
            // we answer `None` there.
            "HANG" if cols[5].is_empty() => "OK\tZERO".to_string(),
            "HANG" => format!("OK\t{} ZERO", cols[5]),
            other => panic!("line {}: unknown status {other}", lineno + 1),
        };
        let got = match Schedule::parse(&expr) {
            Err(e) => format!("ERR\t{e}"),
            Ok(s) => {
                let mut times = Vec::new();
                let mut t = start;
                for _ in 0..n {
                    match s.next(t, &zone) {
                        Some(next) => {
                            times.push(rfc3339(next, &zone));
                            t = next;
                        }
                        None => {
                            times.push("ZERO".to_string());
                            break;
                        }
                    }
                }
                format!("OK\t{}", times.join(" "))
            }
        };
        checked += 1;
        // robfig panics on a zone prefix without a following space; any error is acceptable.
        if want.starts_with("ERR\tPANIC") && got.starts_with("ERR\t") {
            continue;
        }
        if got != want {
            failures.push(format!(
                "line {}: {:?} from {} in {}\n   want {want}\n    got {got}",
                lineno + 1,
                expr,
                cols[2],
                cols[1]
            ));
        }
    }
    assert!(checked > 3000, "only {checked} cases");
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
