//! Schema-guided operations on JSON objects, as structured-merge-diff's `typed` package: the
//! field set of a value, the comparison of two values, the merge of an applied configuration
//! into a live object, and the removal of fields an applier gave up.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, PathElement, path_string};
use super::schema::{ListType, Schema, key_default};

/// The path element of a list item: its key fields, its value (sets) or its index.
pub fn item_element(list: ListType, item: &Value, index: usize) -> Result<PathElement, String> {
    match list {
        ListType::Map(keys) => {
            let Value::Object(m) = item else {
                return Err(format!(
                    "element {index}: associative list with keys may not have non-map elements"
                ));
            };
            let mut fields = Vec::with_capacity(keys.len());
            for (key, default) in keys {
                match m
                    .get(*key)
                    .filter(|v| !v.is_null())
                    .cloned()
                    .or_else(|| key_default(*default))
                {
                    Some(v) => fields.push((key.to_string(), v)),
                    None => {
                        return Err(format!(
                            "element {index}: associative list with keys has an element that omits key field {key:?} (and doesn't have default value)"
                        ));
                    }
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(PathElement::Key(fields))
        }
        ListType::Set => match item {
            Value::Object(_) | Value::Array(_) => Err(format!(
                "element {index}: associative list without keys has an element that's a map type"
            )),
            v => Ok(PathElement::Value(v.clone())),
        },
        ListType::Atomic => Ok(PathElement::Index(index)),
    }
}

/// The paths a value sets (upstream's `ToFieldSet`): every leaf, every list item, and atomic
/// values as a whole. Errors (missing or duplicate keys) are collected with their paths.
pub fn field_set(v: &Value, schema: &Schema) -> Result<FieldSet, Vec<String>> {
    let mut set = FieldSet::new();
    let mut errors = Vec::new();
    collect(v, schema, &mut Vec::new(), &mut set, &mut errors, 0);
    if errors.is_empty() {
        Ok(set)
    } else {
        Err(errors)
    }
}

fn collect(
    v: &Value,
    schema: &Schema,
    path: &mut Vec<PathElement>,
    set: &mut FieldSet,
    errors: &mut Vec<String>,
    depth: usize,
) {
    if depth > super::MAX_DEPTH {
        errors.push(format!("{}: nested too deeply", path_string(path)));
        return;
    }
    match v {
        Value::Object(m) if !schema.is_atomic() => {
            for (k, child) in m {
                path.push(PathElement::Field(k.clone()));
                collect(child, &schema.field(k), path, set, errors, depth + 1);
                path.pop();
            }
        }
        Value::Array(items) if schema.list_type() != ListType::Atomic => {
            let elem = schema.elem();
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = match item_element(schema.list_type(), item, i) {
                    Ok(pe) => pe,
                    Err(e) => {
                        errors.push(format!("{}: {e}", path_string(path)));
                        continue;
                    }
                };
                // PathElement has no Hash; its encoding identifies it.
                if !seen.insert(pe.to_string()) {
                    errors.push(format!(
                        "{}: duplicate entries for key {pe}",
                        path_string(path)
                    ));
                    continue;
                }
                path.push(pe);
                collect(item, &elem, path, set, errors, depth + 1);
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
}

/// What changed between two versions of an object.
#[derive(Debug, Default)]
pub struct Comparison {
    pub removed: FieldSet,
    pub modified: FieldSet,
    pub added: FieldSet,
}

impl Comparison {
    pub fn is_same(&self) -> bool {
        self.removed.is_empty() && self.modified.is_empty() && self.added.is_empty()
    }
}

/// Compare `lhs` (before) with `rhs` (after), as upstream's `Compare`: leaves are added,
/// removed or modified; a granular map or list that appears or disappears is itself added or
/// removed as well; atomic values and values empty on both sides are leaves. Paths at or
/// below a member of `exclude` are not compared at all (upstream compares, then drops them).
pub fn compare(
    lhs: &Value,
    rhs: &Value,
    schema: &Schema,
    exclude: &FieldSet,
) -> Result<Comparison, String> {
    let mut c = Comparison::default();
    let exclude = (!exclude.is_empty()).then_some(exclude);
    compare_at(
        &mut Vec::new(),
        Some(lhs),
        Some(rhs),
        schema,
        exclude,
        &mut c,
        0,
    )?;
    Ok(c)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Shape {
    Map,
    List,
    Leaf,
}

fn shape(v: Option<&Value>) -> Option<Shape> {
    match v? {
        Value::Object(_) => Some(Shape::Map),
        Value::Array(_) => Some(Shape::List),
        // A null takes the shape of the other side (an absent container).
        Value::Null => None,
        _ => Some(Shape::Leaf),
    }
}

fn leaf(path: &[PathElement], lhs: Option<&Value>, rhs: Option<&Value>, c: &mut Comparison) {
    match (lhs, rhs) {
        (None, None) => {}
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(a), Some(b)) => {
            if a != b {
                c.modified.insert(path)
            }
        }
    }
}

/// What `exclude` says about field `k`: skip it (`None`), or compare it excluding this.
fn excluded<'a>(exclude: Option<&'a FieldSet>, k: &str) -> Option<Option<&'a FieldSet>> {
    let Some(set) = exclude else {
        return Some(None);
    };
    match set.child_field(k) {
        Some((true, _)) => None,
        Some((false, below)) => Some(Some(below)),
        None => Some(None),
    }
}

fn compare_at(
    path: &mut Vec<PathElement>,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    schema: &Schema,
    exclude: Option<&FieldSet>,
    c: &mut Comparison,
    depth: usize,
) -> Result<(), String> {
    // An unchanged subtree has nothing added, removed or modified: one deep equality instead
    // of a walk that names every path (a status update leaves the whole spec as it was).
    if let (Some(a), Some(b)) = (lhs, rhs)
        && a == b
    {
        return Ok(());
    }
    if depth > super::MAX_DEPTH {
        return Err(format!("{}: nested too deeply", path_string(path)));
    }
    let kind = match (shape(lhs), shape(rhs)) {
        (Some(a), Some(b)) if a != b => Shape::Leaf,
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => Shape::Leaf,
    };
    let descended = match kind {
        Shape::Map => {
            let empty = Map::new();
            let l = lhs.and_then(Value::as_object).unwrap_or(&empty);
            let r = rhs.and_then(Value::as_object).unwrap_or(&empty);
            if schema.is_atomic() || (l.is_empty() && r.is_empty()) {
                false
            } else {
                // managedFields are the bookkeeping, not part of what is compared.
                let in_meta = depth == 1 && path.first() == Some(&metadata());
                for (k, lv) in l {
                    if in_meta && k == "managedFields" {
                        continue;
                    }
                    let Some(below) = excluded(exclude, k) else {
                        continue;
                    };
                    path.push(PathElement::Field(k.clone()));
                    let f = schema.field(k);
                    compare_at(path, Some(lv), r.get(k), &f, below, c, depth + 1)?;
                    path.pop();
                }
                for (k, rv) in r {
                    if l.contains_key(k) || in_meta && k == "managedFields" {
                        continue;
                    }
                    let Some(below) = excluded(exclude, k) else {
                        continue;
                    };
                    path.push(PathElement::Field(k.clone()));
                    compare_at(path, None, Some(rv), &schema.field(k), below, c, depth + 1)?;
                    path.pop();
                }
                true
            }
        }
        Shape::List => {
            let empty = Vec::new();
            let l = lhs.and_then(Value::as_array).unwrap_or(&empty);
            let r = rhs.and_then(Value::as_array).unwrap_or(&empty);
            if schema.list_type() == ListType::Atomic || (l.is_empty() && r.is_empty()) {
                false
            } else {
                compare_items(path, l, r, schema, c, depth)?;
                true
            }
        }
        Shape::Leaf => false,
    };
    if descended {
        match (lhs, rhs) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            _ => {}
        }
    } else {
        leaf(path, lhs, rhs, c);
    }
    Ok(())
}

fn metadata() -> PathElement {
    PathElement::Field("metadata".into())
}

type Grouped<'a> = Vec<(PathElement, Vec<&'a Value>)>;

