//! One node's `/metrics/resource` (the Prometheus text format kubelet writes) into a
//! [`Batch`], as metrics-server's `decodeBatch` reads it: the node's cumulative CPU and working
//! set, and per container its cumulative CPU, working set and start time; a sample's
//! timestamp (milliseconds) is its time, the scrape's start when it has none. A node point
//! lacking its time, CPU or memory is dropped, and so is a pod one of whose containers has
//! a zero CPU or memory value.

use std::collections::{BTreeMap, HashMap};

use super::storage::{Batch, PodRef, Point};

const NODE_CPU: &str = "node_cpu_usage_seconds_total";
const NODE_MEMORY: &str = "node_memory_working_set_bytes";
const CONTAINER_CPU: &str = "container_cpu_usage_seconds_total";
const CONTAINER_MEMORY: &str = "container_memory_working_set_bytes";
const CONTAINER_START: &str = "container_start_time_seconds";

/// A series' labels, names and unescaped values.
type Labels<'a> = Vec<(&'a str, String)>;

/// One sample line: name, labels, value, timestamp in milliseconds if it had one.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Labels<'a>,
    value: f64,
    timestamp_ms: Option<i64>,
}

/// Decodes `text` scraped from `node` at `scraped_ms` (milliseconds since the epoch). A
/// line that is not in the text format fails the whole scrape, as upstream's parser does.
pub fn decode(text: &str, scraped_ms: i64, node: &str) -> Result<Batch, String> {
    let mut node_point = Point::default();
    let mut pods: HashMap<PodRef, BTreeMap<String, Point>> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let s = sample(line).map_err(|e| format!("failed parsing metrics: line {}: {e}", n + 1))?;
        // Milliseconds to Go's nanosecond times.
        let ts = s
            .timestamp_ms
            .unwrap_or(scraped_ms)
            .saturating_mul(1_000_000);
        match s.name {
            NODE_CPU => {
                node_point.cumulative_cpu = seconds_to_nanos(s.value);
                node_point.timestamp = ts;
            }
            NODE_MEMORY => {
                node_point.memory = s.value as u64;
                node_point.timestamp = ts;
            }
            CONTAINER_CPU | CONTAINER_MEMORY | CONTAINER_START => {
                let Some((pod, container)) = container_of(&s.labels) else {
                    continue;
                };
                let p = pods.entry(pod).or_default().entry(container).or_default();
                match s.name {
                    CONTAINER_CPU => {
                        p.cumulative_cpu = seconds_to_nanos(s.value);
                        p.timestamp = ts;
                    }
                    CONTAINER_MEMORY => {
                        p.memory = s.value as u64;
                        p.timestamp = ts;
                    }
                    // The start time is the sample's value, in seconds.
                    _ => p.start_time = (s.value * 1e9) as i64,
                }
            }
            _ => {}
        }
    }
    let mut batch = Batch::default();
    if node_point.timestamp == 0 || node_point.cumulative_cpu == 0 || node_point.memory == 0 {
        tracing::debug!(node, ?node_point, "incomplete node metrics");
    } else {
        batch.nodes.insert(node.to_string(), node_point);
    }
    for (pod, containers) in pods {
        match complete(containers) {
            Some(c) => {
                batch.pods.insert(pod, c);
            }
            None => tracing::debug!(namespace = %pod.0, pod = %pod.1, "incomplete pod metrics"),
        }
    }
    Ok(batch)
}

/// `uint64(value * 1e9)`: seconds to nanoseconds (negative and NaN values are 0).
fn seconds_to_nanos(v: f64) -> u64 {
    (v * 1e9) as u64
}

/// The pod and container a container series is about; none when a label is missing.
fn container_of(labels: &Labels<'_>) -> Option<(PodRef, String)> {
    let get = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    Some(((get("namespace")?, get("pod")?), get("container")?))
}

/// metrics-server's `checkContainerMetrics`: containers with no value at all are left out;
/// one with a zero CPU or memory value makes the pod's point incomplete.
fn complete(containers: BTreeMap<String, Point>) -> Option<BTreeMap<String, Point>> {
    let mut out = BTreeMap::new();
    for (name, p) in containers {
        if p == Point::default() {
            continue;
        }
        if p.cumulative_cpu == 0 || p.memory == 0 {
            return None;
        }
        out.insert(name, p);
    }
    Some(out)
}

