//! The read-consistency options of lists and watches against `kbatch up`, as kube-apiserver
//! serves them with its WatchList feature on: watch lists (initial events, then a bookmark
//! annotated `k8s.io/initial-events-end`, what client-go informers send since 1.35 and
//! kube-rs sends with `streaming_lists`), lists at an exact or a minimum resourceVersion,
//! continued lists read at their first page's revision, and the options' validation.

use crate::common;

use std::time::Duration;

use common::{Server, job_json, raw, rv_num};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;

const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";

/// A client that does not retry: kube's default one retries a 504 with back-off, and the
/// tests here want to see it.
async fn no_retry_client(server: &Server) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(server.kubeconfig()).expect("read the kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("load the kubeconfig");
    config.default_retry = false;
    kube::Client::try_from(config).expect("build a kube client")
}

fn job(name: &str) -> Job {
    serde_json::from_value(job_json(name)).expect("job fixture")
}

async fn next(
    stream: &mut (impl futures::Stream<Item = Result<watcher::Event<Job>, watcher::Error>> + Unpin),
) -> watcher::Event<Job> {
    tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("event in time")
        .expect("watcher ok")
        .expect("stream open")
}

/// A server with the named Jobs created in `default`: its client, the Jobs API and the last
/// Job's resourceVersion.
async fn with_jobs(names: &[&str]) -> (Server, kube::Client, Api<Job>, u64) {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let mut last = 0;
    for n in names {
        let j = jobs
            .create(&PostParams::default(), &job(n))
            .await
            .expect("create");
        last = rv_num(j.metadata.resource_version.as_deref().expect("rv"));
    }
    (server, client, jobs, last)
}

async fn get(client: &kube::Client, path: &str) -> common::Raw {
    raw(client, "GET", path, None, Vec::new()).await
}

/// The events of a watch that ends by its timeout, as (type, object).
fn events(body: &str) -> Vec<(String, serde_json::Value)> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("event line ({e}): {l}"));
            (
                v["type"].as_str().expect("type").to_string(),
                v["object"].clone(),
            )
        })
        .collect()
}

