//! A small parser for Kubernetes resource quantities (`k8s.io/apimachinery/pkg/api/resource`).
//! `parse` validates the syntax and yields an approximate value, which is enough for the sign
//! and request-versus-limit checks validation needs; `parse_exact` keeps the value exact, for
//! the downward API's rounding up to a unit.

use thiserror::Error;

/// The error upstream's `ParseQuantity` reports for any malformed quantity.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)]
pub struct QuantityError;

/// A parsed quantity: its value in base units (approximate for very large or precise values).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Quantity {
    pub value: f64,
}

impl Quantity {
    pub fn is_negative(&self) -> bool {
        self.value < 0.0
    }
    pub fn is_integer(&self) -> bool {
        self.value.fract() == 0.0
    }
}

/// Parses `<sign><digits>[.<digits>]<suffix>` where the suffix is a binary SI suffix
/// (`Ki`..`Ei`), a decimal SI suffix (`n u m "" k M G T P E`) or a decimal exponent (`e3`).
pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(QuantityError);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut negative = false;
    if bytes[0] == b'+' || bytes[0] == b'-' {
        negative = bytes[0] == b'-';
        i = 1;
    }
    let num_start = i;
    let mut seen_dot = false;
    let mut digits = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => digits += 1,
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return Err(QuantityError);
    }
    let number: f64 = s[num_start..i].parse().map_err(|_| QuantityError)?;
    let suffix = &s[i..];
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        _ => {
            let exp = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or(QuantityError)?;
            let rest = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if rest.is_empty() || !rest.bytes().all(|c| c.is_ascii_digit()) {
                return Err(QuantityError);
            }
            let e: i32 = exp.parse().map_err(|_| QuantityError)?;
            10f64.powi(e)
        }
    };
    let value = number * multiplier;
    Ok(Quantity {
        value: if negative { -value } else { value },
    })
}

/// A quantity exactly: `num × 10^exp10 × 2^bin`. `parse` is enough for validation's sign and
/// comparison checks; the downward API rounds values up to a unit, which needs them exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exact {
    num: i128,
    exp10: i32,
    bin: u32,
}

impl Exact {
    pub fn is_zero(&self) -> bool {
        self.num == 0
    }

    pub const ZERO: Exact = Exact {
        num: 0,
        exp10: 0,
        bin: 0,
    };
    pub const ONE: Exact = Exact {
        num: 1,
        exp10: 0,
        bin: 0,
    };

    /// The value in units of 10^`scale`, rounded up (apimachinery's `ScaledValue`:
    /// `MilliValue` is scale -3, `Value` scale 0), saturated to i64.
    pub fn scaled_ceil(&self, scale: i32) -> i64 {
        let mut n = self.num.saturating_mul(1i128 << self.bin.min(100));
        let e = self.exp10 - scale;
        if e >= 0 {
            for _ in 0..e {
                n = n.saturating_mul(10);
            }
        } else {
            let d = u32::try_from(-e).ok().and_then(|p| 10i128.checked_pow(p));
            n = match d {
                Some(d) => {
                    let q = n / d;
                    if n % d > 0 { q + 1 } else { q }
                }
                // Smaller than any unit of the scale: up to one for a positive value.
                None => i128::from(n > 0),
            };
        }
        i64::try_from(n).unwrap_or(if n > 0 { i64::MAX } else { i64::MIN })
    }
}

/// `<sign><digits>[.<digits>]<suffix>`, the suffix binary SI (`Ki`..`Ei`), decimal SI
/// (`n u m k M G T P E`) or a decimal exponent (`e3`, `E-2`).
pub fn parse_exact(s: &str) -> Option<Exact> {
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    // More digits than an i128 holds are not a quantity a pod carries.
    if digits.len() > 36 {
        return None;
    }
    let mut num: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    if negative {
        num = -num;
    }
    let frac_len = i32::try_from(frac.len()).ok()?;
    let (exp10, bin) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            (exp.parse::<i32>().ok().filter(|e| e.abs() <= 1000)?, 0)
        }
    };
    Some(Exact {
        num,
        exp10: exp10 - frac_len,
        bin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        assert_eq!(parse("100m").map(|q| q.value), Ok(0.1));
        assert_eq!(parse("1Gi").map(|q| q.value), Ok(1073741824.0));
        assert_eq!(parse("1e3").map(|q| q.value), Ok(1000.0));
        assert_eq!(parse("1.5").map(|q| q.value), Ok(1.5));
        assert_eq!(parse(".5").map(|q| q.value), Ok(0.5));
        assert!(parse("-1").is_ok_and(|q| q.is_negative()));
        for bad in ["", "abc", "1x", "1.2.3", "Gi", "1e", "1Kii", "--1"] {
            assert_eq!(parse(bad), Err(QuantityError), "{bad}");
        }
    }

    #[test]
    fn quantities_scale_and_round_up_exactly() {
        let cases = [
            ("1", -3, 1000),
            ("0.5", -3, 500),
            ("100m", 0, 1),
            ("1n", -3, 1),
            ("1e3", 0, 1000),
            ("1E-2", -3, 10),
            ("1.5Gi", 0, 1_610_612_736),
            ("2k", 0, 2000),
            ("0", 0, 0),
            (".5", -3, 500),
            ("12345678901234567890", 0, i64::MAX),
        ];
        for (q, scale, want) in cases {
            let a = parse_exact(q).unwrap_or_else(|| panic!("{q}"));
            assert_eq!(a.scaled_ceil(scale), want, "{q} at 10^{scale}");
        }
        for bad in ["", "abc", "1.2.3", "1x", "-", "1Kx"] {
            assert!(parse_exact(bad).is_none(), "{bad}");
        }
    }
}