fn group<'a>(
    list: ListType,
    items: &'a [Value],
    path: &[PathElement],
) -> Result<Grouped<'a>, String> {
    let mut index: BTreeMap<PathElement, usize> = BTreeMap::new();
    let mut out: Grouped<'a> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let pe = item_element(list, item, i).map_err(|e| format!("{}: {e}", path_string(path)))?;
        match index.get(&pe) {
            Some(&at) => out[at].1.push(item),
            None => {
                index.insert(pe.clone(), out.len());
                out.push((pe, vec![item]));
            }
        }
    }
    Ok(out)
}

fn compare_items(
    path: &mut Vec<PathElement>,
    l: &[Value],
    r: &[Value],
    schema: &Schema,
    c: &mut Comparison,
    depth: usize,
) -> Result<(), String> {
    let list = schema.list_type();
    let elem = schema.elem();
    let lg = group(list, l, path)?;
    let rg = group(list, r, path)?;
    let rindex: BTreeMap<&PathElement, &Vec<&Value>> = rg.iter().map(|(p, v)| (p, v)).collect();
    let lindex: BTreeMap<&PathElement, &Vec<&Value>> = lg.iter().map(|(p, v)| (p, v)).collect();
    let none: Vec<&Value> = Vec::new();
    let all = lg.iter().map(|(p, _)| p).chain(
        rg.iter()
            .map(|(p, _)| p)
            .filter(|p| !lindex.contains_key(p)),
    );
    for pe in all {
        let ls = lindex.get(pe).copied().unwrap_or(&none);
        let rs = rindex.get(pe).copied().unwrap_or(&none);
        path.push(pe.clone());
        // Duplicated keys are compared as a whole, as upstream does.
        match (ls.len(), rs.len()) {
            (a, b) if a <= 1 && b <= 1 => compare_at(
                path,
                ls.first().copied(),
                rs.first().copied(),
                &elem,
                None,
                c,
                depth + 1,
            )?,
            (a, b) if a >= 2 && b >= 2 => {
                if ls != rs {
                    c.modified.insert(path);
                }
            }
            (a, _) if a >= 2 => {
                if let Some(r0) = rs.first() {
                    compare_at(path, None, Some(r0), &elem, None, c, depth + 1)?;
                }
                c.removed.insert(path);
            }
            _ => {
                if let Some(l0) = ls.first() {
                    compare_at(path, Some(l0), None, &elem, None, c, depth + 1)?;
                }
                c.added.insert(path);
            }
        }
        path.pop();
    }
    Ok(())
}

