//! Pod volumes against the real API server: the executor sets them up before any container
//! starts (emptyDir, hostPath, configMap, secret, downwardAPI, projected), as kubelet's volume
//! manager does, and each container sees them at its `volumeMounts` (bind mounts in a mount
//! namespace of its own), read-only for API data; a volume that cannot be set up keeps the pod
//! Pending with kubelet's `FailedMount` events until it can.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use kbatch_api::k8s_openapi::ByteString;
use kbatch_api::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

/// A directory path unique to this test, which does not exist yet.
fn fresh_dir(test: &str) -> String {
    format!("/tmp/kbatch-volume-test-{}", marker(test))
}

async fn create_config_map(c: &Cluster, name: &str, data: &[(&str, &str)]) {
    let api: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
}

async fn logs(c: &Cluster, pod: &str) -> String {
    c.pods()
        .logs(pod, &LogParams::default())
        .await
        .expect("pod logs")
}

/// The message of the first `FailedMount` event about pod `name`, once there is one.
async fn failed_mount(c: &Cluster, name: &str) -> String {
    eventually(Duration::from_secs(15), "a FailedMount event", || async {
        events_of(c, name)
            .await
            .into_iter()
            .find(|(reason, _)| reason == "FailedMount")
            .map(|(_, m)| m)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_see_the_pods_volumes_at_their_mount_paths() {
    let c = Cluster::start().await;
    create_config_map(&c, "app", &[("app.conf", "mode=fast\n"), ("extra", "x")]).await;
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), "default");
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("creds".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "token".to_string(),
            ByteString(b"s3cr3t".to_vec()),
        )])),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let root = fresh_dir("mounts");
    let (work, cfg, sec, info) = (
        format!("{root}/work"),
        format!("{root}/etc/app"),
        format!("{root}/secret"),
        format!("{root}/podinfo"),
    );
    // The init container leaves a file in the emptyDir; the main container reads it, the
    // ConfigMap's files (one key, mode 0600), the Secret and the pod's labels, and cannot
    // write into the ConfigMap's volume.
    let script = format!(
        "cat {work}/from-init; cat {cfg}/settings; stat -L -c %a {cfg}/settings; \
         ls {cfg}; test -L {cfg}/..data && echo linked; cat {sec}/token; echo; \
         cat {info}/labels; echo; \
         pwd; touch {cfg}/new 2>/dev/null && echo writable || echo read-only"
    );
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vols", "labels": {"app": "demo", "tier": "batch"}},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "config", "configMap": {"name": "app", "items": [
                    {"key": "app.conf", "path": "settings", "mode": 0o600}
                ]}},
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "podinfo", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
                ]}}
            ],
            "initContainers": [{
                "name": "prepare", "image": "busybox",
                "command": ["sh", "-c", format!("echo prepared > {work}/from-init")],
                "volumeMounts": [{"name": "scratch", "mountPath": work}]
            }],
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", script],
                "workingDir": work,
                "volumeMounts": [
                    {"name": "scratch", "mountPath": work},
                    {"name": "config", "mountPath": cfg},
                    {"name": "creds", "mountPath": sec, "readOnly": true},
                    {"name": "podinfo", "mountPath": info}
                ]
            }]
        }
    }))
    .await;
    c.wait_phase("vols", "Succeeded", 20).await;
    let out = logs(&c, "vols").await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        vec![
            "prepared",
            "mode=fast",
            "600",
            "settings",
            "linked",
            "s3cr3t",
            "app=\"demo\"",
            "tier=\"batch\"",
            work.as_str(),
            "read-only",
        ],
        "the main container's view of its volumes:\n{out}"
    );
    // The emptyDir lives under the pod's directory on the host; the mount points were made
    // for the pod's runs only and are gone with them.
    let on_host = c
        .data_dir()
        .join("executor/pods")
        .join(
            c.pods()
                .get("vols")
                .await
                .expect("pod")
                .metadata
                .uid
                .expect("uid"),
        )
        .join("volumes/kubernetes.io~empty-dir/scratch/from-init");
    assert_eq!(
        std::fs::read_to_string(&on_host).ok().as_deref(),
        Some("prepared\n"),
        "{on_host:?}"
    );
    eventually(
        Duration::from_secs(5),
        &format!("the mount points under {root} are removed once no run uses them"),
        || async { (!std::path::Path::new(&root).exists()).then_some(()) },
    )
    .await;
    c.delete("vols").await;
    c.wait_gone("vols", 15).await;
    eventually(
        Duration::from_secs(5),
        "the pod's volumes go with it",
        || async { (!on_host.exists()).then_some(()) },
    )
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_config_map_keeps_the_pod_pending_with_failed_mount_until_it_exists() {
    let c = Cluster::start().await;
    let dir = fresh_dir("missing");
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waits"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "cfg", "configMap": {"name": "later"}}],
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["cat", format!("{dir}/greeting")],
                "volumeMounts": [{"name": "cfg", "mountPath": dir}]
            }]
        }
    }))
    .await;
    let message = failed_mount(&c, "waits").await;
    assert_eq!(
        message,
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"later\" not found"
    );
    let p = c.pods().get("waits").await.expect("pod");
    assert_eq!(phase_of(&p), "Pending");
    let w = waiting_of(&p, "main").expect("main waits");
    assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
    create_config_map(&c, "later", &[("greeting", "hello from a configmap")]).await;
    c.wait_phase("waits", "Succeeded", 20).await;
    assert_eq!(logs(&c, "waits").await, "hello from a configmap");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_paths_are_checked_and_created_as_their_type_asks() {
    let c = Cluster::start().await;
    let base = fresh_dir("hostpath");
    std::fs::create_dir_all(&base).expect("base dir");
    let created = format!("{base}/made/here");
    let mount = format!("{base}-mnt");
    // A File type on a directory fails the check; DirectoryOrCreate makes its directory.
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-a-file"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "h", "hostPath": {"path": base, "type": "File"}}],
            "containers": [{"name": "main", "image": "busybox", "command": ["true"],
                "volumeMounts": [{"name": "h", "mountPath": mount}]}]
        }
    }))
    .await;
    let message = failed_mount(&c, "not-a-file").await;
    assert_eq!(
        message,
        format!(
            "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: {base} is not a file"
        )
    );
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "made"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "h", "hostPath": {"path": created, "type": "DirectoryOrCreate"}}],
            "containers": [{"name": "main", "image": "busybox",
                "command": ["sh", "-c", format!("echo written > {mount}/out")],
                "volumeMounts": [{"name": "h", "mountPath": mount}]}]
        }
    }))
    .await;
    c.wait_phase("made", "Succeeded", 20).await;
    assert_eq!(
        std::fs::read_to_string(format!("{created}/out"))
            .ok()
            .as_deref(),
        Some("written\n"),
        "the container wrote through its mount into the host path"
    );
    let _ = std::fs::remove_dir_all(&base);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_paths_mount_one_entry_and_exec_probes_see_the_containers_mounts() {
    let c = Cluster::start().await;
    create_config_map(&c, "files", &[("app.conf", "port=8080")]).await;
    let dir = fresh_dir("subpath");
    let conf = format!("{dir}/conf/app.conf");
    let state = format!("{dir}/state");
    // The container writes a marker into its emptyDir (under a subPathExpr named after the
    // pod); the readiness probe finds it only inside the container's mount namespace.
    let script = format!("cat {conf}; echo; touch {state}/ready; sleep 30");
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sub"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "files", "configMap": {"name": "files"}},
                {"name": "scratch", "emptyDir": {}}
            ],
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", script],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [
                    {"name": "files", "mountPath": conf, "subPath": "app.conf"},
                    {"name": "scratch", "mountPath": state, "subPathExpr": "$(POD)"}
                ],
                "readinessProbe": {
                    "exec": {"command": ["test", "-f", format!("{state}/ready")]},
                    "periodSeconds": 1
                }
            }]
        }
    }))
    .await;
    let p = c
        .wait_pod("sub", 20, "main ready", |p| is_ready(p, "main"))
        .await;
    assert!(
        !std::path::Path::new(&format!("{state}/ready")).exists(),
        "the marker is in the emptyDir, not at the host's mount point"
    );
    let uid = p.metadata.uid.expect("uid");
    let in_volume = c
        .data_dir()
        .join("executor/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/scratch/sub/ready");
    assert!(
        in_volume.exists(),
        "{in_volume:?}: the subPathExpr directory"
    );
    assert_eq!(logs(&c, "sub").await.lines().next(), Some("port=8080"));
    c.delete("sub").await;
    c.wait_gone("sub", 15).await;
    eventually(
        Duration::from_secs(5),
        &format!("mount points under {dir} are removed with the pod's runs"),
        || async { (!std::path::Path::new(&dir).exists()).then_some(()) },
    )
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_pod_sees_its_config_map_change() {
    let mut c = Cluster::server_only().await;
    c.config.volume_sync_period = Duration::from_millis(500);
    c.start_executor();
    c.wait_for_node().await;
    create_config_map(&c, "live", &[("mode", "old")]).await;
    let dir = fresh_dir("live");
    // It waits until the file through its mount says "new" (a ConfigMap update reaches a
    // running pod's volume on the node's next sync).
    let script = format!(
        "cat {dir}/mode; echo; while [ \"$(cat {dir}/mode)\" != new ]; do sleep 0.1; done; \
         echo saw new"
    );
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "live"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "cfg", "configMap": {"name": "live"}}],
            "containers": [{"name": "main", "image": "busybox",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "cfg", "mountPath": dir}]}]
        }
    }))
    .await;
    c.wait_phase("live", "Running", 20).await;
    let api: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let patch = json!({"data": {"mode": "new"}});
    api.patch(
        "live",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("update the configmap");
    c.wait_phase("live", "Succeeded", 20).await;
    assert_eq!(logs(&c, "live").await, "old\nsaw new\n");
    c.shutdown().await;
}
