//! Strategic merge patch, apply side (`application/strategic-merge-patch+json`).
//!
//! This follows upstream's `k8s.io/apimachinery/pkg/util/strategicpatch` as the API server runs
//! it (`StrategicMergeMapPatch`: parallel lists merged, unmatched nulls ignored):
//!
//! - maps merge recursively; `null` deletes a key;
//! - lists follow the field's patch strategy from [`Schema`]: `merge` lists of maps merge
//!   element-wise by the patch merge key, `merge` lists of scalars are ordered sets (union),
//!   every other list is atomic (the patch value replaces it);
//! - directives: `$patch: replace|delete` (in a map or as a list element), `$retainKeys`,
//!   `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`.
//!
//! Where upstream stores a patch fragment verbatim (a key the original lacks, a `$patch: replace`
//! map), this implementation merges the fragment into an empty value instead, so directives and
//! nulls never leak into the stored object. Upstream gets the same effect from decoding the
//! result into Go structs, which drops `$`-keys and nulls; kbatch stores JSON, so it must do it
//! here.
//!
//! Other deliberate differences from upstream, all in corners kubectl does not reach:
//! - fields the schema does not know are schema-less (maps merge, lists are replaced) where
//!   upstream fails with "unable to find api field"; kbatch's stored objects may carry fields
//!   newer than the table;
//! - `$deleteFromPrimitiveList` never adds values (see `delete_from_primitive_list`) and runs
//!   after the additions of the same map, where upstream's order is random;
//! - `$setElementOrder` for an atomic list is dropped, and one naming a list present in
//!   neither document is skipped instead of ending the processing of its map early.
//!
//! Errors carry upstream's messages; [`SmpError::code`] gives the status upstream's API server
//! answers with.

mod schema;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::error::ApiError;
pub use schema::Schema;
use schema::{Field, Strategy};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Nesting beyond this is refused rather than recursed into, so that a value built in code
/// cannot overflow the stack of a server thread. JSON parsed by serde_json is already limited
/// to 128 levels, so no real request comes near it.
const MAX_DEPTH: usize = 200;

/// Why a strategic merge patch could not be applied. Messages are upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmpError {
    #[error("invalid JSON document")]
    BadJsonDoc,
    #[error("lists of lists are not supported")]
    NoListOfLists,
    #[error("invalid patch format of primitive list")]
    BadPatchFormatForPrimitiveList,
    #[error("invalid patch format of retainKeys")]
    BadPatchFormatForRetainKeys,
    #[error("invalid patch format of setElementOrder list")]
    BadPatchFormatForSetElementOrderList,
    /// `map` is the element rendered as Go's `%v` renders it.
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    #[error("unknown patch type: {directive} in map: {map}")]
    BadPatchType { directive: String, map: String },
    /// Type names as Go's reflect prints them (`[]interface {}`, `map[string]interface {}`).
    #[error("expected a {expected}, but received a {actual}")]
    BadArgType {
        expected: &'static str,
        actual: &'static str,
    },
    #[error("merging lists cannot yet be specified in the patch")]
    MergingListsUnsupported,
    #[error("list element types are not identical: {lists}")]
    ElementTypesDiffer { lists: String },
    #[error("cannot merge lists without merge key for type {kind}")]
    NoMergeKeyForType { kind: &'static str },
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    SetElementOrderMismatch { patch: String, order: String },
    #[error("the patch is nested too deeply")]
    TooDeep,
}

impl SmpError {
    /// The HTTP status: 400 for the malformed-directive errors (as upstream), 422 for the rest.
    /// Upstream answers a plain 500 for the errors its `interpretStrategicMergePatchError`
    /// leaves unconverted (unknown `$patch`, missing merge key, mixed element types); they are
    /// the client's input errors, and this server never answers client input with a 5xx.
    pub fn code(&self) -> u16 {
        match self {
            SmpError::BadJsonDoc
            | SmpError::BadPatchFormatForPrimitiveList
            | SmpError::BadPatchFormatForRetainKeys
            | SmpError::BadPatchFormatForSetElementOrderList
            | SmpError::TooDeep => 400,
            _ => 422,
        }
    }

    /// The `Status` upstream's API server answers with.
    pub fn to_api_error(&self) -> ApiError {
        let message = self.to_string();
        match self.code() {
            400 => ApiError::bad_request(message),
            422 => {
                let mut err = ApiError::new(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                );
                err.details = Some(serde_json::json!({
                    "causes": [{"reason": "UnexpectedServerResponse", "message": message}]
                }));
                err
            }
            code => ApiError::new(code, "Invalid", message),
        }
    }
}

