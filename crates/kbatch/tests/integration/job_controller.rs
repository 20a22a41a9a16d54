//! The Job controller end to end: `kbatch up --executor none` runs it as a client of its own
//! API server, and the tests play the pods' part through the status subresource, as
//! upstream's test/integration/job does. Scenarios follow that file.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const TRACKING: &str = "batch.kubernetes.io/job-tracking";

/// A server whose Job controller backs off briefly after pod failures.
async fn server() -> Server {
    Server::start_with(&[
        "--controllers",
        "job,serviceaccount",
        "--pod-failure-backoff",
        "50ms",
        "--pod-failure-backoff-max",
        "200ms",
    ])
    .await
}

fn job_with(name: &str, spec: Value) -> Job {
    let mut j = common::job_json(name);
    let template = j["spec"]["template"].clone();
    j["spec"] = spec;
    if j["spec"].get("template").is_none() {
        j["spec"]["template"] = template;
    }
    serde_json::from_value(j).expect("a Job")
}

/// Waits for the server's /metrics to carry the line `want`.
async fn metric_line(client: &kube::Client, want: &str) {
    eventually(WAIT, want, || async {
        let metrics = common::raw(client, "GET", "/metrics", None, Vec::new()).await;
        metrics.body.lines().any(|l| l == want).then_some(())
    })
    .await;
}

async fn create(jobs: &Api<Job>, job: Job) -> Job {
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the Job")
}

/// The Job's pods (by its job-name label), sorted by name.
async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    let mut list = pods.list(&lp).await.expect("list pods").items;
    list.sort_by_key(|p| p.name_any());
    list
}

fn is_active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

async fn active_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods_of(pods, job)
        .await
        .into_iter()
        .filter(is_active)
        .collect()
}

/// Waits until the Job has exactly `n` active pods, and returns them.
async fn wait_active(pods: &Api<Pod>, job: &str, n: usize) -> Vec<Pod> {
    eventually(WAIT, &format!("{job} has {n} active pods"), || async {
        let a = active_pods(pods, job).await;
        (a.len() == n).then_some(a)
    })
    .await
}

/// Ends a pod the way a kubelet reports it: phase plus a terminated container.
async fn finish(pods: &Api<Pod>, pod: &Pod, phase: &str, exit_code: i32) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": phase,
        "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {
                "exitCode": exit_code,
                "reason": if exit_code == 0 { "Completed" } else { "Error" },
                "startedAt": now, "finishedAt": now,
            }}
        }]
    }});
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("patch pod status");
}

async fn set_ready(pods: &Api<Pod>, pod: &Pod) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
    }});
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("patch pod status");
}

fn condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Waits for a condition of the type to be True and returns the Job then.
async fn wait_condition(jobs: &Api<Job>, name: &str, type_: &str) -> Job {
    eventually(WAIT, &format!("{name} has {type_}"), || async {
        let j = jobs.get(name).await.ok()?;
        condition(&j, type_).is_some().then_some(j)
    })
    .await
}

#[derive(Debug, PartialEq, Eq)]
struct Counts {
    active: i32,
    succeeded: i32,
    failed: i32,
    ready: i32,
    terminating: i32,
}

fn counts(job: &Job) -> Counts {
    let s = job.status.clone().unwrap_or_default();
    Counts {
        active: s.active.unwrap_or(0),
        succeeded: s.succeeded.unwrap_or(0),
        failed: s.failed.unwrap_or(0),
        ready: s.ready.unwrap_or(0),
        terminating: s.terminating.unwrap_or(0),
    }
}

async fn wait_counts(jobs: &Api<Job>, name: &str, want: Counts) -> Job {
    let what = format!("{name} reaches {want:?}");
    eventually(WAIT, &what, || async {
        let j = jobs.get(name).await.ok()?;
        (counts(&j) == want).then_some(j)
    })
    .await
}

fn c(active: i32, succeeded: i32, failed: i32) -> Counts {
    Counts {
        active,
        succeeded,
        failed,
        ready: 0,
        terminating: 0,
    }
}

async fn no_tracking_finalizers_left(pods: &Api<Pod>, job: &str) {
    eventually(WAIT, "every pod lost the tracking finalizer", || async {
        let left = pods_of(pods, job)
            .await
            .into_iter()
            .filter(|p| p.finalizers().iter().any(|f| f == TRACKING))
            .count();
        (left == 0).then_some(())
    })
    .await;
}

async fn event_reasons(client: &Client, job: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!(
        "involvedObject.name={job},involvedObject.kind=Job"
    ));
    events
        .list(&lp)
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

fn apis(client: &Client) -> (Api<Job>, Api<Pod>) {
    (
        Api::namespaced(client.clone(), "default"),
        Api::namespaced(client.clone(), "default"),
    )
}

