//! `/openapi/v2` against a real `kbatch up`: kubectl reads it for `kubectl explain
//! --output=plaintext-openapiv2` and for the strategic merge patch of a client-side `kubectl
//! apply`; plain GETs see kube-openapi's content negotiation and conditional requests.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::process::Command;

use common::Server;
use kube::Client;

const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const PROTOBUF_DEPRECATED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// kubectl with the server's kubeconfig and a cache dir of its own; stdout and stderr.
fn kubectl(
    server: &Server,
    cache: &tempfile::TempDir,
    args: &[&str],
    stdin: Option<&str>,
) -> (String, String) {
    let mut cmd = Command::new("kubectl");
    cmd.arg(format!("--cache-dir={}", cache.path().display()))
        .args(args)
        .env("KUBECONFIG", server.kubeconfig());
    let out = common::run_captured(cmd, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "kubectl {} failed:\n{stdout}\n{stderr}\nserver logs:\n{}",
        args.join(" "),
        server.logs()
    );
    (stdout, stderr)
}

/// Whether kubectl's log shows `GET …/openapi/v2` answered 200: on the request's line at
/// `-v=6`, on the `Response Status` line after it at `-v=8`.
fn fetched_v2(log: &str) -> bool {
    let mut lines = log.lines();
    while let Some(l) = lines.next() {
        if l.contains("GET http") && l.contains("/openapi/v2") {
            if l.contains("200 OK") {
                return true;
            }
            return lines
                .find(|l| l.contains("Response Status:"))
                .is_some_and(|l| l.contains("200 OK"));
        }
    }
    false
}

