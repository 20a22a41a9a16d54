//! `metadata.managedFields` entries: decoding, identity, and encoding in upstream's order.

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
        m.insert("manager".into(), json!(self.manager));
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

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
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

    fn from_json(i: usize, v: &Value) -> Result<Entry, String> {
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

    /// The wire form, sorted as upstream sorts it (operation, time, manager, apiVersion,
    /// subresource); none when there are no entries.
    pub fn encode(&self) -> Option<Value> {
        if self.0.is_empty() {
            return None;
        }
        let mut entries: Vec<&Entry> = self.0.iter().collect();
        entries.sort_by(|p, q| {
            p.operation
                .cmp(&q.operation)
                .then_with(|| {
                    p.time
                        .as_deref()
                        .unwrap_or("")
                        .cmp(q.time.as_deref().unwrap_or(""))
                })
                .then_with(|| p.manager.cmp(&q.manager))
                .then_with(|| p.api_version.cmp(&q.api_version))
                .then_with(|| p.subresource.cmp(&q.subresource))
        });
        Some(Value::Array(entries.iter().map(|e| e.to_json()).collect()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn drop_empty(&mut self) {
        self.0.retain(|e| !e.set.is_empty());
    }
}

/// Whether a request's managedFields ask for a reset: an empty list, or one empty entry.
pub fn is_reset(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(a)) if a.is_empty() => true,
        Some(Value::Array(a)) if a.len() == 1 => a[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}