#[tokio::test]
async fn non_indexed_job_runs_to_completion_with_parallelism() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("simple", json!({"parallelism": 2, "completions": 4})),
    )
    .await;

    let first = wait_active(&pods, "simple", 2).await;
    for p in &first {
        assert!(
            p.finalizers().iter().any(|f| f == TRACKING),
            "new pods carry the tracking finalizer"
        );
        let owner = &p.owner_references()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("Job", Some(true), Some(true))
        );
        assert!(p.metadata.generate_name.as_deref() == Some("simple-"));
    }
    set_ready(&pods, &first[0]).await;
    let j = wait_counts(
        &jobs,
        "simple",
        Counts {
            ready: 1,
            ..c(2, 0, 0)
        },
    )
    .await;
    assert!(
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_some()
    );

    finish(&pods, &first[0], "Succeeded", 0).await;
    finish(&pods, &first[1], "Succeeded", 0).await;
    wait_counts(&jobs, "simple", c(2, 2, 0)).await;
    let second = wait_active(&pods, "simple", 2).await;
    for p in &second {
        finish(&pods, p, "Succeeded", 0).await;
    }
    let j = wait_condition(&jobs, "simple", "Complete").await;
    assert_eq!(counts(&j), c(0, 4, 0));
    assert!(
        condition(&j, "SuccessCriteriaMet").is_some(),
        "SuccessCriteriaMet comes with Complete"
    );
    assert_eq!(
        condition(&j, "Complete").and_then(|c| c.reason.as_deref()),
        Some("CompletionsReached")
    );
    assert!(
        j.status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .is_some()
    );
    no_tracking_finalizers_left(&pods, "simple").await;
    assert_eq!(
        pods_of(&pods, "simple").await.len(),
        4,
        "exactly one pod per completion"
    );
    let reasons = eventually(WAIT, "events recorded", || async {
        let r = event_reasons(&client, "simple").await;
        r.iter().any(|x| x == "Completed").then_some(r)
    })
    .await;
    assert_eq!(
        reasons.iter().filter(|r| *r == "SuccessfulCreate").count(),
        4,
        "{reasons:?}"
    );

    // Upstream's metric names, served on the API server's /metrics.
    let metrics = common::raw(&client, "GET", "/metrics", None, Vec::new()).await;
    assert_eq!(metrics.status, 200);
    for want in [
        "job_controller_jobs_finished_total{completion_mode=\"NonIndexed\",result=\"succeeded\",reason=\"\"} 1",
        "job_controller_job_pods_finished_total{completion_mode=\"NonIndexed\",result=\"succeeded\"} 4",
        "job_controller_job_pods_creation_total{reason=\"new\",status=\"succeeded\"} 4",
        "# TYPE job_controller_job_sync_duration_seconds histogram",
        "job_controller_job_syncs_total{completion_mode=\"NonIndexed\",result=\"success\",action=\"pods_created\"}",
        // client-go's request metrics of the controllers' (and the node's) clients: the pods
        // created, the status updates.
        "rest_client_requests_total{code=\"201\",method=\"POST\",host=\"127.0.0.1:",
        "rest_client_request_duration_seconds_count{verb=\"PUT\",host=\"127.0.0.1:",
        "# TYPE rest_client_request_duration_seconds histogram",
    ] {
        assert!(
            metrics.body.contains(want),
            "missing {want} in:\n{}",
            metrics.body
        );
    }
}

/// client-go's event correlator: after nine `SuccessfulCreate` events that differ only by
/// message, the rest are one combined event whose count grows (patched, not re-created).
#[tokio::test]
async fn similar_events_are_combined_into_one_counted_event() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("wide", json!({"parallelism": 12, "completions": 12})),
    )
    .await;
    wait_active(&pods, "wide", 12).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields("involvedObject.name=wide,involvedObject.kind=Job");
    let created = eventually(WAIT, "twelve creations recorded", || async {
        let list = events.list(&lp).await.expect("list events").items;
        let created: Vec<Event> = list
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
            .collect();
        let total: i32 = created.iter().map(|e| e.count.unwrap_or(0)).sum();
        (total == 12).then_some(created)
    })
    .await;
    assert_eq!(created.len(), 10, "nine events and a combined one");
    let combined: Vec<&Event> = created
        .iter()
        .filter(|e| {
            e.message.as_deref().is_some_and(|m| {
                m.starts_with("(combined from similar events): Created pod: wide-")
            })
        })
        .collect();
    assert_eq!(combined.len(), 1, "{created:?}");
    assert_eq!(combined[0].count, Some(3));
    for e in &created {
        assert_eq!(
            e.source.as_ref().and_then(|s| s.component.as_deref()),
            Some("job-controller")
        );
    }
}

