//! kubelet's resource metrics, `GET /metrics/resource`: what metrics-server scrapes for the
//! metrics.k8s.io API. The text is what kubelet's collector writes through the Prometheus Go
//! client (pkg/kubelet/metrics/collectors/resource_metrics.go): its metric names, HELP texts
//! with the stability marker component-base adds, families in name order (the client's
//! `Gather` sorts them), each family's samples in the order of their label values with labels
//! by name, usage samples stamped with the time they were read, in milliseconds, and values
//! written as Go's `strconv.FormatFloat(v, 'g', -1, 64)`.
//!
//! Of upstream's families: `scrape_error` is deprecated since 1.29.0 and component-base hides a
//! metric deprecated before the running minor version (this node says it is v1.37), so it is
//! not written; `container_swap_limit_bytes` is written only for a container with a swap limit,
//! which a host process does not have; the `*_memory_commit_bytes` ones are Windows-only. The
//! numbers come from /proc (`crate::usage`).

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use jiff::Timestamp;

use super::Registry;
use crate::usage::{self, GroupUsage, NodeUsage};

pub const PATH: &str = "/metrics/resource";

/// The Prometheus text format, as the Go client's handler (client_golang 1.20 and later, with
/// prometheus/common's default name escaping) names it to a scraper that sends no `Accept`.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";

/// One metric family's name, HELP text (with its stability marker) and TYPE.
struct Desc {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
}

const CONTAINER_CPU: Desc = Desc {
    name: "container_cpu_usage_seconds_total",
    help: "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    kind: "counter",
};
const CONTAINER_MEMORY: Desc = Desc {
    name: "container_memory_working_set_bytes",
    help: "[STABLE] Current working set of the container in bytes",
    kind: "gauge",
};
const CONTAINER_START: Desc = Desc {
    name: "container_start_time_seconds",
    help: "[STABLE] Start time of the container since unix epoch in seconds",
    kind: "gauge",
};
const CONTAINER_SWAP: Desc = Desc {
    name: "container_swap_usage_bytes",
    help: "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
    kind: "gauge",
};
const NODE_CPU: Desc = Desc {
    name: "node_cpu_usage_seconds_total",
    help: "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    kind: "counter",
};
const NODE_MEMORY: Desc = Desc {
    name: "node_memory_working_set_bytes",
    help: "[STABLE] Current working set of the node in bytes",
    kind: "gauge",
};
const NODE_SWAP: Desc = Desc {
    name: "node_swap_usage_bytes",
    help: "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
    kind: "gauge",
};
const POD_CPU: Desc = Desc {
    name: "pod_cpu_usage_seconds_total",
    help: "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    kind: "counter",
};
const POD_MEMORY: Desc = Desc {
    name: "pod_memory_working_set_bytes",
    help: "[STABLE] Current working set of the pod in bytes",
    kind: "gauge",
};
const POD_SWAP: Desc = Desc {
    name: "pod_swap_usage_bytes",
    help: "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
    kind: "gauge",
};
const SCRAPE_ERROR: Desc = Desc {
    name: "resource_scrape_error",
    help: "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    kind: "gauge",
};

/// The node's usage when it was read.
#[derive(Debug, Clone)]
pub struct NodeSample {
    pub at: Timestamp,
    pub usage: NodeUsage,
}

/// A running container's usage when it was read.
#[derive(Debug, Clone)]
pub struct ContainerSample {
    pub name: String,
    pub started_at: Timestamp,
    pub at: Timestamp,
    pub usage: GroupUsage,
}

/// A pod with running containers; its usage is theirs summed (kubelet reads the pod's cgroup).
#[derive(Debug, Clone)]
pub struct PodSample {
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerSample>,
}

/// One scrape's readings.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub node: NodeSample,
    pub pods: Vec<PodSample>,
}

