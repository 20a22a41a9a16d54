//! `pods/NAME/ephemeralcontainers` through the router, in process: kubectl debug's
//! strategic-merge patch, PUT (JSON and protobuf), json and merge patches and apply add
//! ephemeral containers and nothing else; existing ones may not change or go; static pods
//! take none; the main resource may not touch them; discovery and OpenAPI list the
//! subresource as kube-apiserver does.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use kbatch_apiserver::router;
use serde_json::{Value, json};

use common::Reply;

const PODS: &str = "/api/v1/namespaces/default/pods";
const SMP: &str = "application/strategic-merge-patch+json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

async fn server() -> (Router, tempfile::TempDir) {
    let (state, dir) = common::state();
    state.bootstrap().await.expect("bootstrap");
    let app = router(state);
    common::default_accounts(&app, &["default"]).await;
    (app, dir)
}

async fn send(app: &Router, method: &str, uri: &str, body: Option<(&str, Vec<u8>)>) -> Reply {
    let mut req = common::kubectl_request(method, uri, "application/json");
    let body = match body {
        Some((ct, bytes)) => {
            req = req.header("content-type", ct);
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    common::send(app, req, body).await
}

async fn json_call(app: &Router, method: &str, uri: &str, ct: &str, body: Value) -> Reply {
    send(app, method, uri, Some((ct, body.to_string().into_bytes()))).await
}

fn ok(r: &Reply) -> &Value {
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    &r.body
}

/// Creates pod `name` (with `annotations`) and returns it.
async fn create_pod(app: &Router, name: &str, annotations: Value) -> Value {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "a"}, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
                 "initContainers": [{"name": "init", "image": "busybox:1.36"}]},
    });
    let r = json_call(app, "POST", PODS, "application/json", pod).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body
}

fn sub(name: &str) -> String {
    format!("{PODS}/{name}/ephemeralcontainers")
}

/// The container kubectl debug -it --image=busybox --target=app sends (general profile).
fn debugger(name: &str) -> Value {
    json!({"image": "busybox", "name": name, "resources": {},
           "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
           "stdin": true, "targetContainerName": "app",
           "terminationMessagePolicy": "File", "tty": true})
}