#[tokio::test]
async fn backoff_limit_fails_the_job_and_deletes_active_pods() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "flaky",
            json!({"parallelism": 2, "completions": 5, "backoffLimit": 1}),
        ),
    )
    .await;

    let first = wait_active(&pods, "flaky", 2).await;
    finish(&pods, &first[0], "Failed", 1).await;
    // Replaced after the (shortened) back-off.
    wait_counts(&jobs, "flaky", c(2, 0, 1)).await;
    let now_active = wait_active(&pods, "flaky", 2).await;
    finish(&pods, &now_active[0], "Failed", 1).await;

    let j = wait_condition(&jobs, "flaky", "Failed").await;
    assert_eq!(
        condition(&j, "Failed").and_then(|c| c.reason.as_deref()),
        Some("BackoffLimitExceeded")
    );
    assert_eq!(
        condition(&j, "FailureTarget").and_then(|c| c.message.as_deref()),
        Some("Job has reached the specified backoff limit")
    );
    // The survivor was deleted and counted failed too: 3 failures in all.
    assert_eq!(counts(&j), c(0, 0, 3));
    assert!(active_pods(&pods, "flaky").await.is_empty());
    no_tracking_finalizers_left(&pods, "flaky").await;
    let reasons = eventually(WAIT, "failure event", || async {
        let r = event_reasons(&client, "flaky").await;
        r.iter().any(|x| x == "BackoffLimitExceeded").then_some(r)
    })
    .await;
    assert!(
        reasons.iter().any(|r| r == "SuccessfulDelete"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn indexed_job_tracks_completed_indexes() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "idx",
            json!({"parallelism": 3, "completions": 4, "completionMode": "Indexed"}),
        ),
    )
    .await;
    let first = wait_active(&pods, "idx", 3).await;
    let mut indexes: Vec<String> = first
        .iter()
        .map(|p| p.annotations()["batch.kubernetes.io/job-completion-index"].clone())
        .collect();
    indexes.sort();
    assert_eq!(indexes, vec!["0", "1", "2"]);
    for p in &first {
        let ix = &p.annotations()["batch.kubernetes.io/job-completion-index"];
        assert_eq!(&p.labels()["batch.kubernetes.io/job-completion-index"], ix);
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.hostname.as_deref(), Some(format!("idx-{ix}").as_str()));
        let env = spec.containers[0].env.as_ref().expect("env");
        assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"));
        assert!(p.metadata.generate_name.as_deref() == Some(format!("idx-{ix}-").as_str()));
    }
    let by_index = |ix: &str| {
        first
            .iter()
            .find(|p| p.annotations()["batch.kubernetes.io/job-completion-index"] == ix)
            .cloned()
            .expect("pod of index")
    };
    finish(&pods, &by_index("1"), "Succeeded", 0).await;
    // Index 3 starts in the freed slot.
    let j = wait_counts(&jobs, "idx", c(3, 1, 0)).await;
    assert_eq!(
        j.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref()),
        Some("1")
    );
    for ix in ["0", "2"] {
        finish(&pods, &by_index(ix), "Succeeded", 0).await;
    }
    let j = wait_counts(&jobs, "idx", c(1, 3, 0)).await;
    assert_eq!(
        j.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref()),
        Some("0-2")
    );
    let last = wait_active(&pods, "idx", 1).await;
    assert_eq!(
        last[0].annotations()["batch.kubernetes.io/job-completion-index"],
        "3"
    );
    finish(&pods, &last[0], "Succeeded", 0).await;
    let j = wait_condition(&jobs, "idx", "Complete").await;
    assert_eq!(
        j.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref()),
        Some("0-3")
    );
    // An Indexed Job's finished pods are its completed indexes, counted as finished indexes
    // too (upstream's recordJobPodFinished).
    // (Recorded once the controller has the write's answer: a moment after the condition.)
    for want in [
        "job_controller_job_finished_indexes_total{status=\"succeeded\",backoffLimit=\"global\"} 4",
        "job_controller_job_pods_finished_total{completion_mode=\"Indexed\",result=\"succeeded\"} 4",
    ] {
        metric_line(&client, want).await;
    }
}

#[tokio::test]
async fn pod_failure_policy_fail_job_on_exit_code() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "pfp",
            json!({"parallelism": 1, "completions": 1, "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [5]}}
            ]}}),
        ),
    )
    .await;
    let first = wait_active(&pods, "pfp", 1).await;
    finish(&pods, &first[0], "Failed", 5).await;
    let j = wait_condition(&jobs, "pfp", "Failed").await;
    let failed = condition(&j, "Failed").expect("Failed");
    assert_eq!(failed.reason.as_deref(), Some("PodFailurePolicy"));
    assert_eq!(
        failed.message.as_deref(),
        Some(format!("Container main for pod default/{} failed with exit code 5 matching FailJob rule at index 0", first[0].name_any()).as_str())
    );
    assert_eq!(counts(&j), c(0, 0, 1));
    metric_line(
        &client,
        "job_controller_pod_failures_handled_by_failure_policy_total{action=\"FailJob\"} 1",
    )
    .await;
}

