//! Sets of field paths, as structured-merge-diff's `fieldpath.Set`, and their `FieldsV1`
//! encoding in `metadata.managedFields`.
//!
//! A path is a list of elements: a field name (`f:spec`), a map-list item named by its key
//! fields (`k:{"name":"main"}`), a set-list value (`v:"a"`) or a list index (`i:0`). A set is a
//! tree: each node may be a member itself (the path up to it is in the set, encoded `.`) and
//! have children.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

/// One step of a path.
#[derive(Debug, Clone)]
pub enum PathElement {
    Field(String),
    /// The key fields of a map-list item, sorted by name.
    Key(Vec<(String, Value)>),
    Value(Value),
    Index(usize),
}

impl PathElement {
    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `FieldsV1` key of this element.
    fn encode(&self) -> String {
        match self {
            PathElement::Field(f) => {
                let mut s = String::with_capacity(f.len() + 2);
                s.push_str("f:");
                s.push_str(f);
                s
            }
            PathElement::Key(fields) => {
                let m: Map<String, Value> = fields.iter().cloned().collect();
                format!("k:{}", Value::Object(m))
            }
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Result<PathElement, String> {
        let bad = || format!("invalid path element {s:?}");
        let (prefix, rest) = s.split_once(':').ok_or_else(bad)?;
        match prefix {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "k" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) if !m.is_empty() => {
                    let mut fields: Vec<(String, Value)> = m.into_iter().collect();
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(PathElement::Key(fields))
                }
                _ => Err(bad()),
            },
            "v" => serde_json::from_str(rest)
                .map(PathElement::Value)
                .map_err(|_| bad()),
            "i" => rest.parse().map(PathElement::Index).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// How upstream prints a value inside a path: strings as Go's `%q`, the rest as JSON.
fn value_string(v: &Value) -> String {
    match v {
        Value::String(s) => kbatch_api::field::quote(s),
        other => other.to_string(),
    }
}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", value_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// Upstream's total order on values: numbers, strings, booleans, lists, maps, null.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let c = compare_values(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|p, q| p.0.cmp(q.0));
            ys.sort_by(|p, q| p.0.cmp(q.0));
            for (p, q) in xs.iter().zip(&ys) {
                let c = p.0.cmp(q.0).then_with(|| compare_values(p.1, q.1));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for (p, q) in a.iter().zip(b) {
                    let c = p.0.cmp(&q.0).then_with(|| compare_values(&p.1, &q.1));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// A path printed as upstream prints it in conflict messages (`.spec.template.spec.containers[name="main"].image`).
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    member: bool,
    children: FieldSet,
}

impl Node {
    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }
}

/// A set of paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeMap<PathElement, Node>);

impl FieldSet {
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        // Clone the element only when the node is new: most inserts share a prefix.
        let node = match self.0.get_mut(first) {
            Some(n) => n,
            None => self.0.entry(first.clone()).or_default(),
        };
        if rest.is_empty() {
            node.member = true;
        } else {
            node.children.insert(rest);
        }
    }

    /// Remove the members of `other` (in place; what lies below them stays).
    pub fn subtract(&mut self, other: &FieldSet) {
        if other.is_empty() || self.is_empty() {
            return;
        }
        self.0.retain(|pe, n| {
            if let Some(o) = other.0.get(pe) {
                n.member &= !o.member;
                n.children.subtract(&o.children);
            }
            !n.is_empty()
        });
    }

    pub fn has(&self, path: &[PathElement]) -> bool {
        match path.split_first() {
            None => false,
            Some((first, [])) => self.0.get(first).is_some_and(|n| n.member),
            Some((first, rest)) => self.0.get(first).is_some_and(|n| n.children.has(rest)),
        }
    }

    /// The member at `pe` (if any) and the subset below it.
    pub fn child(&self, pe: &PathElement) -> Option<(bool, &FieldSet)> {
        self.0.get(pe).map(|n| (n.member, &n.children))
    }

    /// `child` of the field `name`, without building its path element. Fields sort first and
    /// by name, so the scan stops at the first element past it.
    pub fn child_field(&self, name: &str) -> Option<(bool, &FieldSet)> {
        for (pe, n) in &self.0 {
            let PathElement::Field(f) = pe else {
                break;
            };
            match f.as_str().cmp(name) {
                Ordering::Less => {}
                Ordering::Equal => return Some((n.member, &n.children)),
                Ordering::Greater => break,
            }
        }
        None
    }

    pub fn union(&mut self, other: &FieldSet) {
        for (pe, n) in &other.0 {
            let mine = self.0.entry(pe.clone()).or_default();
            mine.member |= n.member;
            mine.children.union(&n.children);
        }
    }

    /// The paths of `self` that are not in `other` (a member of `other` removes only that
    /// path, not what lies below it).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = BTreeMap::new();
        for (pe, n) in &self.0 {
            let node = match other.0.get(pe) {
                None => n.clone(),
                Some(o) => Node {
                    member: n.member && !o.member,
                    children: n.children.difference(&o.children),
                },
            };
            if !node.is_empty() {
                out.insert(pe.clone(), node);
            }
        }
        FieldSet(out)
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = BTreeMap::new();
        for (pe, n) in &self.0 {
            if let Some(o) = other.0.get(pe) {
                let node = Node {
                    member: n.member && o.member,
                    children: n.children.intersection(&o.children),
                };
                if !node.is_empty() {
                    out.insert(pe.clone(), node);
                }
            }
        }
        FieldSet(out)
    }

    /// The paths of `self` that neither are in `other` nor lie below a member of `other`.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = BTreeMap::new();
        for (pe, n) in &self.0 {
            let node = match other.0.get(pe) {
                None => n.clone(),
                Some(o) if o.member => continue,
                Some(o) => Node {
                    member: n.member,
                    children: n.children.recursive_difference(&o.children),
                },
            };
            if !node.is_empty() {
                out.insert(pe.clone(), node);
            }
        }
        FieldSet(out)
    }

