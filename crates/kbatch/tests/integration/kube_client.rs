//! kube-rs (an unmodified real client) against `kbatch up`: CRUD, status, patch, delete,
//! watch and the kube-runtime watcher/reflector.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Server, eventually, job_json, pod_json, raw, rv_num};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::Status;
use kube::runtime::{reflector, watcher};
use serde_json::json;

const T: Duration = Duration::from_secs(10);

fn job(name: &str) -> Job {
    serde_json::from_value(job_json(name)).expect("job fixture")
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(pod_json(name)).expect("pod fixture")
}

/// The Status of an API error (panics on success or a transport error).
fn api_err<T: std::fmt::Debug>(r: kube::Result<T>) -> Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta()
        .resource_version
        .clone()
        .expect("object has a resourceVersion")
}

#[tokio::test]
async fn job_and_pod_crud_with_defaults() {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    let mut j = job("crud");
    j.metadata.labels = Some(BTreeMap::from([("app".into(), "crud".into())]));
    let created = jobs
        .create(&PostParams::default(), &j)
        .await
        .expect("create job");
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    let uid = meta.uid.clone().expect("uid");
    let spec = created.spec.as_ref().expect("spec");
    // Upstream Job defaulting, as kubectl shows it.
    assert_eq!(spec.parallelism, Some(1));
    assert_eq!(spec.completions, Some(1));
    assert_eq!(spec.backoff_limit, Some(6));
    assert_eq!(spec.suspend, Some(false));
    assert_eq!(spec.completion_mode.as_deref(), Some("NonIndexed"));
    let selector = spec.selector.as_ref().expect("generated selector");
    assert_eq!(
        selector
            .match_labels
            .as_ref()
            .and_then(|m| m.get("batch.kubernetes.io/controller-uid")),
        Some(&uid)
    );
    let tlabels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .expect("template labels");
    assert_eq!(
        tlabels
            .get("batch.kubernetes.io/job-name")
            .map(String::as_str),
        Some("crud")
    );
    assert_eq!(tlabels.get("job-name").map(String::as_str), Some("crud"));
    assert_eq!(tlabels.get("controller-uid"), Some(&uid));

    let got = jobs.get("crud").await.expect("get job");
    assert_eq!(got.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(rv(&got), rv(&created));

    jobs.create(&PostParams::default(), &job("other"))
        .await
        .expect("create other");
    let all = jobs.list(&ListParams::default()).await.expect("list");
    assert_eq!(all.items.len(), 2);
    assert!(all.metadata.resource_version.is_some_and(|r| !r.is_empty()));
    let sel = jobs
        .list(&ListParams::default().labels("app=crud"))
        .await
        .expect("list by label");
    let names: Vec<_> = sel
        .items
        .iter()
        .filter_map(|j| j.metadata.name.clone())
        .collect();
    assert_eq!(names, ["crud"]);
    let by_field = jobs
        .list(&ListParams::default().fields("metadata.name=other"))
        .await
        .expect("list by field");
    assert_eq!(by_field.items.len(), 1);
    assert_eq!(by_field.items[0].metadata.name.as_deref(), Some("other"));

    // Pagination: limit + continue returns every item exactly once.
    let page1 = jobs
        .list(&ListParams::default().limit(1))
        .await
        .expect("page 1");
    assert_eq!(page1.items.len(), 1);
    let token = page1.metadata.continue_.clone().expect("continue token");
    let page2 = jobs
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(page2.items.len(), 1);
    assert_ne!(page1.items[0].metadata.name, page2.items[0].metadata.name);

    // Pods: create, get, list, status update, delete (unscheduled → gone at once).
    let p = pods
        .create(&PostParams::default(), &pod("p1"))
        .await
        .expect("create pod");
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending"),
        "a new pod is Pending"
    );
    let spec = p.spec.as_ref().expect("pod spec");
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    let patched = pods
        .patch_status(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("patch pod status");
    assert_eq!(
        patched.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert!(rv_num(&rv(&patched)) > rv_num(&rv(&p)));
    let listed = pods.list(&ListParams::default()).await.expect("list pods");
    assert_eq!(listed.items.len(), 1);
    pods.delete("p1", &DeleteParams::default())
        .await
        .expect("delete pod");
    let st = api_err(pods.get("p1").await);
    assert_eq!((st.code, st.reason.as_str()), (404, "NotFound"));
    assert_eq!(st.message, r#"pods "p1" not found"#);
}

#[tokio::test]
async fn job_status_replace_and_patch() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    let created = jobs
        .create(&PostParams::default(), &job("st"))
        .await
        .expect("create");

    // PUT /status: status changes stick, spec changes are ignored.
    let mut j = created.clone();
    j.status = Some(JobStatus {
        active: Some(1),
        ..Default::default()
    });
    j.spec.as_mut().expect("spec").parallelism = Some(5);
    let after = jobs
        .replace_status("st", &PostParams::default(), &j)
        .await
        .expect("replace_status");
    assert_eq!(after.status.as_ref().and_then(|s| s.active), Some(1));
    assert_eq!(after.spec.as_ref().and_then(|s| s.parallelism), Some(1));
    assert_eq!(
        after.metadata.generation,
        Some(1),
        "a status write keeps the generation"
    );
    assert!(rv_num(&rv(&after)) > rv_num(&rv(&created)));

    // PATCH /status (merge).
    let after = jobs
        .patch_status(
            "st",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": 1, "terminating": 0}})),
        )
        .await
        .expect("patch_status");
    let status = after.status.clone().expect("status");
    assert_eq!(
        (status.active, status.ready, status.terminating),
        (Some(1), Some(1), Some(0))
    );

    // PUT on the main resource: status changes are dropped, spec changes bump generation.
    let mut j = after.clone();
    j.status.as_mut().expect("status").active = Some(7);
    j.spec.as_mut().expect("spec").parallelism = Some(3);
    let after = jobs
        .replace("st", &PostParams::default(), &j)
        .await
        .expect("replace");
    assert_eq!(after.status.as_ref().and_then(|s| s.active), Some(1));
    assert_eq!(after.spec.as_ref().and_then(|s| s.parallelism), Some(3));
    assert_eq!(after.metadata.generation, Some(2));

    // A status write with a stale resourceVersion is a conflict too.
    let mut stale = created.clone();
    stale.status = Some(JobStatus {
        active: Some(2),
        ..Default::default()
    });
    let st = api_err(
        jobs.replace_status("st", &PostParams::default(), &stale)
            .await,
    );
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn merge_and_json_patches() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    jobs.create(&PostParams::default(), &job("pt"))
        .await
        .expect("create");

    let j = jobs
        .patch(
            "pt",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"parallelism": 2}}),
            ),
        )
        .await
        .expect("merge patch");
    let labels = j.metadata.labels.clone().expect("labels");
    assert_eq!((labels["a"].as_str(), labels["b"].as_str()), ("1", "2"));
    assert_eq!(j.spec.as_ref().and_then(|s| s.parallelism), Some(2));
    assert_eq!(j.metadata.generation, Some(2));

    // Merge patch null deletes a key.
    let j = jobs
        .patch(
            "pt",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": null}}})),
        )
        .await
        .expect("merge patch delete key");
    let labels = j.metadata.labels.clone().expect("labels");
    assert!(!labels.contains_key("a"));
    assert_eq!(labels.get("b").map(String::as_str), Some("2"));

    // The json-patch crate's type is reached through `Patch::Json`, deserialized from the
    // standard JSON form.
    let ops = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/parallelism", "value": 2},
        {"op": "replace", "path": "/spec/parallelism", "value": 4},
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "x"}},
        {"op": "remove", "path": "/metadata/labels/b"}
    ]))
    .expect("ops");
    let j = jobs
        .patch("pt", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .expect("json patch");
    assert_eq!(j.spec.as_ref().and_then(|s| s.parallelism), Some(4));
    assert_eq!(
        j.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("note"))
            .map(String::as_str),
        Some("x")
    );
    assert!(!j.metadata.labels.unwrap_or_default().contains_key("b"));

    // A failing `test` op changes nothing and is a client error, not a server error.
    let before = rv(&jobs.get("pt").await.expect("get"));
    let ops = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/parallelism", "value": 99},
        {"op": "replace", "path": "/spec/parallelism", "value": 5}
    ]))
    .expect("ops");
    let st = api_err(
        jobs.patch("pt", &PatchParams::default(), &Patch::Json::<()>(ops))
            .await,
    );
    assert!((400..500).contains(&st.code), "{st:?}");
    assert_eq!(rv(&jobs.get("pt").await.expect("get")), before);

    // Patching a missing object is 404.
    let st = api_err(
        jobs.patch("nope", &PatchParams::default(), &Patch::Merge(json!({})))
            .await,
    );
    assert_eq!((st.code, st.reason.as_str()), (404, "NotFound"));
    assert_eq!(st.message, r#"jobs.batch "nope" not found"#);
}

