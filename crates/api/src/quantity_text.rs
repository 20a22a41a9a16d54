//! Amounts written as Go's `resource.Quantity` writes them (its canonical form): CPU in
//! nanocores at scale -9, DecimalSI, and bytes, BinarySI — what metrics-server serves and what
//! kubelet reports as a Node's memory and storage.

/// CPU usage in nanocores, as metrics-server's `uint64Quantity(v, DecimalSI, -9)` serializes.
pub fn cpu(nanocores: u64) -> String {
    match i64::try_from(nanocores) {
        Ok(v) => canonical(v, -9, Format::DecimalSI),
        // metrics-server gives up one digit to fit an int64.
        Err(_) => canonical((nanocores / 10) as i64, -8, Format::DecimalSI),
    }
}

/// Memory in bytes, as metrics-server's `uint64Quantity(v, BinarySI, 0)` serializes.
pub fn memory(bytes: u64) -> String {
    match i64::try_from(bytes) {
        Ok(v) => canonical(v, 0, Format::BinarySI),
        Err(_) => canonical((bytes / 10) as i64, 1, Format::BinarySI),
    }
}

/// How a quantity is written, which Go keeps from the text it parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `Ki`, `Mi`, ... `Ei`.
    BinarySI,
    /// `m`, `k`, `M`, ... or no suffix.
    DecimalSI,
    /// `e3`, `E6`, ...
    DecimalExponent,
}

impl Format {
    /// The format of the quantity `text` (as `ParseQuantity` decides it from the suffix).
    pub fn of(text: &str) -> Format {
        let t = text.trim();
        let suffix = t.trim_start_matches(|c: char| c.is_ascii_digit() || "+-.".contains(c));
        let mut chars = suffix.chars();
        match (chars.next(), chars.next()) {
            (Some(_), Some('i')) => Format::BinarySI,
            (Some('e' | 'E'), Some(_)) => Format::DecimalExponent,
            _ => Format::DecimalSI,
        }
    }
}

/// A byte amount as Go writes a quantity of it in `format`: what `Quantity.String()` gives for
/// a parsed limit, such as kubelet's eviction messages quote.
pub fn bytes(value: i64, format: Format) -> String {
    canonical(value, 0, format)
}

/// `Quantity.CanonicalizeBytes` of an int64 amount `value`×10^`scale` (`binary`: BinarySI,
/// else DecimalSI): zero is `0`; BinarySI is kept only for an integer of magnitude 1024 or
/// more (smaller ones, and ones that are not integers, are written as DecimalSI).
fn canonical(value: i64, scale: i32, form: Format) -> String {
    if value == 0 {
        return "0".into();
    }
    if form == Format::BinarySI {
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
    if form == Format::DecimalExponent {
        return match exponent {
            0 => format!("{amount}"),
            e => format!("{amount}e{e}"),
        };
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
    fn bytes_keep_their_quantity_format() {
        assert_eq!(bytes(1 << 20, Format::BinarySI), "1Mi");
        assert_eq!(bytes(1536 << 20, Format::BinarySI), "1536Mi");
        assert_eq!(bytes(1_000_000, Format::DecimalSI), "1M");
        assert_eq!(bytes(1_500_000, Format::DecimalSI), "1500k");
        assert_eq!(bytes(1 << 20, Format::DecimalSI), "1048576");
        assert_eq!(bytes(1_000_000, Format::DecimalExponent), "1e6");
        assert_eq!(bytes(1_500_000, Format::DecimalExponent), "1500e3");
        assert_eq!(bytes(512, Format::DecimalExponent), "512");
        assert_eq!(bytes(0, Format::BinarySI), "0");
    }

    #[test]
    fn the_format_comes_from_the_suffix() {
        assert_eq!(Format::of("1Mi"), Format::BinarySI);
        assert_eq!(Format::of("1.5Gi"), Format::BinarySI);
        assert_eq!(Format::of("1e6"), Format::DecimalExponent);
        assert_eq!(Format::of("2E3"), Format::DecimalExponent);
        // `E` alone is exa, a decimal SI suffix.
        assert_eq!(Format::of("1E"), Format::DecimalSI);
        assert_eq!(Format::of("500M"), Format::DecimalSI);
        assert_eq!(Format::of("1024"), Format::DecimalSI);
    }
}
