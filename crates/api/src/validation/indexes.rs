//! The index-list format of `completedIndexes`, `failedIndexes` and `succeededIndexes`:
//! comma-separated `x` or `x-y` intervals, strictly increasing, every index below completions.

use thiserror::Error;

/// A parse error, worded as upstream's `validateIndexesFormat` words it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IndexParseError {
    #[error(
        "the fragment {} violates the requirement that an index interval can have at most two parts separated by '-'",
        crate::field::quote(.0)
    )]
    TooManyParts(String),
    #[error("cannot convert string to integer for index: {}", crate::field::quote(.0))]
    NotAnInteger(String),
    #[error("too large index: {}", crate::field::quote(.0))]
    TooLarge(String),
    #[error("non-increasing order, previous: {previous}, current: {current}")]
    NonIncreasing { previous: i64, current: i64 },
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, 64-bit range.
fn atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_interval(fragment: &str, completions: i32) -> Result<(i64, i64), IndexParseError> {
    let parts: Vec<&str> = fragment.split('-').collect();
    if parts.len() > 2 {
        return Err(IndexParseError::TooManyParts(fragment.to_string()));
    }
    let first = parts[0];
    let x = atoi(first).ok_or_else(|| IndexParseError::NotAnInteger(first.to_string()))?;
    if x >= i64::from(completions) {
        return Err(IndexParseError::TooLarge(first.to_string()));
    }
    if let Some(second) = parts.get(1) {
        let y = atoi(second).ok_or_else(|| IndexParseError::NotAnInteger(second.to_string()))?;
        if y >= i64::from(completions) {
            return Err(IndexParseError::TooLarge(second.to_string()));
        }
        if x >= y {
            return Err(IndexParseError::NonIncreasing {
                previous: x,
                current: y,
            });
        }
        return Ok((x, y));
    }
    Ok((x, x))
}

/// Parses an index list into inclusive intervals. The empty string is the empty list.
pub fn parse_index_intervals(
    indexes: &str,
    completions: i32,
) -> Result<Vec<(i64, i64)>, IndexParseError> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    if indexes.is_empty() {
        return Ok(out);
    }
    for fragment in indexes.split(',') {
        let (x, y) = parse_interval(fragment, completions)?;
        if let Some(&(_, last)) = out.last()
            && last >= x
        {
            return Err(IndexParseError::NonIncreasing {
                previous: last,
                current: x,
            });
        }
        out.push((x, y));
    }
    Ok(out)
}

/// `validateIndexesFormat`: the number of indexes in the list.
pub fn validate_indexes_format(indexes: &str, completions: i32) -> Result<i64, IndexParseError> {
    Ok(parse_index_intervals(indexes, completions)?
        .iter()
        .map(|(x, y)| y - x + 1)
        .sum())
}

/// `validateFailedIndexesNotOverlapCompleted`: walks both lists, skipping unparsable
/// fragments (their format errors are reported separately).
pub(crate) fn overlap_error(completed: &str, failed: &str, completions: i32) -> Option<String> {
    if completed.is_empty() || failed.is_empty() {
        return None;
    }
    let c: Vec<&str> = completed.split(',').collect();
    let f: Vec<&str> = failed.split(',').collect();
    let (mut ci, mut fi) = (0, 0);
    while ci < c.len() && fi < f.len() {
        let cp = parse_interval(c[ci], completions);
        let fp = parse_interval(f[fi], completions);
        match (cp, fp) {
            (Err(_), _) => ci += 1,
            (_, Err(_)) => fi += 1,
            (Ok((cx, cy)), Ok((fx, fy))) => {
                if cx <= fy && fx <= cy {
                    return Some(format!(
                        "failedIndexes and completedIndexes overlap at index: {}",
                        cx.max(fx)
                    ));
                }
                if cx <= fx {
                    ci += 1;
                } else {
                    fi += 1;
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_list_cases() {
        let ok: &[(&str, i32, i64)] = &[
            ("", 0, 0),
            ("0", 1, 1),
            ("0,2-4,6", 7, 5),
            ("1-2,4", 5, 3),
            ("+3", 5, 1),
        ];
        for (s, c, n) in ok {
            assert_eq!(validate_indexes_format(s, *c), Ok(*n), "{s}");
        }
        let bad: &[(&str, i32, &str)] = &[
            (
                "1-2-3",
                5,
                "the fragment \"1-2-3\" violates the requirement that an index interval can have at most two parts separated by '-'",
            ),
            ("a", 5, "cannot convert string to integer for index: \"a\""),
            (
                "1-b",
                5,
                "cannot convert string to integer for index: \"b\"",
            ),
            ("1,", 5, "cannot convert string to integer for index: \"\""),
            (",1", 5, "cannot convert string to integer for index: \"\""),
            ("7", 5, "too large index: \"7\""),
            ("1-7", 5, "too large index: \"7\""),
            ("3,2", 5, "non-increasing order, previous: 3, current: 2"),
            ("1-3,3", 5, "non-increasing order, previous: 3, current: 3"),
            ("3-2", 5, "non-increasing order, previous: 3, current: 2"),
            ("2-2", 5, "non-increasing order, previous: 2, current: 2"),
            (
                "99999999999999999999",
                5,
                "cannot convert string to integer for index: \"99999999999999999999\"",
            ),
            ("0", 0, "too large index: \"0\""),
        ];
        for (s, c, msg) in bad {
            assert_eq!(
                validate_indexes_format(s, *c).map_err(|e| e.to_string()),
                Err(msg.to_string()),
                "{s}"
            );
        }
        assert_eq!(parse_index_intervals("0,2-4", 5), Ok(vec![(0, 0), (2, 4)]));
    }

    #[test]
    fn overlap() {
        assert_eq!(overlap_error("0-2", "3,4", 5), None);
        assert_eq!(
            overlap_error("0-2,4", "3-4", 5).as_deref(),
            Some("failedIndexes and completedIndexes overlap at index: 4")
        );
        assert_eq!(
            overlap_error("x,1", "1", 5).as_deref(),
            Some("failedIndexes and completedIndexes overlap at index: 1")
        );
        assert_eq!(overlap_error("", "1", 5), None);
    }
}
