//! Informers against a real `kbatch up --executor none`.
//!
//! The binary belongs to another package, so it is found through `KBATCH_BIN`, or next to this
//! test's own target directory (`cargo build -p kbatch` puts it there). Without it the tests
//! print why and pass without running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kbatch_controllers::runtime::informer::{Change, Informer};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Selector;
use kube::runtime::watcher;
use kube::{Client, Config};
use tokio::sync::mpsc;
use tokio::time::timeout;

const T: Duration = Duration::from_secs(30);

fn kbatch_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KBATCH_BIN") {
        return Some(PathBuf::from(p));
    }
    // This test runs from <target>/debug/deps/.
    let exe = std::env::current_exe().ok()?;
    let candidates = [
        exe.parent()
            .and_then(Path::parent)
            .map(|d| d.join("kbatch")),
        std::env::var_os("CARGO_TARGET_DIR").map(|d| PathBuf::from(d).join("debug/kbatch")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/kbatch")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

/// The `kbatch up` process; killed on drop, so a failing test leaks nothing.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Server {
    client: Client,
    // Dropped after the process (fields drop in order), then the data dir goes.
    _proc: Proc,
    _dir: tempfile::TempDir,
}

async fn start(extra: &[&str]) -> Option<Server> {
    let Some(bin) = kbatch_bin() else {
        eprintln!(
            "SKIPPED: no kbatch binary; run `cargo build -p kbatch` or set KBATCH_BIN to run this test"
        );
        return None;
    };
    let dir = tempfile::tempdir().expect("temporary dir");
    let data = dir.path().join("data");
    let mut proc = Proc(
        Command::new(&bin)
            .args([
                "up",
                "--executor",
                "none",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&data)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kbatch up"),
    );
    let kubeconfig = data.join("kubeconfig");
    let deadline = tokio::time::Instant::now() + T;
    let client = loop {
        if let Some(status) = proc.0.try_wait().expect("poll kbatch up") {
            panic!("kbatch up exited: {status}");
        }
        if let Ok(kc) = Kubeconfig::read_from(&kubeconfig)
            && let Ok(config) =
                Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await
            && let Ok(client) = Client::try_from(config)
        {
            // Ready once it serves a list.
            let pods: Api<Pod> = Api::all(client.clone());
            if pods.list(&ListParams::default().limit(1)).await.is_ok() {
                break client;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "kbatch up not ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Some(Server {
        client,
        _proc: proc,
        _dir: dir,
    })
}

fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
        }
    }))
    .expect("pod")
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn rv(p: &Pod) -> String {
    p.metadata.resource_version.clone().unwrap_or_default()
}

fn label(p: &Pod, key: &str) -> Option<String> {
    p.metadata.labels.as_ref()?.get(key).cloned()
}

/// The next change that `pick` accepts, skipping others.
async fn next_matching<F>(
    rx: &mut mpsc::UnboundedReceiver<Change<Pod>>,
    what: &str,
    pick: F,
) -> Change<Pod>
where
    F: Fn(&Change<Pod>) -> bool,
{
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let c = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {what} in time"))
            .expect("informer running");
        if pick(&c) {
            return c;
        }
    }
}