#[tokio::test]
async fn suspend_and_resume() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "sus",
            json!({"parallelism": 2, "completions": 2, "suspend": true}),
        ),
    )
    .await;
    let j = wait_condition(&jobs, "sus", "Suspended").await;
    assert_eq!(
        condition(&j, "Suspended").and_then(|c| c.reason.as_deref()),
        Some("JobSuspended")
    );
    assert!(
        pods_of(&pods, "sus").await.is_empty(),
        "a suspended Job creates no pods"
    );
    assert!(
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none()
    );

    jobs.patch(
        "sus",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .expect("resume");
    let running = wait_active(&pods, "sus", 2).await;
    let j = eventually(WAIT, "Suspended=False with JobResumed", || async {
        let j = jobs.get("sus").await.ok()?;
        let c = j
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Suspended")?
            .clone();
        (c.status == "False" && c.reason.as_deref() == Some("JobResumed")).then_some(j)
    })
    .await;
    assert!(
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_some()
    );

    // Suspending again deletes the active pods (and does not count them as failed).
    jobs.patch(
        "sus",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .expect("suspend");
    wait_condition(&jobs, "sus", "Suspended").await;
    eventually(WAIT, "pods deleted", || async {
        let left = pods_of(&pods, "sus").await;
        left.iter()
            .all(|p| !running.iter().any(|r| r.uid() == p.uid()))
            .then_some(())
    })
    .await;
    let j = jobs.get("sus").await.expect("get");
    assert_eq!(counts(&j).failed, 0);

    // Suspended with its pods gone, the Job has no startTime, and its pods' resources and
    // scheduling directives may change (KEP-5440, on by default since 1.36); the pods of
    // the resumed Job have them.
    let j = eventually(WAIT, "no active pod, no startTime", || async {
        let j = jobs.get("sus").await.ok()?;
        let st = j.status.as_ref()?;
        (st.active.unwrap_or(0) == 0 && st.start_time.is_none()).then_some(j)
    })
    .await;
    assert_eq!(
        condition(&j, "Suspended").map(|c| c.status.as_str()),
        Some("True")
    );
    let resized = json!({"spec": {"template": {"spec": {
        "nodeSelector": {"disk": "ssd"},
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "250m"}}}]}}}});
    jobs.patch("sus", &PatchParams::default(), &Patch::Strategic(resized))
        .await
        .expect("a safely suspended Job's resources may change");
    jobs.patch(
        "sus",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .expect("resume");
    let resumed = eventually(WAIT, "pods of the resized template", || async {
        let fresh: Vec<_> = pods_of(&pods, "sus")
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        (fresh.len() == 2).then_some(fresh)
    })
    .await;
    for p in &resumed {
        let spec = p.spec.as_ref().expect("spec");
        let cpu = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("cpu"))
            .map(|q| q.0.clone());
        assert_eq!(cpu.as_deref(), Some("250m"));
        assert_eq!(
            spec.node_selector
                .as_ref()
                .and_then(|n| n.get("disk"))
                .map(String::as_str),
            Some("ssd")
        );
    }
    // Running again, its template is immutable once more.
    let again = json!({"spec": {"template": {"spec": {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m"}}}]}}}});
    let err = jobs
        .patch("sus", &PatchParams::default(), &Patch::Strategic(again))
        .await
        .expect_err("a running Job's template is immutable");
    assert!(err.to_string().contains("field is immutable"), "{err}");
}

#[tokio::test]
async fn active_deadline_fails_the_job() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "deadline",
            json!({"parallelism": 1, "activeDeadlineSeconds": 1}),
        ),
    )
    .await;
    wait_active(&pods, "deadline", 1).await;
    let j = wait_condition(&jobs, "deadline", "Failed").await;
    let cond = condition(&j, "Failed").expect("Failed");
    assert_eq!(cond.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        cond.message.as_deref(),
        Some("Job was active longer than specified deadline")
    );
    assert_eq!(counts(&j), c(0, 0, 1));
}

#[tokio::test]
async fn deleted_pods_are_counted_failed_and_replaced() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "del",
            json!({"parallelism": 1, "completions": 1, "backoffLimit": 3}),
        ),
    )
    .await;
    let first = wait_active(&pods, "del", 1).await;
    // Unscheduled pods are deleted at once (grace 0); the finalizer keeps the object until
    // the controller has counted it.
    pods.delete(&first[0].name_any(), &DeleteParams::default())
        .await
        .expect("delete");
    let j = wait_counts(&jobs, "del", c(1, 0, 1)).await;
    assert_eq!(counts(&j).failed, 1);
    eventually(WAIT, "the deleted pod is gone", || async {
        pods.get_opt(&first[0].name_any())
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let replacement = wait_active(&pods, "del", 1).await;
    assert_ne!(replacement[0].uid(), first[0].uid());
}

#[tokio::test]
async fn finished_job_deleted_with_orphan_policy_loses_pod_finalizers() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("orph", json!({"parallelism": 2, "completions": 2})),
    )
    .await;
    let running = wait_active(&pods, "orph", 2).await;
    jobs.delete("orph", &DeleteParams::orphan())
        .await
        .expect("delete job");
    // The pods outlive the Job; the orphan worker strips the tracking finalizer so they can
    // be deleted later.
    no_tracking_finalizers_left(&pods, "orph").await;
    let left = pods_of(&pods, "orph").await;
    assert_eq!(left.len(), running.len());
}

