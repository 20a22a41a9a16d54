//! `kubectl top pod` and `kubectl top node` against `kbatch up --executor process
//! --metric-resolution 1s`: the API server scrapes the node's kubelet endpoint and serves
//! metrics.k8s.io as metrics-server does; a busy-looping pod shows well over 100m of CPU.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

/// kubectl with the server's kubeconfig: (exit code, stdout, stderr).
/// `kubectl top`'s CPU column in millicores (`998m`, or whole cores: `2`).
fn millicores(cell: &str) -> u64 {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => cell.parse::<u64>().map(|c| c * 1000).unwrap_or(0),
    }
}

async fn create(pods: &Api<Pod>, name: &str, app: &str, script: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox", "command": ["sh", "-c", script]}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
}

/// Runs `kubectl args` until it succeeds with rows that `accept` takes (polled every half
/// second: a metric needs two scrapes of a running container).
async fn top(server: &Server, args: &[&str], accept: impl Fn(&[Vec<String>]) -> bool) -> String {
    eventually(
        Duration::from_secs(90),
        &format!("kubectl {args:?}"),
        || async {
            let (code, out, _) = server.kubectl(args);
            let rows: Vec<Vec<String>> = out
                .lines()
                .skip(1)
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .collect();
            if code == 0 && accept(&rows) {
                return Some(out);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            None
        },
    )
    .await
}

#[tokio::test]
async fn kubectl_top_shows_pod_and_node_usage() {
    let server = Server::start_with(&["--executor", "process", "--metric-resolution", "1s"]).await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    create(&pods, "busy", "spin", "while :; do :; done").await;
    // A container that has used no CPU at all is left out, as metrics-server leaves out a
    // zero counter: the idle one counts a little first.
    create(
        &pods,
        "idle",
        "rest",
        "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 300",
    )
    .await;

    // Discovery names the group, so kubectl asks it rather than saying it is not available.
    let (code, out, err) = server.kubectl(&["api-versions"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l == "metrics.k8s.io/v1beta1"), "{out}");

    let out = top(&server, &["top", "pod"], |rows| {
        let cpu = |name: &str| {
            rows.iter()
                .find(|r| r.first().map(String::as_str) == Some(name))
                .map(|r| millicores(&r[1]))
        };
        cpu("busy").is_some_and(|m| m > 100) && cpu("idle").is_some()
    })
    .await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "CPU(cores)", "MEMORY(bytes)"], "{out}");
    let idle = out
        .lines()
        .find(|l| l.starts_with("idle "))
        .unwrap_or_else(|| panic!("{out}"));
    let cells: Vec<&str> = idle.split_whitespace().collect();
    assert!(millicores(cells[1]) < 100, "{out}");
    assert!(cells[2].ends_with("Mi"), "{out}");

    // A label selector narrows the list; --containers names each container.
    let out = top(
        &server,
        &["top", "pod", "-l", "app=spin", "--containers"],
        |rows| rows.len() == 1 && rows[0].len() == 4 && millicores(&rows[0][2]) > 100,
    )
    .await;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{out}"
    );
    assert_eq!(&lines[1][..2], ["busy", "main"], "{out}");

    // The node: its usage and its share of what it can allocate.
    let out = top(&server, &["top", "node"], |rows| {
        rows.len() == 1 && millicores(&rows[0][1]) > 100
    })
    .await;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][0], "NAME", "{out}");
    assert_eq!(lines[0][1], "CPU(cores)", "{out}");
    assert!(lines[0].contains(&"MEMORY(bytes)"), "{out}");
    assert_eq!(lines[1][0], "kbatch-node", "{out}");

    // The raw objects are metrics-server's.
    let (code, out, err) = server.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy",
    ]);
    assert_eq!(code, 0, "{err}");
    let m: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(m["kind"], "PodMetrics");
    assert_eq!(m["metadata"]["labels"]["app"], "spin");
    assert!(
        m["window"].as_str().is_some_and(|w| w.ends_with('s')),
        "{m}"
    );
    let cpu = m["containers"][0]["usage"]["cpu"].as_str().unwrap_or("");
    // A quantity as metrics-server writes it: nanocores scaled down, so a
    // busy loop's usage may be exactly "1" (one core) as well as "998m".
    let digits = cpu.trim_end_matches(['n', 'u', 'm']);
    assert!(
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()),
        "{m}"
    );

    // `kubectl get` prints metrics-server's Table.
    let (code, out, err) = server.kubectl(&["get", "pods.metrics.k8s.io", "busy"]);
    assert_eq!(code, 0, "{err}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "CPU", "MEMORY", "WINDOW"], "{out}");

    // A pod that is not there: the pod lister's NotFound, as kubectl shows it.
    let (code, _, err) = server.kubectl(&["top", "pod", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("pods \"nope\" not found"), "{err}");
}