impl From<SmpError> for ApiError {
    fn from(e: SmpError) -> Self {
        e.to_api_error()
    }
}

/// Apply the strategic merge patch `patch` to `original`, using `schema` for the patch
/// strategies and merge keys of the object's fields. Both documents must be JSON objects.
pub fn apply(original: &Value, patch: &Value, schema: &Schema) -> Result<Value, SmpError> {
    apply_owned(original.clone(), patch.clone(), schema)
}

/// `apply` on documents the caller gives up: the merge works on them in place instead of on
/// copies (a copy of a stored pod costs about as much as parsing it).
pub fn apply_owned(original: Value, patch: Value, schema: &Schema) -> Result<Value, SmpError> {
    let (Value::Object(o), Value::Object(p)) = (original, patch) else {
        return Err(SmpError::BadJsonDoc);
    };
    merge_map(o, p, schema, 0).map(Value::Object)
}

/// Merge `patch` into `original` (upstream's `mergeMap`).
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: &Schema,
    depth: usize,
) -> Result<Map<String, Value>, SmpError> {
    if depth > MAX_DEPTH {
        return Err(SmpError::TooDeep);
    }
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                merge_map(Map::new(), patch, schema, depth + 1)
            }
            Some("delete") => Ok(Map::new()),
            // `$patch: merge` is only defined for lists and is refused in a map, as upstream
            // does.
            _ => Err(bad_patch_type(d, &patch)),
        };
    }

    apply_retain_keys(&mut original, &mut patch)?;
    apply_set_element_order(&mut original, &mut patch, schema, depth)?;

    // Deletions from primitive lists run after the additions to the same lists: upstream walks
    // a Go map in random order, and running them last gives the only order where a value both
    // added and deleted in one patch ends up deleted, which is what kubectl means by it.
    let (deletions, others): (Vec<_>, Vec<_>) = std::mem::take(&mut patch)
        .into_iter()
        .partition(|(k, _)| k.starts_with(DELETE_FROM_PRIMITIVE_LIST));
    for (key, value) in others {
        merge_field(&mut original, key, value, schema, depth)?;
    }
    for (key, value) in deletions {
        let field = extract_key(&key, DELETE_FROM_PRIMITIVE_LIST)
            .ok_or(SmpError::BadPatchFormatForPrimitiveList)?;
        delete_from_primitive_list(&mut original, field, value)?;
    }
    Ok(original)
}

/// Merge one patch entry into `original`.
fn merge_field(
    original: &mut Map<String, Value>,
    key: String,
    value: Value,
    schema: &Schema,
    depth: usize,
) -> Result<(), SmpError> {
    if value.is_null() {
        original.remove(&key);
        return Ok(());
    }
    let field = schema.field(&key);
    // Merge in place so the key keeps its position in the stored object; on error the
    // half-merged map is dropped by the caller.
    match original.get_mut(&key) {
        Some(slot) => {
            let current = std::mem::take(slot);
            *slot = merge_value(current, value, &field, depth)?;
        }
        None => {
            let v = materialize(value, &field, depth)?;
            original.insert(key, v);
        }
    }
    Ok(())
}

/// Merge a patch value into the current value of a field.
fn merge_value(
    current: Value,
    patch: Value,
    field: &Field,
    depth: usize,
) -> Result<Value, SmpError> {
    match (current, patch) {
        // `patchStrategy:"replace"`: the patch value is the new value, as upstream stores it.
        (_, p) if field.strategy == Strategy::Replace => Ok(p),
        (Value::Object(c), Value::Object(p)) => {
            Ok(Value::Object(merge_map(c, p, &field.child, depth + 1)?))
        }
        (Value::Array(c), Value::Array(p)) => match field.strategy {
            Strategy::Merge(key) => Ok(Value::Array(merge_list(
                c,
                p,
                key,
                &field.child,
                depth + 1,
            )?)),
            Strategy::Atomic | Strategy::Replace => Ok(Value::Array(p)),
        },
        // Different kinds, or scalars: the patch value wins.
        (_, p) => materialize(p, field, depth),
    }
}

