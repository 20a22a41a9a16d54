//! Go's `time.ParseDuration` for non-negative durations (`1500ms`, `2s`, `1m30s`, `1.5h`).

use std::time::Duration;

/// Parse a Go duration; the error reads as Go's (`time: invalid duration "x"`).
pub fn parse(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration \"{s}\"");
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        // Only "-0" is a valid negative; a wait can't be negative anyway.
        return if rest.trim_start_matches('-') == "0" {
            Ok(Duration::ZERO)
        } else {
            Err(format!("{}: must not be negative", invalid()))
        };
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(u8::is_ascii_digit).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, next) = after.split_at(unit_len);
        let nanos_per: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("time: missing unit in duration \"{s}\"")),
            other => {
                return Err(format!(
                    "time: unknown unit \"{other}\" in duration \"{s}\""
                ));
            }
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut value = int.checked_mul(nanos_per).ok_or_else(invalid)?;
        // The fraction, digit by digit, at nanosecond resolution (Go rounds down too).
        let mut scale = nanos_per;
        for d in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            value += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        rest = next;
    }
    // Go durations are int64 nanoseconds.
    if total > i64::MAX as u128 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let ms = Duration::from_millis;
        for (input, want) in [
            ("0", Duration::ZERO),
            ("5s", ms(5000)),
            ("1500ms", ms(1500)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("1m30s", ms(90_000)),
            ("1h", ms(3_600_000)),
            ("2h45m", ms(9_900_000)),
            ("100us", Duration::from_micros(100)),
            ("100µs", Duration::from_micros(100)),
            ("3ns", Duration::from_nanos(3)),
            ("+2s", ms(2000)),
            ("1.000000001s", Duration::from_nanos(1_000_000_001)),
        ] {
            assert_eq!(parse(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for input in [
            "",
            "s",
            "1",
            "1x",
            "abc",
            ".s",
            "1..5s",
            "-1s",
            "9999999999h",
        ] {
            assert!(parse(input).is_err(), "{input} should be rejected");
        }
        assert_eq!(
            parse("2").unwrap_err(),
            "time: missing unit in duration \"2\""
        );
        assert_eq!(
            parse("2d").unwrap_err(),
            "time: unknown unit \"d\" in duration \"2d\""
        );
    }
}
