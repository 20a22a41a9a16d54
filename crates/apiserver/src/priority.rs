//! Pod priority on the server side, as kube-apiserver has it: the `Priority` admission plugin
//! (a new pod's `priority` and `preemptionPolicy` from its PriorityClass, or from the global
//! default class, or 0 and `PreemptLowerPriority`; one global default class at most), the
//! system classes created at start (`scheduling/bootstrap-system-priority-classes`), which may
//! not be deleted.

use serde_json::{Value, json};

use crate::State;
use crate::error::ApiError;
use crate::handlers::parse_stored;
use crate::resources::{self, Kind};
use kbatch_api::priority::{
    DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS, PREEMPT_LOWER_PRIORITY, is_system_class_name,
    system_priority_classes,
};

/// What a pod's admission decided from its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The class's name when the pod got the global default's.
    pub class_name: Option<String>,
    pub priority: i64,
    pub preemption_policy: Option<String>,
}

/// Upstream's `admitPod` on create, over the pod's spec and the classes: the named class (its
/// absence is the error), else the global default (of several, the lowest value), else 0.
/// A priority or preemption policy the pod gives must be the computed one.
pub fn resolve(spec: &Value, classes: &[Value]) -> Result<Resolved, String> {
    let named = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let value_of = |c: &Value| c.get("value").and_then(Value::as_i64).unwrap_or(0);
    let policy_of = |c: &Value| {
        c.get("preemptionPolicy")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let resolved = match named {
        Some(name) => {
            let class = classes
                .iter()
                .find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
                .ok_or_else(|| format!("no PriorityClass with name {name} was found"))?;
            Resolved {
                class_name: None,
                priority: value_of(class),
                preemption_policy: policy_of(class),
            }
        }
        None => match global_default(classes) {
            Some(class) => Resolved {
                class_name: class
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                priority: value_of(class),
                preemption_policy: policy_of(class),
            },
            None => Resolved {
                class_name: None,
                priority: i64::from(DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS),
                preemption_policy: Some(PREEMPT_LOWER_PRIORITY.to_string()),
            },
        },
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != resolved.priority
    {
        return Err(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            resolved.priority
        ));
    }
    if let (Some(given), Some(computed)) = (
        spec.get("preemptionPolicy").and_then(Value::as_str),
        resolved.preemption_policy.as_deref(),
    ) && given != computed
    {
        return Err(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {computed} from the given PriorityClass name"
        ));
    }
    Ok(resolved)
}

/// The global default class: of those marked, the one of the lowest value.
fn global_default(classes: &[Value]) -> Option<&Value> {
    classes
        .iter()
        .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(|c| c.get("value").and_then(Value::as_i64).unwrap_or(0))
}

/// Sets what `resolve` decided on a pod; returns the spec fields it added, which the
/// request's managedFields do not record (upstream's field manager runs before admission).
pub fn apply(pod: &mut Value, r: &Resolved) -> Vec<&'static str> {
    let mut added = Vec::new();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return added;
    };
    if let Some(name) = &r.class_name {
        spec.insert("priorityClassName".into(), json!(name));
        added.push("priorityClassName");
    }
    if !spec.contains_key("priority") {
        added.push("priority");
    }
    spec.insert("priority".into(), json!(r.priority));
    if let Some(p) = &r.preemption_policy {
        if !spec.contains_key("preemptionPolicy") {
            added.push("preemptionPolicy");
        }
        spec.insert("preemptionPolicy".into(), json!(p));
    }
    added
}

/// The classes a pod's admission needs: the one it names, or those that may be the global
/// default (only documents that mention `globalDefault: true` are parsed).
fn classes_for(st: &State, spec: &Value) -> Result<Vec<Value>, ApiError> {
    let res = resources::by_kind(Kind::PriorityClass);
    if let Some(name) = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        return match st.store.get(&res.key("", name)) {
            Some(o) => Ok(vec![parse_stored(&o)?]),
            None => Ok(Vec::new()),
        };
    }
    let page = st.store.list(&res.prefix(None), None, None);
    let mut out = Vec::new();
    for o in page.items.iter() {
        let raw = o.raw();
        if raw
            .windows(b"\"globalDefault\":true".len())
            .any(|w| w == b"\"globalDefault\":true")
        {
            out.push(parse_stored(o)?);
        }
    }
    Ok(out)
}

/// Admission of a new pod (`v`, a pod document): Forbidden, as upstream words it, when its
/// class is missing or its given priority disagrees.
pub fn admit_pod(st: &State, v: &mut Value) -> Result<Vec<&'static str>, ApiError> {
    let empty = json!({});
    let spec = v.get("spec").unwrap_or(&empty);
    let classes = classes_for(st, spec)?;
    match resolve(spec, &classes) {
        Ok(r) => Ok(apply(v, &r)),
        Err(why) => Err(ApiError::forbidden_named(
            "pods",
            "",
            &admission_name(v),
            &why,
        )),
    }
}