/// A patch fragment for which the original has nothing: merge it into an empty value so that
/// nulls and directives inside it are resolved rather than stored.
fn materialize(value: Value, field: &Field, depth: usize) -> Result<Value, SmpError> {
    match value {
        v if field.strategy == Strategy::Replace => Ok(v),
        Value::Object(p) => Ok(Value::Object(merge_map(
            Map::new(),
            p,
            &field.child,
            depth + 1,
        )?)),
        Value::Array(p) => match field.strategy {
            Strategy::Merge(key) => Ok(Value::Array(merge_list(
                Vec::new(),
                p,
                key,
                &field.child,
                depth + 1,
            )?)),
            Strategy::Atomic | Strategy::Replace => Ok(Value::Array(p)),
        },
        v => Ok(v),
    }
}

/// The field name after `prefix/`, or None when the key does not have that form.
fn extract_key<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    let (head, rest) = key.split_once('/')?;
    (head == prefix).then_some(rest)
}

/// `$retainKeys`: drop every key of `original` the list does not name, after checking that the
/// patch itself only sets listed keys.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let Some(list) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(list) = list else {
        return Err(SmpError::BadPatchFormatForRetainKeys);
    };
    let listed: HashSet<&str> = list.iter().filter_map(Value::as_str).collect();
    let retained = |k: &str| listed.contains(k);
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !retained(k) {
            return Err(SmpError::BadPatchFormatForRetainKeys);
        }
    }
    original.retain(|k, _| retained(k));
    Ok(())
}

/// `$deleteFromPrimitiveList/<field>`: remove the listed scalars from the field's list.
///
/// Upstream has two quirks here that are not reproduced: on a list the original lacks it stores
/// the deletion list as the field's value, and on an atomic list it replaces the list with the
/// deletion list. Both would resurrect values the client asked to delete.
fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    field: &str,
    values: Value,
) -> Result<(), SmpError> {
    let values = match values {
        Value::Null => {
            original.remove(field);
            return Ok(());
        }
        Value::Array(v) => v,
        _ => return Err(SmpError::BadPatchFormatForPrimitiveList),
    };
    let Some(Value::Array(current)) = original.get_mut(field) else {
        return Ok(());
    };
    element_kind(current, &values)?;
    if current.iter().chain(&values).any(Value::is_object) {
        return Err(SmpError::BadPatchFormatForPrimitiveList);
    }
    let doomed: HashSet<String> = values.iter().map(canon).collect();
    current.retain(|v| !doomed.contains(&canon(v)));
    Ok(())
}

/// Process every `$setElementOrder/<field>` of `patch` (upstream's `mergePatchIntoOriginal`):
/// merge the field's patch list, then order the result as the directive lists it, with the
/// elements it does not mention interleaved in their original order.
fn apply_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: &Schema,
    depth: usize,
) -> Result<(), SmpError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(SmpError::BadArgType {
                expected: "[]interface {}",
                actual: go_type(&order),
            });
        };
        let name = extract_key(&key, SET_ELEMENT_ORDER)
            .ok_or(SmpError::BadPatchFormatForSetElementOrderList)?
            .to_string();
        let current = match original.get(&name) {
            None => None,
            Some(Value::Array(l)) => Some(l.clone()),
            Some(other) => {
                return Err(SmpError::BadArgType {
                    expected: "[]interface {}",
                    actual: go_type(other),
                });
            }
        };
        let patch_list = match patch.get(&name) {
            None => None,
            Some(Value::Array(l)) => Some(l.clone()),
            Some(other) => {
                return Err(SmpError::BadArgType {
                    expected: "[]interface {}",
                    actual: go_type(other),
                });
            }
        };
        let field = schema.field(&name);
        let Strategy::Merge(merge_key) = field.strategy else {
            // Ordering only means something for merging lists; an atomic list is simply
            // whatever the patch says (or unchanged), and the directive is dropped.
            continue;
        };
        validate_set_element_order(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let merged = match (&current, patch_list) {
            (None, None) => continue,
            (Some(c), None) => c.clone(),
            (None, Some(p)) => merge_list(Vec::new(), p, merge_key, &field.child, depth + 1)?,
            (Some(c), Some(p)) => merge_list(c.clone(), p, merge_key, &field.child, depth + 1)?,
        };
        patch.remove(&name);
        let (listed, server_only) = partition_by_presence(merged, &order, merge_key)?;
        let ordered = normalize_element_order(
            listed,
            server_only,
            &order,
            current.as_deref().unwrap_or(&[]),
            merge_key,
        )?;
        original.insert(name, Value::Array(ordered));
    }
    Ok(())
}

