//! CPU per request of the API server's write path, in process (no HTTP, no fsync): the
//! writes a Job's pod goes through, as the Job controller and the executor send them.
//!
//! `cargo bench -p kbatch-apiserver --bench write_path [-- N]` prints µs per request for each
//! kind of write, on one thread, over N pods (default 2,000).

use std::time::Instant;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use kbatch_apiserver::{ServerState, router};
use kbatch_store::{Store, StoreOptions};
use serde_json::{Value, json};
use tower::ServiceExt;

// As the binary: the figures should be the server's, not glibc malloc's.
#[global_allocator]
static GLOBAL: kbatch_alloc::Allocator = kbatch_alloc::Allocator;

const CONTROLLER_UA: &str = "kube-controller-manager/v1.37.0 (linux/amd64) kbatch/job-controller";
const CRONJOB_UA: &str = "kube-controller-manager/v1.37.0 (linux/amd64) kbatch/cronjob-controller";
const KUBELET_UA: &str = "kubelet/v1.37.0 (linux/amd64) kbatch";

struct Req {
    method: &'static str,
    uri: String,
    user_agent: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
}

async fn send(app: &Router, r: Req) -> Value {
    let req = Request::builder()
        .method(r.method)
        .uri(&r.uri)
        .header("user-agent", r.user_agent)
        .header("content-type", r.content_type)
        .body(Body::from(r.body))
        .expect("a valid request");
    let resp = app.clone().oneshot(req).await.expect("the router answers");
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a response body");
    assert!(
        status == StatusCode::OK || status == StatusCode::CREATED,
        "{} {}: {status}: {}",
        r.method,
        r.uri,
        String::from_utf8_lossy(&bytes)
    );
    serde_json::from_slice(&bytes).expect("a JSON response")
}

/// Sends the requests one after another (built beforehand: only the server's work is timed).
async fn phase(app: &Router, what: &str, reqs: Vec<Req>) {
    let n = reqs.len();
    let t = start();
    for r in reqs {
        send(app, r).await;
    }
    report(what, n, t);
}

fn job() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"completions": 100000, "parallelism": 50, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["/bin/true"]}]}}}
    })
}

fn cronjob() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "cron", "namespace": "default"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["/bin/true"]}]}}}}}
    })
}

/// What the CronJob controller creates for a firing of `cj` (as created by the server).
fn job_from_template(name: &str, cj: &Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": format!("cron-{name}"), "namespace": "default",
            "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp": "2026-01-01T00:01:00Z"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "cron",
                "uid": cj["metadata"]["uid"].clone(), "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": cj["spec"]["jobTemplate"]["spec"].clone()
    })
}

fn pod(name: &str, job: &Value) -> Value {
    let uid = job["metadata"]["uid"].clone();
    let mut template = job["spec"]["template"].clone();
    let labels = job["spec"]["template"]["metadata"]["labels"].clone();
    template["metadata"] = json!({
        "name": name, "namespace": "default", "labels": labels,
        "finalizers": ["batch.kubernetes.io/job-tracking"],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "bench",
            "uid": uid, "controller": true, "blockOwnerDeletion": true}]
    });
    template["apiVersion"] = json!("v1");
    template["kind"] = json!("Pod");
    template
}

fn terminated_status() -> Value {
    let t = "2026-01-01T00:00:01Z";
    let cond = |ty: &str, s: &str| json!({"type": ty, "status": s, "lastProbeTime": null, "lastTransitionTime": t});
    json!({"status": {
        "phase": "Succeeded", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": t,
        "hostIPs": [{"ip": "127.0.0.1"}], "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [cond("PodReadyToStartContainers", "True"), cond("Initialized", "True"),
            cond("Ready", "False"), cond("ContainersReady", "False"), cond("PodScheduled", "True")],
        "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "started": false, "containerID": "kbatch://x/c/0",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": t,
                "finishedAt": t, "containerID": "kbatch://x/c/0"}}}],
        "qosClass": "BestEffort"}})
}

/// CPU time of all the process's threads so far, in ns (the scheduler's own account).
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

struct Phase {
    wall: Instant,
    cpu: u64,
}

