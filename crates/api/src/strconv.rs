//! Go's `strconv` parsing where upstream applies it to text it receives (query parameters,
//! annotations), so the same spellings are accepted.

/// Go's `strconv.ParseBool`: exactly these spellings, anything else an error (`None`).
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_bool_spellings() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(parse_go_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(parse_go_bool(f), Some(false), "{f}");
        }
        for bad in ["", "yes", "tRue", " true"] {
            assert_eq!(parse_go_bool(bad), None, "{bad:?}");
        }
    }
}