#[tokio::test]
async fn delete_background_and_raw_orphan() {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());

    jobs.create(&PostParams::default(), &job("bg"))
        .await
        .expect("create bg");
    let r = jobs
        .delete("bg", &DeleteParams::background())
        .await
        .expect("delete bg");
    let status = r
        .right()
        .expect("a job without finalizers is removed: Status answer");
    assert_eq!(status.details.as_ref().map(|d| d.name.as_str()), Some("bg"));
    let st = api_err(jobs.get("bg").await);
    assert_eq!((st.code, st.reason.as_str()), (404, "NotFound"));

    // A raw DELETE with no options orphans: the Job stays with deletionTimestamp and the
    // `orphan` finalizer, and the server warns.
    jobs.create(&PostParams::default(), &job("raw"))
        .await
        .expect("create raw");
    let resp = raw(
        &client,
        "DELETE",
        "/apis/batch/v1/namespaces/default/jobs/raw",
        None,
        "",
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    let warning = resp
        .headers
        .get("warning")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        warning,
        "299 - \"child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning\""
    );
    let body = resp.json();
    assert_eq!(body["kind"], "Job", "{body}");
    assert_eq!(body["metadata"]["finalizers"], json!(["orphan"]));
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");

    // Once nothing else holds it, removing the last finalizer deletes it. A garbage collector
    // may get there first; either way the Job must end up gone.
    if let Ok(j) = jobs.get("raw").await {
        assert!(j.metadata.deletion_timestamp.is_some());
        let _ = jobs
            .patch(
                "raw",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    eventually(T, "orphaned job removed", || async {
        matches!(jobs.get("raw").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;

    // Orphan through DeleteParams keeps the object until its finalizer goes.
    jobs.create(&PostParams::default(), &job("orph"))
        .await
        .expect("create orph");
    let r = jobs
        .delete("orph", &DeleteParams::orphan())
        .await
        .expect("delete orph");
    let j = r
        .left()
        .expect("the Job is returned while its orphan finalizer is pending");
    assert_eq!(
        j.metadata.finalizers.as_deref(),
        Some(&["orphan".to_string()][..])
    );

    // A Job with a custom finalizer is only marked for deletion.
    let mut j = job("fin");
    j.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    jobs.create(&PostParams::default(), &j)
        .await
        .expect("create fin");
    let r = jobs
        .delete("fin", &DeleteParams::background())
        .await
        .expect("delete fin");
    let j = r.left().expect("object kept while a finalizer remains");
    assert!(j.metadata.deletion_timestamp.is_some());
    assert_eq!(
        j.metadata.finalizers.as_deref(),
        Some(&["example.com/hold".to_string()][..])
    );
    // New finalizers cannot be added once it is being deleted.
    let st = api_err(
        jobs.patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .await,
    );
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"), "{st:?}");
    jobs.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .expect("remove the finalizer");
    let st = api_err(jobs.get("fin").await);
    assert_eq!(
        st.code, 404,
        "removing the last finalizer deletes the object"
    );
}

#[tokio::test]
async fn generate_name_and_dry_run() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);

    let mut j = job("");
    j.metadata.name = None;
    j.metadata.generate_name = Some("gen-".into());
    let a = jobs
        .create(&PostParams::default(), &j)
        .await
        .expect("create a");
    let b = jobs
        .create(&PostParams::default(), &j)
        .await
        .expect("create b");
    let a_rv = rv(&a);
    let (na, nb) = (
        a.metadata.name.expect("name a"),
        b.metadata.name.expect("name b"),
    );
    for n in [&na, &nb] {
        assert!(
            n.starts_with("gen-") && n.len() == 9,
            "generated name {n:?}"
        );
        assert!(
            n[4..]
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "generated suffix alphabet: {n:?}"
        );
    }
    assert_ne!(na, nb);
    jobs.get(&na).await.expect("generated job exists");

    // Dry-run create: the answer looks created, nothing is stored.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let before = jobs.list(&ListParams::default()).await.expect("list");
    let d = jobs
        .create(&dry, &job("dry"))
        .await
        .expect("dry-run create");
    assert_eq!(d.metadata.name.as_deref(), Some("dry"));
    assert!(
        d.spec.as_ref().and_then(|s| s.selector.as_ref()).is_some(),
        "defaults applied"
    );
    let st = api_err(jobs.get("dry").await);
    assert_eq!(st.code, 404, "dry-run create stored nothing");
    // Dry-run delete leaves the object, dry-run patch changes nothing.
    let dp = DeleteParams {
        dry_run: true,
        ..DeleteParams::background()
    };
    jobs.delete(&na, &dp).await.expect("dry-run delete");
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let p = jobs
        .patch(
            &na,
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("dry-run patch");
    // Not stored: the patched object keeps the stored resourceVersion, as upstream's.
    let stored = jobs.get(&na).await.expect("the job");
    assert_eq!(
        p.metadata.resource_version,
        stored.metadata.resource_version
    );
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("x"))
            .map(String::as_str),
        Some("y")
    );
    let still = jobs
        .get(&na)
        .await
        .expect("still there after dry-run delete");
    assert!(
        !still
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("x"),
        "a dry-run patch stores nothing"
    );
    let after = jobs.list(&ListParams::default()).await.expect("list");
    assert_eq!(after.items.len(), before.items.len());
    // Dry runs do not consume resourceVersions that clients could observe as changes.
    assert_eq!(rv(&still), a_rv);
}

#[tokio::test]
async fn conflicts_not_found_and_already_exists() {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let v1 = jobs
        .create(&PostParams::default(), &job("cf"))
        .await
        .expect("create");

    // Existing name → 409 AlreadyExists.
    let st = api_err(jobs.create(&PostParams::default(), &job("cf")).await);
    assert_eq!((st.code, st.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(st.message, r#"jobs.batch "cf" already exists"#);
    let d = st.details.expect("details");
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("cf", "batch", "jobs")
    );

    // Update with the current resourceVersion works; the old one is now stale → 409 Conflict.
    let mut a = v1.clone();
    a.metadata.labels = Some(BTreeMap::from([("v".into(), "2".into())]));
    jobs.replace("cf", &PostParams::default(), &a)
        .await
        .expect("update at current rv");
    let mut b = v1.clone();
    b.metadata.labels = Some(BTreeMap::from([("v".into(), "3".into())]));
    let st = api_err(jobs.replace("cf", &PostParams::default(), &b).await);
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        st.message,
        r#"Operation cannot be fulfilled on jobs.batch "cf": the object has been modified; please apply your changes to the latest version and try again"#
    );
    // Without a resourceVersion the update is unconditional.
    b.metadata.resource_version = None;
    let j = jobs
        .replace("cf", &PostParams::default(), &b)
        .await
        .expect("unconditional update");
    assert_eq!(
        j.metadata
            .labels
            .unwrap_or_default()
            .get("v")
            .map(String::as_str),
        Some("3")
    );

    // Missing namespace → 404 for the namespace.
    let in_missing: Api<Job> = Api::namespaced(client.clone(), "missing-ns");
    let st = api_err(in_missing.create(&PostParams::default(), &job("x")).await);
    assert_eq!((st.code, st.reason.as_str()), (404, "NotFound"));
    assert_eq!(st.message, r#"namespaces "missing-ns" not found"#);
    // Missing object → 404, for get, replace and delete.
    let st = api_err(jobs.get("ghost").await);
    assert_eq!(st.message, r#"jobs.batch "ghost" not found"#);
    let mut g = job("ghost");
    g.metadata.resource_version = None;
    let st = api_err(jobs.replace("ghost", &PostParams::default(), &g).await);
    assert_eq!(st.code, 404);
    let st = api_err(jobs.delete("ghost", &DeleteParams::default()).await);
    assert_eq!(st.code, 404);

    // Namespaces are served: after creating one, creating a Job in it works.
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "missing-ns"}})).expect("ns");
    nss.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    in_missing
        .create(&PostParams::default(), &job("x"))
        .await
        .expect("create in the new namespace");
}

