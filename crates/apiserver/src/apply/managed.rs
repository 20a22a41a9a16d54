//! `metadata.managedFields` entries: decoding, identity, and encoding (entries in upstream's order;
//! their members, as every JSON object's, in the order of their names).

use serde_json::{Map, Value, json};

use kbatch_api::field::quote;

use super::fieldset::FieldSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One manager's fields.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    /// RFC 3339; none when the manager never changed the object (an apply that changed
    /// nothing records no time, as upstream).
    pub time: Option<String>,
    /// `status` for writes through the status subresource, else empty.
    pub subresource: String,
    pub set: FieldSet,
}

impl Entry {
    /// Upstream keys managers by manager, operation and subresource, plus the apiVersion for
    /// updaters (an applier keeps one entry whatever version it applies with).
    pub fn same_manager(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// Upstream's manager identifier (the entry without time and fields, as JSON): conflict
    /// messages list managers in this order.
    pub fn identifier(&self) -> String {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), json!(self.manager));
        }
        m.insert("operation".into(), json!(self.operation.as_str()));
        if self.operation == Operation::Update {
            m.insert("apiVersion".into(), json!(self.api_version));
        }
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m).to_string()
    }

    /// How a conflict names the manager: `"kubectl-patch" using batch/v1`,
    /// `"job-controller" with subresource "status" using batch/v1`, `"kubectl"`.
    pub fn describe(&self) -> String {
        let mut s = quote(&self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {}", quote(&self.subresource)));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// The entry as upstream serializes it (empty strings omitted).
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), json!(self.manager));
        }
        m.insert("operation".into(), json!(self.operation.as_str()));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }

    pub fn from_json(i: usize, v: &Value) -> Result<Entry, String> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = match s("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = s("apiVersion");
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match s("fieldsType").as_str() {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            other => {
                return Err(format!(
                    "invalid fieldsType {other:?} in managed fields entry {i}"
                ));
            }
        }
        let set = match v.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(f) => FieldSet::from_fields_v1(f)
                .map_err(|e| format!("error decoding versioned set: {e}"))?,
        };
        Ok(Entry {
            manager: s("manager"),
            operation,
            api_version,
            time: v.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: s("subresource"),
            set,
        })
    }
}

/// All entries of an object.
#[derive(Debug, Clone, Default)]
pub struct Managed(pub Vec<Entry>);

impl Managed {
    /// Decode `metadata.managedFields` (absent or null: no entries). A later entry for the
    /// same manager replaces an earlier one, as upstream's map does.
    pub fn decode(v: Option<&Value>) -> Result<Managed, String> {
        let items = match v {
            None | Some(Value::Null) => return Ok(Managed::default()),
            Some(Value::Array(a)) => a,
            Some(_) => return Err("managedFields must be a list".into()),
        };
        let mut out: Vec<Entry> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let e = Entry::from_json(i, item)?;
            match out.iter_mut().find(|o| o.same_manager(&e)) {
                Some(o) => *o = e,
                None => out.push(e),
            }
        }
        Ok(Managed(out))
    }

    /// The wire form, sorted as upstream sorts it; none when there are no entries.
    pub fn encode(&self) -> Option<Value> {
        encode_with(self, Vec::new())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn drop_empty(&mut self) {
        self.0.retain(|e| !e.set.is_empty());
    }

    /// Keep at most `max` Update entries by merging the oldest into one `ancient-changes`
    /// entry per apiVersion, as upstream's capManagersManager (which keeps the first one of
    /// each version as it is until a second one joins it).
    pub fn cap_updaters(&mut self, max: usize) {
        let mut updaters: Vec<usize> = (0..self.0.len())
            .filter(|&i| self.0[i].operation == Operation::Update)
            .collect();
        if updaters.len() <= max {
            return;
        }
        let keys: Vec<(String, String)> = self
            .0
            .iter()
            .map(|e| (e.time.clone().unwrap_or_default(), e.identifier()))
            .collect();
        updaters.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let mut slots: Vec<Option<Entry>> =
            std::mem::take(&mut self.0).into_iter().map(Some).collect();
        let mut first_of_version: Vec<(String, usize)> = Vec::new();
        let mut remaining = updaters.len();
        for &i in &updaters {
            if remaining <= max {
                break;
            }
            let Some(version) = slots[i].as_ref().map(|e| e.api_version.clone()) else {
                continue;
            };
            let Some(&(_, first)) = first_of_version.iter().find(|(v, _)| *v == version) else {
                first_of_version.push((version, i));
                continue;
            };
            let bucket = slots.iter().position(|s| {
                s.as_ref().is_some_and(|e| {
                    e.manager == ANCIENT_CHANGES
                        && e.operation == Operation::Update
                        && e.subresource.is_empty()
                        && e.api_version == version
                })
            });
            let bucket = match bucket {
                Some(b) => b,
                None => {
                    if let Some(e) = slots[first].as_mut() {
                        e.manager = ANCIENT_CHANGES.to_string();
                        e.subresource.clear();
                    }
                    first
                }
            };
            if bucket == i {
                continue;
            }
            if let Some(merged) = slots[i].take() {
                if let Some(b) = slots[bucket].as_mut() {
                    b.set.union(&merged.set);
                    b.time = merged.time;
                }
                remaining -= 1;
            }
        }
        self.0 = slots.into_iter().flatten().collect();
    }
}

/// Where the oldest Update entries go when there are too many.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// `managed`'s entries plus entries kept in wire form, sorted as upstream sorts them
/// (operation, time, manager, apiVersion, subresource); none when there are none.
pub fn encode_with(managed: &Managed, mut raw: Vec<Value>) -> Option<Value> {
    raw.extend(managed.0.iter().map(Entry::to_json));
    if raw.is_empty() {
        return None;
    }
    let key = |v: &Value| -> [String; 5] {
        ["operation", "time", "manager", "apiVersion", "subresource"]
            .map(|k| v.get(k).and_then(Value::as_str).unwrap_or("").to_string())
    };
    raw.sort_by_cached_key(key);
    Some(Value::Array(raw))
}

/// Whether a wire-form entry is the one `e` would replace.
pub fn same_manager_raw(v: &Value, e: &Entry) -> bool {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    let operation = match s("operation") {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return false,
    };
    s("manager") == e.manager
        && operation == e.operation
        && s("subresource") == e.subresource
        && (operation == Operation::Apply || s("apiVersion") == e.api_version)
}

/// Whether a request's managedFields ask for a reset: an empty list, or one empty entry.
pub fn is_reset(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(a)) if a.is_empty() => true,
        Some(Value::Array(a)) if a.len() == 1 => a[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}
