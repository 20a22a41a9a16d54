//! pods/log over the files the process runtime writes: what kubectl logs and client libraries ask.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use futures::AsyncReadExt;
use kube::api::LogParams;
use serde_json::json;

const POD_LOG: &str = "/api/v1/namespaces/default/pods";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_limit_timestamps_and_since() {
    let c = Cluster::start().await;
    // One stream only: the order between stdout and stderr lines is not defined.
    c.create(pod(
        "lines",
        &[
            "sh",
            "-c",
            "echo one; echo two; echo three; sleep 2; printf 'four\\nfive'",
        ],
        "Never",
    ))
    .await;
    c.wait_phase("lines", "Succeeded", 10).await;
    let pods = c.pods();
    let logs = |lp: LogParams| {
        let pods = pods.clone();
        async move { pods.logs("lines", &lp).await.unwrap() }
    };
    assert_eq!(
        logs(LogParams::default()).await,
        "one\ntwo\nthree\nfour\nfive"
    );
    let tail = logs(LogParams {
        tail_lines: Some(2),
        ..LogParams::default()
    })
    .await;
    assert_eq!(tail, "four\nfive");
    let limited = logs(LogParams {
        limit_bytes: Some(6),
        ..LogParams::default()
    })
    .await;
    assert_eq!(limited, "one\ntw");
    let stamped = logs(LogParams {
        timestamps: true,
        tail_lines: Some(3),
        ..LogParams::default()
    })
    .await;
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 3, "{stamped}");
    for (line, text) in lines.iter().zip(["three", "four", "five"]) {
        let (ts, rest) = line.split_once(' ').unwrap();
        assert_eq!(rest, text);
        // RFC 3339 with nine fractional digits, as kubelet prints them.
        assert_eq!(ts.len(), "2006-01-02T15:04:05.000000000Z".len(), "{ts}");
        assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{ts}");
    }
    // The last two lines were written 2 s after the first three.
    let since = logs(LogParams {
        since_seconds: Some(1),
        ..LogParams::default()
    })
    .await;
    assert_eq!(since, "four\nfive");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_streams_until_the_container_ends() {
    let c = Cluster::start().await;
    c.create(pod(
        "talker",
        &["sh", "-c", "echo a; sleep 0.5; echo b; sleep 0.5; echo c"],
        "Never",
    ))
    .await;
    c.wait_phase("talker", "Running", 10).await;
    let started = Instant::now();
    let stream = c
        .pods()
        .log_stream(
            "talker",
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    let mut text = String::new();
    let mut stream = Box::pin(stream);
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut text))
        .await
        .expect("the followed log ends when the container ends")
        .unwrap();
    assert_eq!(text, "a\nb\nc\n");
    assert!(started.elapsed() >= Duration::from_millis(500));
    // Following a finished container returns its log at once.
    let (code, body) = get_raw(&c.client, &format!("{POD_LOG}/talker/log?follow=true")).await;
    assert_eq!((code, body.as_str()), (200, "a\nb\nc\n"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_match_upstream() {
    let c = Cluster::start().await;
    c.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [{"name": "setup", "image": "x", "command": ["true"]}],
            "containers": [
                {"name": "a", "image": "x", "command": ["echo", "from-a"]},
                {"name": "b", "image": "x", "command": ["sh", "-c", "echo from-b >&2"]}]}
    }))
    .await;
    c.wait_phase("two", "Succeeded", 10).await;
    let status = |body: &str| serde_json::from_str::<serde_json::Value>(body).unwrap();

    let (code, body) = get_raw(&c.client, &format!("{POD_LOG}/two/log")).await;
    assert_eq!(code, 400);
    assert_eq!(
        status(&body)["message"],
        "a container name must be specified for pod two, choose one of: [setup a b]"
    );
    let (code, body) = get_raw(&c.client, &format!("{POD_LOG}/two/log?container=b")).await;
    assert_eq!((code, body.as_str()), (200, "from-b\n"));
    let (code, body) = get_raw(&c.client, &format!("{POD_LOG}/two/log?container=zz")).await;
    assert_eq!(code, 400);
    assert_eq!(
        status(&body)["message"],
        "container zz is not valid for pod two"
    );
    let (code, body) = get_raw(
        &c.client,
        &format!("{POD_LOG}/two/log?container=a&previous=true"),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        status(&body)["message"],
        "previous terminated container \"a\" in pod \"two\" not found"
    );
    let (code, body) = get_raw(&c.client, &format!("{POD_LOG}/nope/log")).await;
    assert_eq!(code, 404);
    assert_eq!(status(&body)["message"], "pods \"nope\" not found");
    let (code, body) = get_raw(
        &c.client,
        &format!("{POD_LOG}/two/log?container=a&tailLines=-1"),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status(&body)["message"],
        "PodLogOptions \"two\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
    );
    c.shutdown().await;
}