fn name_of(o: &serde_json::Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

/// The names of a list's items.
fn names(list: &serde_json::Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(name_of)
        .collect()
}

fn rv_of(o: &serde_json::Value) -> u64 {
    rv_num(o["metadata"]["resourceVersion"].as_str().expect("rv"))
}

#[tokio::test]
async fn a_watch_list_sends_the_state_then_the_initial_events_end_bookmark() {
    let (_server, client, _, last_rv) = with_jobs(&["wl-a", "wl-b", "wl-c"]).await;
    let path = format!(
        "{JOBS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2"
    );
    let r = get(&client, &path).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let evs = events(&r.body);
    let added: Vec<&str> = evs
        .iter()
        .take_while(|(t, _)| t == "ADDED")
        .map(|(_, o)| name_of(o))
        .collect();
    assert_eq!(added, ["wl-a", "wl-b", "wl-c"]);
    let (t, end) = &evs[3];
    assert_eq!(t, "BOOKMARK");
    assert_eq!(end["kind"], "Job");
    assert_eq!(end["apiVersion"], "batch/v1");
    assert_eq!(
        end["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(rv_of(end) >= last_rv, "{end}");

    // The legacy watch from "" is a watch list too: the bookmark comes once bookmarks are
    // allowed, and not otherwise.
    let legacy = get(
        &client,
        &format!("{JOBS}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1"),
    )
    .await;
    let evs = events(&legacy.body);
    assert_eq!(evs.len(), 4, "{}", legacy.body);
    assert_eq!(evs[3].0, "BOOKMARK");
    let plain = get(&client, &format!("{JOBS}?watch=true&timeoutSeconds=1")).await;
    let evs = events(&plain.body);
    assert_eq!(evs.len(), 3, "{}", plain.body);
    assert!(evs.iter().all(|(t, _)| t == "ADDED"));

    // sendInitialEvents=false: only what changes from now on.
    let none = get(&client, &format!(
            "{JOBS}?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
        ))
    .await;
    assert_eq!(none.status, 200);
    assert_eq!(events(&none.body), Vec::new());
}

#[tokio::test]
async fn kube_rs_streaming_lists_reach_init_done_and_follow_changes() {
    let (_server, _, jobs, _) = with_jobs(&["sl-a", "sl-b"]).await;
    let pp = PostParams::default();
    let mut stream = watcher(jobs.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        let ev = next(&mut stream).await;
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(j) => initial.push(j.metadata.name.expect("name")),
            watcher::Event::InitDone => break,
            other => panic!("unexpected before InitDone: {other:?}"),
        }
    }
    assert_eq!(initial, ["sl-a", "sl-b"]);

    jobs.create(&pp, &job("sl-c")).await.expect("create");
    jobs.delete("sl-a", &DeleteParams::background())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let ev = next(&mut stream).await;
        match ev {
            watcher::Event::Apply(j) if j.metadata.name.as_deref() == Some("sl-c") => {
                seen.push("apply sl-c")
            }
            watcher::Event::Delete(j) if j.metadata.name.as_deref() == Some("sl-a") => {
                seen.push("delete sl-a")
            }
            // The background deletion may first update sl-a (or sl-c) in place.
            watcher::Event::Apply(_) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }
    assert_eq!(seen, ["apply sl-c", "delete sl-a"]);
}

#[tokio::test]
async fn lists_read_at_exact_and_minimum_resource_versions() {
    let (server, client, jobs, at) = with_jobs(&["ex-a", "ex-b"]).await;
    let pp = PostParams::default();
    jobs.create(&pp, &job("ex-c")).await.expect("create");
    jobs.delete("ex-a", &DeleteParams::background())
        .await
        .expect("delete");

    let exact = get(
        &client,
        &format!("{JOBS}?resourceVersion={at}&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(exact.status, 200, "{}", exact.body);
    let v = exact.json();
    assert_eq!(names(&v), ["ex-a", "ex-b"]);
    assert_eq!(v["metadata"]["resourceVersion"], at.to_string());

    // Not older than: the current state.
    let recent = get(
        &client,
        &format!("{JOBS}?resourceVersion={at}&resourceVersionMatch=NotOlderThan"),
    )
    .await
    .json();
    assert_eq!(names(&recent), ["ex-b", "ex-c"]);

    // A revision the server has not reached: it waits, then answers 504 as upstream.
    let client = no_retry_client(&server).await;
    let future = rv_num(recent["metadata"]["resourceVersion"].as_str().expect("rv")) + 1000;
    let r = get(&client, &format!("{JOBS}?resourceVersion={future}")).await;
    assert_eq!(r.status, 504, "{}", r.body);
    let s = r.json();
    assert_eq!(s["reason"], "Timeout");
    assert!(
        s["message"]
            .as_str()
            .expect("message")
            .starts_with(&format!(
                "Timeout: Too large resource version: {future}, current: "
            )),
        "{s}"
    );
    assert_eq!(
        s["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(s["details"]["retryAfterSeconds"], 1);

    // A watch list from that revision fails as a stream of one ERROR event.
    let w = get(&client, &format!(
            "{JOBS}?watch=true&resourceVersion={future}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        ))
    .await;
    assert_eq!(w.status, 200);
    let evs = events(&w.body);
    assert_eq!(evs.len(), 1, "{}", w.body);
    assert_eq!(evs[0].0, "ERROR");
    assert_eq!(evs[0].1["code"], 504);
}

#[tokio::test]
async fn a_continued_list_reads_the_revision_of_its_first_page() {
    let (_server, client, jobs, _) = with_jobs(&["cp-a", "cp-b", "cp-c"]).await;
    let pp = PostParams::default();
    let first = get(&client, &format!("{JOBS}?limit=1")).await.json();
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("continue token")
        .to_string();
    // Changes after the first page do not show in the rest of the list.
    jobs.create(&pp, &job("cp-d")).await.expect("create");
    jobs.delete("cp-c", &DeleteParams::background())
        .await
        .expect("delete");
    let rest = get(&client, &format!("{JOBS}?limit=10&continue={token}")).await;
    assert_eq!(rest.status, 200, "{}", rest.body);
    let rest = rest.json();
    let names = names(&rest);
    assert_eq!(names, ["cp-b", "cp-c"]);
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );

    // A list from "0" is whole, whatever the limit (upstream serves it from its cache).
    let whole = get(&client, &format!("{JOBS}?limit=1&resourceVersion=0"))
        .await
        .json();
    assert_eq!(whole["items"].as_array().expect("items").len(), 3);
    assert!(whole["metadata"].get("continue").is_none(), "{whole}");
}

#[tokio::test]
async fn invalid_read_options_are_a_list_options_422() {
    let server = Server::start().await;
    let client = server.client().await;
    let cases = [
        (
            format!("{JOBS}?watch=true&resourceVersion=5&resourceVersionMatch=NotOlderThan"),
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ),
        (
            format!("{JOBS}?sendInitialEvents=true"),
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
        (
            format!("{JOBS}?resourceVersionMatch=Exact"),
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
    ];
    for (path, want) in cases {
        let r = get(&client, &path).await;
        assert_eq!(r.status, 422, "{path}: {}", r.body);
        let s = r.json();
        assert_eq!(
            s["message"],
            format!("ListOptions.meta.k8s.io \"\" is invalid: {want}"),
            "{path}"
        );
        assert_eq!(s["details"]["kind"], "ListOptions");
        assert_eq!(s["details"]["group"], "meta.k8s.io");
    }
}

#[tokio::test]
async fn an_expired_continue_offers_a_token_that_goes_on_at_the_current_state() {
    // A short history window, so that a few writes push the first page's revision out of it.
    let server = Server::start_with(&["--watch-history-events", "5"]).await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    for n in ["ec-a", "ec-b", "ec-c"] {
        jobs.create(&pp, &job(n)).await.expect("create");
    }
    let first = get(&client, &format!("{JOBS}?limit=1")).await.json();
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("continue token")
        .to_string();
    for n in ["ec-d", "ec-e", "ec-f", "ec-g", "ec-h", "ec-i"] {
        jobs.create(&pp, &job(n)).await.expect("create");
    }
    let expired = get(&client, &format!("{JOBS}?limit=2&continue={token}")).await;
    assert_eq!(expired.status, 410, "{}", expired.body);
    let s = expired.json();
    assert_eq!(s["reason"], "Expired");
    assert!(
        s["message"]
            .as_str()
            .expect("message")
            .starts_with("The provided continue parameter is too old"),
        "{s}"
    );
    // The offered token lists on from where the first page ended, at the current state.
    let next = s["metadata"]["continue"]
        .as_str()
        .expect("an inconsistent continue token")
        .to_string();
    let rest = get(&client, &format!("{JOBS}?limit=100&continue={next}"))
        .await
        .json();
    let names = names(&rest);
    assert_eq!(
        names,
        [
            "ec-b", "ec-c", "ec-d", "ec-e", "ec-f", "ec-g", "ec-h", "ec-i"
        ]
    );
    assert!(
        rv_of(&rest) > rv_of(&first),
        "the current state's revision: {rest}"
    );
}