#[tokio::test]
async fn watch_resumes_in_order_from_a_resource_version() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    let a = jobs
        .create(&PostParams::default(), &job("wa"))
        .await
        .expect("create wa");
    let from = rv(&a);

    // Changes after `from`: two modifications, a creation and a deletion.
    let pp = PatchParams::default();
    for i in 0..2 {
        jobs.patch(
            "wa",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .expect("modify");
    }
    jobs.create(&PostParams::default(), &job("wb"))
        .await
        .expect("create wb");
    jobs.delete("wb", &DeleteParams::background())
        .await
        .expect("delete wb");

    let wp = WatchParams::default().timeout(5);
    let mut stream = jobs.watch(&wp, &from).await.expect("watch").boxed();
    let mut seen = Vec::new();
    let mut last = rv_num(&from);
    while seen.len() < 4 {
        let ev = tokio::time::timeout(T, stream.try_next())
            .await
            .expect("watch event in time")
            .expect("watch stream ok")
            .expect("watch stream ended early");
        let (kind, j) = match ev {
            WatchEvent::Added(j) => ("ADDED", j),
            WatchEvent::Modified(j) => ("MODIFIED", j),
            WatchEvent::Deleted(j) => ("DELETED", j),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        let n = rv_num(&rv(&j));
        assert!(n > last, "resourceVersions increase: {n} after {last}");
        last = n;
        seen.push(format!("{kind} {}", j.metadata.name.expect("name")));
    }
    assert_eq!(
        seen,
        ["MODIFIED wa", "MODIFIED wa", "ADDED wb", "DELETED wb"]
    );

    // Live changes after the replay arrive on the same stream.
    jobs.patch(
        "wa",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"live": "1"}}})),
    )
    .await
    .expect("live modify");
    loop {
        let ev = tokio::time::timeout(T, stream.try_next())
            .await
            .expect("live event in time")
            .expect("watch stream ok")
            .expect("watch stream ended early");
        match ev {
            WatchEvent::Modified(j) => {
                assert!(rv_num(&rv(&j)) > last);
                assert_eq!(
                    j.metadata
                        .labels
                        .unwrap_or_default()
                        .get("live")
                        .map(String::as_str),
                    Some("1")
                );
                break;
            }
            WatchEvent::Bookmark(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }

    // A label-selected watch from the same point sees only matching objects.
    let wp = WatchParams::default().labels("live=1").timeout(2);
    let mut stream = jobs
        .watch(&wp, &from)
        .await
        .expect("selected watch")
        .boxed();
    let ev = tokio::time::timeout(T, stream.try_next())
        .await
        .expect("event in time")
        .expect("ok")
        .expect("one event");
    match ev {
        // The object entered the selection with this change: upstream reports ADDED.
        WatchEvent::Added(j) => assert_eq!(j.metadata.name.as_deref(), Some("wa")),
        other => panic!("expected ADDED for an object entering the selection, got {other:?}"),
    }
    // Leaving the selection is reported as DELETED (with the object's new state).
    jobs.patch(
        "wa",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"live": "0"}}})),
    )
    .await
    .expect("leave the selection");
    let ev = tokio::time::timeout(T, stream.try_next())
        .await
        .expect("event in time")
        .expect("ok")
        .expect("one more event");
    match ev {
        WatchEvent::Deleted(j) => assert_eq!(j.metadata.name.as_deref(), Some("wa")),
        other => panic!("expected DELETED for an object leaving the selection, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_too_old_resource_version_expires_and_watcher_relists() {
    // A small history: 5 events. 20 writes push the first resourceVersion out of it.
    let server = Server::start_with(&["--watch-history-events", "5"]).await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let first = jobs
        .create(&PostParams::default(), &job("old"))
        .await
        .expect("create");
    let old_rv = rv(&first);
    for i in 0..20 {
        pods.create(&PostParams::default(), &pod(&format!("filler-{i}")))
            .await
            .expect("filler");
    }

    // A raw watch: HTTP 200, then one ERROR event carrying a 410 Expired Status.
    let mut stream = jobs
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .expect("the watch request itself succeeds (HTTP 200)")
        .boxed();
    let ev = tokio::time::timeout(T, stream.try_next())
        .await
        .expect("event in time")
        .expect("stream ok")
        .expect("an event");
    match ev {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"), "{s:?}");
            assert!(s.message.starts_with("too old resource version"), "{s:?}");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }

    // kube-runtime's watcher lists, yields InitDone, and sends its WATCH (from the list's
    // resourceVersion) only when polled again. Writes made in between push that
    // resourceVersion out of history, so the watch gets the 410 ERROR event and the watcher
    // must re-list (the path a real watcher takes after a long disconnect).
    let cfg = watcher::Config::default().labels("group=w");
    let mut w = watcher(jobs.clone(), cfg).boxed();
    let mut marked = job("w1");
    marked.metadata.labels = Some(BTreeMap::from([("group".into(), "w".into())]));
    jobs.create(&PostParams::default(), &marked)
        .await
        .expect("create w1");
    loop {
        let ev = tokio::time::timeout(T, w.try_next())
            .await
            .expect("watcher event")
            .expect("watcher ok")
            .expect("watcher stream");
        if matches!(ev, watcher::Event::InitDone) {
            break;
        }
    }
    for i in 0..20 {
        pods.create(&PostParams::default(), &pod(&format!("filler2-{i}")))
            .await
            .expect("filler");
    }
    let mut w2 = marked.clone();
    w2.metadata.name = Some("w2".into());
    jobs.create(&PostParams::default(), &w2)
        .await
        .expect("create w2");
    for i in 0..20 {
        pods.create(&PostParams::default(), &pod(&format!("filler3-{i}")))
            .await
            .expect("filler");
    }

    let mut got_410 = false;
    let mut relisted: Option<Vec<String>> = None;
    let mut buffer = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    while relisted.is_none() {
        let ev = tokio::time::timeout_at(deadline, w.next())
            .await
            .expect("watcher re-lists in time")
            .expect("watcher stream does not end");
        match ev {
            Err(watcher::Error::WatchError(s)) => {
                assert_eq!(s.code, 410, "{s:?}");
                got_410 = true;
            }
            Err(e) => panic!("unexpected watcher error {e}"),
            Ok(watcher::Event::Init) => buffer.clear(),
            Ok(watcher::Event::InitApply(j)) => buffer.push(j.metadata.name.expect("name")),
            Ok(watcher::Event::InitDone) => {
                buffer.sort();
                relisted = Some(buffer.clone());
            }
            Ok(_) => {}
        }
    }
    assert!(got_410, "the watcher's resumed watch got a 410 ERROR event");
    assert_eq!(relisted.expect("relist"), ["w1", "w2"]);
}

#[tokio::test]
async fn reflector_store_mirrors_the_server() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    for i in 0..3 {
        jobs.create(&PostParams::default(), &job(&format!("pre-{i}")))
            .await
            .expect("pre-existing job");
    }
    let (reader, writer) = reflector::store::<Job>();
    let stream = reflector::reflector(writer, watcher(jobs.clone(), watcher::Config::default()));
    let handle = tokio::spawn(async move {
        // Errors are retried by the watcher; the test fails on content, not here.
        stream.for_each(|_| async {}).await;
    });
    tokio::time::timeout(T, reader.wait_until_ready())
        .await
        .expect("store ready in time")
        .expect("store ready");

    // Changes while the reflector runs.
    let pp = PatchParams::default();
    for i in 0..4 {
        jobs.create(&PostParams::default(), &job(&format!("live-{i}")))
            .await
            .expect("create live");
    }
    jobs.patch(
        "pre-0",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .expect("modify");
    jobs.patch(
        "live-1",
        &pp,
        &Patch::Merge(json!({"spec": {"parallelism": 3}})),
    )
    .await
    .expect("modify");
    jobs.delete("pre-1", &DeleteParams::background())
        .await
        .expect("delete");
    jobs.delete("live-2", &DeleteParams::background())
        .await
        .expect("delete");

    let snapshot = |list: Vec<(String, String)>| {
        let mut l = list;
        l.sort();
        l
    };
    let server_state = snapshot(
        jobs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .map(|j| (j.metadata.name.clone().expect("name"), rv(j)))
            .collect(),
    );
    assert_eq!(server_state.len(), 5);
    eventually(T, "reflector store equals the server's list", || {
        let reader = reader.clone();
        let want = server_state.clone();
        async move {
            let have = snapshot(
                reader
                    .state()
                    .iter()
                    .map(|j| (j.metadata.name.clone().expect("name"), rv(j.as_ref())))
                    .collect(),
            );
            (have == want).then_some(())
        }
    })
    .await;
    let live1 = reader
        .get(&reflector::ObjectRef::new("live-1").within("default"))
        .expect("live-1 in the store");
    assert_eq!(live1.spec.as_ref().and_then(|s| s.parallelism), Some(3));
    handle.abort();
}

/// Request bodies in the content types real clients send: kubectl sends YAML manifests as
/// `application/yaml`, some clients add a charset parameter, and kubectl/python send
/// `application/strategic-merge-patch+json` for patches.
#[tokio::test]
async fn write_content_types_real_clients_send() {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs = "/apis/batch/v1/namespaces/default/jobs";

    let r = raw(
        &client,
        "POST",
        jobs,
        Some("application/json; charset=utf-8"),
        job_json("charset").to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);

    let r = raw(
        &client,
        "PATCH",
        &format!("{jobs}/charset"),
        Some("application/strategic-merge-patch+json"),
        r#"{"metadata": {"labels": {"smp": "yes"}}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["metadata"]["labels"]["smp"], "yes");

    let yaml = "apiVersion: batch/v1
kind: Job
metadata:
  name: from-yaml
  labels: {format: yaml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [\"true\"]
";
    let r = raw(&client, "POST", jobs, Some("application/yaml"), yaml).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let j = r.json();
    assert_eq!(j["metadata"]["labels"]["format"], "yaml");
    assert_eq!(
        j["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["true"])
    );
}

#[tokio::test]
async fn pod_binding_and_graceful_delete() {
    let server = Server::start().await;
    let client = server.client().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("g"))
        .await
        .expect("create pod");

    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kbatch-node"}});
    let path = "/api/v1/namespaces/default/pods/g/binding";
    let r = raw(
        &client,
        "POST",
        path,
        Some("application/json"),
        binding.to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let p = pods.get("g").await.expect("get bound pod");
    assert_eq!(
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("kbatch-node")
    );
    // A pod is bound once.
    let r = raw(
        &client,
        "POST",
        path,
        Some("application/json"),
        binding.to_string(),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["reason"], "Conflict");

    // A scheduled pod is deleted gracefully: it stays, marked, for its grace period (30 s).
    let d = pods
        .delete("g", &DeleteParams::default())
        .await
        .expect("graceful delete")
        .left()
        .expect("the pod is returned");
    assert_eq!(d.metadata.deletion_grace_period_seconds, Some(30));
    let ts = d.metadata.deletion_timestamp.expect("deletionTimestamp");
    let ahead = ts.0.duration_since(server_now(&client).await.0);
    assert!(
        ahead.as_secs() > 20 && ahead.as_secs() <= 31,
        "deletionTimestamp is now + grace: {ahead:?} ahead"
    );
    let still = pods
        .get("g")
        .await
        .expect("still there during its grace period");
    assert!(still.metadata.deletion_timestamp.is_some());
    // A later DELETE may shorten the grace period; 0 removes the pod at once.
    pods.delete(
        "g",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("delete with grace 0");
    let st = api_err(pods.get("g").await);
    assert_eq!(st.code, 404);
}

/// The server's clock, read from a fresh object's creationTimestamp (second precision), so the
/// check above does not depend on this machine's clock agreeing with the server's.
async fn server_now(client: &kube::Client) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"generateName": "clock-"}}))
        .expect("namespace fixture");
    let created = nss
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    created
        .metadata
        .creation_timestamp
        .expect("creationTimestamp")
}

#[tokio::test]
async fn delete_collection_by_label() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    for (name, team) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let mut j = job(name);
        j.metadata.labels = Some(BTreeMap::from([("team".into(), team.into())]));
        jobs.create(&PostParams::default(), &j)
            .await
            .expect("create");
    }
    jobs.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels("team=x"),
    )
    .await
    .expect("deletecollection");
    let left: Vec<_> = jobs
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(left, ["c"]);
}

