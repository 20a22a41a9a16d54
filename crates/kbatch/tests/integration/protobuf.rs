//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) against a real
//! `kbatch up`: the bodies kubectl 1.32 sent, bad bodies, and kubectl itself.

use crate::common;

use std::process::Command;

use base64::Engine;
use common::{Raw, Server, raw};
use serde_json::Value;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const QUERY: &str = "?fieldManager=kubectl-create&fieldValidation=Strict";
const NAMESPACES: &str = "/api/v1/namespaces";
const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const CRONJOBS: &str = "/apis/batch/v1/namespaces/default/cronjobs";

/// `kubectl create namespace foo` (kubectl 1.32).
const NAMESPACE_FOO: &str =
    "azhzAAoPCgJ2MRIJTmFtZXNwYWNlEhsKEwoDZm9vEgAaACIAKgAyADgAQgASABoCCgAaACIA";
/// `kubectl create job j2 --image=busybox -- echo hi`.
const JOB_J2: &str = "azhzAAoPCghiYXRjaC92MRIDSm9iEoQBChIKAmoyEgAaACIAKgAyADgAQgASZDJiChAKABIAGgAiACoAMgA4AEIAEk4SKwoCajISB2J1c3lib3gaBGVjaG8aAmhpKgBCAGoAcgCAAQCIAQCQAQCiAQAaBU5ldmVyMgBCAEoAUgBYAGAAaACCAQCKAQCaAQDCAQAaCCAAKAAwADoAGgAiAA==";
/// `kubectl create cronjob hello2 --image=busybox --schedule="*/1 * * * *" -- echo hi`.
const CRONJOB_HELLO2: &str = "azhzAAoTCghiYXRjaC92MRIHQ3JvbkpvYhK1AQoWCgZoZWxsbzISABoAIgAqADIAOABCABKYAQoLKi8xICogKiAqICoaACqGAQoWCgZoZWxsbzISABoAIgAqADIAOABCABJsMmoKEAoAEgAaACIAKgAyADgAQgASVhIvCgZoZWxsbzISB2J1c3lib3gaBGVjaG8aAmhpKgBCAGoAcgCAAQCIAQCQAQCiAQAaCU9uRmFpbHVyZTIAQgBKAFIAWABgAGgAggEAigEAmgEAwgEAGgAaACIA";
/// `kubectl create job manual1 --from=cronjob/hello`.
const JOB_MANUAL1: &str = "azhzAAoPCghiYXRjaC92MRIDSm9iEoICCogBCgdtYW51YWwxEgAaACIAKgAyADgAQgBiKwohY3JvbmpvYi5rdWJlcm5ldGVzLmlvL2luc3RhbnRpYXRlEgZtYW51YWxqQgoHQ3JvbkpvYhoFaGVsbG8iJGJmYWM2NDJlLWRkNjktNGVhNy1iMjNhLTM5ZmJlNGYzYzc2YioIYmF0Y2gvdjEwARJrMmkKEAoAEgAaACIAKgAyADgAQgASVRIuCgVoZWxsbxIHYnVzeWJveBoEZWNobxoCaGkqAEIAagByAIABAIgBAJABAKIBABoJT25GYWlsdXJlMgBCAEoAUgBYAGAAaACCAQCKAQCaAQDCAQAaCCAAKAAwADoAGgAiAA==";

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("fixture is base64")
}

async fn post_pb(client: &kube::Client, path: &str, body: Vec<u8>) -> Raw {
    raw(
        client,
        "POST",
        &format!("{path}{QUERY}"),
        Some(PROTOBUF),
        body,
    )
    .await
}

async fn get(client: &kube::Client, path: &str) -> Value {
    let r = raw(client, "GET", path, None, Vec::new()).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.json()
}