/// The non-deleting elements of a patch list must appear in `$setElementOrder` in the same
/// relative order (upstream's `validatePatchWithSetOrderList`).
fn validate_set_element_order(
    patch: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), SmpError> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let mut non_delete: Vec<&Value> = Vec::with_capacity(patch.len());
    if merge_key.is_some() {
        for item in patch {
            let Value::Object(m) = item else {
                return Err(SmpError::BadArgType {
                    expected: "map[string]interface {}",
                    actual: go_type(item),
                });
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
                non_delete.push(item);
            }
        }
    } else {
        non_delete.extend(patch);
    }
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi]
            .as_object()
            .is_some_and(|m| m.contains_key(DIRECTIVE))
        {
            pi += 1;
            continue;
        }
        if merge_key_equal(non_delete[pi], &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(SmpError::SetElementOrderMismatch {
            patch: go_fmt_list(patch),
            order: go_fmt_list(order),
        });
    }
    Ok(())
}

fn merge_key_equal(left: &Value, right: &Value, merge_key: Option<&str>) -> Result<bool, SmpError> {
    let Some(key) = merge_key else {
        return Ok(left == right);
    };
    let l = key_value(left, key)?;
    let r = key_value(right, key)?;
    Ok(l == r)
}

/// The merge key's value of a list element that must be a map carrying it.
fn key_value<'a>(item: &'a Value, key: &str) -> Result<&'a Value, SmpError> {
    let Value::Object(m) = item else {
        return Err(SmpError::BadArgType {
            expected: "map[string]interface {}",
            actual: go_type(item),
        });
    };
    m.get(key).ok_or_else(|| SmpError::NoMergeKey {
        map: go_fmt(item),
        key: key.to_string(),
    })
}

/// Go's reflect type name of a decoded JSON value, for upstream's type-mismatch messages.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "%!s(<nil>)",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Element kinds that may share a list: Go distinguishes int64 from float64 elements too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    String,
    Map,
}

/// The one element kind shared by all elements of `a` and `b` (upstream's `sliceElementType`),
/// or None when both are empty.
fn element_kind(a: &[Value], b: &[Value]) -> Result<Option<Kind>, SmpError> {
    let mut kind = None;
    for v in a.iter().chain(b) {
        let k = match v {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(n) if n.is_f64() => Kind::Float,
            Value::Number(_) => Kind::Int,
            Value::String(_) => Kind::String,
            Value::Object(_) => Kind::Map,
            Value::Array(_) => {
                if kind.is_none() {
                    return Err(SmpError::NoListOfLists);
                }
                return Err(element_types_differ(a, b));
            }
        };
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => return Err(element_types_differ(a, b)),
            Some(_) => {}
        }
    }
    Ok(kind)
}

fn element_types_differ(a: &[Value], b: &[Value]) -> SmpError {
    SmpError::ElementTypesDiffer {
        lists: format!("[{} {}]", go_fmt_list(a), go_fmt_list(b)),
    }
}

