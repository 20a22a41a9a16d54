//! metrics.k8s.io/v1beta1 through the router, in process, with a fake kubelet: the scraper
//! reads its `/metrics/resource` twice, and the PodMetrics and NodeMetrics served from the
//! two points are metrics-server's (CPU rate in nanocores over the window, working set as a
//! binary quantity, the pod's or node's labels, lists sorted, selectors, its NotFounds);
//! discovery lists the group only while it is served.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use serde_json::{Value, json};

use common::Reply;

const T1: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="main",namespace="default",pod="busy"} 10 1700000000000
container_cpu_usage_seconds_total{container="side",namespace="default",pod="busy"} 1 1700000000000
container_cpu_usage_seconds_total{container="c",namespace="default",pod="half"} 1 1700000000000
container_cpu_usage_seconds_total{container="c",namespace="kube-system",pod="other"} 2 1700000000000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="main",namespace="default",pod="busy"} 1.2644352e+07 1700000000000
container_memory_working_set_bytes{container="side",namespace="default",pod="busy"} 4096 1700000000000
container_memory_working_set_bytes{container="c",namespace="default",pod="half"} 0 1700000000000
container_memory_working_set_bytes{container="c",namespace="kube-system",pod="other"} 1000 1700000000000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="main",namespace="default",pod="busy"} 1.6e+09
container_start_time_seconds{container="side",namespace="default",pod="busy"} 1.6e+09
container_start_time_seconds{container="c",namespace="kube-system",pod="other"} 1.6e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 1234.5 1700000000000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 2.147483648e+09 1700000000000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;

/// 15.123 s later: `busy/main` used 1.5 core-seconds, `busy/side` 0.25, the node 15.123
/// (rates truncated to whole nanocores, as Go converts the float).
fn t2() -> String {
    T1.replace("1700000000000", "1700000015123")
        .replace("pod=\"busy\"} 10 ", "pod=\"busy\"} 11.5 ")
        .replace("pod=\"busy\"} 1 ", "pod=\"busy\"} 1.25 ")
        .replace("pod=\"other\"} 2 ", "pod=\"other\"} 2.001 ")
        .replace("total 1234.5 ", "total 1249.623 ")
}

/// A kubelet serving whatever text is set, counting the scrapes.
struct FakeKubelet {
    port: u16,
    text: Arc<Mutex<String>>,
    scrapes: Arc<AtomicUsize>,
}

