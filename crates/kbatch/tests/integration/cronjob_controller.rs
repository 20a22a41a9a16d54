//! The CronJob and TTL-after-finished controllers end to end, against `kbatch up --executor
//! none` with the Job controller running too; the tests play the pods' part.
//!
//! No test waits for the wall clock to reach a schedule: CronJobs get yearly schedules and a
//! `status.lastScheduleTime` in the past, so that a scheduled time is already due, and a
//! second one is made due by moving the schedule to a later date of the year.

use crate::common;

use std::time::Duration;

use common::{Server, eventually};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn server() -> Server {
    Server::start_with(&["--controllers", "cronjob,job,ttl,podgc,serviceaccount"]).await
}

/// A CronJob firing every January 1st (UTC), with `spec` merged in.
fn cronjob(name: &str, spec: Value) -> CronJob {
    let mut cj = common::cronjob_json(name);
    cj["spec"]["schedule"] = json!("0 0 1 1 *");
    cj["spec"]["timeZone"] = json!("Etc/UTC");
    if let (Some(base), Some(extra)) = (cj["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(cj).expect("a CronJob")
}

/// Makes the CronJob's next scheduled time already due by moving lastScheduleTime back.
async fn make_due(cronjobs: &Api<CronJob>, name: &str) {
    cronjobs
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"lastScheduleTime": "2025-12-01T00:00:00Z"}})),
        )
        .await
        .expect("set lastScheduleTime");
}

/// Moves the schedule to February 1st, then touches a label: a schedule change alone
/// requeues at the next scheduled time (next year), the label change syncs at once.
async fn move_to_february(cronjobs: &Api<CronJob>, name: &str) {
    cronjobs
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"schedule": "0 0 1 2 *"}})),
        )
        .await
        .expect("change the schedule");
    cronjobs
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .expect("touch");
}

fn minutes(rfc3339: &str) -> i64 {
    rfc3339.parse::<Timestamp>().expect("a time").as_second() / 60
}

async fn jobs_of(jobs: &Api<Job>, cj: &str) -> Vec<Job> {
    let mut list: Vec<Job> = jobs
        .list(&ListParams::default())
        .await
        .expect("list jobs")
        .items
        .into_iter()
        .filter(|j| {
            j.owner_references()
                .iter()
                .any(|r| r.kind == "CronJob" && r.name == cj && r.controller == Some(true))
        })
        .collect();
    list.sort_by_key(|j| j.name_any());
    list
}

async fn wait_jobs(jobs: &Api<Job>, cj: &str, n: usize) -> Vec<Job> {
    eventually(WAIT, &format!("{cj} has {n} Jobs"), || async {
        let l = jobs_of(jobs, cj).await;
        (l.len() == n).then_some(l)
    })
    .await
}

/// Waits until the CronJob's status lists `jobs` as active: the sync that created them is
/// over. Changing the CronJob before that races the controller's status write, which then
/// fails with a conflict and leaves the Job unrecorded (UnexpectedJob), as upstream would.
async fn wait_recorded(cronjobs: &Api<CronJob>, cj: &str, jobs: &[Job]) {
    eventually(WAIT, &format!("{cj} records its active Jobs"), || async {
        let status = cronjobs.get(cj).await.ok()?.status?;
        let active: Vec<String> = status
            .active
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| r.uid)
            .collect();
        jobs.iter()
            .all(|j| j.metadata.uid.as_ref().is_some_and(|u| active.contains(u)))
            .then_some(())
    })
    .await
}

