//! PodMetrics and NodeMetrics as a server-side Table, as metrics-server converts them
//! (`kubectl get pods.metrics.k8s.io`): Name, the usage summed over the containers by
//! resource name (`cpu`, `memory`), Window. An empty list has neither columns nor rows.

use serde_json::{Value, json};

use super::format;
use super::serve::Metrics;
use crate::handlers::TableRequest;
use crate::table::IncludeObject;

pub(super) fn table(tr: &TableRequest, items: &[Metrics<'_>]) -> Value {
    let (columns, rows) = if items.is_empty() {
        (Value::Null, Value::Null)
    } else {
        let col = |name: &str, format: &str, description: &str| {
            json!({"name": name, "type": "string", "format": format,
                "description": description, "priority": 0})
        };
        let columns = json!([
            col("Name", "name", "Name of the resource"),
            col("cpu", "quantity", ""),
            col("memory", "quantity", ""),
            col("Window", "duration", ""),
        ]);
        let rows = items.iter().map(|m| row(tr.include, m)).collect();
        (columns, Value::Array(rows))
    };
    json!({"kind": "Table", "apiVersion": tr.api_version, "metadata": {},
        "columnDefinitions": columns, "rows": rows})
}

fn row(include: IncludeObject, m: &Metrics<'_>) -> Value {
    let cells = json!([
        m.metadata.name,
        format::cpu(m.total.cpu_nanocores),
        format::memory(m.total.memory_bytes),
        m.window,
    ]);
    let object = match include {
        IncludeObject::None => None,
        IncludeObject::Metadata => Some(json!({"kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1", "metadata": m.metadata})),
        IncludeObject::Object => serde_json::to_value(m).ok(),
    };
    match object {
        Some(o) => json!({"cells": cells, "object": o}),
        None => json!({"cells": cells}),
    }
}