#[tokio::test]
async fn leases_and_events() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;

    let server = Server::start().await;
    let client = server.client().await;

    // Leader election: create, then renew with optimistic concurrency.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "kbatch-controllers"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    }))
    .expect("lease fixture");
    let l1 = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    let mut renew = l1.clone();
    renew.spec.as_mut().expect("spec").holder_identity = Some("b".into());
    let l2 = leases
        .replace("kbatch-controllers", &PostParams::default(), &renew)
        .await
        .expect("take over the lease");
    assert_eq!(
        l2.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b")
    );
    // A contender holding the old version loses.
    let st = api_err(
        leases
            .replace("kbatch-controllers", &PostParams::default(), &l1)
            .await,
    );
    assert_eq!(st.code, 409);

    // events.k8s.io/v1 events are served, and visible through core/v1 too.
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"name": "ev1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "kbatch.dev/test",
        "reportingInstance": "test-1",
        "action": "Testing",
        "reason": "Tested",
        "type": "Normal",
        "note": "hello",
        "regarding": {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "default"}
    }))
    .expect("event fixture");
    let created = events
        .create(&PostParams::default(), &ev)
        .await
        .expect("create events.k8s.io/v1 event");
    assert_eq!(created.note.as_deref(), Some("hello"));
    let got = events.get("ev1").await.expect("get event");
    assert_eq!(got.reason.as_deref(), Some("Tested"));
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let listed = core
        .list(&ListParams::default().fields("involvedObject.name=j"))
        .await
        .expect("list core events");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].message.as_deref(), Some("hello"));
    assert_eq!(listed.items[0].reason.as_deref(), Some("Tested"));
}