#[tokio::test]
async fn managed_by_another_controller_is_left_alone() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("ext", json!({"managedBy": "example.com/other"})),
    )
    .await;
    create(&jobs, job_with("mine", json!({}))).await;
    wait_active(&pods, "mine", 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(pods_of(&pods, "ext").await.is_empty());
    let j = jobs.get("ext").await.expect("get");
    assert!(
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none()
    );
}

#[tokio::test]
async fn orphan_pods_matching_a_manual_selector_are_adopted() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    let mut orphan = common::pod_json("stray");
    orphan["metadata"]["labels"] =
        json!({"app": "adopt-me", "batch.kubernetes.io/job-name": "adopter"});
    let orphan: Pod = serde_json::from_value(orphan).expect("pod");
    pods.create(&PostParams::default(), &orphan)
        .await
        .expect("create orphan");
    let mut job = job_with(
        "adopter",
        json!({"parallelism": 1, "completions": 1, "manualSelector": true,
               "selector": {"matchLabels": {"app": "adopt-me"}}}),
    );
    if let Some(spec) = job.spec.as_mut() {
        spec.template.metadata =
            Some(serde_json::from_value(json!({"labels": {"app": "adopt-me"}})).expect("meta"));
    }
    let job = create(&jobs, job).await;
    let adopted = eventually(WAIT, "the orphan is adopted", || async {
        let p = pods.get("stray").await.ok()?;
        p.owner_references()
            .iter()
            .any(|r| Some(&r.uid) == job.metadata.uid.as_ref())
            .then_some(p)
    })
    .await;
    assert!(adopted.finalizers().iter().any(|f| f == TRACKING));
    // It counts as the Job's one active pod: no other pod is created.
    let j = wait_counts(&jobs, "adopter", c(1, 0, 0)).await;
    assert_eq!(counts(&j).active, 1);
    finish(&pods, &adopted, "Succeeded", 0).await;
    wait_condition(&jobs, "adopter", "Complete").await;
}

#[tokio::test]
async fn backoff_limit_per_index_fails_only_that_index() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "blpi",
            json!({"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                   "backoffLimitPerIndex": 1}),
        ),
    )
    .await;
    let first = wait_active(&pods, "blpi", 2).await;
    let of = |ps: &[Pod], ix: &str| {
        ps.iter()
            .find(|p| p.annotations()["batch.kubernetes.io/job-completion-index"] == ix)
            .cloned()
            .expect("pod of index")
    };
    finish(&pods, &of(&first, "0"), "Failed", 1).await;
    // Index 0 gets one retry, its failure count carried in an annotation.
    let retry = eventually(WAIT, "index 0 is retried", || async {
        let a = active_pods(&pods, "blpi").await;
        let p = a.into_iter().find(|p| {
            p.annotations()["batch.kubernetes.io/job-completion-index"] == "0"
                && p.uid() != of(&first, "0").uid()
        })?;
        Some(p)
    })
    .await;
    assert_eq!(
        retry.annotations()["batch.kubernetes.io/job-index-failure-count"],
        "1"
    );
    finish(&pods, &retry, "Failed", 1).await;
    finish(&pods, &of(&first, "1"), "Succeeded", 0).await;
    let j = wait_condition(&jobs, "blpi", "Failed").await;
    let s = j.status.clone().expect("status");
    assert_eq!(s.failed_indexes.as_deref(), Some("0"));
    assert_eq!(s.completed_indexes.as_deref(), Some("1"));
    assert_eq!(
        condition(&j, "Failed").and_then(|c| c.reason.as_deref()),
        Some("FailedIndexes")
    );
}

#[tokio::test]
async fn success_policy_completes_early() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "sp",
            json!({"parallelism": 3, "completions": 3, "completionMode": "Indexed",
                   "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
        ),
    )
    .await;
    let first = wait_active(&pods, "sp", 3).await;
    let leader = first
        .iter()
        .find(|p| p.annotations()["batch.kubernetes.io/job-completion-index"] == "0")
        .expect("index 0");
    finish(&pods, leader, "Succeeded", 0).await;
    let j = wait_condition(&jobs, "sp", "Complete").await;
    assert_eq!(
        condition(&j, "SuccessCriteriaMet").and_then(|c| c.reason.as_deref()),
        Some("SuccessPolicy")
    );
    assert_eq!(
        condition(&j, "Complete").and_then(|c| c.reason.as_deref()),
        Some("SuccessPolicy")
    );
    // The other indexes' pods were terminated; a successful Job does not count them failed.
    assert_eq!(counts(&j), c(0, 1, 0));
    assert!(active_pods(&pods, "sp").await.is_empty());
}

