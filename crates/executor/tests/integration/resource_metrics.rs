//! kubelet's resource metrics (`GET /metrics/resource` on the node's kubelet endpoint) against
//! real running containers: a busy loop's CPU counter grows, a memory holder's working set
//! shows, a pod is the sum of its containers, and a deleted pod's samples go.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::streams::{node_port, raw_request, running};
use common::*;
use serde_json::json;

/// One sample line: metric name, labels in their order, value, timestamp.
#[derive(Debug, Clone)]
struct Line {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
    timestamp_ms: Option<i64>,
}

/// Enough of the text format to read what the endpoint writes (label values here hold no
/// escapes, commas or spaces).
fn parse(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, rest) = match line.find('}') {
            Some(i) => (&line[..=i], line[i + 1..].trim()),
            None => line.split_once(' ').expect("name and value"),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels
                    .trim_end_matches('}')
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("label=value");
                        (k.to_string(), v.trim_matches('"').to_string())
                    })
                    .collect();
                (name, labels)
            }
            None => (series, Vec::new()),
        };
        let mut words = rest.split(' ');
        let value = words.next().expect("value").parse().expect("float value");
        let timestamp_ms = words.next().map(|t| t.parse().expect("timestamp"));
        out.push(Line {
            name: name.to_string(),
            labels,
            value,
            timestamp_ms,
        });
    }
    out
}

async fn scrape(port: u16) -> (String, Vec<Line>) {
    let (status, head, body) = raw_request(port, "/metrics/resource", &[]).await;
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.lines().any(|l| l.trim_end()
            == "content-type: text/plain; version=0.0.4; charset=utf-8; escaping=underscores"),
        "{head}"
    );
    let lines = parse(&body);
    (body, lines)
}

fn find<'a>(lines: &'a [Line], name: &str, labels: &[(&str, &str)]) -> Option<&'a Line> {
    lines.iter().find(|l| {
        l.name == name
            && l.labels.len() == labels.len()
            && l.labels
                .iter()
                .zip(labels)
                .all(|((k, v), (wk, wv))| k == wk && v == wv)
    })
}

fn container_line<'a>(lines: &'a [Line], name: &str, c: &str) -> &'a Line {
    find(
        lines,
        name,
        &[("container", c), ("namespace", "default"), ("pod", "busy")],
    )
    .unwrap_or_else(|| panic!("{name} of container {c}: {lines:#?}"))
}