/// The strategic merge patch kubectl logged at `-v=8`: the `Request Body` logged before its
/// PATCH.
fn patch_body(log: &str) -> serde_json::Value {
    let lines: Vec<&str> = log.lines().collect();
    let patch = lines
        .iter()
        .position(|l| l.contains("PATCH http"))
        .unwrap_or_else(|| panic!("no PATCH logged:\n{log}"));
    let line = lines[..patch]
        .iter()
        .rev()
        .find(|l| l.contains("\"Request Body\" body=\"{"))
        .unwrap_or_else(|| panic!("no request body logged:\n{log}"));
    let quoted = line.split_once("body=").map(|(_, b)| b).unwrap_or_default();
    // The body is logged as a Go-quoted string; its escapes are JSON's.
    let text: String =
        serde_json::from_str(quoted).unwrap_or_else(|e| panic!("logged body {quoted}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("patch {text}: {e}"))
}

#[tokio::test]
async fn kubectl_explain_reads_the_v2_schemas() {
    let s = Server::start().await;
    let cache = tempfile::tempdir().expect("cache dir");
    let (out, log) = kubectl(
        &s,
        &cache,
        &[
            "explain",
            "--output=plaintext-openapiv2",
            "jobs.spec.template.spec.containers",
            "-v=6",
        ],
        None,
    );
    assert!(fetched_v2(&log), "explain did not read /openapi/v2:\n{log}");
    for want in [
        "KIND:     Job",
        "VERSION:  batch/v1",
        "RESOURCE: containers <[]Object>",
        "List of containers belonging to the pod.",
        "FIELDS:",
        "   command\t<[]string>",
        "   name\t<string> -required-",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
}

fn cronjob(first_command: &str, second_priority: u32) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          evictionResponders:
          - name: acme.io/first
            priority: 10000
          - name: acme.io/second
            priority: {second_priority}
          containers:
          - name: main
            image: busybox
            command: ["sh", "-c", "{first_command}"]
          - name: side
            image: busybox
            command: ["sleep", "1"]
"#
    )
}

/// Client-side apply of a changed object: kubectl computes its strategic merge patch from the
/// merge keys in `/openapi/v2`. A Job's pod template is immutable, as upstream's, so the
/// changed containers are a CronJob's job template.
#[tokio::test]
async fn client_side_apply_merges_lists_by_the_v2_merge_keys() {
    let s = Server::start().await;
    let cache = tempfile::tempdir().expect("cache dir");
    kubectl(
        &s,
        &cache,
        &["apply", "-f", "-"],
        Some(&cronjob("echo one", 5000)),
    );
    let (out, log) = kubectl(
        &s,
        &cache,
        &["apply", "-f", "-", "-v=8"],
        Some(&cronjob("echo two", 6000)),
    );
    assert!(out.contains("cronjob.batch/nightly configured"), "{out}");
    assert!(fetched_v2(&log), "apply did not read /openapi/v2:\n{log}");
    let patch = patch_body(&log);
    let pod_spec = &patch["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    // Merged by name: the order of the list, and only the changed container.
    assert_eq!(
        pod_spec["$setElementOrder/containers"],
        serde_json::json!([{"name": "main"}, {"name": "side"}]),
        "{patch}"
    );
    assert_eq!(
        pod_spec["containers"],
        serde_json::json!([{"name": "main", "command": ["sh", "-c", "echo two"]}]),
        "{patch}"
    );
    // kubectl's compiled-in types predate `evictionResponders`: its merge key can only have
    // come from this server's document.
    assert_eq!(
        pod_spec["$setElementOrder/evictionResponders"],
        serde_json::json!([{"name": "acme.io/first"}, {"name": "acme.io/second"}]),
        "{patch}"
    );
    assert_eq!(
        pod_spec["evictionResponders"],
        serde_json::json!([{"name": "acme.io/second", "priority": 6000}]),
        "{patch}"
    );

    let (json, _) = kubectl(
        &s,
        &cache,
        &["get", "cronjob", "nightly", "-o", "json"],
        None,
    );
    let cj: serde_json::Value = serde_json::from_str(&json).expect("cronjob JSON");
    let spec = &cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 2, "{spec}");
    assert_eq!(containers[0]["name"], "main");
    assert_eq!(
        containers[0]["command"],
        serde_json::json!(["sh", "-c", "echo two"])
    );
    assert_eq!(containers[1]["name"], "side");
    assert_eq!(containers[1]["command"], serde_json::json!(["sleep", "1"]));
    assert_eq!(
        spec["evictionResponders"],
        serde_json::json!([
            {"name": "acme.io/first", "priority": 10000},
            {"name": "acme.io/second", "priority": 6000}
        ])
    );
}

struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn get(client: &Client, headers: &[(&str, &str)]) -> Got {
    let mut req = http::Request::get("/openapi/v2");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(kube::client::Body::empty())
        .expect("build request");
    let resp = client.send(req).await.expect("GET /openapi/v2");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect_bytes()
        .await
        .expect("read the body")
        .to_vec();
    Got {
        status,
        headers,
        body,
    }
}

/// The length-delimited field `field` of a protobuf message (the first one).
fn pb_field(mut b: &[u8], field: u64) -> Option<&[u8]> {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut n = 0;
        for shift in (0..64).step_by(7) {
            let (byte, rest) = b.split_first()?;
            *b = rest;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }
    while !b.is_empty() {
        let key = varint(&mut b)?;
        match key & 7 {
            0 => {
                varint(&mut b)?;
            }
            2 => {
                let len = usize::try_from(varint(&mut b)?).ok()?;
                let (value, rest) = b.split_at_checked(len)?;
                b = rest;
                if key >> 3 == field {
                    return Some(value);
                }
            }
            _ => return None,
        }
    }
    None
}

#[tokio::test]
async fn served_as_json_and_protobuf_with_conditional_requests() {
    let s = Server::start().await;
    let client = s.client().await;

    let json = get(&client, &[]).await;
    assert_eq!(json.status, 200);
    assert_eq!(json.header("content-type"), Some("application/json"));
    assert_eq!(json.header("vary"), Some("Accept"));
    let etag = json.header("etag").expect("an ETag").to_string();
    assert!(
        json.header("last-modified")
            .is_some_and(|d| d.ends_with(" GMT"))
    );
    let doc: serde_json::Value = serde_json::from_slice(&json.body).expect("JSON document");
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(
        doc["definitions"]["io.k8s.api.batch.v1.Job"]["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "batch", "kind": "Job", "version": "v1"}])
    );
    assert_eq!(
        doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["x-kubernetes-patch-merge-key"],
        "name"
    );
    let star = get(&client, &[("accept", "*/*")]).await;
    assert_eq!(star.body, json.body);

    let mut protobuf = Vec::new();
    for accept in [PROTOBUF_DEPRECATED, PROTOBUF] {
        let pb = get(&client, &[("accept", accept)]).await;
        assert_eq!(pb.status, 200, "{accept}");
        assert_eq!(pb.header("content-type"), Some(PROTOBUF), "{accept}");
        assert_eq!(pb.header("etag"), Some(etag.as_str()));
        // Document: swagger 1, info 2 (title 1, version 2).
        assert_eq!(pb_field(&pb.body, 1), Some(&b"2.0"[..]));
        let info = pb_field(&pb.body, 2).expect("info");
        assert_eq!(pb_field(info, 1), Some(&b"Kubernetes"[..]));
        assert_eq!(
            pb_field(info, 2).map(|v| String::from_utf8_lossy(v).into_owned()),
            doc["info"]["version"].as_str().map(str::to_string)
        );
        assert!(
            pb_field(&pb.body, 9).is_some_and(|d| d.len() > 100_000),
            "definitions"
        );
        protobuf.push(pb.body);
    }
    assert_eq!(protobuf[0], protobuf[1]);

    let refused = get(&client, &[("accept", "text/html")]).await;
    assert_eq!(refused.status, 406);
    assert!(refused.body.is_empty());

    let cached = get(&client, &[("if-none-match", &etag)]).await;
    assert_eq!(cached.status, 304);
    assert_eq!(cached.header("etag"), Some(etag.as_str()));
    assert!(cached.body.is_empty());
    let cached_pb = get(
        &client,
        &[("accept", PROTOBUF_DEPRECATED), ("if-none-match", &etag)],
    )
    .await;
    assert_eq!(cached_pb.status, 304);
    let changed = get(&client, &[("if-none-match", "\"0000\"")]).await;
    assert_eq!(changed.status, 200);
    assert_eq!(changed.body, json.body);

    // Counted as upstream counts its OpenAPI handlers: the path as the subresource.
    let m = common::raw(&client, "GET", "/metrics", None, Vec::new())
        .await
        .body;
    for (code, n) in [("200", 5), ("304", 2), ("406", 1)] {
        let series = format!(
            "apiserver_request_total{{verb=\"GET\",dry_run=\"\",group=\"\",version=\"\",resource=\"\",subresource=\"/openapi/v2\",scope=\"\",component=\"\",code=\"{code}\"}} {n}"
        );
        assert!(m.lines().any(|l| l == series), "no {series} in:\n{m}");
    }
}