/// Read-modify-write with resourceVersion preconditions from many tasks at once: every
/// increment lands exactly once (conflicts are retried), as controllers rely on.
#[tokio::test]
async fn optimistic_concurrency_loses_no_update() {
    const TASKS: usize = 8;
    const EACH: usize = 10;
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    jobs.create(&PostParams::default(), &job("counter"))
        .await
        .expect("create");
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let jobs = jobs.clone();
        handles.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..EACH {
                loop {
                    let mut j = jobs.get("counter").await.expect("get");
                    let ann = j.metadata.annotations.get_or_insert_with(BTreeMap::new);
                    let n: usize = ann.get("n").map_or(0, |v| v.parse().expect("number"));
                    ann.insert("n".into(), (n + 1).to_string());
                    match jobs.replace("counter", &PostParams::default(), &j).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                        Err(e) => panic!("replace: {e}"),
                    }
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for h in handles {
        conflicts += tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("writers finish")
            .expect("writer task");
    }
    let j = jobs.get("counter").await.expect("get");
    let n = j
        .metadata
        .annotations
        .and_then(|a| a.get("n").cloned())
        .expect("counter annotation");
    assert_eq!(
        n,
        (TASKS * EACH).to_string(),
        "lost updates ({conflicts} conflicts retried)"
    );
}

/// Deleting a Job with each propagation policy, with a pod that names it as controller owner:
/// Background and Foreground remove the pod (Foreground keeps the Job until then), Orphan
/// keeps the pod and strips its owner reference.
#[tokio::test]
async fn garbage_collection_of_dependents() {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    let owned_pod = |name: &str, owner: &Job| -> Pod {
        let mut p = pod(name);
        p.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "name": owner.metadata.name.clone().expect("name"),
                "uid": owner.metadata.uid.clone().expect("uid"),
                "controller": true, "blockOwnerDeletion": true
            }))
            .expect("ownerReference"),
        ]);
        p
    };
    for (policy, dp) in [
        ("background", DeleteParams::background()),
        ("foreground", DeleteParams::foreground()),
        ("orphan", DeleteParams::orphan()),
    ] {
        let owner = jobs
            .create(&PostParams::default(), &job(&format!("gc-{policy}")))
            .await
            .expect("create owner");
        let pod_name = format!("gc-{policy}-pod");
        pods.create(&PostParams::default(), &owned_pod(&pod_name, &owner))
            .await
            .expect("create dependent");
        let answer = jobs
            .delete(&format!("gc-{policy}"), &dp)
            .await
            .expect("delete owner");
        match policy {
            "foreground" => {
                let j = answer
                    .left()
                    .expect("the Job stays while dependents remain");
                assert!(j.metadata.deletion_timestamp.is_some());
                assert!(
                    j.metadata
                        .finalizers
                        .unwrap_or_default()
                        .contains(&"foregroundDeletion".to_string())
                );
            }
            "orphan" => {
                let j = answer
                    .left()
                    .expect("the Job stays until orphaning is done");
                assert!(
                    j.metadata
                        .finalizers
                        .unwrap_or_default()
                        .contains(&"orphan".to_string())
                );
            }
            _ => {}
        }
        let owner_gone = || {
            let jobs = jobs.clone();
            let name = format!("gc-{policy}");
            async move {
                matches!(jobs.get(&name).await, Err(kube::Error::Api(s)) if s.code == 404)
                    .then_some(())
            }
        };
        eventually(T, &format!("{policy}: owner removed"), owner_gone).await;
        if policy == "orphan" {
            let p = pods.get(&pod_name).await.expect("orphaned pod is kept");
            assert!(
                p.metadata.owner_references.unwrap_or_default().is_empty(),
                "the orphaned pod no longer names the deleted Job"
            );
        } else {
            let pod_gone = || {
                let pods = pods.clone();
                let name = pod_name.clone();
                async move {
                    matches!(pods.get(&name).await, Err(kube::Error::Api(s)) if s.code == 404)
                        .then_some(())
                }
            };
            eventually(T, &format!("{policy}: dependent pod removed"), pod_gone).await;
        }
    }
}