async fn event_reasons(client: &Client, kind: &str, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind={kind},involvedObject.name={name}"
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

async fn wait_event(client: &Client, kind: &str, name: &str, reason: &str) {
    eventually(WAIT, &format!("{kind}/{name} event {reason}"), || async {
        event_reasons(client, kind, name)
            .await
            .iter()
            .any(|r| r == reason)
            .then_some(())
    })
    .await;
}

/// Finishes the Job's pod as a kubelet would report it.
async fn finish_pod(client: &Client, job: &Job) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let lp =
        ListParams::default().labels(&format!("batch.kubernetes.io/job-name={}", job.name_any()));
    let pod = eventually(WAIT, "the Job's pod", || async {
        pods.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await;
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .expect("finish the pod");
}

/// Completes a Job by finishing its pod (the Job controller does the rest).
async fn complete(client: &Client, job: &Job) {
    finish_pod(client, job).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    common::wait_job_complete(&jobs, &job.name_any(), WAIT).await;
}

fn apis(client: &Client) -> (Api<CronJob>, Api<Job>) {
    (
        Api::namespaced(client.clone(), "default"),
        Api::namespaced(client.clone(), "default"),
    )
}

#[tokio::test]
async fn a_due_schedule_creates_a_named_owned_job() {
    let server = server().await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    let cj = cronjobs
        .create(&PostParams::default(), &cronjob("nightly", json!({})))
        .await
        .expect("create");
    // Nothing is due yet: created now, next run next January.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(jobs_of(&jobs, "nightly").await.is_empty());

    make_due(&cronjobs, "nightly").await;
    let created = wait_jobs(&jobs, "nightly", 1).await.remove(0);
    let scheduled = "2026-01-01T00:00:00Z";
    assert_eq!(
        created.name_any(),
        format!("nightly-{}", minutes(scheduled))
    );
    assert_eq!(
        created.annotations()["batch.kubernetes.io/cronjob-scheduled-timestamp"],
        scheduled
    );
    let owner = &created.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("CronJob", cj.uid().unwrap_or_default().as_str(), Some(true))
    );
    let status = eventually(WAIT, "status.active lists the Job", || async {
        let s = cronjobs.get("nightly").await.ok()?.status?;
        (s.active.as_ref()?.len() == 1).then_some(s)
    })
    .await;
    assert_eq!(
        status.active.as_ref().and_then(|a| a[0].uid.clone()),
        created.uid()
    );
    assert_eq!(
        status.last_schedule_time.map(|t| t.0.to_string()),
        Some(scheduled.to_string())
    );
    wait_event(&client, "CronJob", "nightly", "SuccessfulCreate").await;

    // Completion is seen: the Job leaves status.active, lastSuccessfulTime is set.
    complete(&client, &created).await;
    let status = eventually(WAIT, "the completion is recorded", || async {
        let s = cronjobs.get("nightly").await.ok()?.status?;
        (s.active.as_ref().is_none_or(Vec::is_empty) && s.last_successful_time.is_some())
            .then_some(s)
    })
    .await;
    assert!(status.last_successful_time.is_some());
    wait_event(&client, "CronJob", "nightly", "SawCompletedJob").await;
}

/// Many CronJobs due at once with few workers: the status writes after their creations wait
/// for the other creations (the key stays taken meanwhile), and each CronJob still gets
/// exactly one Job and a status that records it.
#[tokio::test]
async fn many_cronjobs_due_at_once_each_get_one_job_and_record_it() {
    let server = Server::start_with(&[
        "--controllers",
        "cronjob,serviceaccount",
        "--concurrent-cron-job-syncs",
        "2",
    ])
    .await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    let names: Vec<String> = (0..24).map(|i| format!("fleet-{i}")).collect();
    for name in &names {
        cronjobs
            .create(
                &PostParams::default(),
                &cronjob(name, json!({"suspend": true})),
            )
            .await
            .expect("create");
        make_due(&cronjobs, name).await;
    }
    // Resumed together: they queue up behind the two workers.
    let (pp, resume) = (
        PatchParams::default(),
        Patch::Merge(json!({"spec": {"suspend": false}})),
    );
    futures::future::join_all(names.iter().map(|name| cronjobs.patch(name, &pp, &resume)))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("resume");

    for name in &names {
        let created = wait_jobs(&jobs, name, 1).await;
        wait_recorded(&cronjobs, name, &created).await;
        let status = cronjobs
            .get(name)
            .await
            .expect("get")
            .status
            .expect("status");
        assert_eq!(
            status
                .last_schedule_time
                .map(|t| t.0.to_string())
                .as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "{name}"
        );
    }
    // Nothing was synced twice into a second Job.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for name in &names {
        assert_eq!(jobs_of(&jobs, name).await.len(), 1, "{name}");
    }
}

#[tokio::test]
async fn forbid_skips_a_run_while_the_last_one_is_active() {
    let server = server().await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    cronjobs
        .create(
            &PostParams::default(),
            &cronjob("forbid", json!({"concurrencyPolicy": "Forbid"})),
        )
        .await
        .expect("create");
    make_due(&cronjobs, "forbid").await;
    let first = wait_jobs(&jobs, "forbid", 1).await;
    wait_recorded(&cronjobs, "forbid", &first).await;
    move_to_february(&cronjobs, "forbid").await;
    wait_event(&client, "CronJob", "forbid", "JobAlreadyActive").await;
    assert_eq!(jobs_of(&jobs, "forbid").await.len(), 1);
}