/// The four captured kubectl bodies create their objects, answered in JSON; what is stored
/// went through defaulting as a JSON create would (the empty strings kubectl writes did not
/// block it).
#[tokio::test]
async fn captured_kubectl_bodies_create_objects() {
    let server = Server::start().await;
    let client = server.client().await;

    let r = post_pb(&client, NAMESPACES, b64(NAMESPACE_FOO)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let ns = get(&client, "/api/v1/namespaces/foo").await;
    assert_eq!(ns["metadata"]["name"], "foo");
    assert!(ns["metadata"].get("generateName").is_none(), "{ns}");
    assert_eq!(ns["status"]["phase"], "Active");

    let r = post_pb(&client, JOBS, b64(JOB_J2)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let job = get(&client, &format!("{JOBS}/j2")).await;
    assert_eq!(job["metadata"]["namespace"], "default");
    assert!(
        job["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    let pod_spec = &job["spec"]["template"]["spec"];
    assert_eq!(pod_spec["restartPolicy"], "Never");
    assert_eq!(pod_spec["dnsPolicy"], "ClusterFirst", "{job}");
    assert_eq!(pod_spec["schedulerName"], "default-scheduler");
    let c = &pod_spec["containers"][0];
    assert_eq!(c["name"], "j2");
    assert_eq!(c["image"], "busybox");
    assert_eq!(c["command"], serde_json::json!(["echo", "hi"]));
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(job["spec"]["backoffLimit"], 6);

    let r = post_pb(&client, CRONJOBS, b64(CRONJOB_HELLO2)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let cj = get(&client, &format!("{CRONJOBS}/hello2")).await;
    assert_eq!(cj["spec"]["schedule"], "*/1 * * * *");
    assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(cj["spec"]["jobTemplate"]["metadata"]["name"], "hello2");
    assert_eq!(
        cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"],
        "OnFailure"
    );

    // Its owner (a CronJob uid from another cluster) does not exist here, so the garbage
    // collector may remove it at any time: check the create's answer.
    let r = post_pb(&client, JOBS, b64(JOB_MANUAL1)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let m = r.json();
    assert_eq!(m["metadata"]["name"], "manual1");
    assert_eq!(
        m["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"],
        "manual"
    );
    let owner = &m["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "CronJob");
    assert_eq!(owner["name"], "hello");
    assert_eq!(owner["uid"], "bfac642e-dd69-4ea7-b23a-39fbe4f3c76b");
    assert_eq!(owner["controller"], true);
    assert_eq!(
        m["spec"]["template"]["spec"]["containers"][0]["name"],
        "hello"
    );
}

/// Assert a 400 Status whose message contains `text`.
fn bad_request(r: &Raw, text: &str) {
    assert_eq!(r.status, 400, "{}", r.body);
    let s = r.json();
    assert_eq!(s["kind"], "Status", "{}", r.body);
    assert_eq!(s["reason"], "BadRequest", "{}", r.body);
    let msg = s["message"].as_str().unwrap_or_default();
    assert!(msg.contains(text), "{msg:?} lacks {text:?}");
}

/// Bad protobuf bodies are 400 Statuses naming the problem, never a 5xx.
#[tokio::test]
async fn bad_protobuf_bodies_are_bad_requests() {
    let server = Server::start().await;
    let client = server.client().await;
    let job = b64(JOB_J2);

    let r = post_pb(&client, JOBS, br#"{"kind":"Job"}"#.to_vec()).await;
    bad_request(&r, "does not start with the protobuf prefix");
    let r = post_pb(&client, JOBS, job[..job.len() / 2].to_vec()).await;
    bad_request(
        &r,
        "error decoding request body as protobuf: unexpected end of data",
    );
    // A Job body sent to the pods endpoint, and a Namespace to the jobs endpoint.
    let r = post_pb(&client, "/api/v1/namespaces/default/pods", job.clone()).await;
    bad_request(&r, "does not match the expected");
    let r = post_pb(&client, JOBS, b64(NAMESPACE_FOO)).await;
    bad_request(&r, "does not match the expected");
    // A kind the server has no schema for.
    let mut gadget = job.clone();
    let at = gadget
        .windows(3)
        .position(|w| w == b"Job")
        .expect("kind in the envelope");
    gadget[at..at + 3].copy_from_slice(b"Jib");
    let r = post_pb(&client, JOBS, gadget).await;
    bad_request(&r, "no kind \"Jib\" is registered for version \"batch/v1\"");
    // A wrong wire type deep inside: the message names the field.
    let mut wrong = job.clone();
    let at = wrong
        .windows(4)
        .position(|w| w == b"\x0a\x02j2")
        .expect("metadata.name");
    wrong[at] = 0x08; // name as a varint
    let r = post_pb(&client, JOBS, wrong).await;
    bad_request(&r, "metadata.name: wire type 0 where 2 was expected");
    // Random damage never reaches a 5xx.
    for i in (4..job.len()).step_by(7) {
        let mut damaged = job.clone();
        damaged[i] ^= 0x5a;
        let r = post_pb(&client, JOBS, damaged).await;
        assert!(r.status < 500, "byte {i}: {} {}", r.status, r.body);
    }
    // Patches stay JSON or YAML.
    let r = raw(&client, "PATCH", &format!("{JOBS}/j2"), Some(PROTOBUF), job).await;
    assert_eq!(r.status, 415, "{}", r.body);
}

/// Run kubectl against the server; stdout and stderr on success.
fn kubectl_output(server: &Server, args: &[&str]) -> (String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", server.data_dir().join("kubeconfig"))
        .output()
        .unwrap_or_else(|e| {
            panic!("kubectl is needed on PATH for this test (kubectl >= 1.32 sends protobuf bodies): {e}")
        });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "kubectl {}: {stdout}\n{stderr}\nserver logs:\n{}",
        args.join(" "),
        server.logs()
    );
    (stdout, stderr)
}

fn kubectl(server: &Server, args: &[&str]) -> String {
    kubectl_output(server, args).0
}

/// The minor version of the kubectl that talks to this server (the machine's kubectl may
/// choose a release from the server's version).
fn kubectl_minor(server: &Server) -> u32 {
    let out = kubectl(server, &["version", "--client", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).expect("kubectl version -o json");
    let minor = v["clientVersion"]["minor"].as_str().unwrap_or_default();
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("kubectl client minor version {minor:?}"))
}

/// kubectl's create commands (protobuf bodies from kubectl 1.32 on) succeed and create what
/// they say. Needs kubectl on PATH (fails, not skips, without it).
#[tokio::test]
async fn kubectl_create_commands() {
    let server = Server::start().await;
    let client = server.client().await;
    let minor = kubectl_minor(&server);

    // -v=8 logs the request headers: from 1.32 on the body is protobuf.
    let (out, log) = kubectl_output(&server, &["create", "namespace", "x", "-v=8"]);
    assert_eq!(out.trim(), "namespace/x created");
    let sent_protobuf = log.contains("Content-Type: application/vnd.kubernetes.protobuf");
    assert_eq!(sent_protobuf, minor >= 32, "kubectl 1.{minor}:\n{log}");
    let out = kubectl(
        &server,
        &["create", "job", "j", "--image=busybox", "--", "echo", "hi"],
    );
    assert_eq!(out.trim(), "job.batch/j created");
    let out = kubectl(
        &server,
        &[
            "create",
            "cronjob",
            "c",
            "--image=busybox",
            "--schedule=*/1 * * * *",
            "--",
            "echo",
            "hi",
        ],
    );
    assert_eq!(out.trim(), "cronjob.batch/c created");
    let out = kubectl(&server, &["create", "job", "m", "--from=cronjob/c"]);
    assert_eq!(out.trim(), "job.batch/m created");

    let ns = get(&client, "/api/v1/namespaces/x").await;
    assert_eq!(ns["status"]["phase"], "Active");
    let j = get(&client, &format!("{JOBS}/j")).await;
    let c = &j["spec"]["template"]["spec"]["containers"][0];
    assert_eq!((&c["name"], &c["image"]), (&"j".into(), &"busybox".into()));
    assert_eq!(c["command"], serde_json::json!(["echo", "hi"]));
    assert_eq!(j["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let cj = get(&client, &format!("{CRONJOBS}/c")).await;
    assert_eq!(cj["spec"]["schedule"], "*/1 * * * *");
    let m = get(&client, &format!("{JOBS}/m")).await;
    assert_eq!(
        m["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"],
        "manual"
    );
    let owner = &m["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "CronJob");
    assert_eq!(owner["name"], "c");
    assert_eq!(owner["uid"], cj["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(
        m["spec"]["template"]["spec"]["containers"][0]["command"],
        serde_json::json!(["echo", "hi"])
    );
}