#[tokio::test]
async fn status_updates_of_a_terminating_pod_keep_its_deletion_timestamp() {
    let server = Server::start().await;
    let pods: Api<Pod> = Api::default_namespaced(server.client().await);
    let mut p = pod("held");
    p.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    pods.delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let deleting = pods.get("held").await.expect("still there");
    let ts = deleting.metadata.deletion_timestamp.clone();
    assert!(ts.is_some(), "the finalizer keeps a deleted pod");
    // A kubelet (or the pod GC) reporting the final phase of a terminating pod.
    let patched = pods
        .patch_status(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await
        .expect("status patch of a terminating pod");
    assert_eq!(patched.metadata.deletion_timestamp, ts);
    assert_eq!(
        patched.status.and_then(|s| s.phase).as_deref(),
        Some("Failed")
    );
    let mut replaced = pods.get("held").await.expect("get");
    replaced.status.get_or_insert_with(Default::default).message = Some("bye".into());
    let replaced = pods
        .replace_status("held", &PostParams::default(), &replaced)
        .await
        .expect("status replace of a terminating pod");
    assert_eq!(replaced.metadata.deletion_timestamp, ts);
}

#[tokio::test]
async fn concurrent_patches_without_a_resource_version_all_apply() {
    let server = Server::start().await;
    let jobs: Api<Job> = Api::default_namespaced(server.client().await);
    let created = jobs
        .create(&PostParams::default(), &job("busy"))
        .await
        .expect("create");
    // Racing patches are retried by the server (as upstream's GuaranteedUpdate does): none
    // gets a 409, and none is lost.
    let patches = (0..24).map(|i| {
        let jobs = jobs.clone();
        async move {
            let p = json!({"metadata": {"labels": {format!("l{i}"): "x"}}});
            jobs.patch("busy", &PatchParams::default(), &Patch::Merge(&p))
                .await
                .map(|_| ())
        }
    });
    for r in futures::future::join_all(patches).await {
        r.expect("a patch without resourceVersion never conflicts");
    }
    let labels = jobs
        .get("busy")
        .await
        .expect("get")
        .metadata
        .labels
        .unwrap_or_default();
    for i in 0..24 {
        assert!(
            labels.contains_key(&format!("l{i}")),
            "label l{i} lost: {labels:?}"
        );
    }
    // A patch that names an old resourceVersion is a precondition, and fails.
    let stale = json!({"metadata": {"resourceVersion": rv(&created), "labels": {"late": "y"}}});
    let err = api_err(
        jobs.patch("busy", &PatchParams::default(), &Patch::Merge(&stale))
            .await,
    );
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
}

/// One sample line of `/metrics` (`name{labels} value`), by exact labels.
fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn resource_requests_are_counted_as_kube_apiserver_counts_them() {
    let s = Server::start().await;
    let client = s.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("m1"))
        .await
        .expect("create");
    pods.get("m1").await.expect("get");
    api_err(pods.get("nope").await);
    pods.list(&ListParams::default()).await.expect("list");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    pods.create(&dry, &pod("m2")).await.expect("dry-run create");
    pods.patch_status(
        "m1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("status patch");
    // A watch counts once it ends, with its whole life as its duration.
    let watched = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(watched.status, 200);

    let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
    let total = |verb: &str, dry: &str, sub: &str, scope: &str, code: &str| {
        sample(
            &m,
            &format!(
                "apiserver_request_total{{verb=\"{verb}\",dry_run=\"{dry}\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"{sub}\",scope=\"{scope}\",component=\"apiserver\",code=\"{code}\"}}"
            ),
        )
    };
    assert_eq!(total("POST", "", "", "resource", "201"), Some(1.0), "{m}");
    assert_eq!(
        total("POST", "All", "", "resource", "201"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(total("GET", "", "", "resource", "200"), Some(1.0), "{m}");
    assert_eq!(total("GET", "", "", "resource", "404"), Some(1.0), "{m}");
    assert_eq!(total("LIST", "", "", "namespace", "200"), Some(1.0), "{m}");
    assert_eq!(
        total("PATCH", "", "status", "resource", "200"),
        Some(1.0),
        "{m}"
    );
    let watch_labels = "verb=\"WATCH\",dry_run=\"\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",scope=\"namespace\",component=\"apiserver\"";
    let watch_count = eventually(T, "the ended watch is recorded", || {
        let client = client.clone();
        let labels = watch_labels.to_string();
        async move {
            let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
            let count = sample(
                &m,
                &format!("apiserver_request_duration_seconds_count{{{labels}}}"),
            )?;
            let sum = sample(
                &m,
                &format!("apiserver_request_duration_seconds_sum{{{labels}}}"),
            )?;
            Some((count, sum))
        }
    })
    .await;
    assert_eq!(watch_count.0, 1.0);
    assert!(
        watch_count.1 >= 1.0,
        "the watch lasted its timeout: {}",
        watch_count.1
    );
    // The histogram has upstream's buckets.
    assert!(
        m.contains("apiserver_request_duration_seconds_bucket{verb=\"POST\",dry_run=\"\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",scope=\"resource\",component=\"apiserver\",le=\"0.005\"}"),
        "{m}"
    );
    assert!(m.contains("le=\"45\""), "{m}");
}

/// The non-resource endpoints upstream instruments are counted with its labels: the path as
/// the subresource, no group, version, resource or scope; `/version` and `/metrics` are not.
#[tokio::test]
async fn non_resource_requests_are_counted_as_kube_apiserver_counts_them() {
    let s = Server::start().await;
    let client = s.client().await;
    for path in ["/healthz", "/livez", "/readyz", "/readyz", "/version"] {
        assert_eq!(
            raw(&client, "GET", path, None, Vec::new()).await.status,
            200,
            "{path}"
        );
    }
    assert_eq!(
        raw(&client, "GET", "/openapi/v3", None, Vec::new())
            .await
            .status,
        200
    );
    let gv = raw(
        &client,
        "GET",
        "/openapi/v3/apis/batch/v1",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(gv.status, 200);
    let missing = raw(&client, "GET", "/openapi/v3/apis/nope/v1", None, Vec::new()).await;
    assert_eq!(missing.status, 404);
    let req = http::Request::builder()
        .method("GET")
        .uri("/apis")
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(kube::client::Body::from(Vec::new()))
        .expect("build request");
    let resp = client.send(req).await.expect("aggregated discovery");
    assert_eq!(resp.status(), 200);
    // The unaggregated document is not counted, as upstream.
    assert_eq!(
        raw(&client, "GET", "/apis", None, Vec::new()).await.status,
        200
    );

    let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
    let total = |sub: &str, component: &str, code: &str| {
        sample(
            &m,
            &format!(
                "apiserver_request_total{{verb=\"GET\",dry_run=\"\",group=\"\",version=\"\",resource=\"\",subresource=\"{sub}\",scope=\"\",component=\"{component}\",code=\"{code}\"}}"
            ),
        )
    };
    assert_eq!(total("/healthz", "", "200"), Some(1.0), "{m}");
    assert_eq!(total("/livez", "", "200"), Some(1.0), "{m}");
    // The test server's start polled /readyz too.
    assert!(total("/readyz", "", "200").is_some_and(|n| n >= 2.0), "{m}");
    assert_eq!(total("openapi/v3", "", "200"), Some(1.0), "{m}");
    assert_eq!(total("openapi/v3/", "", "200"), Some(1.0), "{m}");
    assert_eq!(total("openapi/v3/", "", "404"), Some(1.0), "{m}");
    assert_eq!(total("/apis", "apiserver", "200"), Some(1.0), "{m}");
    assert!(!m.contains("subresource=\"/version\""), "{m}");
    assert!(!m.contains("subresource=\"/metrics\""), "{m}");
    assert!(
        m.contains("apiserver_request_duration_seconds_count{verb=\"GET\",dry_run=\"\",group=\"\",version=\"\",resource=\"\",subresource=\"/healthz\",scope=\"\",component=\"\"} 1"),
        "{m}"
    );
}

/// A watch being served counts in `apiserver_longrunning_requests` until it ends.
#[tokio::test]
async fn open_watches_are_counted_as_long_running_requests() {
    let s = Server::start().await;
    let client = s.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-public");
    let series = "apiserver_longrunning_requests{verb=\"WATCH\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",scope=\"namespace\",component=\"apiserver\"}";
    let gauge = |client: kube::Client| async move {
        let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
        sample(&m, series)
    };
    let stream = pods
        .watch(&WatchParams::default().timeout(2), "0")
        .await
        .expect("watch");
    let open = eventually(T, "the open watch is counted", || {
        let client = client.clone();
        async move { gauge(client).await.filter(|v| *v == 1.0) }
    })
    .await;
    assert_eq!(open, 1.0);
    // The server ends it at its timeout.
    let events: Vec<_> = stream.collect().await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    let closed = eventually(T, "the ended watch is no longer counted", || {
        let client = client.clone();
        async move { gauge(client).await.filter(|v| *v == 0.0) }
    })
    .await;
    assert_eq!(closed, 0.0);
}

/// Every write reaches the store as a storage request, counted and timed by operation and
/// resource under upstream's etcd metric names.
#[tokio::test]
async fn storage_writes_are_counted_as_etcd_requests() {
    use k8s_openapi::api::coordination::v1::Lease;
    let s = Server::start().await;
    let client = s.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "counted"}, "spec": {"holderIdentity": "a"}
    }))
    .expect("a lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create");
    leases
        .patch(
            "counted",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "b"}})),
        )
        .await
        .expect("patch");
    // A conflict is decided before the store is asked: no storage request.
    let stale = json!({"metadata": {"resourceVersion": "1"}, "spec": {"holderIdentity": "c"}});
    let err = api_err(
        leases
            .patch("counted", &PatchParams::default(), &Patch::Merge(&stale))
            .await,
    );
    assert_eq!(err.code, 409);
    leases
        .delete("counted", &DeleteParams::default())
        .await
        .expect("delete");

    let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
    let labels =
        |op: &str| format!("operation=\"{op}\",group=\"coordination.k8s.io\",resource=\"leases\"");
    for op in ["create", "update", "delete"] {
        assert_eq!(
            sample(&m, &format!("etcd_requests_total{{{}}}", labels(op))),
            Some(1.0),
            "{op}: {m}"
        );
        assert_eq!(
            sample(
                &m,
                &format!("etcd_request_duration_seconds_count{{{}}}", labels(op))
            ),
            Some(1.0),
            "{op}: {m}"
        );
    }
    assert!(
        m.contains(&format!(
            "etcd_request_duration_seconds_bucket{{{},le=\"0.005\"}}",
            labels("create")
        )),
        "{m}"
    );
    assert!(!m.contains("etcd_request_errors_total{"), "{m}");
    // The server's own namespaces were written through the store too.
    assert!(
        sample(
            &m,
            "etcd_requests_total{operation=\"create\",group=\"\",resource=\"namespaces\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{m}"
    );
}

