//! Ports of the few Go standard-library behaviours whose results or error texts leak into
//! robfig's parser: `strconv.Atoi`, `strconv.Quote`, `time.ParseDuration` and the name checks of
//! `time.LoadLocation`. Error texts must match Go byte for byte, because Kubernetes shows them to
//! users.

use std::fmt::Write as _;

/// `strconv.Atoi` on a 64-bit platform, with the error text of its `*NumError`.
pub(crate) fn atoi(s: &str) -> Result<i64, String> {
    let syntax = || format!("strconv.Atoi: parsing {}: invalid syntax", quote(s));
    let range = || format!("strconv.Atoi: parsing {}: value out of range", quote(s));
    let b = s.as_bytes();

    // Go's fast path: fewer than 19 bytes always fits an int64, so it never reports a range error.
    if !b.is_empty() && b.len() < 19 {
        let digits = match b[0] {
            b'-' | b'+' => &b[1..],
            _ => b,
        };
        if digits.is_empty() {
            return Err(syntax());
        }
        let mut n: i64 = 0;
        for &c in digits {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                return Err(syntax());
            }
            n = n * 10 + i64::from(d);
        }
        return Ok(if b[0] == b'-' { -n } else { n });
    }

    // Slow path: ParseInt(s, 10, 0). A range error is reported as soon as the accumulator
    // overflows, even if an invalid byte follows.
    let (neg, rest) = match b.first() {
        None => return Err(syntax()),
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        Some(_) => (false, b),
    };
    if rest.is_empty() {
        return Err(syntax());
    }
    let cutoff = u64::MAX / 10 + 1;
    let mut n: u64 = 0;
    for &c in rest {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return Err(syntax());
        }
        if n >= cutoff {
            return Err(range());
        }
        n = match (n * 10).checked_add(u64::from(d)) {
            Some(v) => v,
            None => return Err(range()),
        };
    }
    const LIMIT: u64 = 1 << 63;
    if (!neg && n >= LIMIT) || (neg && n > LIMIT) {
        return Err(range());
    }
    // n <= 2^63 here; negating through i128 keeps i64::MIN representable.
    let v = if neg { -(n as i128) } else { n as i128 };
    i64::try_from(v).map_err(|_| range())
}

/// `strconv.Quote`: printable runes verbatim, everything else escaped as Go does.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            _ if is_print(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            _ => {
                let v = u32::from(c);
                if v < 0x20 || v == 0x7f {
                    let _ = write!(out, "\\x{v:02x}");
                } else if v < 0x10000 {
                    let _ = write!(out, "\\u{v:04x}");
                } else {
                    let _ = write!(out, "\\U{v:08x}");
                }
            }
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `strconv.IsPrint` without Unicode category tables: controls, format
/// characters, separators other than U+0020, private-use code points and noncharacters are not
/// printable. Unassigned code points are treated as printable, unlike Go.
fn is_print(c: char) -> bool {
    let v = u32::from(c);
    if v < 0x80 {
        return (0x20..0x7f).contains(&v);
    }
    if (0x80..0xa0).contains(&v) {
        return false;
    }
    const NOT_PRINT: &[(u32, u32)] = &[
        (0x00a0, 0x00a0),
        (0x00ad, 0x00ad),
        (0x0600, 0x0605),
        (0x061c, 0x061c),
        (0x06dd, 0x06dd),
        (0x070f, 0x070f),
        (0x0890, 0x0891),
        (0x08e2, 0x08e2),
        (0x1680, 0x1680),
        (0x180e, 0x180e),
        (0x2000, 0x200f),
        (0x2028, 0x202f),
        (0x205f, 0x2064),
        (0x2066, 0x206f),
        (0x3000, 0x3000),
        (0xd800, 0xdfff),
        (0xe000, 0xf8ff),
        (0xfdd0, 0xfdef),
        (0xfeff, 0xfeff),
        (0xfff9, 0xfffb),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x1343f),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0xe0001, 0xe0001),
        (0xe0020, 0xe007f),
        (0xf0000, 0x10ffff),
    ];
    if (v & 0xfffe) == 0xfffe {
        return false;
    }
    !NOT_PRINT.iter().any(|&(lo, hi)| (lo..=hi).contains(&v))
}

