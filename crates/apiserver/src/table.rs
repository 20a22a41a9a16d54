//! Server-side Tables (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): the columns and
//! cell formatting of upstream's printers, so `kubectl get` prints what it prints against a
//! real cluster.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::resources::Kind;

/// What a Table row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// Does the Accept header ask for a meta.k8s.io Table (v1 or v1beta1)?
pub fn wants_table(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("as=Table") && has("g=meta.k8s.io") {
            if has("v=v1") {
                return Some("meta.k8s.io/v1");
            }
            if has("v=v1beta1") {
                return Some("meta.k8s.io/v1beta1");
            }
        }
    }
    None
}

pub fn include_object(q: Option<&str>) -> IncludeObject {
    match q {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

struct Col {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    priority: i32,
    description: &'static str,
}

const fn col(
    name: &'static str,
    ty: &'static str,
    priority: i32,
    description: &'static str,
) -> Col {
    Col {
        name,
        ty,
        format: "",
        priority,
        description,
    }
}

const NAME: Col = Col {
    name: "Name",
    ty: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
};
const AGE: Col = col(
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
);

fn columns(kind: Kind) -> Vec<Col> {
    match kind {
        Kind::Job => vec![
            NAME,
            col("Status", "string", 0, "Status of the job."),
            col(
                "Completions",
                "string",
                0,
                "The completion status of the job",
            ),
            col(
                "Duration",
                "string",
                0,
                "Time required to complete the job.",
            ),
            AGE,
            col(
                "Containers",
                "string",
                1,
                "Names of each container in the template.",
            ),
            col(
                "Images",
                "string",
                1,
                "Images referenced by each container in the template.",
            ),
            col(
                "Selector",
                "string",
                1,
                "A label query over pods that should match the pod count.",
            ),
        ],
        Kind::CronJob => vec![
            NAME,
            col(
                "Schedule",
                "string",
                0,
                "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
            ),
            col(
                "Timezone",
                "string",
                0,
                "The time zone name for the given schedule.",
            ),
            col(
                "Suspend",
                "boolean",
                0,
                "This flag tells the controller to suspend subsequent executions.",
            ),
            col(
                "Active",
                "integer",
                0,
                "A list of pointers to currently running jobs.",
            ),
            col(
                "Last Schedule",
                "string",
                0,
                "Information when was the last time the job was successfully scheduled.",
            ),
            AGE,
            col(
                "Containers",
                "string",
                1,
                "Names of each container in the template.",
            ),
            col(
                "Images",
                "string",
                1,
                "Images referenced by each container in the template.",
            ),
            col(
                "Selector",
                "string",
                1,
                "A label query over pods that should match the pod count.",
            ),
        ],
        Kind::Pod => vec![
            NAME,
            col(
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status",
                "string",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            col(
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            col(
                "IP",
                "string",
                1,
                "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            col(
                "Node",
                "string",
                1,
                "NodeName is a request to schedule this pod onto a specific node. If it is non-empty, the scheduler simply schedules this pod onto that node, assuming that it fits resource requirements.",
            ),
            col(
                "Nominated Node",
                "string",
                1,
                "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            ),
            col(
                "Readiness Gates",
                "string",
                1,
                "If specified, all readiness gates will be evaluated for pod readiness.",
            ),
        ],
        Kind::Event | Kind::EventV1 => vec![
            col(
                "Last Seen",
                "string",
                0,
                "The time at which the most recent occurrence of this event was recorded.",
            ),
            col(
                "Type",
                "string",
                0,
                "Type of this event (Normal, Warning), new types could be added in the future",
            ),
            col(
                "Reason",
                "string",
                0,
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            ),
            col(
                "Object",
                "string",
                0,
                "The object that this event is about.",
            ),
            col(
                "Subobject",
                "string",
                1,
                "FieldPath of the involved object.",
            ),
            col(
                "Source",
                "string",
                1,
                "The component reporting this event. Should be a short machine understandable string.",
            ),
            col(
                "Message",
                "string",
                0,
                "A human-readable description of the status of this operation.",
            ),
            col(
                "First Seen",
                "string",
                1,
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
            ),
            col(
                "Count",
                "string",
                1,
                "The number of times this event has occurred.",
            ),
            Col {
                format: "name",
                ..col("Name", "string", 1, "Name of the event.")
            },
        ],
        Kind::Namespace => vec![
            NAME,
            col("Status", "string", 0, "The status of the namespace"),
            AGE,
        ],
        Kind::Node => vec![
            NAME,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            AGE,
            col(
                "Version",
                "string",
                0,
                "Kubelet Version reported by the node.",
            ),
            col(
                "Internal-IP",
                "string",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            col(
                "External-IP",
                "string",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            col(
                "OS-Image",
                "string",
                1,
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            col(
                "Kernel-Version",
                "string",
                1,
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            col(
                "Container-Runtime",
                "string",
                1,
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        Kind::Lease => vec![
            NAME,
            col("Holder", "string", 0, "The holder of the lease"),
            AGE,
        ],
        Kind::PriorityClass => vec![
            NAME,
            col(
                "Value",
                "integer",
                0,
                "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.",
            ),
            col(
                "Global-Default",
                "boolean",
                0,
                "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.",
            ),
            AGE,
            col(
                "PreemptionPolicy",
                "string",
                0,
                "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.",
            ),
        ],
        Kind::ConfigMap => vec![
            NAME,
            col(
                "Data",
                "string",
                0,
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
            ),
            AGE,
        ],
        Kind::Secret => vec![
            NAME,
            col(
                "Type",
                "string",
                0,
                "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
            ),
            col(
                "Data",
                "string",
                0,
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
            ),
            AGE,
        ],
        Kind::PodDisruptionBudget => vec![
            NAME,
            col(
                "Min Available",
                "string",
                0,
                "The minimum number of pods that must be available.",
            ),
            col(
                "Max Unavailable",
                "string",
                0,
                "The maximum number of pods that may be unavailable.",
            ),
            col(
                "Allowed Disruptions",
                "integer",
                0,
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE,
        ],
        Kind::ServiceAccount => vec![
            NAME,
            col(
                "Secrets",
                "string",
                0,
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret",
            ),
            AGE,
        ],
    }
}

pub fn column_definitions(kind: Kind) -> Value {
    Value::Array(
        columns(kind)
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority})
            })
            .collect(),
    )
}

/// apimachinery's `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    let y = d / 365;
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if y < 2 {
        format!("{d}d")
    } else if y < 8 {
        let rd = d % 365;
        if rd == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{rd}d")
        }
    } else {
        format!("{y}y")
    }
}

fn ts(v: Option<&Value>) -> Option<Timestamp> {
    v.and_then(Value::as_str)
        .and_then(|s| s.parse::<Timestamp>().ok())
}

/// `translateTimestampSince`.
fn since(now: Timestamp, v: Option<&Value>) -> String {
    match ts(v) {
        None => "<unknown>".into(),
        Some(t) => human_duration(now.as_second() - t.as_second()),
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn or_none(x: &str) -> String {
    if x.is_empty() {
        "<none>".into()
    } else {
        x.into()
    }
}

fn has_condition(v: &Value, ptr: &str, ty: &str) -> bool {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

fn containers_and_images(spec: Option<&Value>) -> (String, String) {
    let cs = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = cs
        .iter()
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    let images: Vec<&str> = cs
        .iter()
        .map(|c| c["image"].as_str().unwrap_or(""))
        .collect();
    (names.join(","), images.join(","))
}

/// `metav1.FormatLabelSelector`.
fn selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return "<none>".into();
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        let mut kv: Vec<(&String, &Value)> = ml.iter().collect();
        kv.sort_by(|a, b| a.0.cmp(b.0));
        parts.extend(
            kv.into_iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))),
        );
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let vs = values.join(",");
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({vs})"),
            "NotIn" => format!("{key} notin ({vs})"),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({vs})"),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

fn job_cells(v: &Value, now: Timestamp) -> Vec<Value> {
    let conds = "/status/conditions";
    let status = if has_condition(v, conds, "Complete") {
        "Complete"
    } else if has_condition(v, conds, "Failed") {
        "Failed"
    } else if v.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has_condition(v, conds, "Suspended") {
        "Suspended"
    } else if has_condition(v, conds, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let succeeded = v
        .pointer("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let completions = match (
        v.pointer("/spec/completions").and_then(Value::as_i64),
        v.pointer("/spec/parallelism")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    ) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let duration = match (
        ts(v.pointer("/status/startTime")),
        ts(v.pointer("/status/completionTime")),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.as_second() - start.as_second()),
        (Some(start), Some(end)) => human_duration(end.as_second() - start.as_second()),
    };
    let (names, images) = containers_and_images(v.pointer("/spec/template/spec"));
    vec![
        json!(s(v, "/metadata/name")),
        json!(status),
        json!(completions),
        json!(duration),
        json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        json!(names),
        json!(images),
        json!(selector_string(v.pointer("/spec/selector"))),
    ]
}

fn cronjob_cells(v: &Value, now: Timestamp) -> Vec<Value> {
    let suspend = match v.pointer("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let active = v
        .pointer("/status/active")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let last = match v.pointer("/status/lastScheduleTime") {
        Some(t) if !t.is_null() => since(now, Some(t)),
        _ => "<none>".into(),
    };
    let (names, images) = containers_and_images(v.pointer("/spec/jobTemplate/spec/template/spec"));
    vec![
        json!(s(v, "/metadata/name")),
        json!(s(v, "/spec/schedule")),
        json!(or_none(s(v, "/spec/timeZone"))),
        json!(suspend),
        json!(active),
        json!(last),
        json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        json!(names),
        json!(images),
        json!(selector_string(
            v.pointer("/spec/jobTemplate/spec/selector")
        )),
    ]
}

fn terminated_reason(t: &Value, prefix: &str) -> String {
    match t
        .get("reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        Some(r) => format!("{prefix}{r}"),
        None => match t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
            Some(sig) => format!("{prefix}Signal:{sig}"),
            None => format!(
                "{prefix}ExitCode:{}",
                t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
            ),
        },
    }
}

/// `printPod`: readiness, the aggregate status reason and restarts.
fn pod_cells(v: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let phase = s(v, "/status/phase");
    let mut reason = or_empty(s(v, "/status/reason"), phase);
    let empty = Vec::new();
    let init_specs = v
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let total = v
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut restarts = 0i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut note_restart = |c: &Value| {
        if let Some(t) = ts(c.pointer("/lastState/terminated/finishedAt")) {
            last_restart = Some(last_restart.map_or(t, |l| l.max(t)));
        }
    };
    let mut initializing = false;
    let init_statuses = v
        .pointer("/status/initContainerStatuses")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        note_restart(c);
        let term = c.pointer("/state/terminated");
        let waiting_reason = s(c, "/state/waiting/reason");
        if term.is_some_and(|t| t.get("exitCode").and_then(Value::as_i64).unwrap_or(0) == 0) {
            continue;
        }
        if let Some(t) = term {
            reason = terminated_reason(t, "Init:");
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }
    let mut ready = 0;
    if !initializing || has_condition(v, "/status/conditions", "Initialized") {
        restarts = 0;
        let mut has_running = false;
        let statuses = v
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        for c in statuses.iter().rev() {
            restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            note_restart(c);
            let waiting = s(c, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = c.pointer("/state/terminated") {
                reason = terminated_reason(t, "");
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if has_condition(v, "/status/conditions", "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    if v.pointer("/metadata/deletionTimestamp").is_some() {
        if s(v, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    let restarts_text = match last_restart {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.as_second() - t.as_second())
        ),
        _ => restarts.to_string(),
    };
    let ip = v
        .pointer("/status/podIPs/0/ip")
        .and_then(Value::as_str)
        .unwrap_or("");
    let gates = v
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let gates_text = if gates == 0 {
        "<none>".to_string()
    } else {
        let met = v
            .pointer("/spec/readinessGates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|g| {
                has_condition(
                    v,
                    "/status/conditions",
                    g["conditionType"].as_str().unwrap_or(""),
                )
            })
            .count();
        format!("{met}/{gates}")
    };
    let conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    let cells = vec![
        json!(s(v, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_text),
        json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        json!(or_none(ip)),
        json!(or_none(s(v, "/spec/nodeName"))),
        json!(or_none(s(v, "/status/nominatedNodeName"))),
        json!(gates_text),
    ];
    (cells, conditions)
}

fn or_empty(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        a.to_string()
    }
}

/// Events are stored in core/v1 form whichever view asks.
fn event_cells(v: &Value, now: Timestamp) -> Vec<Value> {
    let first = match v.get("firstTimestamp").filter(|t| !t.is_null()) {
        Some(t) => since(now, Some(t)),
        None => since(now, v.get("eventTime")),
    };
    let last = if let Some(t) = v.pointer("/series/lastObservedTime") {
        since(now, Some(t))
    } else if let Some(t) = v.get("lastTimestamp").filter(|t| !t.is_null()) {
        since(now, Some(t))
    } else {
        since(now, v.get("eventTime"))
    };
    let count = v
        .pointer("/series/count")
        .and_then(Value::as_i64)
        .or_else(|| v.get("count").and_then(Value::as_i64))
        .unwrap_or(0);
    let component = or_empty(s(v, "/source/component"), s(v, "/reportingComponent"));
    let source = match s(v, "/source/host") {
        "" => component,
        host => format!("{component}, {host}"),
    };
    vec![
        json!(last),
        json!(s(v, "/type")),
        json!(s(v, "/reason")),
        json!(format!(
            "{}/{}",
            s(v, "/involvedObject/kind").to_lowercase(),
            s(v, "/involvedObject/name")
        )),
        json!(s(v, "/involvedObject/fieldPath")),
        json!(source),
        json!(s(v, "/message").trim()),
        json!(first),
        json!(count.to_string()),
        json!(s(v, "/metadata/name")),
    ]
}

fn node_cells(v: &Value, now: Timestamp) -> Vec<Value> {
    let ready = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| match c["status"].as_str() {
            Some("True") => "Ready",
            Some("False") => "NotReady",
            _ => "Unknown",
        })
        .unwrap_or("Unknown");
    let status = if v.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        format!("{ready},SchedulingDisabled")
    } else {
        ready.to_string()
    };
    let roles: Vec<String> = v
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| {
            l.keys()
                .filter_map(|k| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_string)
                })
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let addr = |ty: &str| {
        v.pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == ty))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    vec![
        json!(s(v, "/metadata/name")),
        json!(status),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        json!(s(v, "/status/nodeInfo/kubeletVersion")),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        json!(or_unknown(s(v, "/status/nodeInfo/osImage"))),
        json!(or_unknown(s(v, "/status/nodeInfo/kernelVersion"))),
        json!(or_unknown(s(v, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
}

fn map_len(v: &Value, pointer: &str) -> usize {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map_or(0, Map::len)
}

fn or_unknown(x: &str) -> String {
    if x.is_empty() {
        "<unknown>".into()
    } else {
        x.into()
    }
}

/// One Table row for a stored object.
pub fn row(kind: Kind, v: &Value, now: Timestamp, include: IncludeObject) -> Value {
    let mut conditions = None;
    let cells = match kind {
        Kind::Job => job_cells(v, now),
        Kind::CronJob => cronjob_cells(v, now),
        Kind::Pod => {
            let (c, conds) = pod_cells(v, now);
            conditions = conds;
            c
        }
        Kind::Event | Kind::EventV1 => event_cells(v, now),
        Kind::Namespace => vec![
            json!(s(v, "/metadata/name")),
            json!(s(v, "/status/phase")),
            json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        ],
        Kind::Node => node_cells(v, now),
        Kind::Lease => vec![
            json!(s(v, "/metadata/name")),
            json!(s(v, "/spec/holderIdentity")),
            json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        ],
        Kind::PriorityClass => vec![
            json!(s(v, "/metadata/name")),
            json!(v.pointer("/value").and_then(Value::as_i64).unwrap_or(0)),
            json!(
                v.pointer("/globalDefault")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            json!(since(now, v.pointer("/metadata/creationTimestamp"))),
            json!(s(v, "/preemptionPolicy")),
        ],
        // DATA counts the keys: of data and binaryData for a ConfigMap, of data for a Secret.
        Kind::ConfigMap => vec![
            json!(s(v, "/metadata/name")),
            json!(map_len(v, "/data") + map_len(v, "/binaryData")),
            json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        ],
        Kind::Secret => vec![
            json!(s(v, "/metadata/name")),
            json!(s(v, "/type")),
            json!(map_len(v, "/data")),
            json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        ],
        // N/A for the bound not given.
        Kind::PodDisruptionBudget => {
            let bound = |k: &str| match v.pointer(&format!("/spec/{k}")) {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::String(s)) => s.clone(),
                _ => "N/A".to_string(),
            };
            vec![
                json!(s(v, "/metadata/name")),
                json!(bound("minAvailable")),
                json!(bound("maxUnavailable")),
                json!(
                    v.pointer("/status/disruptionsAllowed")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                ),
                json!(since(now, v.pointer("/metadata/creationTimestamp"))),
            ]
        }
        // SECRETS counts the listed secrets.
        Kind::ServiceAccount => vec![
            json!(s(v, "/metadata/name")),
            json!(
                v.pointer("/secrets")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            json!(since(now, v.pointer("/metadata/creationTimestamp"))),
        ],
    };
    let mut r = Map::new();
    r.insert("cells".into(), Value::Array(cells));
    if let Some(c) = conditions {
        r.insert("conditions".into(), c);
    }
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            let meta = v.get("metadata").cloned().unwrap_or_else(|| json!({}));
            r.insert(
                "object".into(),
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}),
            );
        }
        IncludeObject::Object => {
            r.insert("object".into(), v.clone());
        }
    }
    Value::Object(r)
}

/// A whole Table document.
pub fn table(
    api_version: &str,
    kind: Kind,
    rows: Vec<Value>,
    metadata: Value,
    with_columns: bool,
) -> Value {
    let mut t = Map::new();
    t.insert("kind".into(), json!("Table"));
    t.insert("apiVersion".into(), json!(api_version));
    t.insert("metadata".into(), metadata);
    if with_columns {
        t.insert("columnDefinitions".into(), column_definitions(kind));
    }
    t.insert("rows".into(), Value::Array(rows));
    Value::Object(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (49 * 3600, "2d1h"),
            (8 * 86400, "8d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            (731 * 86400, "2y1d"),
            (8 * 365 * 86400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(wants_table(kubectl), Some("meta.k8s.io/v1"));
        assert_eq!(
            wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Some("meta.k8s.io/v1beta1")
        );
        assert_eq!(wants_table("application/json"), None);
    }

    #[test]
    fn job_rows() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let job = json!({"metadata": {"name": "pi", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"completions": 4, "parallelism": 2, "selector": {"matchLabels": {"b": "2", "a": "1"}},
                     "template": {"spec": {"containers": [{"name": "pi", "image": "perl"}, {"name": "x", "image": "busybox"}]}}},
            "status": {"succeeded": 4, "startTime": "2026-01-01T00:00:01Z", "completionTime": "2026-01-01T00:00:31Z",
                       "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}});
        let r = row(Kind::Job, &job, now, IncludeObject::Metadata);
        assert_eq!(
            r["cells"],
            json!([
                "pi",
                "Complete",
                "4/4",
                "30s",
                "10m",
                "pi,x",
                "perl,busybox",
                "a=1,b=2"
            ])
        );
        assert_eq!(r["object"]["kind"], "PartialObjectMetadata");
        let running = json!({"metadata": {"name": "w"}, "spec": {"parallelism": 3}, "status": {"startTime": "2026-01-01T00:09:00Z"}});
        let r = row(Kind::Job, &running, now, IncludeObject::None);
        assert_eq!(r["cells"][1], "Running");
        assert_eq!(r["cells"][2], "0/1 of 3");
        assert_eq!(r["cells"][3], "60s");
        assert_eq!(r["cells"][4], "<unknown>");
        assert!(r.get("object").is_none());
    }

    #[test]
    fn pod_rows() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let done = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
        let r = row(Kind::Pod, &done, now, IncludeObject::None);
        assert_eq!(r["cells"][1], "0/1");
        assert_eq!(r["cells"][2], "Completed");
        assert_eq!(r["conditions"][0]["reason"], "Succeeded");
        let crashing = json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:09:00Z"},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}], "containerStatuses": [{"name": "c", "ready": true, "restartCount": 3,
                "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:05:00Z"}}}]}});
        let r = row(Kind::Pod, &crashing, now, IncludeObject::None);
        assert_eq!(
            r["cells"],
            json!([
                "p",
                "1/1",
                "Terminating",
                "3 (5m ago)",
                "<unknown>",
                "10.0.0.1",
                "n1",
                "<none>",
                "<none>"
            ])
        );
        let init = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i"}, {"name": "j"}], "containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": 0}}},
                {"name": "j", "state": {"terminated": {"exitCode": 2}}}]}});
        assert_eq!(
            row(Kind::Pod, &init, now, IncludeObject::None)["cells"][2],
            "Init:ExitCode:2"
        );
    }

    #[test]
    fn cronjob_and_event_rows() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let cj = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/1 * * * *", "suspend": false,
            "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "busybox"}]}}}}},
            "status": {"active": [{"name": "c-1"}], "lastScheduleTime": "2026-01-01T00:09:00Z"}});
        assert_eq!(
            row(Kind::CronJob, &cj, now, IncludeObject::None)["cells"],
            json!([
                "c",
                "*/1 * * * *",
                "<none>",
                "False",
                1,
                "60s",
                "<unknown>",
                "a",
                "busybox",
                "<none>"
            ])
        );
        let ev = json!({"metadata": {"name": "e1"}, "type": "Normal", "reason": "SuccessfulCreate", "message": "Created pod: pi-x ",
            "involvedObject": {"kind": "Job", "name": "pi"}, "source": {"component": "job-controller"}, "count": 2,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:09:30Z"});
        assert_eq!(
            row(Kind::Event, &ev, now, IncludeObject::None)["cells"],
            json!([
                "30s",
                "Normal",
                "SuccessfulCreate",
                "job/pi",
                "",
                "job-controller",
                "Created pod: pi-x",
                "10m",
                "2",
                "e1"
            ])
        );
    }
}
