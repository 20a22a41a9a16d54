//! `kbatch up --executor process|simulate`: the executor runs in-process against the server, and
//! a crash (kill -9) of the whole process leaves no pod counted twice and no process behind.

use crate::common;

use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

async fn wait_phase(pods: &Api<Pod>, name: &str, want: &str) -> Pod {
    eventually(
        Duration::from_secs(15),
        &format!("pod {name} {want}"),
        || async { pods.get(name).await.ok().filter(|p| phase(p) == want) },
    )
    .await
}

/// Creates the pod running `script`, waits for it to succeed and returns its log.
async fn run_to_success(pods: &Api<Pod>, name: &str, script: &str, marker: &str) -> String {
    pods.create(&PostParams::default(), &pod(name, script, marker))
        .await
        .expect("create");
    wait_phase(pods, name, "Succeeded").await;
    pods.logs(name, &LogParams::default()).await.expect("logs")
}

fn pod(name: &str, script: &str, marker: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox", "command": ["sh", "-c", script],
            "env": [{"name": "KBATCH_E2E_MARKER", "value": marker}]}]}
    }))
    .expect("pod")
}

/// Live processes carrying the marker in their environment.
fn marked(marker: &str) -> usize {
    let needle = format!("KBATCH_E2E_MARKER={marker}");
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let p = e.path();
                    let zombie = std::fs::read_to_string(p.join("stat"))
                        .map(|s| {
                            s.rsplit(')')
                                .next()
                                .unwrap_or("")
                                .trim_start()
                                .starts_with('Z')
                        })
                        .unwrap_or(true);
                    !zombie
                        && std::fs::read(p.join("environ"))
                            .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                            .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn process_executor_runs_pods_and_survives_kill_9() {
    let mut server = Server::start_with(&["--executor", "process"]).await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let marker = format!("e2e-{}", std::process::id());
    let logs = run_to_success(&pods, "hello", "echo hello from $HOSTNAME", &marker).await;
    assert_eq!(logs, "hello from hello\n");
    // A container that printed nothing has an empty log (its file is never created).
    let logs = run_to_success(&pods, "quiet", "true", &marker).await;
    assert_eq!(logs, "");

    pods.create(
        &PostParams::default(),
        &pod("long", "sleep 1000 & wait", &marker),
    )
    .await
    .expect("create");
    wait_phase(&pods, "long", "Running").await;
    eventually(
        Duration::from_secs(5),
        "the pod's processes run",
        || async { (marked(&marker) >= 2).then_some(()) },
    )
    .await;
    server.kill();
    server.restart().await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = wait_phase(&pods, "long", "Failed").await;
    assert_eq!(
        p.status.as_ref().and_then(|s| s.reason.as_deref()),
        Some("ExecutorRestarted"),
        "logs:\n{}",
        server.logs()
    );
    eventually(Duration::from_secs(5), "no process is left", || async {
        (marked(&marker) == 0).then_some(())
    })
    .await;
    // The finished pod is still served, and still Succeeded.
    assert_eq!(phase(&pods.get("hello").await.expect("get")), "Succeeded");
    server.stop().await;
}

#[tokio::test]
async fn simulate_executor_honours_max_pods() {
    let mut server = Server::start_with(&["--executor", "simulate", "--max-pods", "3"]).await;
    let client = server.client().await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = eventually(Duration::from_secs(10), "the node", || async {
        nodes.get_opt("kbatch-node").await.ok().flatten()
    })
    .await;
    let cap = node.status.and_then(|s| s.capacity).expect("capacity");
    assert_eq!(cap["pods"].0, "3");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sim", "annotations": {"kbatch.dev/simulate-exit-code": "4"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    let p = wait_phase(&pods, "sim", "Failed").await;
    let code = p
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().next())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .map(|t| t.exit_code);
    assert_eq!(code, Some(4));
    server.stop().await;
}

#[tokio::test]
async fn a_jobs_ready_count_follows_its_pods_readiness_probe() {
    use k8s_openapi::api::batch::v1::Job;
    let mut server = Server::start_with(&[
        "--executor",
        "process",
        "--controllers",
        "job,serviceaccount",
    ])
    .await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probed"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "command": ["sh", "-c", "sleep 2; touch ok; sleep 8"],
            "readinessProbe": {"exec": {"command": ["test", "-f", "ok"]}, "periodSeconds": 1}
        }]}}}
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create");
    let status = |j: &Job| {
        let s = j.status.clone().unwrap_or_default();
        (s.active.unwrap_or(0), s.ready.unwrap_or(0))
    };
    // Running but not ready: its probe fails until the file exists.
    eventually(Duration::from_secs(15), "one active pod", || async {
        jobs.get("probed")
            .await
            .ok()
            .filter(|j| status(j) == (1, 0))
    })
    .await;
    eventually(Duration::from_secs(15), "the pod counted ready", || async {
        jobs.get("probed")
            .await
            .ok()
            .filter(|j| status(j) == (1, 1))
    })
    .await;
    common::wait_job_complete(&jobs, "probed", Duration::from_secs(30)).await;
    server.stop().await;
}
