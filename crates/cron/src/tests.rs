use super::*;

#[test]
fn parses_basic() {
    assert!(Schedule::parse("*/15 * * * *").is_ok());
    assert_eq!(
        Schedule::parse("* * * *").unwrap_err().to_string(),
        "expected exactly 5 fields, found 4: [* * * *]"
    );
}
