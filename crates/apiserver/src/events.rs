//! core/v1 and events.k8s.io/v1 Events are two views of the same stored objects (stored in the
//! core/v1 form, as upstream stores the internal Event).

use serde_json::{Map, Value, json};

/// Field renames between the two views: (events.k8s.io/v1, core/v1).
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(v: Value, from_v1: bool, api_version: &str) -> Value {
    let Value::Object(src) = v else { return v };
    let mut out = Map::new();
    for (k, val) in src {
        let renamed = RENAMES
            .iter()
            .find(|(v1, core)| if from_v1 { k == *v1 } else { k == *core })
            .map(|(v1, core)| {
                if from_v1 {
                    core.to_string()
                } else {
                    v1.to_string()
                }
            })
            .unwrap_or(k);
        out.insert(renamed, val);
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// events.k8s.io/v1 document to the stored core/v1 form.
pub fn from_v1(v: Value) -> Value {
    rename(v, true, "v1")
}

/// Stored core/v1 form to the events.k8s.io/v1 view.
pub fn to_v1(v: Value) -> Value {
    rename(v, false, "events.k8s.io/v1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Job", "name": "pi"}, "reason": "SuccessfulCreate",
            "message": "Created pod: pi-abc", "count": 2, "source": {"component": "job-controller"}});
        let v1 = to_v1(core.clone());
        assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v1["regarding"]["name"], "pi");
        assert_eq!(v1["note"], "Created pod: pi-abc");
        assert_eq!(v1["deprecatedCount"], 2);
        assert_eq!(v1["deprecatedSource"]["component"], "job-controller");
        assert!(v1.get("involvedObject").is_none());
        assert_eq!(from_v1(v1), core);
    }
}