fn pod_line<'a>(lines: &'a [Line], name: &str) -> &'a Line {
    find(lines, name, &[("namespace", "default"), ("pod", "busy")])
        .unwrap_or_else(|| panic!("{name} of pod busy: {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_metrics_of_running_containers() {
    let c = Cluster::start().await;
    let port = node_port(&c).await;

    // Nothing runs yet: the node's lines and the error gauge.
    let (body, lines) = scrape(port).await;
    for name in [
        "node_cpu_usage_seconds_total",
        "node_memory_working_set_bytes",
    ] {
        let l = find(&lines, name, &[]).unwrap_or_else(|| panic!("{name}: {body}"));
        assert!(l.value > 0.0 && l.timestamp_ms.is_some(), "{l:?}");
    }
    let err = find(&lines, "resource_scrape_error", &[]).expect("resource_scrape_error");
    assert_eq!((err.value, err.timestamp_ms), (0.0, None));
    assert!(
        !lines.iter().any(|l| l.name.starts_with("container_")),
        "{body}"
    );
    assert!(body.contains("# TYPE node_cpu_usage_seconds_total counter\n"));
    assert!(body.contains(
        "# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes\n"
    ));

    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "busy"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "spin", "image": "busybox", "command": ["sh", "-c", "while :; do :; done"]},
                // 16 MiB held in a shell variable while the shell waits for sleep.
                {"name": "hold", "image": "busybox", "command": ["sh", "-c",
                    "x=$(head -c 16777216 /dev/zero | tr '\\0' a); sleep 600; echo ${#x}"]}
            ]
        }
    }))
    .await;
    c.wait_pod("busy", 30, "both containers running", |p| {
        running(p, "spin") && running(p, "hold")
    })
    .await;
    // The holder has filled its variable once its working set shows it.
    let first = eventually(
        Duration::from_secs(30),
        "the holder's 16 MiB show",
        || async {
            let (_, lines) = scrape(port).await;
            let held = find(
                &lines,
                "container_memory_working_set_bytes",
                &[
                    ("container", "hold"),
                    ("namespace", "default"),
                    ("pod", "busy"),
                ],
            )?
            .value;
            (held > 16_000_000.0).then_some(lines)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (body, second) = scrape(port).await;

    // The busy loop used a good part of a core over the interval (generous for a loaded
    // machine), measured between the samples' own timestamps.
    let (a, b) = (
        container_line(&first, "container_cpu_usage_seconds_total", "spin"),
        container_line(&second, "container_cpu_usage_seconds_total", "spin"),
    );
    let elapsed = (b.timestamp_ms.expect("ts") - a.timestamp_ms.expect("ts")) as f64 / 1000.0;
    assert!(elapsed >= 1.0, "{a:?} {b:?}");
    let rate = (b.value - a.value) / elapsed;
    assert!(rate > 0.2, "spin used {rate} cores: {a:?} {b:?}");
    assert!(rate < 4.0, "one thread can't use {rate} cores");

    for c_name in ["spin", "hold"] {
        let mem = container_line(&second, "container_memory_working_set_bytes", c_name);
        assert!(mem.value > 0.0, "{mem:?}");
        let start = container_line(&second, "container_start_time_seconds", c_name);
        assert!(start.timestamp_ms.is_none(), "{start:?}");
        let now = jiff::Timestamp::now().as_second() as f64;
        assert!(
            start.value > now - 120.0 && start.value <= now + 1.0,
            "{start:?}"
        );
        container_line(&second, "container_swap_usage_bytes", c_name);
    }

    // The pod is the sum of its containers, at the same time.
    for (c_metric, p_metric) in [
        (
            "container_cpu_usage_seconds_total",
            "pod_cpu_usage_seconds_total",
        ),
        (
            "container_memory_working_set_bytes",
            "pod_memory_working_set_bytes",
        ),
        ("container_swap_usage_bytes", "pod_swap_usage_bytes"),
    ] {
        let sum = container_line(&second, c_metric, "spin").value
            + container_line(&second, c_metric, "hold").value;
        let p = pod_line(&second, p_metric);
        assert!(
            (p.value - sum).abs() <= 1e-6 * sum.max(1.0),
            "{p_metric} {} != {sum}",
            p.value
        );
        assert_eq!(
            p.timestamp_ms,
            container_line(&second, c_metric, "spin").timestamp_ms
        );
    }

    // Labels exactly as kubelet's: container, namespace, pod (by name); pods: namespace, pod;
    // the node's none.
    for l in &second {
        let names: Vec<&str> = l.labels.iter().map(|(k, _)| k.as_str()).collect();
        let want: &[&str] = if l.name.starts_with("container_") {
            &["container", "namespace", "pod"]
        } else if l.name.starts_with("pod_") {
            &["namespace", "pod"]
        } else {
            &[]
        };
        assert_eq!(names, want, "{l:?}");
    }
    // Families in name order, each once, with kubelet's types.
    let mut families = BTreeMap::new();
    let mut order = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("type");
            assert!(families.insert(name, kind).is_none(), "{name} twice");
            order.push(name);
        }
    }
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    for (name, kind) in [
        ("container_cpu_usage_seconds_total", "counter"),
        ("container_memory_working_set_bytes", "gauge"),
        ("container_start_time_seconds", "gauge"),
        ("container_swap_usage_bytes", "gauge"),
        ("node_cpu_usage_seconds_total", "counter"),
        ("node_memory_working_set_bytes", "gauge"),
        ("pod_cpu_usage_seconds_total", "counter"),
        ("pod_memory_working_set_bytes", "gauge"),
        ("pod_swap_usage_bytes", "gauge"),
        ("resource_scrape_error", "gauge"),
    ] {
        assert_eq!(families.get(name), Some(&kind), "{name}: {body}");
    }

    // A deleted pod's samples go with its containers.
    c.delete("busy").await;
    c.wait_gone("busy", 30).await;
    eventually(
        Duration::from_secs(30),
        "the deleted pod's samples are gone",
        || async {
            let (_, lines) = scrape(port).await;
            (!lines
                .iter()
                .any(|l| l.labels.iter().any(|(k, v)| k == "pod" && v == "busy")))
            .then_some(())
        },
    )
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_containers_have_no_samples() {
    let c = Cluster::start_with(kbatch_executor::RuntimeKind::Simulate, 110).await;
    let port = node_port(&c).await;
    let mut sim = pod("sim", &["sleep", "300"], "Never");
    sim["metadata"]["annotations"] = json!({"kbatch.dev/simulate-duration": "5m"});
    c.create(sim).await;
    c.wait_pod("sim", 30, "main running", |p| running(p, "main"))
        .await;
    let (body, lines) = scrape(port).await;
    assert!(
        find(&lines, "node_cpu_usage_seconds_total", &[]).is_some(),
        "{body}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.name.starts_with("container_") || l.name.starts_with("pod_")),
        "{body}"
    );
    c.shutdown().await;
}
