//! Name and label syntax checks (`k8s.io/apimachinery/pkg/util/validation`). Each function
//! returns the upstream messages, empty when the value is valid.

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `RegexError`: the message, the examples (note the doubled space upstream produces), the regex.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (");
    if !examples.is_empty() {
        s.push_str("e.g. ");
        for (i, ex) in examples.iter().enumerate() {
            if i > 0 {
                s.push_str(" or ");
            }
            s.push('\'');
            s.push_str(ex);
            s.push_str("', ");
        }
    }
    s.push_str("regex used for validation is '");
    s.push_str(fmt);
    s.push_str("')");
    s
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn matches_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

fn matches_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(matches_dns_label)
}

fn matches_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// `IsDNS1123Label`.
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_chars(DNS1123_LABEL_MAX));
    }
    if !matches_dns_label(value) {
        if matches_dns_subdomain(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_chars(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `NameIsDNSSubdomain`: with `prefix` (generateName), a trailing dash is masked first.
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        dns1123_subdomain(&mask_trailing_dash(name))
    } else {
        dns1123_subdomain(name)
    }
}

/// `NameIsDNSLabel` (namespaces, container names in a prefix-free form).
pub fn name_is_dns_label(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        dns1123_label(&mask_trailing_dash(name))
    } else {
        dns1123_label(name)
    }
}

fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        format!("{}a", &name[..name.len() - 1])
    } else {
        name.to_string()
    }
}

/// `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of at most 63 bytes.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                for m in dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {m}"));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_bytes(QUALIFIED_NAME_MAX)));
    }
    if !matches_qualified_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_bytes(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !matches_qualified_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_ERR: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// `IsConfigMapKey`: the keys of ConfigMap and Secret data (file names when mounted, hence
/// the `.`/`..` rules).
pub fn config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_chars(DNS1123_SUBDOMAIN_MAX));
    }
    let allowed = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_');
    if value.is_empty() || !value.bytes().all(allowed) {
        errs.push(regex_error(
            CONFIG_MAP_KEY_ERR,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        errs.push("must not be '.'".to_string());
    } else if value == ".." {
        errs.push("must not be '..'".to_string());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// `IsValidPortName` (IANA service name).
pub fn port_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 15 {
        errs.push("must be no more than 15 characters".to_string());
    }
    if value.is_empty()
        || !value
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !value.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if value.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if value.starts_with('-') || value.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

const HTTP_HEADER_NAME_FMT: &str = "[-A-Za-z0-9]+";
const HTTP_HEADER_NAME_ERR: &str =
    "a valid HTTP header must consist of alphanumeric characters or '-'";

/// `IsHTTPHeaderName`: the Go HTTP library's (strict) header field name syntax.
pub fn http_header_name(value: &str) -> Vec<String> {
    if !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        Vec::new()
    } else {
        vec![regex_error(
            HTTP_HEADER_NAME_ERR,
            HTTP_HEADER_NAME_FMT,
            &["X-Header-Name"],
        )]
    }
}

/// `IsValidPortNum`.
pub fn port_num(port: i32) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![in_range(1, 65535)]
    }
}

/// `InclusiveRangeError`.
pub fn in_range(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn max_len_chars(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn max_len_bytes(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

/// `ValidatePathSegmentName`: what every object name must be to fit in a URL path segment
/// (the generic check the registry runs after a kind's own).
pub fn path_segment_name(name: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if name == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(dns1123_label("abc-1").is_empty());
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(
            dns1123_label("A")[0],
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert!(dns1123_subdomain("a.b-c").is_empty());
        assert_eq!(dns1123_subdomain("-a").len(), 1);
        assert!(name_is_dns_subdomain("abc-", true).is_empty());
        assert_eq!(name_is_dns_subdomain("abc-", false).len(), 1);
    }

    #[test]
    fn port_names_and_header_names() {
        assert!(port_name("http-alt").is_empty());
        assert_eq!(
            port_name(""),
            vec![
                "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "must contain at least one letter (a-z)"
            ]
        );
        assert_eq!(
            port_name("8080"),
            vec!["must contain at least one letter (a-z)"]
        );
        assert!(http_header_name("X-Forwarded-For").is_empty());
        let msg = "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')";
        assert_eq!(http_header_name("Host:"), vec![msg]);
        assert_eq!(http_header_name("X_Forwarded_For"), vec![msg]);
        assert_eq!(http_header_name(""), vec![msg]);
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name("example.com/My_Name").is_empty());
        assert_eq!(qualified_name("/a"), vec!["prefix part must be non-empty"]);
        assert_eq!(
            qualified_name("a/"),
            vec![
                "name part must be non-empty",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert_eq!(
            qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 bytes"]
        );
        assert_eq!(
            label_value(&"a".repeat(64)),
            vec!["must be no more than 63 bytes"]
        );
        assert!(label_value("").is_empty());
        assert_eq!(label_value("-a").len(), 1);
    }
}