fn start() -> Phase {
    Phase {
        wall: Instant::now(),
        cpu: cpu_ns(),
    }
}

/// Wall time includes the hand-offs to the store's writer thread; CPU time is the work.
fn report(what: &str, n: usize, p: Phase) {
    let wall = p.wall.elapsed().as_secs_f64() * 1e6 / n as f64;
    let cpu = cpu_ns().saturating_sub(p.cpu) as f64 / 1e3 / n as f64;
    println!("{what:<34} {cpu:7.1} µs CPU {wall:7.1} µs wall per request");
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    rt.block_on(async move {
        let opts = StoreOptions {
            durable: false,
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), opts).expect("the store opens");
        let state = ServerState::new(store, "127.0.0.1:0".into());
        state.bootstrap().await.expect("bootstrap");
        let app = router(state);
        let jobs = "/apis/batch/v1/namespaces/default/jobs";
        let pods = "/api/v1/namespaces/default/pods";
        let req = |method, uri: String, user_agent, content_type, body: &Value| Req {
            method,
            uri,
            user_agent,
            content_type,
            body: body.to_string().into_bytes(),
        };
        let json_ct = "application/json";
        let job = send(
            &app,
            req("POST", jobs.into(), CONTROLLER_UA, json_ct, &job()),
        )
        .await;
        let names: Vec<String> = (0..n).map(|i| format!("bench-{i}")).collect();
        let each = |f: &dyn Fn(&str) -> Req| names.iter().map(|name| f(name)).collect();

        let create = |name: &str| {
            req(
                "POST",
                pods.into(),
                CONTROLLER_UA,
                json_ct,
                &pod(name, &job),
            )
        };
        phase(&app, "pod create (job controller)", each(&create)).await;

        let bind = |name: &str| {
            let body = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name}, "target": {"kind": "Node", "name": "kbatch-node"}});
            req(
                "POST",
                format!("{pods}/{name}/binding"),
                KUBELET_UA,
                json_ct,
                &body,
            )
        };
        phase(&app, "pod binding (executor)", each(&bind)).await;

        let status = terminated_status();
        let merge = "application/merge-patch+json";
        let report_status = |name: &str| {
            req(
                "PATCH",
                format!("{pods}/{name}/status"),
                KUBELET_UA,
                merge,
                &status,
            )
        };
        phase(&app, "pod status patch (executor)", each(&report_status)).await;

        let fin = json!({"metadata": {"$deleteFromPrimitiveList/finalizers":
            ["batch.kubernetes.io/job-tracking"]}});
        let strategic = "application/strategic-merge-patch+json";
        let remove_finalizer = |name: &str| {
            req(
                "PATCH",
                format!("{pods}/{name}"),
                CONTROLLER_UA,
                strategic,
                &fin,
            )
        };
        phase(
            &app,
            "finalizer patch (job controller)",
            each(&remove_finalizer),
        )
        .await;

        // Without a resourceVersion, each write replaces the last one (no precondition).
        let mut job = job;
        if let Some(m) = job["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        let statuses = (0..n)
            .map(|i| {
                job["status"] = json!({"active": 50, "succeeded": i, "ready": 0, "terminating": 0,
                    "startTime": "2026-01-01T00:00:00Z",
                    "uncountedTerminatedPods": {"succeeded": [format!("uid-{i}")]}});
                req(
                    "PUT",
                    format!("{jobs}/bench/status"),
                    CONTROLLER_UA,
                    json_ct,
                    &job,
                )
            })
            .collect();
        phase(&app, "job status put (job controller)", statuses).await;

        // A firing of CronJobs: a Job from the (server-defaulted) template of one, as the
        // CronJob controller sends it.
        let cronjobs = "/apis/batch/v1/namespaces/default/cronjobs";
        let cj = send(
            &app,
            req("POST", cronjobs.into(), CONTROLLER_UA, json_ct, &cronjob()),
        )
        .await;
        let job_of_cronjob = |name: &str| {
            req(
                "POST",
                jobs.into(),
                CRONJOB_UA,
                json_ct,
                &job_from_template(name, &cj),
            )
        };
        phase(
            &app,
            "job create (cronjob controller)",
            each(&job_of_cronjob),
        )
        .await;
    });
}