#[tokio::test]
async fn controller_restart_mid_job_keeps_counts_exact() {
    let mut server = server().await;
    let (jobs, pods) = apis(&server.client().await);
    create(
        &jobs,
        job_with("restart", json!({"parallelism": 3, "completions": 6})),
    )
    .await;
    let first = wait_active(&pods, "restart", 3).await;
    for p in &first[..2] {
        finish(&pods, p, "Succeeded", 0).await;
    }
    // Stop the whole process right after the pods finished: the controller may or may not
    // have counted them yet; the finalizers make sure they are counted once either way.
    server.kill();
    server.restart().await;
    let (jobs, pods) = apis(&server.client().await);
    wait_counts(&jobs, "restart", c(3, 2, 0)).await;
    let second = wait_active(&pods, "restart", 3).await;
    for p in &second {
        finish(&pods, p, "Succeeded", 0).await;
    }
    server.stop().await;
    server.restart().await;
    let (jobs, pods) = apis(&server.client().await);
    let last = wait_active(&pods, "restart", 1).await;
    finish(&pods, &last[0], "Succeeded", 0).await;
    let j = wait_condition(&jobs, "restart", "Complete").await;
    assert_eq!(counts(&j), c(0, 6, 0));
    let uids: BTreeSet<String> = pods_of(&pods, "restart")
        .await
        .iter()
        .map(|p| p.uid().unwrap_or_default())
        .collect();
    assert_eq!(uids.len(), 6, "one pod per completion, none created twice");
}

#[tokio::test]
async fn status_conflicts_are_retried() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("conflict", json!({"parallelism": 2, "completions": 2})),
    )
    .await;
    let running = wait_active(&pods, "conflict", 2).await;
    // Keep changing the Job (labels bump its resourceVersion) while pods finish: the
    // controller's status writes race with these and must retry until they land.
    for (i, p) in running.iter().enumerate() {
        finish(&pods, p, "Succeeded", 0).await;
        for k in 0..5 {
            jobs.patch(
                "conflict",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"bump": format!("{i}-{k}")}}})),
            )
            .await
            .expect("label patch");
        }
    }
    let j = wait_condition(&jobs, "conflict", "Complete").await;
    assert_eq!(counts(&j), c(0, 2, 0));
}

#[tokio::test]
async fn five_hundred_pods_in_one_job() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("big", json!({"parallelism": 500, "completions": 500})),
    )
    .await;
    let all = eventually(Duration::from_secs(120), "500 pods created", || async {
        let a = active_pods(&pods, "big").await;
        (a.len() == 500).then_some(a)
    })
    .await;
    // Finish them all through one merge patch each, concurrently in chunks.
    for chunk in all.chunks(50) {
        futures::future::join_all(chunk.iter().map(|p| finish(&pods, p, "Succeeded", 0))).await;
    }
    let j = eventually(Duration::from_secs(120), "500 succeeded", || async {
        let j = jobs.get("big").await.ok()?;
        condition(&j, "Complete").is_some().then_some(j)
    })
    .await;
    assert_eq!(counts(&j), c(0, 500, 0));
    assert_eq!(pods_of(&pods, "big").await.len(), 500);
    no_tracking_finalizers_left(&pods, "big").await;
}

/// Marks a pod as being deleted with a kubelet still running it: the pod is bound to a node,
/// then deleted with a grace period, so it stays terminating (not terminal) for a while.
async fn bind_and_delete_gracefully(client: &Client, pods: &Api<Pod>, pod: &Pod) {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod.name_any()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    });
    let r = common::raw(
        client,
        "POST",
        &format!("/api/v1/namespaces/default/pods/{}/binding", pod.name_any()),
        Some("application/json"),
        serde_json::to_vec(&binding).expect("json"),
    )
    .await;
    assert_eq!(r.status, 201, "binding: {}", r.body);
    set_ready(pods, pod).await;
    pods.delete(&pod.name_any(), &DeleteParams::default().grace_period(30))
        .await
        .expect("delete");
}