/// Merge an applied configuration into the live object (upstream's `Merge`, the config
/// winning): granular maps merge key by key, keyed lists and sets item by item, everything
/// else is replaced by the configuration's value.
pub fn merge(live: Option<&Value>, config: &Value, schema: &Schema) -> Value {
    match (live, config) {
        (Some(Value::Object(l)), Value::Object(r)) if !schema.is_atomic() => {
            let mut out = l.clone();
            for (k, rv) in r {
                let merged = merge(l.get(k), rv, &schema.field(k));
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(r)) if schema.list_type() != ListType::Atomic => {
            merge_lists(l, r, schema).unwrap_or_else(|| config.clone())
        }
        _ => config.clone(),
    }
}

/// Items in the configuration's order where it names them; live-only items keep their place
/// relative to the items around them (upstream's merge order).
fn merge_lists(l: &[Value], r: &[Value], schema: &Schema) -> Option<Value> {
    let list = schema.list_type();
    let elem = schema.elem();
    let keyed = |items: &[Value]| -> Option<Vec<PathElement>> {
        items
            .iter()
            .enumerate()
            .map(|(i, v)| item_element(list, v, i).ok())
            .collect()
    };
    let lk = keyed(l)?;
    let rk = keyed(r)?;
    let lmap: BTreeMap<&PathElement, &Value> = lk.iter().zip(l).rev().collect();
    let rset: std::collections::BTreeSet<&PathElement> = rk.iter().collect();
    let mut shared: std::collections::VecDeque<&PathElement> =
        rk.iter().filter(|p| lmap.contains_key(p)).collect();
    let mut out = Vec::with_capacity(l.len().max(r.len()));
    let mut emitted: HashSet<String> = HashSet::new();
    let mut push = |pe: &PathElement, v: Value, out: &mut Vec<Value>| {
        if emitted.insert(pe.to_string()) {
            out.push(v);
        }
    };
    let (mut li, mut ri) = (0, 0);
    while li < lk.len() || ri < rk.len() {
        if li < lk.len() && ri < rk.len() {
            let pe = &lk[li];
            if *pe == rk[ri] {
                let merged = merge(lmap.get(pe).copied(), &r[ri], &elem);
                push(pe, merged, &mut out);
                li += 1;
                ri += 1;
                if shared.front() == Some(&pe) {
                    shared.pop_front();
                }
                continue;
            }
            if rset.contains(pe) && shared.front().is_some_and(|n| *n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lk.len() && !rset.contains(&lk[li]) {
            // Live items the configuration does not name stay as they are, duplicates too.
            out.push(l[li].clone());
            li += 1;
            continue;
        }
        if ri < rk.len() {
            let pe = &rk[ri];
            let merged = merge(lmap.get(pe).copied(), &r[ri], &elem);
            push(pe, merged, &mut out);
            ri += 1;
            if shared.front() == Some(&pe) {
                shared.pop_front();
            }
            continue;
        }
        // Only shared live items already emitted remain.
        li += 1;
    }
    Some(Value::Array(out))
}

/// Remove from `v` the paths in `remove` that nobody in `keep` claims, as upstream's prune:
/// an item or field goes with everything below it unless some of it is still owned.
/// Containers emptied this way go too (Go's `omitempty` drops them from the stored object).
pub fn prune(v: &mut Value, remove: &FieldSet, keep: &FieldSet, schema: &Schema) {
    let empty = FieldSet::new();
    let decide = |pe: &PathElement| -> Option<(bool, &FieldSet, &FieldSet)> {
        let (member, below) = remove.child(pe)?;
        let (kept, kept_below) = keep.child(pe).unwrap_or((false, &empty));
        Some((member && !kept && kept_below.is_empty(), below, kept_below))
    };
    match v {
        Value::Object(m) if !schema.is_atomic() => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let pe = PathElement::Field(k.clone());
                let Some((drop, below, kept_below)) = decide(&pe) else {
                    continue;
                };
                if drop {
                    m.remove(&k);
                } else if !below.is_empty()
                    && let Some(child) = m.get_mut(&k)
                {
                    let was_empty = is_empty_container(child);
                    prune(child, below, kept_below, &schema.field(&k));
                    if !was_empty && is_empty_container(child) {
                        m.remove(&k);
                    }
                }
            }
        }
        Value::Array(items) if schema.list_type() != ListType::Atomic => {
            let list = schema.list_type();
            let elem = schema.elem();
            let mut i = 0;
            items.retain_mut(|item| {
                let index = i;
                i += 1;
                let Ok(pe) = item_element(list, item, index) else {
                    return true;
                };
                let Some((drop, below, kept_below)) = decide(&pe) else {
                    return true;
                };
                if drop {
                    return false;
                }
                if !below.is_empty() {
                    prune(item, below, kept_below, &elem);
                }
                true
            });
        }
        _ => {}
    }
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}
