//! YAML as Kubernetes reads it: sigs.k8s.io/yaml converts YAML to JSON with go-yaml v2, whose
//! YAML 1.1 rules read `0755` as the octal 493 (a volume's `defaultMode` is written so) and
//! `yes`/`no`/`on`/`off` as booleans. Every YAML the server or the binary reads goes through
//! these options.

use serde::de::DeserializeOwned;

/// serde-saphyr's options for YAML 1.1 numbers (its booleans are YAML 1.1 by default).
pub fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    options
}

/// One YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, options())
}

/// Every document of a YAML stream.
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, serde_saphyr::Error> {
    serde_saphyr::from_multiple_with_options(text, options())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    #[test]
    fn numbers_with_a_leading_zero_are_octal_as_in_yaml_1_1() {
        let v: Value = super::from_str("mode: 0755\nplain: 420\nhex: 0x1F\nflag: yes\nzero: 0\n")
            .expect("parses");
        assert_eq!(
            v,
            json!({"mode": 493, "plain": 420, "hex": 31, "flag": true, "zero": 0})
        );
        let docs: Vec<Value> = super::from_multiple("a: 0644\n---\nb: 010\n").expect("parses");
        assert_eq!(docs, vec![json!({"a": 420}), json!({"b": 8})]);
    }
}