async fn fake_kubelet() -> FakeKubelet {
    let text = Arc::new(Mutex::new(T1.to_string()));
    let scrapes = Arc::new(AtomicUsize::new(0));
    let (t, n) = (text.clone(), scrapes.clone());
    let app = Router::new().route(
        "/metrics/resource",
        axum::routing::get(move || {
            let body = t.lock().unwrap().clone();
            n.fetch_add(1, Ordering::SeqCst);
            async move { body }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    FakeKubelet {
        port,
        text,
        scrapes,
    }
}

impl FakeKubelet {
    /// Waits for two more scrapes: the first of them was stored before the second began.
    async fn scraped(&self) {
        let start = self.scrapes.load(Ordering::SeqCst);
        for _ in 0..300 {
            if self.scrapes.load(Ordering::SeqCst) >= start + 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the node was not scraped");
    }
}

async fn req(app: &Router, method: &str, uri: &str, body: Option<Value>) -> Reply {
    let mut r = common::kubectl_request(method, uri, "application/json");
    let body = match body {
        Some(v) => {
            r = r.header("content-type", "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    common::send(app, r, body).await
}

async fn get(app: &Router, uri: &str) -> Reply {
    req(app, "GET", uri, None).await
}

async fn create_pod(app: &Router, ns: &str, name: &str, labels: Value, phase: &str) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let r = req(
        app,
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        Some(pod),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let status = json!({"status": {"phase": phase}});
    let mut b = common::kubectl_request(
        "PATCH",
        &format!("/api/v1/namespaces/{ns}/pods/{name}/status"),
        "application/json",
    );
    b = b.header("content-type", "application/merge-patch+json");
    let r = common::send(app, b, Body::from(status.to_string())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

/// A server whose node `n1` is the fake kubelet, with pods in every state that matters.
async fn cluster() -> (Router, FakeKubelet, tempfile::TempDir) {
    let kubelet = fake_kubelet().await;
    let (state, dir) = common::state();
    state.bootstrap().await.unwrap();
    let app = kbatch_apiserver::router(state.clone());
    common::default_accounts(&app, &["default", "kube-system"]).await;
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port}}}});
    let r = req(&app, "POST", "/api/v1/nodes", Some(node)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    create_pod(&app, "default", "busy", json!({"app": "busy"}), "Running").await;
    create_pod(&app, "default", "half", json!({"app": "busy"}), "Running").await;
    create_pod(&app, "default", "quiet", json!({}), "Running").await;
    create_pod(&app, "default", "idle", json!({"app": "busy"}), "Pending").await;
    create_pod(&app, "kube-system", "other", json!({}), "Running").await;
    assert!(state.start_metrics_api(Duration::from_millis(50)).is_some());
    kubelet.scraped().await;
    (app, kubelet, dir)
}

/// The body with `creationTimestamp` (the time of serving) checked and taken out.
fn served(mut v: Value) -> Value {
    let mut strip = |m: &mut Value| {
        let ts = m["metadata"]
            .as_object_mut()
            .and_then(|o| o.remove("creationTimestamp"))
            .expect("a creationTimestamp");
        let ts = ts.as_str().expect("a string");
        assert!(ts.len() == 20 && ts.ends_with('Z'), "{ts}");
    };
    match v.get_mut("items").and_then(Value::as_array_mut) {
        Some(items) => items.iter_mut().for_each(&mut strip),
        None => strip(&mut v),
    }
    v
}

fn busy() -> Value {
    json!({"metadata": {"name": "busy", "namespace": "default", "labels": {"app": "busy"}},
    "timestamp": "2023-11-14T22:13:35Z", "window": "15.123s",
    "containers": [
        {"name": "main", "usage": {"cpu": "99186669n", "memory": "12348Ki"}},
        {"name": "side", "usage": {"cpu": "16531111n", "memory": "4Ki"}},
    ]})
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            match m["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap()),
                None => m["name"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

#[tokio::test]
async fn pod_and_node_metrics_as_metrics_server_serves_them() {
    let (app, kubelet, _dir) = cluster().await;
    // One point each: nothing to serve yet.
    let r = get(&app, "/apis/metrics.k8s.io/v1beta1/pods").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {}, "items": []})
    );
    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy",
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    *kubelet.text.lock().unwrap() = t2();
    kubelet.scraped().await;

    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut want = busy();
    want["kind"] = json!("PodMetrics");
    want["apiVersion"] = json!("metrics.k8s.io/v1beta1");
    assert_eq!(served(r.body), want);

    // All namespaces, sorted; `half` (a zero working set), `quiet` (no points) and `idle`
    // (not Running) have none.
    let r = get(&app, "/apis/metrics.k8s.io/v1beta1/pods").await;
    assert_eq!(names(&r.body), ["default/busy", "kube-system/other"]);
    let body = served(r.body);
    assert_eq!(body["items"][0], busy());
    assert_eq!(
        body["items"][1],
        json!({"metadata": {"name": "other", "namespace": "kube-system"},
            "timestamp": "2023-11-14T22:13:35Z", "window": "15.123s",
            "containers": [{"name": "c", "usage": {"cpu": "66124n", "memory": "1k"}}]})
    );
    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dbusy",
    )
    .await;
    assert_eq!(names(&r.body), ["default/busy"]);
    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=metadata.namespace%3Dkube-system",
    )
    .await;
    assert_eq!(names(&r.body), ["kube-system/other"]);
    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?fieldSelector=metadata.name!%3Dbusy",
    )
    .await;
    assert_eq!(names(&r.body), Vec::<String>::new());

    // `kubectl get pods.metrics.k8s.io` asks for a Table: the containers' usage summed.
    let table = common::kubectl_request(
        "GET",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    );
    let r = common::send(&app, table, Body::empty()).await;
    let col = |name: &str, format: &str, description: &str| json!({"name": name, "type": "string", "format": format, "description": description, "priority": 0});
    assert_eq!(r.body["kind"], "Table");
    assert_eq!(
        r.body["columnDefinitions"],
        json!([
            col("Name", "name", "Name of the resource"),
            col("cpu", "quantity", ""),
            col("memory", "quantity", ""),
            col("Window", "duration", "")
        ])
    );
    assert_eq!(
        r.body["rows"][0]["cells"],
        json!(["busy", "115717780n", "12352Ki", "15.123s"])
    );
    assert_eq!(r.body["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(r.body["rows"][0]["object"]["metadata"]["name"], "busy");

    let r = get(&app, "/apis/metrics.k8s.io/v1beta1/nodes/n1").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        served(r.body),
        json!({"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "timestamp": "2023-11-14T22:13:35Z", "window": "15.123s",
            "usage": {"cpu": "1", "memory": "2Gi"}})
    );
    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=kubernetes.io%2Fhostname%3Dn1",
    )
    .await;
    assert_eq!(r.body["kind"], "NodeMetricsList");
    assert_eq!(names(&r.body), ["n1"]);
    let r = get(
        &app,
        "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=x%3Dy",
    )
    .await;
    assert_eq!(names(&r.body), Vec::<String>::new());
}

#[tokio::test]
async fn errors_are_metrics_servers() {
    let (app, kubelet, _dir) = cluster().await;
    *kubelet.text.lock().unwrap() = t2();
    kubelet.scraped().await;
    let cases = [
        // A pod that is not there, or not Running: the pod lister's NotFound.
        (
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope",
            404,
            json!({"message": "pods \"nope\" not found", "reason": "NotFound",
                "details": {"name": "nope", "kind": "pods"}}),
        ),
        (
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/idle",
            404,
            json!({"message": "pods \"idle\" not found", "reason": "NotFound",
                "details": {"name": "idle", "kind": "pods"}}),
        ),
        // A Running pod without usage.
        (
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/quiet",
            404,
            json!({"message": "podmetrics.metrics.k8s.io \"default/quiet\" not found",
                "reason": "NotFound",
                "details": {"name": "default/quiet", "group": "metrics.k8s.io", "kind": "podmetrics"}}),
        ),
        (
            "/apis/metrics.k8s.io/v1beta1/nodes/nope",
            404,
            json!({"message": "node \"nope\" not found", "reason": "NotFound",
                "details": {"name": "nope", "kind": "node"}}),
        ),
        (
            "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=spec.nodeName%3Dn1",
            400,
            json!({"message": "\"spec.nodeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                "reason": "BadRequest"}),
        ),
        (
            "/apis/metrics.k8s.io/v1beta1/pods?watch=true",
            405,
            json!({"message": "watch is not supported on resources of kind \"pods.metrics.k8s.io\"",
                "reason": "MethodNotAllowed",
                "details": {"group": "metrics.k8s.io", "kind": "pods"}}),
        ),
    ];
    for (uri, code, want) in cases {
        let r = get(&app, uri).await;
        assert_eq!(r.status.as_u16(), code, "{uri}: {}", r.body);
        for (k, v) in want.as_object().unwrap() {
            assert_eq!(&r.body[k], v, "{uri}: {}", r.body);
        }
    }
    let r = req(
        &app,
        "DELETE",
        "/apis/metrics.k8s.io/v1beta1/nodes/n1",
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    for uri in [
        "/apis/metrics.k8s.io/v1beta1/pods/busy",
        "/apis/metrics.k8s.io/v1beta1/watch/pods",
        "/apis/metrics.k8s.io/v1beta1/nodes/n1/status",
    ] {
        assert_eq!(get(&app, uri).await.status, StatusCode::NOT_FOUND, "{uri}");
    }
}

#[tokio::test]
async fn discovery_lists_the_group_only_while_served() {
    let (plain, _d) = common::server();
    let r = get(&plain, "/apis").await;
    assert!(!r.body.to_string().contains("metrics.k8s.io"));
    assert_eq!(
        get(&plain, "/apis/metrics.k8s.io/v1beta1/pods")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&plain, "/apis/metrics.k8s.io/v1beta1").await.status,
        StatusCode::NOT_FOUND
    );

    let (app, _kubelet, _dir) = cluster().await;
    let r = get(&app, "/apis").await;
    let groups = r.body["groups"].as_array().unwrap();
    assert_eq!(
        groups.last().unwrap(),
        &json!({"name": "metrics.k8s.io",
            "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
            "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}})
    );
    let r = get(&app, "/apis/metrics.k8s.io").await;
    assert_eq!(r.body["kind"], "APIGroup");
    let r = get(&app, "/apis/metrics.k8s.io/v1beta1").await;
    assert_eq!(
        r.body,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1",
        "resources": [
            {"name": "nodes", "singularName": "node", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
        ]})
    );
    let agg = common::kubectl_request(
        "GET",
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
    );
    let r = common::send(&app, agg, Body::empty()).await;
    let last = r.body["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["metadata"]["name"], "metrics.k8s.io");
    assert_eq!(
        last["versions"][0]["resources"][1],
        json!({"resource": "pods",
            "responseKind": {"group": "metrics.k8s.io", "version": "v1beta1", "kind": "PodMetrics"},
            "scope": "Namespaced", "singularResource": "", "verbs": ["get", "list"]})
    );
}
