//! Label selectors (`k8s.io/apimachinery/pkg/labels` syntax) and field selectors.

use serde_json::Value;

use crate::error::ApiError;
use crate::resources::Kind;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn parse_error(sel: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: {why} (in selector {sel:?})"
    ))
}

impl LabelSelector {
    pub fn parse(sel: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        let chars: Vec<char> = sel.chars().collect();
        let mut i = 0;
        let skip_ws = |i: &mut usize| {
            while *i < chars.len() && chars[*i].is_whitespace() {
                *i += 1;
            }
        };
        loop {
            skip_ws(&mut i);
            if i >= chars.len() {
                break;
            }
            let negated = chars[i] == '!';
            if negated {
                i += 1;
                skip_ws(&mut i);
            }
            let start = i;
            while i < chars.len() && is_key_char(chars[i]) {
                i += 1;
            }
            let key: String = chars[start..i].iter().collect();
            if key.is_empty() {
                return Err(parse_error(sel, "found '' , expected: identifier"));
            }
            skip_ws(&mut i);
            let at_end = i >= chars.len() || chars[i] == ',';
            let op = if negated {
                if !at_end {
                    return Err(parse_error(
                        sel,
                        "exists operator ! must be followed only by a key",
                    ));
                }
                Op::DoesNotExist
            } else if at_end {
                Op::Exists
            } else {
                let rest: String = chars[i..].iter().collect();
                let word = |w: &str| {
                    rest.starts_with(w)
                        && rest[w.len()..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_whitespace() || c == '(')
                };
                if rest.starts_with("==") {
                    i += 2;
                    Op::Eq(read_value(&chars, &mut i))
                } else if rest.starts_with("!=") {
                    i += 2;
                    Op::NotEq(read_value(&chars, &mut i))
                } else if rest.starts_with('=') {
                    i += 1;
                    Op::Eq(read_value(&chars, &mut i))
                } else if rest.starts_with('>') || rest.starts_with('<') {
                    let gt = rest.starts_with('>');
                    i += 1;
                    let v = read_value(&chars, &mut i);
                    let n: i64 = v.parse().map_err(|_| {
                        parse_error(
                            sel,
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        )
                    })?;
                    if gt { Op::Gt(n) } else { Op::Lt(n) }
                } else if word("notin") {
                    i += 5;
                    Op::NotIn(read_set(sel, &chars, &mut i)?)
                } else if word("in") {
                    i += 2;
                    Op::In(read_set(sel, &chars, &mut i)?)
                } else {
                    return Err(parse_error(
                        sel,
                        &format!("found '{rest}', expected: in, notin, =, ==, !=, gt, lt"),
                    ));
                }
            };
            reqs.push(Requirement { key, op });
            skip_ws(&mut i);
            if i < chars.len() {
                if chars[i] != ',' {
                    return Err(parse_error(sel, "expected ','"));
                }
                i += 1;
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Does an object's `metadata.labels` satisfy every requirement?
    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.0.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match &r.op {
                Op::Eq(x) => v == Some(x.as_str()),
                Op::NotEq(x) => v != Some(x.as_str()),
                Op::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::NotIn(xs) => !v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

fn read_value(chars: &[char], i: &mut usize) -> String {
    while *i < chars.len() && chars[*i].is_whitespace() {
        *i += 1;
    }
    let start = *i;
    while *i < chars.len() && chars[*i] != ',' && !chars[*i].is_whitespace() {
        *i += 1;
    }
    chars[start..*i].iter().collect()
}

fn read_set(sel: &str, chars: &[char], i: &mut usize) -> Result<Vec<String>, ApiError> {
    while *i < chars.len() && chars[*i].is_whitespace() {
        *i += 1;
    }
    if *i >= chars.len() || chars[*i] != '(' {
        return Err(parse_error(sel, "expected '('"));
    }
    *i += 1;
    let start = *i;
    while *i < chars.len() && chars[*i] != ')' {
        *i += 1;
    }
    if *i >= chars.len() {
        return Err(parse_error(sel, "expected ')'"));
    }
    let inner: String = chars[start..*i].iter().collect();
    *i += 1;
    Ok(inner
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect())
}

/// A parsed field selector: `key=value`, `key==value`, `key!=value`, comma-separated.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(sel: &str, kind: Kind) -> Result<FieldSelector, ApiError> {
        Self::parse_with(sel, |key| {
            supported_field(kind, key)
                .then_some(())
                .ok_or_else(|| format!("field label not supported: {key}"))
        })
    }

    /// A selector of a kind without field label conversions of its own (an aggregated API's,
    /// such as metrics.k8s.io): only the object metadata fields, refused with
    /// apimachinery's `DefaultMetaV1FieldSelectorConversion` message.
    pub fn parse_object_meta(sel: &str) -> Result<FieldSelector, ApiError> {
        Self::parse_with(sel, |key| match key {
            "metadata.name" | "metadata.namespace" => Ok(()),
            _ => Err(format!(
                "\"{key}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )),
        })
    }

    fn parse_with(
        sel: &str,
        supported: impl Fn(&str) -> Result<(), String>,
    ) -> Result<FieldSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in sel.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{sel}'; can't understand '{part}'"
                )));
            };
            let key = key.trim();
            // An `=` inside a value must be escaped (upstream's fields.UnescapeValue).
            if value.contains('=') || key.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{sel}'; can't understand '{part}'"
                )));
            }
            supported(key).map_err(ApiError::bad_request)?;
            reqs.push((key.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The one `metadata.name=X` requirement, if the selector pins a name (lets a list read one key).
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, kind: Kind, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(k, eq, v)| (field_value(kind, obj, k).as_deref().unwrap_or("") == v) == *eq)
    }
}