/// `apiserver_storage_objects` and `apiserver_resource_objects` count what is stored, per
/// resource, when `/metrics` is read.
#[tokio::test]
async fn stored_objects_are_counted_per_resource() {
    let s = Server::start().await;
    let client = s.client().await;
    let path = "/apis/batch/v1/namespaces/default/cronjobs";
    for name in ["c1", "c2", "c3"] {
        let cj = json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name},
            "spec": {"schedule": "0 0 1 1 *", "suspend": true, "jobTemplate": {"spec": {
                "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}}}
        });
        let created = raw(
            &client,
            "POST",
            path,
            Some("application/json"),
            cj.to_string(),
        )
        .await;
        assert_eq!(created.status, 201, "{}", created.body);
    }
    let counts = |m: &str| {
        (
            sample(m, "apiserver_storage_objects{resource=\"cronjobs.batch\"}"),
            sample(
                m,
                "apiserver_resource_objects{group=\"batch\",resource=\"cronjobs\"}",
            ),
            sample(
                m,
                "apiserver_resource_objects{group=\"\",resource=\"namespaces\"}",
            ),
        )
    };
    let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
    let (old, new, namespaces) = counts(&m);
    assert_eq!((old, new), (Some(3.0), Some(3.0)), "{m}");
    // default, kube-system, kube-public, kube-node-lease at least.
    assert!(namespaces.is_some_and(|n| n >= 4.0), "{m}");
    assert!(m.contains("# TYPE apiserver_storage_objects gauge"), "{m}");
    let deleted = raw(&client, "DELETE", &format!("{path}/c2"), None, Vec::new()).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let m = raw(&client, "GET", "/metrics", None, Vec::new()).await.body;
    assert_eq!(counts(&m).0, Some(2.0), "{m}");
    assert_eq!(counts(&m).1, Some(2.0), "{m}");
}