/// The name admission errors give: the object's, else its generateName (names are generated
/// after admission).
pub(crate) fn admission_name(v: &Value) -> String {
    let meta = |k: &str| {
        v.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    meta("name")
        .or_else(|| meta("generateName"))
        .unwrap_or_default()
}

/// Validating admission of a PriorityClass create or update: one global default at most.
pub fn validate_class(st: &State, pc: &Value, update: bool) -> Result<(), ApiError> {
    if pc.get("globalDefault").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let res = resources::by_kind(Kind::PriorityClass);
    let page = st.store.list(&res.prefix(None), None, None);
    let mut classes = Vec::new();
    for o in page.items.iter() {
        classes.push(parse_stored(o)?);
    }
    let name = pc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(existing) = global_default(&classes) {
        let existing = existing
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !update || existing != name {
            return Err(ApiError::forbidden_named(
                res.plural,
                res.group,
                name,
                &format!(
                    "PriorityClass {existing} is already marked as default. Only one default can exist"
                ),
            ));
        }
    }
    Ok(())
}

/// The system classes may not be deleted (upstream's PriorityClass storage).
pub fn check_delete(name: &str) -> Result<(), ApiError> {
    if is_system_class_name(name) {
        let res = resources::by_kind(Kind::PriorityClass);
        return Err(ApiError::forbidden_named(
            res.plural,
            res.group,
            name,
            "this is a system priority class and cannot be deleted",
        ));
    }
    Ok(())
}

/// Creates the system classes that are missing, as kube-apiserver does at start (its
/// managedFields name it).
pub async fn bootstrap(st: &State) -> Result<(), ApiError> {
    let res = resources::by_kind(Kind::PriorityClass);
    for class in system_priority_classes() {
        let name = class.metadata.name.clone().unwrap_or_default();
        if st.store.get(&res.key("", &name)).is_some() {
            continue;
        }
        let mut v = serde_json::to_value(&class)
            .map_err(|e| ApiError::internal(format!("encoding {name}: {e}")))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("apiVersion".into(), json!(res.api_version()));
            o.insert("kind".into(), json!(res.kind_name));
        }
        match crate::handlers::create_as(st, res, v, "kube-apiserver").await {
            Ok(()) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool, policy: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": name}, "value": value});
        if default {
            c["globalDefault"] = json!(true);
        }
        if let Some(p) = policy {
            c["preemptionPolicy"] = json!(p);
        }
        c
    }

    // Scenarios of upstream's TestPodAdmission.
    #[test]
    fn pods_get_their_classes_priority() {
        let classes = vec![
            class("default1", 1000, true, Some("PreemptLowerPriority")),
            class("default2", 500, true, Some("Never")),
            class("high", 100000, false, Some("PreemptLowerPriority")),
            class("nopreempt", 10, false, Some("Never")),
        ];
        let rows: Vec<(&str, Value, Result<Resolved, String>)> = vec![
            (
                "a named class",
                json!({"priorityClassName": "high"}),
                Ok(Resolved {
                    class_name: None,
                    priority: 100000,
                    preemption_policy: Some("PreemptLowerPriority".into()),
                }),
            ),
            (
                "no class: the lowest global default, named",
                json!({}),
                Ok(Resolved {
                    class_name: Some("default2".into()),
                    priority: 500,
                    preemption_policy: Some("Never".into()),
                }),
            ),
            (
                "a missing class",
                json!({"priorityClassName": "nope"}),
                Err("no PriorityClass with name nope was found".into()),
            ),
            (
                "a priority that agrees",
                json!({"priorityClassName": "high", "priority": 100000}),
                Ok(Resolved {
                    class_name: None,
                    priority: 100000,
                    preemption_policy: Some("PreemptLowerPriority".into()),
                }),
            ),
            (
                "a priority that does not",
                json!({"priorityClassName": "high", "priority": 5}),
                Err("the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 100000 from the given PriorityClass name".into()),
            ),
            (
                "a preemption policy that does not agree",
                json!({"priorityClassName": "nopreempt", "preemptionPolicy": "PreemptLowerPriority"}),
                Err("the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never from the given PriorityClass name".into()),
            ),
        ];
        for (name, spec, want) in rows {
            assert_eq!(resolve(&spec, &classes), want, "{name}");
        }
        // No class at all: 0 and PreemptLowerPriority, no name.
        assert_eq!(
            resolve(&json!({}), &[]),
            Ok(Resolved {
                class_name: None,
                priority: 0,
                preemption_policy: Some("PreemptLowerPriority".into()),
            })
        );
    }

    #[test]
    fn apply_reports_what_it_added() {
        let mut pod = json!({"spec": {"containers": []}});
        let r = Resolved {
            class_name: Some("d".into()),
            priority: 7,
            preemption_policy: Some("Never".into()),
        };
        assert_eq!(
            apply(&mut pod, &r),
            vec!["priorityClassName", "priority", "preemptionPolicy"]
        );
        assert_eq!(pod["spec"]["priority"], 7);
        let mut given = json!({"spec": {"priority": 7, "preemptionPolicy": "Never"}});
        let r = Resolved {
            class_name: None,
            ..r
        };
        assert!(apply(&mut given, &r).is_empty());
    }
}