/// Read the node's and the running containers' usage. `Err` when the node's own figures (or
/// the process list) cannot be read, which kubelet reports as a scrape error with nothing else.
pub fn collect(registry: &Registry) -> std::io::Result<Snapshot> {
    let node = NodeSample {
        usage: usage::node()?,
        at: Timestamp::now(),
    };
    let running = registry.running();
    let leaders: Vec<u32> = running.iter().map(|c| c.pid).collect();
    let groups = usage::groups(&leaders)?;
    let at = Timestamp::now();
    let mut pods: Vec<PodSample> = Vec::new();
    for c in running {
        // A container whose processes are all gone has nothing to report: kubelet leaves out a
        // container it has no stats for (and the simulate runtime's containers have none).
        let Some(usage) = groups.get(&c.pid) else {
            continue;
        };
        let sample = ContainerSample {
            name: c.container,
            started_at: c.started_at,
            at,
            usage: *usage,
        };
        match pods
            .iter_mut()
            .find(|p| p.namespace == c.namespace && p.name == c.pod)
        {
            Some(p) => p.containers.push(sample),
            None => pods.push(PodSample {
                namespace: c.namespace,
                name: c.pod,
                containers: vec![sample],
            }),
        }
    }
    Ok(Snapshot { node, pods })
}

/// Serve a scrape: /proc is read on a blocking thread.
pub async fn serve(registry: Registry) -> Response<Full<Bytes>> {
    let text = match tokio::task::spawn_blocking(move || render(collect(&registry).as_ref())).await
    {
        Ok(text) => text,
        Err(e) => {
            tracing::warn!(error = %e, "collecting resource metrics");
            render(Err(&std::io::Error::other("collecting failed")))
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(text)));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    resp
}

struct Sample<'a> {
    /// By label name.
    labels: Vec<(&'static str, &'a str)>,
    value: f64,
    timestamp_ms: Option<i64>,
}

fn sample<'a>(
    labels: Vec<(&'static str, &'a str)>,
    value: f64,
    at: Option<Timestamp>,
) -> Sample<'a> {
    Sample {
        labels,
        value,
        timestamp_ms: at.map(|t| t.as_millisecond()),
    }
}

fn seconds(ns: u64) -> f64 {
    // As kubelet divides its nanosecond counters.
    ns as f64 / 1e9
}