/// Merge a patch list into a list whose field has the `merge` strategy (upstream's
/// `mergeSlice`).
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: Option<&str>,
    elem: &Schema,
    depth: usize,
) -> Result<Vec<Value>, SmpError> {
    if depth > MAX_DEPTH {
        return Err(SmpError::TooDeep);
    }
    let Some(kind) = element_kind(&original, &patch)? else {
        return Ok(original);
    };
    if kind != Kind::Map {
        // A set of scalars: union, each value once.
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        let mut seen = HashSet::new();
        for v in original.iter().chain(&patch) {
            if seen.insert(canon(v)) {
                merged.push(v.clone());
            }
        }
        let (listed, server_only) = partition_by_presence(merged, &patch, None)?;
        return normalize_element_order(listed, server_only, &patch, &original, None);
    }
    let Some(key) = merge_key else {
        // Only reachable for a merge list of scalars whose elements turn out to be maps; the
        // served types' scalar merge lists are all lists of strings.
        return Err(SmpError::NoMergeKeyForType { kind: "string" });
    };

    // Directive elements first: deletions by merge key, `$patch: replace` of the whole list.
    let mut original = original;
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    let mut doomed: HashSet<String> = HashSet::new();
    for item in patch {
        let Value::Object(m) = &item else {
            continue; // element_kind guarantees maps
        };
        let Some(d) = m.get(DIRECTIVE) else {
            plain.push(item);
            continue;
        };
        match d.as_str() {
            Some("delete") => {
                let Some(target) = m.get(key) else {
                    return Err(SmpError::NoMergeKey {
                        map: go_fmt(&item),
                        key: key.to_string(),
                    });
                };
                doomed.insert(canon(target));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(SmpError::MergingListsUnsupported),
            _ => return Err(bad_patch_type(d, m)),
        }
    }
    if !doomed.is_empty() {
        original.retain(|o| !doomed.contains(&key_canon(o, key)));
    }
    if replace {
        // The list becomes the patch's plain elements, in the patch's order.
        return plain
            .into_iter()
            .map(|v| match v {
                Value::Object(m) => merge_map(Map::new(), m, elem, depth + 1).map(Value::Object),
                v => Ok(v),
            })
            .collect();
    }

    let server_order = original.clone();
    let mut merged = original;
    // First element per merge-key value, as upstream's linear search finds it.
    let mut position: HashMap<String, usize> = HashMap::new();
    for (i, o) in merged.iter().enumerate() {
        position.entry(key_canon(o, key)).or_insert(i);
    }
    for item in &plain {
        let target = canon(key_value(item, key)?);
        let Value::Object(p) = item.clone() else {
            continue;
        };
        match position.get(&target).copied() {
            Some(i) => {
                let Value::Object(current) = std::mem::take(&mut merged[i]) else {
                    continue; // element_kind guarantees maps
                };
                merged[i] = Value::Object(merge_map(current, p, elem, depth + 1)?);
            }
            None => {
                position.insert(target, merged.len());
                merged.push(Value::Object(merge_map(Map::new(), p, elem, depth + 1)?));
            }
        }
    }
    let (listed, server_only) = partition_by_presence(merged, &plain, Some(key))?;
    normalize_element_order(listed, server_only, &plain, &server_order, Some(key))
}

/// Split `items` into those `list` mentions (by merge key, or by value for scalars) and the
/// rest, keeping the relative order of each.
fn partition_by_presence(
    items: Vec<Value>,
    list: &[Value],
    merge_key: Option<&str>,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut present: HashSet<String> = HashSet::with_capacity(list.len());
    for l in list {
        match merge_key {
            None => present.insert(canon(l)),
            Some(key) => {
                let Value::Object(m) = l else {
                    return Err(SmpError::BadArgType {
                        expected: "map[string]interface {}",
                        actual: go_type(l),
                    });
                };
                present.insert(opt_canon(m.get(key)))
            }
        };
    }
    let mut listed = Vec::with_capacity(items.len());
    let mut rest = Vec::new();
    for item in items {
        let k = match merge_key {
            None => canon(&item),
            Some(key) => canon(key_value(&item, key)?),
        };
        if present.contains(&k) {
            listed.push(item);
        } else {
            rest.push(item);
        }
    }
    Ok((listed, rest))
}

/// Positions of the elements of `list` (first occurrence), matching maps by merge key and
/// scalars by value.
struct Positions(HashMap<String, usize>);

impl Positions {
    fn of(list: &[Value], merge_key: Option<&str>) -> Positions {
        let mut m = HashMap::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            m.entry(element_canon(v, merge_key)).or_insert(i);
        }
        Positions(m)
    }

    fn get(&self, item: &Value, merge_key: Option<&str>) -> Option<usize> {
        self.0.get(&element_canon(item, merge_key)).copied()
    }
}

fn element_canon(v: &Value, merge_key: Option<&str>) -> String {
    match merge_key {
        Some(key) => key_canon(v, key),
        None => canon(v),
    }
}

