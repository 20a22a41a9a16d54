//! kubelet's local storage eviction against the real API server: a pod whose emptyDir holds
//! more than its `sizeLimit`, or one of whose containers logs more than its
//! `ephemeral-storage` limit, is evicted at the next look (every 10 s): its processes are
//! stopped, an `Evicted` event says why, and the pod is Failed with reason `Evicted` and
//! kubelet's message.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_outgrow_their_storage_limits_are_evicted() {
    let c = Cluster::start().await;
    let m = marker("storage");
    let cache = format!("/tmp/kbatch-storage-test-{m}/cache");
    let env = json!([{"name": "KBATCH_TEST_MARKER", "value": m}]);
    // 2 MiB into a 1 MiB emptyDir.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hoarder"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Mi"}}],
            "containers": [{
                "name": "main", "image": "busybox", "env": env,
                "command": ["sh", "-c", format!("head -c 2097152 /dev/zero > {cache}/blob; sleep 1000")],
                "volumeMounts": [{"name": "cache", "mountPath": cache}],
            }],
        },
    }))
    .await;
    // 300 KiB of logs from a container limited to 100 KiB, beside one that may use 10 MiB:
    // the pod is within its total, the container is not.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "chatty"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "quiet", "image": "busybox", "env": env,
                    "command": ["sleep", "1000"],
                    "resources": {"limits": {"ephemeral-storage": "10Mi"}},
                },
                {
                    "name": "loud", "image": "busybox", "env": env,
                    "command": ["sh", "-c", "head -c 307200 /dev/zero | tr '\\0' x; sleep 1000"],
                    "resources": {"limits": {"ephemeral-storage": "100Ki"}},
                },
            ],
        },
    }))
    .await;

    for (name, message) in [
        (
            "hoarder",
            "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". ",
        ),
        (
            "chatty",
            "Container loud exceeded its local ephemeral storage limit \"100Ki\". ",
        ),
    ] {
        let p = c.wait_phase(name, "Failed", 30).await;
        let s = p.status.as_ref().expect("a status");
        assert_eq!(s.reason.as_deref(), Some("Evicted"), "{name}: {s:?}");
        assert_eq!(s.message.as_deref(), Some(message), "{name}");
        let events = events_of(&c, name).await;
        assert!(
            events.contains(&("Evicted".to_string(), message.to_string())),
            "{name}: {events:?}"
        );
    }
    // kubelet's count of its evictions, by signal (the node runs in this process).
    for signal in ["emptydirfs.limit", "ephemeralcontainerfs.limit"] {
        assert_eq!(
            kbatch_metrics::registry().counter_value("kubelet_evictions", &[signal]),
            1.0,
            "{signal}"
        );
    }
    eventually(
        Duration::from_secs(5),
        "the evicted pods' processes end",
        || {
            let m = m.clone();
            async move { processes_with_marker(&m).is_empty().then_some(()) }
        },
    )
    .await;
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(format!("/tmp/kbatch-storage-test-{m}"));
}
