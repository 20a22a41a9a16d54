//! The metrics API's values as Go writes them: `resource.Quantity` (metrics-server's CPU in
//! nanocores at scale -9, DecimalSI; memory in bytes, BinarySI) and `metav1.Duration`
//! (`time.Duration.String()`).

/// CPU usage in nanocores, as metrics-server's `uint64Quantity(v, DecimalSI, -9)` serializes.
pub fn cpu(nanocores: u64) -> String {
    match i64::try_from(nanocores) {
        Ok(v) => canonical(v, -9, false),
        // metrics-server gives up one digit to fit an int64.
        Err(_) => canonical((nanocores / 10) as i64, -8, false),
    }
}

/// Memory in bytes, as metrics-server's `uint64Quantity(v, BinarySI, 0)` serializes.
pub fn memory(bytes: u64) -> String {
    match i64::try_from(bytes) {
        Ok(v) => canonical(v, 0, true),
        Err(_) => canonical((bytes / 10) as i64, 1, true),
    }
}

/// `Quantity.CanonicalizeBytes` of an int64 amount `value`×10^`scale` (`binary`: BinarySI,
/// else DecimalSI): zero is `0`; BinarySI is kept only for an integer of magnitude 1024 or
/// more (smaller ones, and ones that are not integers, are written as DecimalSI).
fn canonical(value: i64, scale: i32, binary: bool) -> String {
    if value == 0 {
        return "0".into();
    }
    if binary {
        let whole = if scale >= 0 {
            10i128
                .checked_pow(scale.unsigned_abs())
                .and_then(|m| i128::from(value).checked_mul(m))
        } else {
            None
        };
        if let Some(v) = whole
            && v.unsigned_abs() >= 1024
            && let Ok(v) = i64::try_from(v)
        {
            let (amount, times) = remove_factors(i128::from(v), 1024);
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                .get(times as usize)
                .copied()
                .unwrap_or("");
            return format!("{amount}{suffix}");
        }
    }
    // `AsCanonicalBytes`: trailing zeros into the exponent, then the exponent down to a
    // multiple of three.
    let (mut amount, times) = remove_factors(i128::from(value), 10);
    let mut exponent = scale + times as i32;
    match exponent % 3 {
        1 | -2 => {
            amount *= 10;
            exponent -= 1;
        }
        2 | -1 => {
            amount *= 100;
            exponent -= 2;
        }
        _ => {}
    }
    let suffix = match exponent {
        -9 => "n".to_string(),
        -6 => "u".to_string(),
        -3 => "m".to_string(),
        0 => String::new(),
        3 => "k".to_string(),
        6 => "M".to_string(),
        9 => "G".to_string(),
        12 => "T".to_string(),
        15 => "P".to_string(),
        18 => "E".to_string(),
        // Out of the SI table (no CPU or memory value gets here).
        e => format!("e{e}"),
    };
    format!("{amount}{suffix}")
}

/// `removeInt64Factors`: `value` without its factors of `base`, and how many there were.
fn remove_factors(value: i128, base: i128) -> (i128, u32) {
    let negative = value < 0;
    let mut result = value.abs();
    let mut times = 0;
    while result >= base && result % base == 0 {
        result /= base;
        times += 1;
    }
    (if negative { -result } else { result }, times)
}

/// Go's `time.Duration.String()` of `nanos`: `1h2m3.5s`, `15.001s`, `500ms`, `0s`.
pub fn go_duration(nanos: i64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_written_as_a_scaled_decimal_quantity() {
        assert_eq!(cpu(0), "0");
        assert_eq!(cpu(1), "1n");
        assert_eq!(cpu(1_234_567), "1234567n");
        // Trailing zeros move into the suffix, which stays a multiple of three.
        assert_eq!(cpu(1_000), "1u");
        assert_eq!(cpu(12_340_000), "12340u");
        assert_eq!(cpu(250_000_000), "250m");
        assert_eq!(cpu(1_500_000_000), "1500m");
        assert_eq!(cpu(2_000_000_000), "2");
        assert_eq!(cpu(10_000_000_000), "10");
        assert_eq!(cpu(123_000_000_000), "123");
        assert_eq!(cpu(1_000_000_000_000), "1k");
        // Past int64, one digit is given up (scale -8), then written at -9 again.
        assert_eq!(cpu(u64::MAX), "18446744073709551610n");
    }

    #[test]
    fn memory_is_binary_from_1024_up() {
        assert_eq!(memory(0), "0");
        assert_eq!(memory(512), "512");
        // Under 1024 it is DecimalSI, which takes its thousands into a suffix.
        assert_eq!(memory(1000), "1k");
        assert_eq!(memory(120), "120");
        assert_eq!(memory(1023), "1023");
        assert_eq!(memory(1024), "1Ki");
        assert_eq!(memory(1500), "1500");
        assert_eq!(memory(12_345 * 1024), "12345Ki");
        assert_eq!(memory(3 * 1024 * 1024), "3Mi");
        assert_eq!(memory(1_234_567), "1234567");
        assert_eq!(memory(5 << 30), "5Gi");
    }

    #[test]
    fn durations_are_gos() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(15_123_000_000), "15.123s");
        assert_eq!(go_duration(15_000_000_000), "15s");
        assert_eq!(go_duration(1_000_123_000), "1.000123s");
        assert_eq!(go_duration(500_000_000), "500ms");
        assert_eq!(go_duration(1_500_000), "1.5ms");
        assert_eq!(go_duration(2_500), "2.5µs");
        assert_eq!(go_duration(999), "999ns");
        assert_eq!(go_duration(61_000_000_000), "1m1s");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(-1_500_000_000), "-1.5s");
    }
}