/// One line of the text format: `name{label="value",...} value [timestamp]`.
fn sample(line: &str) -> Result<Sample<'_>, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("expected a metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = label_set(after)?;
        labels = parsed;
        rest = tail;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err("expected a value after the series".into());
    }
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()
        .ok_or("expected a value")?
        .parse::<f64>()
        .map_err(|e| format!("bad value: {e}"))?;
    let timestamp_ms = match fields.next() {
        None => None,
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|e| format!("bad timestamp: {e}"))?,
        ),
    };
    if fields.next().is_some() {
        return Err("unexpected text after the timestamp".into());
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// The labels after `{`, and what follows the closing `}`.
fn label_set(mut s: &str) -> Result<(Labels<'_>, &str), String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(tail) = s.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let name_end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or("unterminated label set")?;
        let name = &s[..name_end];
        if name.is_empty() {
            return Err("expected a label name".into());
        }
        s = s[name_end..].trim_start();
        s = s
            .strip_prefix('=')
            .ok_or("expected '=' after a label name")?;
        s = s.trim_start();
        s = s.strip_prefix('"').ok_or("expected a quoted label value")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value".into()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name, value));
        s = s[end + 1..].trim_start();
        if let Some(tail) = s.strip_prefix(',') {
            s = tail;
        } else if !s.starts_with('}') {
            return Err("expected ',' or '}' after a label".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubelet's resource metrics collector writes (names, labels, order, timestamps).
    pub const KUBELET: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="main",namespace="default",pod="busy"} 12.5 1700000015000
container_cpu_usage_seconds_total{container="side",namespace="default",pod="busy"} 0.25 1700000015000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="main",namespace="default",pod="busy"} 1.2644352e+07 1700000015000
container_memory_working_set_bytes{container="side",namespace="default",pod="busy"} 4096 1700000015000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="main",namespace="default",pod="busy"} 1.7e+09 1700000000000
container_start_time_seconds{container="side",namespace="default",pod="busy"} 1.7e+09 1700000000000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 1234.5 1700000015000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1700000015000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="busy"} 12.75 1700000015000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;

    #[test]
    fn decodes_kubelets_resource_metrics() {
        let b = decode(KUBELET, 1, "n1").unwrap();
        let node = b.nodes["n1"];
        assert_eq!(node.cumulative_cpu, 1_234_500_000_000);
        assert_eq!(node.memory, 2_147_483_648);
        assert_eq!(node.timestamp, 1_700_000_015_000_000_000);
        let pod = &b.pods[&("default".to_string(), "busy".to_string())];
        assert_eq!(
            pod["main"],
            Point {
                start_time: 1_700_000_000_000_000_000,
                timestamp: 1_700_000_015_000_000_000,
                cumulative_cpu: 12_500_000_000,
                memory: 12_644_352,
            }
        );
        assert_eq!(pod["side"].memory, 4096);
        assert_eq!(b.pods.len(), 1);
    }

    #[test]
    fn incomplete_points_are_dropped() {
        // A container with no memory value drops its pod; the node without memory is dropped.
        let text = "container_cpu_usage_seconds_total{container=\"a\",namespace=\"ns\",pod=\"p\"} 1 5\n\
            container_cpu_usage_seconds_total{container=\"a\",namespace=\"ns\",pod=\"q\"} 1 5\n\
            container_memory_working_set_bytes{container=\"a\",namespace=\"ns\",pod=\"q\"} 10 5\n\
            node_cpu_usage_seconds_total 3 5\n";
        let b = decode(text, 1, "n1").unwrap();
        assert!(b.nodes.is_empty());
        assert_eq!(b.pods.len(), 1);
        assert!(b.pods.contains_key(&("ns".to_string(), "q".to_string())));
    }

    #[test]
    fn samples_without_a_timestamp_take_the_scrapes() {
        let text = "node_cpu_usage_seconds_total 3\nnode_memory_working_set_bytes 4\n";
        let b = decode(text, 42, "n").unwrap();
        assert_eq!(b.nodes["n"].timestamp, 42_000_000);
    }

    #[test]
    fn bad_text_fails_the_scrape_without_panicking() {
        for bad in [
            "node_cpu_usage_seconds_total",
            "node_cpu_usage_seconds_total{ 1",
            "node_cpu_usage_seconds_total{a=\"b} 1",
            "node_cpu_usage_seconds_total{a=b} 1",
            "node_cpu_usage_seconds_total one",
            "node_cpu_usage_seconds_total 1 1.5",
            "node_cpu_usage_seconds_total 1 2 3",
            "{a=\"b\"} 1",
            "9x 1",
            "node_cpu_usage_seconds_total{a=\"\\",
        ] {
            assert!(decode(bad, 0, "n").is_err(), "{bad:?}");
        }
        // Escapes, spaces and odd values decode; a container series without its labels is skipped.
        let ok = "container_cpu_usage_seconds_total{ container = \"a\\\"b\" , namespace=\"n\",pod=\"p\",} NaN 1\n\
            container_memory_working_set_bytes{container=\"c\"} -Inf\n";
        let b = decode(ok, 0, "n").unwrap();
        assert!(b.pods.is_empty(), "a NaN CPU value is zero: incomplete");
    }
}