/// The text of a scrape (`Err`: the readings failed).
pub fn render(snapshot: Result<&Snapshot, &std::io::Error>) -> String {
    let mut families: Vec<(&Desc, Vec<Sample<'_>>)> = Vec::new();
    let error = match snapshot {
        Ok(s) => {
            let (mut c_cpu, mut c_mem, mut c_start, mut c_swap) = (vec![], vec![], vec![], vec![]);
            let (mut p_cpu, mut p_mem, mut p_swap) = (vec![], vec![], vec![]);
            for p in &s.pods {
                let (ns, pod) = (p.namespace.as_str(), p.name.as_str());
                let mut total = GroupUsage::default();
                let mut at = None::<Timestamp>;
                for c in &p.containers {
                    let labels = || {
                        vec![
                            ("container", c.name.as_str()),
                            ("namespace", ns),
                            ("pod", pod),
                        ]
                    };
                    // kubelet skips a start time at or before the epoch.
                    if c.started_at.as_second() > 0 {
                        let ns = i64::try_from(c.started_at.as_nanosecond()).unwrap_or(i64::MAX);
                        c_start.push(sample(labels(), ns as f64 / 1e9, None));
                    }
                    c_cpu.push(sample(labels(), seconds(c.usage.cpu_ns), Some(c.at)));
                    c_mem.push(sample(
                        labels(),
                        c.usage.working_set_bytes as f64,
                        Some(c.at),
                    ));
                    c_swap.push(sample(labels(), c.usage.swap_bytes as f64, Some(c.at)));
                    total.cpu_ns = total.cpu_ns.saturating_add(c.usage.cpu_ns);
                    total.working_set_bytes = total
                        .working_set_bytes
                        .saturating_add(c.usage.working_set_bytes);
                    total.swap_bytes = total.swap_bytes.saturating_add(c.usage.swap_bytes);
                    at = at.max(Some(c.at));
                }
                let Some(at) = at else { continue };
                let labels = || vec![("namespace", ns), ("pod", pod)];
                p_cpu.push(sample(labels(), seconds(total.cpu_ns), Some(at)));
                p_mem.push(sample(labels(), total.working_set_bytes as f64, Some(at)));
                p_swap.push(sample(labels(), total.swap_bytes as f64, Some(at)));
            }
            let node = &s.node;
            let at = Some(node.at);
            let n_cpu = vec![sample(vec![], seconds(node.usage.cpu_ns), at)];
            let n_mem = vec![sample(vec![], node.usage.working_set_bytes as f64, at)];
            let n_swap = node
                .usage
                .swap_bytes
                .map(|b| sample(vec![], b as f64, at))
                .into_iter()
                .collect();
            families.extend([
                (&CONTAINER_CPU, c_cpu),
                (&CONTAINER_MEMORY, c_mem),
                (&CONTAINER_START, c_start),
                (&CONTAINER_SWAP, c_swap),
                (&NODE_CPU, n_cpu),
                (&NODE_MEMORY, n_mem),
                (&NODE_SWAP, n_swap),
                (&POD_CPU, p_cpu),
                (&POD_MEMORY, p_mem),
                (&POD_SWAP, p_swap),
            ]);
            0.0
        }
        Err(_) => 1.0,
    };
    families.push((&SCRAPE_ERROR, vec![sample(vec![], error, None)]));
    let mut out = String::new();
    for (desc, mut samples) in families {
        // The Go client writes no family that has no samples.
        if samples.is_empty() {
            continue;
        }
        samples.sort_by(|a, b| {
            a.labels
                .iter()
                .map(|l| l.1)
                .cmp(b.labels.iter().map(|l| l.1))
                .then(a.timestamp_ms.cmp(&b.timestamp_ms))
        });
        write_family(&mut out, desc, &samples);
    }
    out
}

fn write_family(out: &mut String, desc: &Desc, samples: &[Sample<'_>]) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP {} {}", desc.name, desc.help);
    let _ = writeln!(out, "# TYPE {} {}", desc.name, desc.kind);
    for s in samples {
        out.push_str(desc.name);
        if !s.labels.is_empty() {
            out.push('{');
            for (i, (name, value)) in s.labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(name);
                out.push_str("=\"");
                out.push_str(&kbatch_metrics::escape(value));
                out.push('"');
            }
            out.push('}');
        }
        out.push(' ');
        out.push_str(&go_float(s.value));
        if let Some(ms) = s.timestamp_ms {
            let _ = write!(out, " {ms}");
        }
        out.push('\n');
    }
}

/// A sample value as the Go client writes it: 0, 1 and -1 and the specials spelled out, the rest
/// `strconv.FormatFloat(v, 'g', -1, 64)`: the shortest digits that read back the same, with an
/// exponent (`e+09`, at least two digits) when it is below -4 or at least 6.
fn go_float(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    // Rust's `{:e}` writes the same shortest digits: `1.6243962483020916e9`.
    let sci = format!("{v:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci;
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return sci;
    };
    if (-4..6).contains(&exp) {
        // Rust's `{}` never uses an exponent and writes the same shortest digits.
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ns: i128) -> Timestamp {
        Timestamp::from_nanosecond(ns).unwrap()
    }

    #[test]
    fn go_float_formatting() {
        for (v, want) in [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (10.0, "10"),
            (0.5, "0.5"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1_048_576.0, "1.048576e+06"),
            (12.34, "12.34"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (1.6243962483020916e9, "1.6243962483020916e+09"),
            (1e100, "1e+100"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_float(v), want, "{v}");
        }
    }

    #[test]
    fn renders_as_kubelets_collector() {
        // Upstream's test times: 2021-06-23 05:11:18.302091597 +0800.
        let at = ts(1_624_396_278_302_091_597);
        let container = |name: &str, started_ns: i128, cpu_ns, ws, swap| ContainerSample {
            name: name.to_string(),
            started_at: ts(started_ns),
            at,
            usage: GroupUsage {
                cpu_ns,
                working_set_bytes: ws,
                swap_bytes: swap,
            },
        };
        let snapshot = Snapshot {
            node: NodeSample {
                at,
                usage: NodeUsage {
                    cpu_ns: 10_000_000_000,
                    working_set_bytes: 1000,
                    swap_bytes: Some(500),
                },
            },
            // Out of order, to be sorted by label values.
            pods: vec![
                PodSample {
                    namespace: "namespace_b".into(),
                    name: "pod_b".into(),
                    containers: vec![container(
                        "container_a",
                        1_624_395_678_302_091_597,
                        10_000_000_000,
                        1000,
                        0,
                    )],
                },
                PodSample {
                    namespace: "namespace_a".into(),
                    name: "pod_a".into(),
                    containers: vec![
                        container(
                            "container_b",
                            1_624_396_158_302_091_597,
                            2_500_000_000,
                            33_554_432,
                            0,
                        ),
                        container(
                            "container_a",
                            1_624_396_248_302_091_597,
                            10_000_000_000,
                            1000,
                            1000,
                        ),
                    ],
                },
            ],
        };
        let want = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="container_a",namespace="namespace_a",pod="pod_a"} 10 1624396278302
container_cpu_usage_seconds_total{container="container_a",namespace="namespace_b",pod="pod_b"} 10 1624396278302
container_cpu_usage_seconds_total{container="container_b",namespace="namespace_a",pod="pod_a"} 2.5 1624396278302
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="container_a",namespace="namespace_a",pod="pod_a"} 1000 1624396278302
container_memory_working_set_bytes{container="container_a",namespace="namespace_b",pod="pod_b"} 1000 1624396278302
container_memory_working_set_bytes{container="container_b",namespace="namespace_a",pod="pod_a"} 3.3554432e+07 1624396278302
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="container_a",namespace="namespace_a",pod="pod_a"} 1.6243962483020916e+09
container_start_time_seconds{container="container_a",namespace="namespace_b",pod="pod_b"} 1.6243956783020916e+09
container_start_time_seconds{container="container_b",namespace="namespace_a",pod="pod_a"} 1.6243961583020916e+09
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="container_a",namespace="namespace_a",pod="pod_a"} 1000 1624396278302
container_swap_usage_bytes{container="container_a",namespace="namespace_b",pod="pod_b"} 0 1624396278302
container_swap_usage_bytes{container="container_b",namespace="namespace_a",pod="pod_a"} 0 1624396278302
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 10 1624396278302
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1000 1624396278302
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 500 1624396278302
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="namespace_a",pod="pod_a"} 12.5 1624396278302
pod_cpu_usage_seconds_total{namespace="namespace_b",pod="pod_b"} 10 1624396278302
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="namespace_a",pod="pod_a"} 3.3555432e+07 1624396278302
pod_memory_working_set_bytes{namespace="namespace_b",pod="pod_b"} 1000 1624396278302
# HELP pod_swap_usage_bytes [ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems
# TYPE pod_swap_usage_bytes gauge
pod_swap_usage_bytes{namespace="namespace_a",pod="pod_a"} 1000 1624396278302
pod_swap_usage_bytes{namespace="namespace_b",pod="pod_b"} 0 1624396278302
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;
        assert_eq!(render(Ok(&snapshot)), want);

        // Nothing running, no swap fields: the node's lines and the error gauge only.
        let idle = Snapshot {
            node: NodeSample {
                at,
                usage: NodeUsage {
                    cpu_ns: 1_234_560_000_000,
                    working_set_bytes: 4_000_000_000,
                    swap_bytes: None,
                },
            },
            pods: vec![],
        };
        let want = "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 1234.56 1624396278302
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 4e+09 1624396278302
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
";
        assert_eq!(render(Ok(&idle)), want);

        // Readings failed: the error gauge alone, as upstream's "error getting summary".
        let want = "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 1
";
        assert_eq!(render(Err(&std::io::Error::other("x"))), want);
    }

    #[test]
    fn label_values_are_escaped() {
        let out = kbatch_metrics::escape("a\\b\"c\nd");
        assert_eq!(out, r#"a\\b\"c\nd"#);
    }
}