#[tokio::test]
async fn replace_deletes_the_active_job_and_starts_a_new_one() {
    let server = server().await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    cronjobs
        .create(
            &PostParams::default(),
            &cronjob("replace", json!({"concurrencyPolicy": "Replace"})),
        )
        .await
        .expect("create");
    make_due(&cronjobs, "replace").await;
    let first = wait_jobs(&jobs, "replace", 1).await.remove(0);
    wait_recorded(&cronjobs, "replace", std::slice::from_ref(&first)).await;
    move_to_february(&cronjobs, "replace").await;
    let now = eventually(WAIT, "the first Job is replaced", || async {
        let l = jobs_of(&jobs, "replace").await;
        (l.len() == 1 && l[0].uid() != first.uid()).then_some(l)
    })
    .await;
    assert_eq!(
        now[0].name_any(),
        format!("replace-{}", minutes("2026-02-01T00:00:00Z"))
    );
    wait_event(&client, "CronJob", "replace", "SuccessfulDelete").await;
}

#[tokio::test]
async fn allow_runs_concurrently_and_history_limits_prune_finished_jobs() {
    let server = server().await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    cronjobs
        .create(
            &PostParams::default(),
            &cronjob("hist", json!({"successfulJobsHistoryLimit": 1})),
        )
        .await
        .expect("create");
    make_due(&cronjobs, "hist").await;
    let first = wait_jobs(&jobs, "hist", 1).await.remove(0);
    wait_recorded(&cronjobs, "hist", std::slice::from_ref(&first)).await;
    move_to_february(&cronjobs, "hist").await;
    // Allow: the second run starts while the first is still active.
    let both = wait_jobs(&jobs, "hist", 2).await;
    let second = both
        .into_iter()
        .find(|j| j.uid() != first.uid())
        .expect("the second Job");
    complete(&client, &first).await;
    complete(&client, &second).await;
    // Only the most recent successful Job is kept.
    let kept = eventually(WAIT, "history pruned to one Job", || async {
        let l = jobs_of(&jobs, "hist").await;
        (l.len() == 1).then_some(l)
    })
    .await;
    assert_eq!(kept[0].uid(), second.uid());
    wait_event(&client, "CronJob", "hist", "SuccessfulDelete").await;
}

#[tokio::test]
async fn a_suspended_cronjob_starts_nothing() {
    let server = server().await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    cronjobs
        .create(
            &PostParams::default(),
            &cronjob("paused", json!({"suspend": true})),
        )
        .await
        .expect("create");
    make_due(&cronjobs, "paused").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(jobs_of(&jobs, "paused").await.is_empty());
    // Resuming starts the missed run.
    cronjobs
        .patch(
            "paused",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("resume");
    wait_jobs(&jobs, "paused", 1).await;
}

#[tokio::test]
async fn a_deleted_job_leaves_status_active() {
    let server = server().await;
    let client = server.client().await;
    let (cronjobs, jobs) = apis(&client);
    cronjobs
        .create(&PostParams::default(), &cronjob("gone", json!({})))
        .await
        .expect("create");
    make_due(&cronjobs, "gone").await;
    let job = wait_jobs(&jobs, "gone", 1).await.remove(0);
    eventually(WAIT, "status.active lists the Job", || async {
        let s = cronjobs.get("gone").await.ok()?.status?;
        (s.active?.len() == 1).then_some(())
    })
    .await;
    jobs.delete(&job.name_any(), &Default::default())
        .await
        .expect("delete the Job");
    eventually(WAIT, "status.active is emptied", || async {
        let s = cronjobs.get("gone").await.ok()?.status?;
        s.active.is_none_or(|a| a.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn finished_jobs_with_a_ttl_are_deleted_with_their_pods() {
    let server = server().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut with_ttl = common::job_json("short-lived");
    with_ttl["spec"]["ttlSecondsAfterFinished"] = json!(0);
    let with_ttl: Job = serde_json::from_value(with_ttl).expect("job");
    let without: Job = serde_json::from_value(common::job_json("kept")).expect("job");
    let a = jobs
        .create(&PostParams::default(), &with_ttl)
        .await
        .expect("create");
    let b = jobs
        .create(&PostParams::default(), &without)
        .await
        .expect("create");
    // With a TTL of 0 the Job goes as soon as it is finished.
    finish_pod(&client, &a).await;
    complete(&client, &b).await;
    eventually(WAIT, "the Job with a TTL is deleted", || async {
        jobs.get_opt("short-lived")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually(WAIT, "its pod is gone too", || async {
        let lp = ListParams::default().labels("batch.kubernetes.io/job-name=short-lived");
        pods.list(&lp).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        jobs.get_opt("kept").await.expect("get").is_some(),
        "a Job without ttlSecondsAfterFinished stays"
    );
}