#[tokio::test]
async fn replacement_policy_failed_waits_for_terminating_pods() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "rpf",
            json!({"parallelism": 1, "completions": 1, "podReplacementPolicy": "Failed"}),
        ),
    )
    .await;
    let first = wait_active(&pods, "rpf", 1).await;
    bind_and_delete_gracefully(&client, &pods, &first[0]).await;
    let j = wait_counts(
        &jobs,
        "rpf",
        Counts {
            terminating: 1,
            ..c(0, 0, 0)
        },
    )
    .await;
    assert_eq!(counts(&j).terminating, 1);
    // No replacement while the old pod is still terminating.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pods_of(&pods, "rpf").await.len(), 1, "replaced too early");
    // The kubelet reports it failed: now it is counted and replaced.
    finish(&pods, &first[0], "Failed", 137).await;
    wait_counts(&jobs, "rpf", c(1, 0, 1)).await;
    let replacement = wait_active(&pods, "rpf", 1).await;
    assert_ne!(replacement[0].uid(), first[0].uid());
}

#[tokio::test]
async fn replacement_policy_terminating_or_failed_replaces_at_once() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("rpt", json!({"parallelism": 1, "completions": 1})),
    )
    .await;
    let first = wait_active(&pods, "rpt", 1).await;
    bind_and_delete_gracefully(&client, &pods, &first[0]).await;
    // Counted failed as soon as it is terminating, and replaced right away.
    let j = wait_counts(
        &jobs,
        "rpt",
        Counts {
            terminating: 1,
            ..c(1, 0, 1)
        },
    )
    .await;
    assert_eq!(counts(&j).failed, 1);
    let replacement = wait_active(&pods, "rpt", 1).await;
    assert_ne!(replacement[0].uid(), first[0].uid());
}

#[tokio::test]
async fn pod_failure_policy_ignores_disruptions() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "ign",
            json!({"parallelism": 1, "completions": 1, "backoffLimit": 0, "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
            ]}}),
        ),
    )
    .await;
    let first = wait_active(&pods, "ign", 1).await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch_status(
        &first[0].name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "lastTransitionTime": now}
        ]}})),
    )
    .await
    .expect("fail the pod");
    // Not counted (backoffLimit 0 would otherwise fail the Job), and replaced.
    let replacement = eventually(WAIT, "the disrupted pod is replaced", || async {
        let a = active_pods(&pods, "ign").await;
        a.into_iter().find(|p| p.uid() != first[0].uid())
    })
    .await;
    let j = jobs.get("ign").await.expect("get");
    assert_eq!(counts(&j).failed, 0);
    assert!(condition(&j, "Failed").is_none());
    finish(&pods, &replacement, "Succeeded", 0).await;
    let j = wait_condition(&jobs, "ign", "Complete").await;
    assert_eq!(counts(&j), c(0, 1, 0));
}

#[tokio::test]
async fn on_failure_restarts_count_toward_the_backoff_limit() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    let mut job = job_with(
        "restarts",
        json!({"parallelism": 1, "completions": 1, "backoffLimit": 2}),
    );
    if let Some(spec) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.restart_policy = Some("OnFailure".into());
    }
    create(&jobs, job).await;
    let first = wait_active(&pods, "restarts", 1).await;
    let status = json!({"status": {"phase": "Running", "containerStatuses": [{
        "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}
    }]}});
    pods.patch_status(
        &first[0].name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("report restarts");
    let j = wait_condition(&jobs, "restarts", "Failed").await;
    assert_eq!(
        condition(&j, "Failed").and_then(|c| c.reason.as_deref()),
        Some("BackoffLimitExceeded")
    );
}

#[tokio::test]
async fn elastic_indexed_job_scales_down() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "elastic",
            json!({"parallelism": 4, "completions": 4, "completionMode": "Indexed"}),
        ),
    )
    .await;
    wait_active(&pods, "elastic", 4).await;
    // Scaling an Indexed Job changes completions and parallelism together.
    jobs.patch(
        "elastic",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"completions": 2, "parallelism": 2}})),
    )
    .await
    .expect("scale down");
    let left = wait_active(&pods, "elastic", 2).await;
    let mut ix: Vec<String> = left
        .iter()
        .map(|p| p.annotations()["batch.kubernetes.io/job-completion-index"].clone())
        .collect();
    ix.sort();
    assert_eq!(ix, vec!["0", "1"], "the out-of-range indexes were removed");
    for p in &left {
        finish(&pods, p, "Succeeded", 0).await;
    }
    let j = wait_condition(&jobs, "elastic", "Complete").await;
    // Two consecutive indexes are written as a list, as upstream does.
    let completed = j.status.as_ref().and_then(|s| s.completed_indexes.clone());
    assert_eq!(completed.as_deref(), Some("0,1"));
    assert_eq!(counts(&j).failed, 0, "removed indexes are not failures");
}

