//! A small parser for Kubernetes resource quantities (`k8s.io/apimachinery/pkg/api/resource`).
//! It validates the syntax and yields an approximate value, which is enough for the sign and
//! request-versus-limit checks validation needs.

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
}
