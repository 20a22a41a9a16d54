//! Env from ConfigMaps and Secrets against the real API server: the executor reads them
//! through the API when a container is about to start, and a missing one keeps the container
//! waiting (`CreateContainerConfigError`, the pod Pending) until it appears.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use kbatch_api::k8s_openapi::ByteString;
use kbatch_api::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_config_map_waits_then_env_comes_from_config_maps_and_secrets() {
    let c = Cluster::start().await;
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), "default");
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("creds".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("user".to_string(), ByteString(b"admin".to_vec())),
            ("password".to_string(), ByteString(b"s3cr3t".to_vec())),
        ])),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cfg"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "command": ["sh", "-c", "echo level=$LEVEL user=$DB_user pw=$DB_password dsn=$(DSN) opt=${OPT-unset}"],
            "envFrom": [{"prefix": "DB_", "secretRef": {"name": "creds"}}],
            "env": [
                {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
                {"name": "DSN", "value": "$(DB_user)@$(LEVEL)"},
                {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": true}}},
            ]
        }]}
    }))
    .await;
    let p = c
        .wait_pod("cfg", 10, "a CreateContainerConfigError", |p| {
            waiting_of(p, "main")
                .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
        })
        .await;
    assert_eq!(phase_of(&p), "Pending");
    let w = waiting_of(&p, "main").expect("main is waiting");
    assert_eq!(
        w.message.as_deref(),
        Some("configmap \"settings\" not found")
    );
    // It keeps waiting: no failure, no start.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let p = c.pods().get("cfg").await.unwrap();
    assert_eq!(phase_of(&p), "Pending");
    assert_eq!(status_of(&p, "main").restart_count, 0);

    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings"}, "data": {"level": "debug"}
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &settings)
        .await
        .expect("create config map");
    // The executor tries again within its retry period (10 s).
    c.wait_phase("cfg", "Succeeded", 30).await;
    let logs = c.pods().logs("cfg", &LogParams::default()).await.unwrap();
    assert_eq!(
        logs.trim_end(),
        "level=debug user=admin pw=s3cr3t dsn=admin@debug opt=unset"
    );
    c.shutdown().await;
}