/// The `quote` helper of Go's time package: non-ASCII and control bytes become `\xNN`.
fn time_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if !c.is_ascii() || c < ' ' {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "\\x{b:02x}");
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// `time.ParseDuration`, in nanoseconds, with Go's error texts.
pub(crate) fn parse_duration(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", time_quote(orig));
    let mut s = orig.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u64 = 1 << 63;
    let mut d: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Leading integer; overflow beyond 2^63 is an error.
        let mut v: u64 = 0;
        let mut i = 0;
        while i < s.len() && s[i].is_ascii_digit() {
            if v > LIMIT / 10 {
                return Err(invalid());
            }
            v = v * 10 + u64::from(s[i] - b'0');
            if v > LIMIT {
                return Err(invalid());
            }
            i += 1;
        }
        let pre = i > 0;
        s = &s[i..];

        // Optional fraction; it only stops gaining precision on overflow.
        let mut f: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut post = false;
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let mut i = 0;
            let mut overflow = false;
            while i < s.len() && s[i].is_ascii_digit() {
                if !overflow {
                    if f > (LIMIT - 1) / 10 {
                        overflow = true;
                    } else {
                        let y = f * 10 + u64::from(s[i] - b'0');
                        if y > LIMIT {
                            overflow = true;
                        } else {
                            f = y;
                            scale *= 10.0;
                        }
                    }
                }
                i += 1;
            }
            post = i > 0;
            s = &s[i..];
        }
        if !pre && !post {
            return Err(invalid());
        }

        let i = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if i == 0 {
            return Err(format!(
                "time: missing unit in duration {}",
                time_quote(orig)
            ));
        }
        // The unit ends at an ASCII byte or at the end, so this is a char boundary.
        let u = std::str::from_utf8(&s[..i]).unwrap_or("");
        s = &s[i..];
        let unit: u64 = match u {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    time_quote(u),
                    time_quote(orig)
                ));
            }
        };
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            // Go computes the fraction in float64; the conversion truncates like Go's.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        // Go's uint64 addition wraps; two maximal terms sum to zero there, and so here.
        d = d.wrapping_add(v);
        if d > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        // d <= 2^63, so the negation is representable.
        return Ok(i64::try_from(-(d as i128)).unwrap_or(i64::MIN));
    }
    i64::try_from(d).map_err(|_| invalid())
}

/// Go's `strings.ToLower` restricted to what can produce an ASCII month or weekday name:
/// Go lowercases U+0130 to a plain `i` (simple case mapping), unlike Rust's full mapping.
pub(crate) fn name_lower(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{130}' => 'i',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}
/// Go's `time.Duration.String()` of `nanos`: `1h2m3.5s`, `15.001s`, `500ms`, `0s`.
pub(crate) fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let mut out = String::new();
    if u < 1_000_000_000 {
        // Under a second: one unit, with a fraction.
        let (unit, digits, name) = if u < 1_000 {
            (1, 0, "ns")
        } else if u < 1_000_000 {
            (1_000, 3, "µs")
        } else {
            (1_000_000, 6, "ms")
        };
        out.push_str(&(u / unit).to_string());
        out.push_str(&fraction(u % unit, digits));
        out.push_str(name);
    } else {
        let secs = u / 1_000_000_000;
        let frac = fraction(u % 1_000_000_000, 9);
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            out.push_str(&format!("{h}h{m}m"));
        } else if m > 0 {
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac}s"));
    }
    if neg { format!("-{out}") } else { out }
}

/// `.ddd` of `v` over `digits` places with trailing zeros dropped; empty when zero.
fn fraction(v: u64, digits: usize) -> String {
    if digits == 0 || v == 0 {
        return String::new();
    }
    let s = format!("{v:0digits$}");
    format!(".{}", s.trim_end_matches('0'))
}