/// Order the merged list (upstream's `normalizeElementOrder`): the patch's elements follow
/// `patch_order`, the server-only ones keep `server_order`, and the two are interleaved so that
/// a server-only element stays ahead of a patch element it preceded in the original.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Result<Vec<Value>, SmpError> {
    let patch_items = sort_by_order(patch_items, patch_order, merge_key)?;
    let server_only = sort_by_order(server_only, server_order, merge_key)?;
    let server_pos = Positions::of(server_order, merge_key);

    let mut out = Vec::with_capacity(patch_items.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = patch_items.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (server_pos.get(l, merge_key), server_pos.get(r, merge_key)) {
                    (Some(li), Some(ri)) => li < ri,
                    // An element the server never had goes before the server-only ones.
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    Ok(out)
}

/// Stable-sort `items` by their position in `order`; items `order` lacks go last, and elements
/// carrying `$patch: delete` go after everything (upstream's `normalizeSliceOrder`).
fn sort_by_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<Vec<Value>, SmpError> {
    let mut deletes = Vec::new();
    let mut keep = Vec::with_capacity(items.len());
    if let Some(key) = merge_key {
        for v in items.iter().chain(order) {
            key_value(v, key)?;
        }
        for item in items {
            if item.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                deletes.push(item);
            } else {
                keep.push(item);
            }
        }
    } else {
        keep = items;
    }
    let pos = Positions::of(order, merge_key);
    let mut keyed: Vec<(usize, Value)> = keep
        .into_iter()
        .map(|v| (pos.get(&v, merge_key).unwrap_or(usize::MAX), v))
        .collect();
    keyed.sort_by_key(|(i, _)| *i);
    let mut out: Vec<Value> = keyed.into_iter().map(|(_, v)| v).collect();
    out.extend(deletes);
    Ok(out)
}

/// A canonical text for a value, equal exactly when the values are equal (`==` on
/// `serde_json::Value`: maps compare regardless of key order, 1 and 1.0 differ), so that list
/// operations can use hash lookups instead of quadratic scans.
fn canon(v: &Value) -> String {
    let mut s = String::new();
    write_canon(&mut s, v, 0);
    s
}

/// The canonical text of a possibly missing value; a missing value matches only another
/// missing one (JSON text is never empty).
fn opt_canon(v: Option<&Value>) -> String {
    v.map(canon).unwrap_or_default()
}

/// The canonical merge-key value of a list element (missing for non-maps and keyless maps).
fn key_canon(v: &Value, key: &str) -> String {
    opt_canon(v.get(key))
}

fn write_canon(s: &mut String, v: &Value, depth: usize) {
    match v {
        Value::Object(m) if depth <= MAX_DEPTH => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            s.push('{');
            for k in keys {
                s.push_str(&Value::String(k.clone()).to_string());
                s.push(':');
                if let Some(x) = m.get(k) {
                    write_canon(s, x, depth + 1);
                }
                s.push(',');
            }
            s.push('}');
        }
        Value::Array(l) if depth <= MAX_DEPTH => {
            s.push('[');
            for x in l {
                write_canon(s, x, depth + 1);
                s.push(',');
            }
            s.push(']');
        }
        // Scalars (and, past the depth guard, whole subtrees) in serde_json's own rendering.
        other => s.push_str(&other.to_string()),
    }
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> SmpError {
    let directive = match directive {
        Value::String(s) => s.clone(),
        other => format!("%!s({}={})", go_type(other), go_fmt(other)),
    };
    SmpError::BadPatchType {
        directive,
        map: go_fmt_map(map),
    }
}

/// A value as Go's `%v` prints the decoded `interface{}` (`map[a:1 b:[x y]]`), for error
/// messages that quote patch fragments.
fn go_fmt(v: &Value) -> String {
    let mut s = String::new();
    write_go(&mut s, v, 0);
    s
}

fn go_fmt_map(m: &Map<String, Value>) -> String {
    let mut s = String::new();
    write_go_map(&mut s, m, 0);
    s
}

fn go_fmt_list(l: &[Value]) -> String {
    let mut s = String::new();
    write_go_list(&mut s, l, 0);
    s
}

fn write_go(s: &mut String, v: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        s.push_str("...");
        return;
    }
    match v {
        Value::Null => s.push_str("<nil>"),
        Value::Bool(b) => {
            let _ = write!(s, "{b}");
        }
        Value::Number(n) => {
            let _ = write!(s, "{n}");
        }
        Value::String(x) => s.push_str(x),
        Value::Array(l) => write_go_list(s, l, depth),
        Value::Object(m) => write_go_map(s, m, depth),
    }
}

fn write_go_list(s: &mut String, l: &[Value], depth: usize) {
    s.push('[');
    for (i, v) in l.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        write_go(s, v, depth + 1);
    }
    s.push(']');
}

fn write_go_map(s: &mut String, m: &Map<String, Value>, depth: usize) {
    // Go prints map keys sorted.
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    s.push_str("map[");
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(k);
        s.push(':');
        if let Some(v) = m.get(k) {
            write_go(s, v, depth + 1);
        }
    }
    s.push(']');
}