#[tokio::test]
async fn informer_lists_watches_and_reports_old_objects() {
    let Some(server) = start(&[]).await else {
        return;
    };
    let client = server.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "other"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let default: Api<Pod> = Api::namespaced(client.clone(), "default");
    let other: Api<Pod> = Api::namespaced(client.clone(), "other");
    let pp = PostParams::default();
    default
        .create(&pp, &pod("p1", &[("app", "a")]))
        .await
        .expect("p1");
    default
        .create(&pp, &pod("p2", &[("app", "b")]))
        .await
        .expect("p2");
    other
        .create(&pp, &pod("q1", &[("app", "a")]))
        .await
        .expect("q1");

    let (informer, mut rx) =
        Informer::spawn_channel(Api::all(client.clone()), watcher::Config::default());
    timeout(T, informer.wait_until_synced())
        .await
        .expect("synced in time")
        .expect("synced");
    let lister = informer.lister();
    let mut listed: Vec<String> = lister.list().iter().map(|p| name(p)).collect();
    listed.sort();
    assert_eq!(listed, ["p1", "p2", "q1"]);
    assert!(lister.get("other", "q1").is_some());
    assert!(lister.get("default", "q1").is_none());
    assert_eq!(lister.list_namespace("default").len(), 2);
    let app_a: Selector = [("app", "a")].into_iter().collect();
    let mut selected: Vec<String> = lister
        .list_selected(None, &app_a)
        .iter()
        .map(|p| name(p))
        .collect();
    selected.sort();
    assert_eq!(selected, ["p1", "q1"]);
    let in_default: Vec<String> = lister
        .list_selected(Some("default"), &app_a)
        .iter()
        .map(|p| name(p))
        .collect();
    assert_eq!(in_default, ["p1"]);
    // The initial list arrives as additions.
    for _ in 0..3 {
        next_matching(&mut rx, "initial add", |c| matches!(c, Change::Added(_))).await;
    }

    // An update carries the previous object.
    let patch = serde_json::json!({"metadata": {"labels": {"app": "c"}}});
    default
        .patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch p1");
    let c = next_matching(
        &mut rx,
        "update of p1",
        |c| matches!(c, Change::Updated { new, .. } if name(new) == "p1"),
    )
    .await;
    let Change::Updated { old, new } = c else {
        unreachable!("matched an update");
    };
    assert_eq!(label(&old, "app").as_deref(), Some("a"));
    assert_eq!(label(&new, "app").as_deref(), Some("c"));
    assert_ne!(rv(&old), rv(&new));
    assert_eq!(
        lister.get("default", "p1").and_then(|p| label(&p, "app")),
        Some("c".into())
    );

    // A new object, then a deletion.
    default.create(&pp, &pod("p3", &[])).await.expect("p3");
    next_matching(
        &mut rx,
        "add of p3",
        |c| matches!(c, Change::Added(p) if name(p) == "p3"),
    )
    .await;
    default
        .delete("p2", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete p2");
    next_matching(
        &mut rx,
        "delete of p2",
        |c| matches!(c, Change::Deleted(p) if name(p) == "p2"),
    )
    .await;
    assert!(lister.get("default", "p2").is_none());
    assert!(lister.get("default", "p3").is_some());
}

#[tokio::test]
async fn informer_relists_after_410() {
    // A 5-event watch history: a watch resumed from an older resourceVersion gets 410 Expired.
    let Some(server) = start(&["--watch-history-events", "5"]).await else {
        return;
    };
    let client = server.client.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    pods.create(&pp, &pod("w1", &[("group", "w")]))
        .await
        .expect("w1");

    // Watch only group=w, without bookmarks and with 1 s watches: the informer's
    // resourceVersion stays at w1's while unrelated writes push it out of the history, so the
    // next re-watch gets 410 and the watcher must re-list.
    let config = watcher::Config::default()
        .labels("group=w")
        .timeout(1)
        .disable_bookmarks();
    let (informer, mut rx) = Informer::spawn_channel(pods.clone(), config);
    timeout(T, informer.wait_until_synced())
        .await
        .expect("synced in time")
        .expect("synced");
    next_matching(
        &mut rx,
        "initial add of w1",
        |c| matches!(c, Change::Added(p) if name(p) == "w1"),
    )
    .await;
    for i in 0..20 {
        pods.create(&pp, &pod(&format!("filler-{i}"), &[]))
            .await
            .expect("filler");
    }

    // A re-list reports w1 as updated with its unchanged version: the cache resumed.
    let c = next_matching(
        &mut rx,
        "re-list after 410",
        |c| matches!(c, Change::Updated { old, new } if name(new) == "w1" && rv(old) == rv(new)),
    )
    .await;
    assert!(matches!(c, Change::Updated { .. }));

    // And it keeps watching afterwards.
    pods.create(&pp, &pod("w2", &[("group", "w")]))
        .await
        .expect("w2");
    next_matching(
        &mut rx,
        "add of w2",
        |c| matches!(c, Change::Added(p) if name(p) == "w2"),
    )
    .await;
    assert!(informer.lister().get("default", "w2").is_some());
    assert!(informer.lister().get("default", "filler-0").is_none());
}