fn event(name: &str) -> k8s_openapi::api::core::v1::Event {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
        "reason": "Tested", "message": "m", "type": "Normal", "count": 1,
        "source": {"component": "test"}
    }))
    .expect("event fixture")
}

/// As kube-apiserver's `--event-ttl`: an event goes a TTL after its last write, and a write
/// (a repeat counted) renews it; after a crash and restart the TTL still runs from the last
/// write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_a_ttl_after_their_last_write() {
    let mut server = Server::start_with(&["--event-ttl=3s"]).await;
    let client = server.client().await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    let t0 = std::time::Instant::now();
    for name in ["once", "renewed"] {
        events
            .create(&PostParams::default(), &event(name))
            .await
            .expect("create event");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    events
        .patch(
            "renewed",
            &PatchParams::default(),
            &Patch::Merge(json!({"count": 2})),
        )
        .await
        .expect("patch event");
    tokio::time::sleep(Duration::from_millis(2000).saturating_sub(t0.elapsed())).await;
    assert!(
        events.get_opt("once").await.expect("get").is_some(),
        "an event lives for its TTL"
    );
    eventually(T, "the untouched event expires", || {
        let events = events.clone();
        async move { events.get_opt("once").await.ok()?.is_none().then_some(()) }
    })
    .await;
    let gone_after = t0.elapsed();
    assert!(gone_after >= Duration::from_secs(3), "{gone_after:?}");
    assert!(
        events.get_opt("renewed").await.expect("get").is_some(),
        "the write 1.5 s in renewed it (gone after {gone_after:?})"
    );
    eventually(T, "the renewed event expires too", || {
        let events = events.clone();
        async move {
            events
                .get_opt("renewed")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;

    // Across a restart, from the write's own time (recorded to the second).
    events
        .create(&PostParams::default(), &event("across"))
        .await
        .expect("create event");
    let t1 = std::time::Instant::now();
    server.kill();
    server.restart().await;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(server.client().await, "default");
    eventually(T, "the event written before the restart expires", || {
        let events = events.clone();
        async move { events.get_opt("across").await.ok()?.is_none().then_some(()) }
    })
    .await;
    let left_for = t1.elapsed();
    assert!(
        left_for >= Duration::from_secs(2) && left_for < Duration::from_secs(8),
        "{left_for:?}"
    );
}
