//! Durability: every acknowledged write survives SIGKILL of `kbatch up`, restarts resume from
//! the same data dir, and watches resume across a restart in resourceVersion order.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, job_json, pod_json, rv_num};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const TASKS: usize = 16;
/// Kill once this many writes are acknowledged, so the kill lands mid-burst.
const KILL_AFTER_ACKS: usize = 300;

fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta()
        .resource_version
        .clone()
        .expect("object has a resourceVersion")
}

#[tokio::test]
async fn acknowledged_writes_survive_sigkill() {
    let mut server = Server::start().await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    // Every acknowledged write: (pod name, resourceVersion the server answered with).
    let acks: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let pods = pods.clone();
        let acks = acks.clone();
        tasks.push(tokio::spawn(async move {
            // Until the server dies: create a pod, then move its status along.
            for i in 0.. {
                let name = format!("burst-{t}-{i}");
                let p: Pod = serde_json::from_value(pod_json(&name)).expect("pod fixture");
                let Ok(created) = pods.create(&PostParams::default(), &p).await else {
                    return;
                };
                acks.lock()
                    .expect("acks")
                    .push((name.clone(), rv_num(&rv(&created))));
                for phase in ["Running", "Succeeded"] {
                    let patch = Patch::Merge(json!({"status": {"phase": phase}}));
                    let Ok(updated) = pods
                        .patch_status(&name, &PatchParams::default(), &patch)
                        .await
                    else {
                        return;
                    };
                    acks.lock()
                        .expect("acks")
                        .push((name.clone(), rv_num(&rv(&updated))));
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while acks.lock().expect("acks").len() < KILL_AFTER_ACKS {
        assert!(
            Instant::now() < deadline,
            "the burst is too slow: {} acks",
            acks.lock().expect("acks").len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("writers notice the dead server")
            .expect("writer task");
    }
    let acks = acks.lock().expect("acks").clone();
    assert!(acks.len() >= KILL_AFTER_ACKS);

    server.restart().await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    // 1. Every acknowledged write is there: the object exists at that resourceVersion or later.
    let mut latest_ack: BTreeMap<String, u64> = BTreeMap::new();
    for (name, rv) in &acks {
        let e = latest_ack.entry(name.clone()).or_default();
        *e = (*e).max(*rv);
    }
    let list = pods
        .list(&ListParams::default())
        .await
        .expect("list after restart");
    let stored: BTreeMap<String, u64> = list
        .items
        .iter()
        .map(|p| (p.metadata.name.clone().expect("name"), rv_num(&rv(p))))
        .collect();
    let mut lost = Vec::new();
    for (name, acked) in &latest_ack {
        match stored.get(name) {
            None => lost.push(format!("{name}: acknowledged at {acked}, missing")),
            Some(have) if have < acked => {
                lost.push(format!("{name}: acknowledged at {acked}, stored at {have}"))
            }
            Some(_) => {}
        }
    }
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost:\n{}",
        lost.len(),
        lost.join("\n")
    );
    let list_rv = rv_num(
        list.metadata
            .resource_version
            .as_deref()
            .expect("list resourceVersion"),
    );
    assert!(list_rv >= acks.iter().map(|a| a.1).max().expect("acks"));

    // 2. A watch resumed from an early resourceVersion replays the rest in strictly increasing
    //    order, including every acknowledged write.
    let early = acks.iter().map(|a| a.1).min().expect("acks");
    let mut stream = pods
        .watch(&WatchParams::default().timeout(10), &early.to_string())
        .await
        .expect("watch after restart")
        .boxed();
    let mut seen: BTreeSet<(String, u64)> = BTreeSet::new();
    let mut last = early;
    while last < list_rv {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("replayed event in time")
            .expect("watch stream ok")
            .expect("watch ended before reaching the list resourceVersion");
        let p = match ev {
            WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => p,
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch from {early} after restart: {e:?}"),
        };
        let n = rv_num(&rv(&p));
        assert!(
            n > last,
            "resourceVersion {n} after {last}: not strictly increasing"
        );
        last = n;
        seen.insert((p.metadata.name.expect("name"), n));
    }
    let missing: Vec<_> = acks
        .iter()
        .filter(|a| a.1 > early && !seen.contains(a))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged writes not replayed by the watch: {missing:?}"
    );

    // 3. New writes continue after the recovered revision.
    let p: Pod = serde_json::from_value(pod_json("after-crash")).expect("pod fixture");
    let created = pods
        .create(&PostParams::default(), &p)
        .await
        .expect("write after restart");
    assert!(rv_num(&rv(&created)) > list_rv);
}

#[tokio::test]
async fn graceful_restart_resumes_with_nothing_lost() {
    let mut server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    let j: Job = serde_json::from_value(job_json("keep")).expect("job fixture");
    let created = jobs
        .create(&PostParams::default(), &j)
        .await
        .expect("create");
    let updated = jobs
        .patch_status(
            "keep",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"active": 1}})),
        )
        .await
        .expect("patch status");

    server.stop().await;
    server.restart().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    let got = jobs.get("keep").await.expect("job after restart");
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(rv(&got), rv(&updated));
    assert_eq!(got.status.and_then(|s| s.active), Some(1));
    assert_eq!(
        got.metadata.creation_timestamp, created.metadata.creation_timestamp,
        "timestamps round-trip through the store"
    );

    // A watch from before the restart replays the status change; new writes get later RVs.
    let mut stream = jobs
        .watch(&WatchParams::default().timeout(5), &rv(&created))
        .await
        .expect("watch")
        .boxed();
    let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("event in time")
        .expect("ok")
        .expect("one event");
    match ev {
        WatchEvent::Modified(j) => assert_eq!(rv(&j), rv(&updated)),
        other => panic!("expected the status change, got {other:?}"),
    }
    let again = jobs
        .patch(
            "keep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"r": "1"}}})),
        )
        .await
        .expect("write after restart");
    assert!(rv_num(&rv(&again)) > rv_num(&rv(&updated)));

    // Restarting twice in a row is fine too (the kubeconfig is rewritten with the new port).
    server.stop().await;
    server.restart().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    assert_eq!(rv(&jobs.get("keep").await.expect("get")), rv(&again));
}