#[tokio::test]
async fn deleting_a_running_job_removes_its_pods_and_their_finalizers() {
    let server = server().await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with("gone", json!({"parallelism": 3, "completions": 3})),
    )
    .await;
    let running = wait_active(&pods, "gone", 3).await;
    finish(&pods, &running[0], "Succeeded", 0).await;
    // What kubectl delete sends: background propagation.
    jobs.delete("gone", &DeleteParams::background())
        .await
        .expect("delete job");
    // The garbage collector deletes the pods; the orphan worker releases their tracking
    // finalizers (the Job is gone), so nothing is left behind.
    eventually(WAIT, "every pod of the deleted Job is gone", || async {
        pods_of(&pods, "gone").await.is_empty().then_some(())
    })
    .await;
    assert!(jobs.get_opt("gone").await.expect("get").is_none());
}

#[tokio::test]
async fn failed_pods_are_replaced_after_the_pod_failure_backoff() {
    let server = Server::start_with(&[
        "--controllers",
        "job,podgc,serviceaccount",
        "--pod-failure-backoff",
        "2s",
        "--pod-failure-backoff-max",
        "10s",
    ])
    .await;
    let client = server.client().await;
    let (jobs, pods) = apis(&client);
    create(
        &jobs,
        job_with(
            "slow",
            json!({"parallelism": 1, "completions": 1, "backoffLimit": 5}),
        ),
    )
    .await;
    let mut last = wait_active(&pods, "slow", 1).await.remove(0);
    // The delay before a replacement doubles with each failure: 2 s, then 4 s.
    for want in [Duration::from_secs(2), Duration::from_secs(4)] {
        finish(&pods, &last, "Failed", 1).await;
        let failed_at = std::time::Instant::now();
        let next = eventually(WAIT, "a replacement pod", || async {
            active_pods(&pods, "slow")
                .await
                .into_iter()
                .find(|p| p.uid() != last.uid())
        })
        .await;
        let waited = failed_at.elapsed();
        // Pod finish times have second precision: allow for the rounding.
        assert!(
            waited + Duration::from_millis(1000) >= want,
            "replaced after {waited:?}, before the {want:?} back-off"
        );
        last = next;
    }
}

/// Upstream's StaleControllerConsistencyJob: a sync that starts before the caches have seen
/// the last sync's status write and pods is deferred (`job_controller_stale_sync_skips_total`)
/// instead of deciding on the old state, so the status writes of a Job that finishes pods as
/// fast as it creates them never meet a 409 and no sync fails.
#[tokio::test]
async fn syncs_wait_for_their_own_writes_instead_of_conflicting() {
    let server = Server::start_with(&[
        "--controllers",
        "job,serviceaccount",
        "--executor",
        "simulate",
        "--job-sync-batch-period=0s",
    ])
    .await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut job = common::job_json("fast");
    job["spec"]["completions"] = json!(300);
    job["spec"]["parallelism"] = json!(30);
    create(&jobs, serde_json::from_value(job).expect("a Job")).await;
    let j = common::wait_job_complete(&jobs, "fast", Duration::from_secs(120)).await;
    assert_eq!(j.status.as_ref().and_then(|s| s.succeeded), Some(300));
    assert_eq!(
        pods_of(&pods, "fast").await.len(),
        300,
        "one pod per completion"
    );

    let metrics = common::raw(&client, "GET", "/metrics", None, Vec::new()).await;
    assert_eq!(metrics.status, 200);
    let failed_syncs: Vec<&str> = metrics
        .body
        .lines()
        .filter(|l| {
            l.starts_with("job_controller_job_syncs_total{") && l.contains("result=\"error\"")
        })
        .collect();
    assert!(failed_syncs.is_empty(), "{failed_syncs:?}");
}

/// A finished Job's update can reach the controller before its pods' last updates; the pods
/// whose tracking finalizer its sync has just removed are not patched again as orphans: each
/// pod gets exactly one finalizer patch (`apiserver_request_total` counts them).
#[tokio::test]
async fn each_tracking_finalizer_is_removed_with_one_patch() {
    let server = Server::start_with(&[
        "--controllers",
        "job,serviceaccount",
        "--executor",
        "simulate",
    ])
    .await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    const N: usize = 60;
    futures::future::join_all((0..N).map(|i| {
        let jobs = jobs.clone();
        async move {
            let j: Job =
                serde_json::from_value(common::job_json(&format!("one-{i}"))).expect("a Job");
            create(&jobs, j).await
        }
    }))
    .await;
    for i in 0..N {
        common::wait_job_complete(&jobs, &format!("one-{i}"), Duration::from_secs(120)).await;
    }
    let all = pods.list(&ListParams::default()).await.expect("list pods");
    assert_eq!(all.items.len(), N);
    eventually(WAIT, "every finalizer removed", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .all(|p| !p.finalizers().iter().any(|f| f == TRACKING))
                .then_some(())
        }
    })
    .await;
    // Late orphan patches would come after the Jobs complete: give them time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let metrics = common::raw(&client, "GET", "/metrics", None, Vec::new())
        .await
        .body;
    let patches: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{verb=\"PATCH\"")
                && l.contains("resource=\"pods\",subresource=\"\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(patches, N as f64, "{metrics}");
}