    /// The paths of `self` at or below `prefix` (upstream's include filter of a prefix
    /// matcher).
    pub fn at_or_below(&self, prefix: &[PathElement]) -> FieldSet {
        let Some((first, rest)) = prefix.split_first() else {
            return self.clone();
        };
        let Some(n) = self.0.get(first) else {
            return FieldSet::new();
        };
        let node = if rest.is_empty() {
            n.clone()
        } else {
            Node {
                member: false,
                children: n.children.at_or_below(rest),
            }
        };
        let mut out = BTreeMap::new();
        if !node.is_empty() {
            out.insert(first.clone(), node);
        }
        FieldSet(out)
    }

    /// Every path, members of a node before its children (upstream's `Iterate` order).
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for (pe, n) in &self.0 {
            if n.member {
                let mut p = prefix.clone();
                p.push(pe.clone());
                out.push(p);
            }
        }
        for (pe, n) in &self.0 {
            if !n.children.is_empty() {
                prefix.push(pe.clone());
                n.children.collect_paths(prefix, out);
                prefix.pop();
            }
        }
    }

    /// Whether a `FieldsV1` document mentions any path of this set (or something below
    /// one): a cheap test that tells which entries an update can change without decoding
    /// them. It may say yes when the entry would not change; never the other way round.
    pub fn touches_fields_v1(&self, v: &Value) -> bool {
        let Value::Object(m) = v else {
            return true;
        };
        self.0.iter().any(|(pe, n)| match m.get(&pe.encode()) {
            None => false,
            Some(child) => n.member || n.children.touches_fields_v1(child),
        })
    }

    /// The `FieldsV1` document. Its members are JSON object members, so they come out in the
    /// order of their names (`.` first, then `f:`, `i:`, `k:` and `v:` entries); upstream
    /// writes them in its path element order, which differs only where numbers are compared
    /// inside keys and indexes (`k:{"port":9}` before `k:{"port":10}`). Readers decode the
    /// members as a set either way.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        for (pe, n) in &self.0 {
            let mut inner = n.children.to_fields_v1();
            if n.member
                && !n.children.is_empty()
                && let Value::Object(o) = &mut inner
            {
                // `.` first, as upstream writes it.
                let mut with_self = Map::new();
                with_self.insert(".".into(), Value::Object(Map::new()));
                with_self.append(o);
                inner = Value::Object(with_self);
            }
            m.insert(pe.encode(), inner);
        }
        Value::Object(m)
    }

    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        Self::decode_level(v, 0)
    }

    fn decode_level(v: &Value, depth: usize) -> Result<FieldSet, String> {
        if depth > super::MAX_DEPTH {
            return Err("fieldsV1 nested too deeply".into());
        }
        let Value::Object(m) = v else {
            return Err("fieldsV1 must be an object".into());
        };
        let mut out = BTreeMap::new();
        for (k, child) in m {
            if k == "." {
                continue;
            }
            let pe = PathElement::decode(k)?;
            let Value::Object(cm) = child else {
                return Err(format!("fieldsV1 entry {k:?} must be an object"));
            };
            let children = Self::decode_level(child, depth + 1)?;
            let member = cm.is_empty() || cm.contains_key(".");
            let node = Node { member, children };
            if !node.is_empty() {
                out.insert(pe, node);
            }
        }
        Ok(FieldSet(out))
    }
}