/// A kube-runtime reflector (as the controllers use) keeps following the server through a
/// SIGKILL and a restart on the same port: it reconnects, resumes or re-lists, and its store
/// again mirrors the server, including changes made after the restart.
#[tokio::test]
async fn reflector_follows_the_server_across_a_crash() {
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let mut server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let job = |name: &str| -> Job { serde_json::from_value(job_json(name)).expect("job fixture") };
    for name in ["a", "b"] {
        jobs.create(&PostParams::default(), &job(name))
            .await
            .expect("create");
    }
    let (reader, writer) = reflector::store::<Job>();
    let stream = reflector::reflector(
        writer,
        watcher(jobs.clone(), watcher::Config::default()).default_backoff(),
    );
    let task = tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .expect("store ready in time")
        .expect("store ready");

    server.kill();
    server.restart_same_port().await;
    // The old client reaches the new process at the same address.
    jobs.create(&PostParams::default(), &job("c"))
        .await
        .expect("create after restart");
    jobs.delete("a", &kube::api::DeleteParams::background())
        .await
        .expect("delete after restart");

    let want: BTreeMap<String, String> = jobs
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|j| (j.metadata.name.clone().expect("name"), rv(j)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let have: BTreeMap<String, String> = reader
            .state()
            .iter()
            .map(|j| (j.metadata.name.clone().expect("name"), rv(j.as_ref())))
            .collect();
        if have == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reflector store {have:?} never matched the server {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
}

/// The soft and hard limits on open files of process `pid`, from `/proc/<pid>/limits`.
fn open_file_limits(pid: &str) -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut numbers = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .map(|n| n.parse::<u64>().ok());
    Some((numbers.next()??, numbers.next()??))
}

/// Started with a soft limit of 256 open files, `kbatch up` raises it to the hard limit (a
/// thousand concurrent clients would otherwise leave its store unable to open a file).
#[test]
fn up_raises_its_open_file_limit() {
    let (_, hard) = open_file_limits("self").expect("this process's limits");
    assert!(
        hard > 256,
        "the hard limit ({hard}) leaves nothing to raise"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn 256 && exec '{}' up --executor none --listen 127.0.0.1:0 --data-dir '{}'",
            env!("CARGO_BIN_EXE_kbatch"),
            dir.path().display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start kbatch up");
    let pid = child.id().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = None;
    while Instant::now() < deadline {
        // The shell execs kbatch in place: same pid, the shell's 256 first.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if exe.is_some_and(|e| e.ends_with("kbatch")) {
            seen = open_file_limits(&pid);
            if seen.is_some_and(|(soft, _)| soft == hard) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen, Some((hard, hard)));
}