fn invalid_message(r: &Reply) -> String {
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.body["reason"], "Invalid");
    assert_eq!(r.body["details"]["kind"], "Pod");
    r.body["message"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn kubectl_debug_patch_adds_an_ephemeral_container_and_nothing_else() {
    let (app, _dir) = server().await;
    create_pod(&app, "p", json!({})).await;
    // kubectl debug's two-way patch carries only the new container; the rest of this one is
    // what the subresource ignores.
    let patch = json!({
        "metadata": {"labels": {"app": "changed"}, "annotations": {"x": "y"}},
        "spec": {"activeDeadlineSeconds": 5, "ephemeralContainers": [debugger("debugger-abcde")]},
        "status": {"phase": "Running"},
    });
    let r = json_call(&app, "PATCH", &sub("p"), SMP, patch).await;
    let pod = ok(&r);
    assert_eq!(pod["kind"], "Pod");
    let ec = &pod["spec"]["ephemeralContainers"][0];
    assert_eq!(ec["name"], "debugger-abcde");
    assert_eq!(ec["targetContainerName"], "app");
    assert_eq!(ec["stdin"], true);
    // Defaulted as a container is.
    assert_eq!(ec["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(ec["terminationMessagePolicy"], "File");
    assert_eq!(ec["imagePullPolicy"], "Always");
    assert_eq!(ec["resources"], json!({}));
    assert_eq!(pod["metadata"]["labels"], json!({"app": "a"}));
    assert!(pod["metadata"].get("annotations").is_none(), "{pod}");
    assert!(pod["spec"].get("activeDeadlineSeconds").is_none());
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["metadata"]["generation"], 2);
    // The write is recorded for the subresource, with only the ephemeral containers' fields.
    let mf = pod["metadata"]["managedFields"].as_array().unwrap();
    let entry = mf
        .iter()
        .find(|e| e["subresource"] == "ephemeralcontainers")
        .unwrap_or_else(|| panic!("{mf:?}"));
    assert_eq!(entry["manager"], "kubectl");
    assert_eq!(entry["operation"], "Update");
    let fields = &entry["fieldsV1"];
    assert_eq!(
        fields.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["f:spec"]
    );
    assert_eq!(
        fields["f:spec"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["f:ephemeralContainers"]
    );
    assert!(
        fields["f:spec"]["f:ephemeralContainers"]
            .get("k:{\"name\":\"debugger-abcde\"}")
            .is_some(),
        "{fields}"
    );

    // GET through the subresource is the Pod.
    let r = send(&app, "GET", &sub("p"), None).await;
    let got = ok(&r);
    assert_eq!(got["kind"], "Pod");
    assert_eq!(
        got["spec"]["ephemeralContainers"][0]["name"],
        "debugger-abcde"
    );

    // A repeated identical patch changes nothing.
    let again = json!({"spec": {"ephemeralContainers": [debugger("debugger-abcde")]}});
    let r = json_call(&app, "PATCH", &sub("p"), SMP, again).await;
    assert_eq!(ok(&r)["metadata"]["generation"], 2);
}

#[tokio::test]
async fn put_json_patch_merge_patch_and_apply_through_the_subresource() {
    let (app, _dir) = server().await;
    let mut pod = create_pod(&app, "p", json!({})).await;
    // PUT of the whole pod with one more ephemeral container.
    pod["spec"]["ephemeralContainers"] = json!([debugger("one")]);
    let r = json_call(&app, "PUT", &sub("p"), "application/json", pod).await;
    let pod = ok(&r).clone();
    assert_eq!(pod["spec"]["ephemeralContainers"][0]["name"], "one");

    let jp = json!([{"op": "add", "path": "/spec/ephemeralContainers/-",
                     "value": {"name": "two", "image": "busybox:1.36"}}]);
    let r = json_call(&app, "PATCH", &sub("p"), "application/json-patch+json", jp).await;
    let names: Vec<&str> = ok(&r)["spec"]["ephemeralContainers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["one", "two"]);
    assert_eq!(
        r.body["spec"]["ephemeralContainers"][1]["imagePullPolicy"],
        "IfNotPresent"
    );

    // A merge patch replaces the list: it must repeat the ones there.
    let mut all = r.body["spec"]["ephemeralContainers"].clone();
    all.as_array_mut()
        .unwrap()
        .push(json!({"name": "three", "image": "busybox"}));
    let mp = json!({"spec": {"ephemeralContainers": all}});
    let r = json_call(&app, "PATCH", &sub("p"), "application/merge-patch+json", mp).await;
    assert_eq!(ok(&r)["spec"]["ephemeralContainers"][2]["name"], "three");

    // Server-side apply through the subresource, recorded for it.
    let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"ephemeralContainers": [{"name": "four", "image": "busybox"}]}});
    let uri = format!("{}?fieldManager=debugger", sub("p"));
    let r = json_call(&app, "PATCH", &uri, "application/apply-patch+yaml", cfg).await;
    let pod = ok(&r);
    assert_eq!(
        pod["spec"]["ephemeralContainers"].as_array().map(Vec::len),
        Some(4)
    );
    let applied = pod["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "debugger")
        .unwrap_or_else(|| panic!("{pod}"));
    assert_eq!(applied["operation"], "Apply");
    assert_eq!(applied["subresource"], "ephemeralcontainers");
}

#[tokio::test]
async fn existing_ephemeral_containers_may_not_change_or_go() {
    let (app, _dir) = server().await;
    create_pod(&app, "p", json!({})).await;
    let add = json!({"spec": {"ephemeralContainers": [debugger("debugger")]}});
    let r = json_call(&app, "PATCH", &sub("p"), SMP, add).await;
    let pod = ok(&r).clone();

    let change =
        json!({"spec": {"ephemeralContainers": [{"name": "debugger", "image": "alpine"}]}});
    let r = json_call(&app, "PATCH", &sub("p"), SMP, change).await;
    let msg = invalid_message(&r);
    assert!(
        msg.starts_with(
            "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be changed\n"
        ),
        "{msg}"
    );
    assert!(msg.contains("image"), "{msg}");
    assert_eq!(
        r.body["details"]["causes"][0]["field"],
        "spec.ephemeralContainers"
    );
    assert_eq!(
        r.body["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );

    let mut removed = pod.clone();
    removed["spec"]["ephemeralContainers"] = json!([]);
    let r = json_call(&app, "PUT", &sub("p"), "application/json", removed).await;
    assert_eq!(
        invalid_message(&r),
        "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed\n"
    );

    // Zero values sent explicitly are the fields left out: no change.
    let mut same = pod.clone();
    same["spec"]["ephemeralContainers"][0]["stdinOnce"] = json!(false);
    same["spec"]["ephemeralContainers"][0]["command"] = json!([]);
    let r = json_call(&app, "PUT", &sub("p"), "application/json", same).await;
    ok(&r);
}

#[tokio::test]
async fn ephemeral_container_rules_apply_to_the_new_ones() {
    let (app, _dir) = server().await;
    create_pod(&app, "p", json!({})).await;
    let bad = json!({"spec": {"ephemeralContainers": [
        {"name": "app", "image": "busybox", "targetContainerName": "nope",
         "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}},
         "readinessProbe": {"exec": {"command": ["true"]}}},
    ]}});
    let r = json_call(&app, "PATCH", &sub("p"), SMP, bad).await;
    let causes: Vec<(String, String)> = r.body["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r.body))
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let forbidden = "Forbidden: cannot be set for an Ephemeral Container";
    assert_eq!(
        causes,
        [
            (
                "spec.ephemeralContainers[0].name".to_string(),
                "Duplicate value: \"app\"".to_string()
            ),
            (
                "spec.ephemeralContainers[0].targetContainerName".to_string(),
                "Not found: \"nope\"".to_string()
            ),
            (
                "spec.ephemeralContainers[0].ports".to_string(),
                forbidden.to_string()
            ),
            (
                "spec.ephemeralContainers[0].resources".to_string(),
                forbidden.to_string()
            ),
            (
                "spec.ephemeralContainers[0].readinessProbe".to_string(),
                forbidden.to_string()
            ),
        ]
    );
}

#[tokio::test]
async fn static_pods_take_no_ephemeral_containers() {
    let (app, _dir) = server().await;
    create_pod(&app, "s", json!({"kubernetes.io/config.mirror": "abc"})).await;
    let add = json!({"spec": {"ephemeralContainers": [debugger("debugger")]}});
    let r = json_call(&app, "PATCH", &sub("s"), SMP, add).await;
    assert_eq!(
        invalid_message(&r),
        "Pod \"s\" is invalid: []: Forbidden: static pods do not support ephemeral containers"
    );
}

#[tokio::test]
async fn the_main_resource_may_not_touch_ephemeral_containers() {
    let (app, _dir) = server().await;
    create_pod(&app, "p", json!({})).await;
    let add = json!({"spec": {"ephemeralContainers": [debugger("debugger")]}});
    let r = json_call(&app, "PATCH", &format!("{PODS}/p"), SMP, add.clone()).await;
    let msg = invalid_message(&r);
    assert!(
        msg.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"),
        "{msg}"
    );
    assert!(msg.contains("ephemeralContainers"), "{msg}");
    // Once added through the subresource, the main resource keeps them untouched.
    ok(&json_call(&app, "PATCH", &sub("p"), SMP, add).await);
    let labels = json!({"metadata": {"labels": {"more": "x"}}});
    let r = json_call(&app, "PATCH", &format!("{PODS}/p"), SMP, labels).await;
    assert_eq!(ok(&r)["spec"]["ephemeralContainers"][0]["name"], "debugger");
    let mut pod = r.body.clone();
    pod["spec"]["ephemeralContainers"][0]["image"] = json!("alpine");
    let r = json_call(&app, "PUT", &format!("{PODS}/p"), "application/json", pod).await;
    assert!(
        invalid_message(&r).contains("pod updates may not change fields other than"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn a_missing_pod_is_not_found_by_name() {
    let (app, _dir) = server().await;
    let add = json!({"spec": {"ephemeralContainers": [debugger("debugger")]}});
    let r = json_call(&app, "PATCH", &sub("nope"), SMP, add).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    // kubectl debug takes a 404 without a name for a server without the subresource.
    assert_eq!(r.body["details"]["name"], "nope");
    assert_eq!(r.body["details"]["kind"], "pods");
    // Neither create nor delete is served there.
    let r = send(&app, "DELETE", &sub("nope"), None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{}", r.body);
}

fn msg(num: u32, parts: &[Vec<u8>]) -> Vec<u8> {
    common::pb_field(num, &parts.concat())
}

fn text(num: u32, s: &str) -> Vec<u8> {
    common::pb_field(num, s.as_bytes())
}

#[tokio::test]
async fn put_takes_a_protobuf_pod() {
    let (app, _dir) = server().await;
    create_pod(&app, "p", json!({})).await;
    // Pod{metadata 1 {name 1}, spec 2 {containers 2 {name 1, image 2},
    //   ephemeralContainers 34 {ephemeralContainerCommon 1 {name 1, image 2, tty 18}}}}.
    let container = msg(2, &[text(1, "app"), text(2, "busybox:1.36")]);
    let common = msg(1, &[text(1, "dbg"), text(2, "busybox")]);
    let pod = msg(
        2,
        &[
            msg(1, &[text(1, "p")]),
            msg(2, &[container, msg(34, &[common, text(2, "app")])]),
        ],
    );
    let body = [
        b"k8s\x00".to_vec(),
        msg(1, &[text(1, "v1"), text(2, "Pod")]),
        pod,
        text(3, ""),
        text(4, ""),
    ]
    .concat();
    let r = send(&app, "PUT", &sub("p"), Some((PROTOBUF, body))).await;
    let ec = &ok(&r)["spec"]["ephemeralContainers"][0];
    assert_eq!(ec["name"], "dbg");
    assert_eq!(ec["targetContainerName"], "app");
    // The containers of the body are ignored: the stored ones stay.
    assert_eq!(
        r.body["spec"]["containers"][0]["command"],
        json!(["sleep", "3600"])
    );
}

#[tokio::test]
async fn discovery_and_openapi_list_the_subresource() {
    let (app, _dir) = server().await;
    let r = send(&app, "GET", "/api/v1", None).await;
    let names: Vec<&str> = ok(&r)["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["name"].as_str())
        .filter(|n| n.starts_with("pods/"))
        .collect();
    assert_eq!(
        names,
        [
            "pods/attach",
            "pods/binding",
            "pods/ephemeralcontainers",
            "pods/eviction",
            "pods/exec",
            "pods/log",
            "pods/portforward",
            "pods/status"
        ]
    );
    let entry = r.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "pods/ephemeralcontainers")
        .cloned();
    assert_eq!(
        entry,
        Some(
            json!({"name": "pods/ephemeralcontainers", "singularName": "", "namespaced": true,
                    "kind": "Pod", "verbs": ["get", "patch", "update"]})
        )
    );

    let r = send(&app, "GET", "/openapi/v3/api/v1", None).await;
    let item = &ok(&r)["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/ephemeralcontainers"];
    for (method, id) in [
        ("get", "readCoreV1NamespacedPodEphemeralcontainers"),
        ("put", "replaceCoreV1NamespacedPodEphemeralcontainers"),
        ("patch", "patchCoreV1NamespacedPodEphemeralcontainers"),
    ] {
        assert_eq!(item[method]["operationId"], id, "{item}");
        assert_eq!(
            item[method]["x-kubernetes-group-version-kind"]["kind"],
            "Pod"
        );
    }
    assert!(item.get("post").is_none());
    let paths = &r.body["paths"];
    assert_eq!(
        paths["/api/v1/namespaces/{namespace}/pods/{name}/status"]["get"]["operationId"],
        "readCoreV1NamespacedPodStatus"
    );
    assert_eq!(
        paths["/api/v1/pods"]["get"]["operationId"],
        "listCoreV1PodForAllNamespaces"
    );
    assert_eq!(
        paths["/api/v1/namespaces/{namespace}/pods"]["delete"]["operationId"],
        "deleteCoreV1CollectionNamespacedPod"
    );
    assert_eq!(
        paths["/api/v1/namespaces/{name}/status"]["put"]["operationId"],
        "replaceCoreV1NamespaceStatus"
    );
}