fn supported_field(kind: Kind, key: &str) -> bool {
    if matches!(key, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match kind {
        Kind::Pod => matches!(
            key,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        Kind::Event | Kind::EventV1 => {
            key.starts_with("involvedObject.")
                || key.starts_with("regarding.")
                || matches!(key, "reason" | "reportingComponent" | "source" | "type")
        }
        Kind::Job => key == "status.successful",
        Kind::Node => key == "spec.unschedulable",
        Kind::Namespace => key == "status.phase",
        // `SelectableFields` of secrets.
        Kind::Secret => key == "type",
        Kind::CronJob
        | Kind::Lease
        | Kind::ConfigMap
        | Kind::ServiceAccount
        | Kind::PriorityClass
        | Kind::PodDisruptionBudget => false,
    }
}

fn str_at(obj: &Value, path: &[&str]) -> Option<String> {
    let mut cur = obj;
    for p in path {
        cur = cur.get(p)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The value a field selector key reads from a stored object (events are stored as core/v1).
fn field_value(kind: Kind, obj: &Value, key: &str) -> Option<String> {
    match (kind, key) {
        (Kind::Event | Kind::EventV1, k) if k.starts_with("regarding.") => {
            let rest: Vec<&str> = std::iter::once("involvedObject")
                .chain(k["regarding.".len()..].split('.'))
                .collect();
            str_at(obj, &rest)
        }
        (Kind::Event | Kind::EventV1, "source") => str_at(obj, &["source", "component"]),
        (Kind::Job, "status.successful") => Some(
            obj.pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .to_string(),
        ),
        (Kind::Pod, "spec.hostNetwork") => Some(
            obj.pointer("/spec/hostNetwork")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
        ),
        (Kind::Node, "spec.unschedulable") => Some(
            obj.pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
        ),
        _ => {
            let parts: Vec<&str> = key.split('.').collect();
            str_at(obj, &parts)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(json!({"app": "pi", "tier": "batch", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("app=pi"));
        assert!(m("app==pi,tier=batch"));
        assert!(!m("app!=pi"));
        assert!(m("app in (pi, other)"));
        assert!(!m("app notin (pi)"));
        assert!(m("tier"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("n>3"));
        assert!(!m("n<3"));
        assert!(m(""));
        assert!(!LabelSelector::parse("app=pi").unwrap().matches(None));
    }

    #[test]
    fn label_selector_errors() {
        assert!(LabelSelector::parse("app in pi").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("a>b").is_err());
        assert!(LabelSelector::parse("!a=b").is_err());
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let f = FieldSelector::parse("status.phase=Running,spec.nodeName!=n2", Kind::Pod).unwrap();
        assert!(f.matches(Kind::Pod, &pod));
        let f = FieldSelector::parse("spec.nodeName=", Kind::Pod).unwrap();
        assert!(!f.matches(Kind::Pod, &pod));
        assert!(FieldSelector::parse("spec.bogus=1", Kind::Pod).is_err());
        assert!(FieldSelector::parse("metadata.name===", Kind::Pod).is_err());
        assert!(FieldSelector::parse("metadata.name=a=b", Kind::Pod).is_err());
        let ev = json!({"involvedObject": {"name": "pi", "kind": "Job", "uid": "u"}});
        let f = FieldSelector::parse(
            "involvedObject.name=pi,involvedObject.kind=Job",
            Kind::Event,
        )
        .unwrap();
        assert!(f.matches(Kind::Event, &ev));
        let f = FieldSelector::parse("regarding.uid=u", Kind::EventV1).unwrap();
        assert!(f.matches(Kind::EventV1, &ev));
        assert_eq!(
            FieldSelector::parse("metadata.name=x", Kind::Job)
                .unwrap()
                .pinned_name(),
            Some("x")
        );
    }
}
