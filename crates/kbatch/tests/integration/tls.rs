//! `kbatch up` on a non-loopback address: HTTPS with the instance's own CA and a bearer
//! token, written into the kubeconfig; requests without the token get upstream's 401.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A client that trusts the server's CA but sends `token` (or none).
async fn client_with_token(server: &Server, token: Option<&str>) -> Client {
    let kc = Kubeconfig::read_from(server.kubeconfig()).expect("kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    config.auth_info = AuthInfo {
        token: token.map(|t| t.to_string().into()),
        ..AuthInfo::default()
    };
    Client::try_from(config).expect("client")
}

fn token_of(server: &Server) -> String {
    let text = std::fs::read_to_string(server.kubeconfig()).expect("kubeconfig");
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("token:")
                .map(|t| t.trim().to_string())
        })
        .expect("a token in the kubeconfig")
}

#[tokio::test]
async fn a_non_loopback_address_is_served_over_tls_with_a_token() {
    let mut server = Server::start_on(
        "0.0.0.0:0",
        &["--executor", "simulate", "--controllers=job,serviceaccount"],
    )
    .await;
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );

    // The kubeconfig's client: the in-process controllers and executor reach the server
    // the same way, so a Job completes.
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(job_json("tls")).expect("job"),
    )
    .await
    .expect("create over TLS");
    wait_job_complete(&jobs, "tls", Duration::from_secs(20)).await;

    // No token, or a wrong one: upstream's 401 Status. Health checks need none.
    for token in [None, Some("not-the-token")] {
        let anonymous = client_with_token(&server, token).await;
        let r = raw(&anonymous, "GET", "/api/v1/namespaces", None, "").await;
        assert_eq!(r.status, 401, "{}", r.body);
        let v = r.json();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["reason"], "Unauthorized");
        assert_eq!(v["message"], "Unauthorized");
        assert_eq!(v["code"], 401);
        let ready = raw(&anonymous, "GET", "/readyz", None, "").await;
        assert_eq!(ready.status, 200, "{}", ready.body);
    }

    // kubectl with the kubeconfig as it is.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["get", "namespaces", "-o", "name"])
        .output()
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("namespace/default"),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The token's holder may do anything, and an access review says so.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["auth", "can-i", "delete", "nodes"])
        .output()
        .expect("run kubectl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "yes\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Who the token's holder is: a static-token admin.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["auth", "whoami", "-o", "json"])
        .output()
        .expect("run kubectl");
    let whoami: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kubectl auth whoami -o json: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        whoami["status"]["userInfo"],
        serde_json::json!({"username": "kbatch-admin", "uid": "kbatch-admin",
            "groups": ["system:masters", "system:authenticated"]})
    );

    // A TokenReview says whose a token is: the instance's is the admin's, any other no one's.
    let token = token_of(&server);
    let review = |t: &str| {
        serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": t}})
        .to_string()
    };
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let json = Some("application/json");
    let r = raw(&client, "POST", path, json, review(&token)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["status"],
        serde_json::json!({"authenticated": true, "user": {"username": "kbatch-admin",
            "uid": "kbatch-admin", "groups": ["system:masters", "system:authenticated"]}})
    );
    let r = raw(&client, "POST", path, json, review("not-the-token")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["status"],
        serde_json::json!({"user": {}, "error": "invalid bearer token"})
    );

    // A restart keeps the CA and the token: kubeconfigs handed out before stay valid.
    let ca = |s: &Server| {
        std::fs::read_to_string(s.kubeconfig())
            .expect("kubeconfig")
            .lines()
            .find(|l| l.contains("certificate-authority-data"))
            .map(str::to_string)
    };
    let ca_before = ca(&server);
    server.stop().await;
    server.restart_on("0.0.0.0:0").await;
    assert_eq!(token_of(&server), token);
    assert_eq!(ca(&server), ca_before);
    let again = client_with_token(&server, Some(&token)).await;
    let namespaces: Api<Namespace> = Api::all(again);
    let list = namespaces
        .list(&ListParams::default())
        .await
        .expect("the old token after a restart");
    assert!(
        list.items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );
}
