//! The disruption controller's decision, as tables: upstream's `disruption_test.go` scenarios
//! (integer budgets, unready and terminating pods, naked pods with percentages, the evicted
//! pods' wait for deletion) over [`decide`].

use super::*;
use serde_json::json;

fn now() -> Timestamp {
    "2026-11-27T12:00:00Z".parse().unwrap()
}

fn pdb(spec: serde_json::Value, status: serde_json::Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "budget", "namespace": "ns", "generation": 2},
        "spec": spec,
        "status": status,
    }))
    .unwrap()
}

fn pod(name: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "a"}},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

fn job_pod(name: &str) -> Pod {
    let mut p = pod(name, true);
    p.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": true
        }))
        .unwrap(),
    ]);
    p
}

/// (disruptionsAllowed, currentHealthy, desiredHealthy, expectedPods) of a written status.
fn counts(d: &Decision) -> (i32, i32, i32, i32) {
    let s = d.status.as_ref().expect("a status to write");
    (
        s.disruptions_allowed.unwrap_or(-1),
        s.current_healthy.unwrap_or(-1),
        s.desired_healthy.unwrap_or(-1),
        s.expected_pods.unwrap_or(-1),
    )
}

fn condition(d: &Decision) -> (String, String, String) {
    let c = d
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == DISRUPTION_ALLOWED))
        .expect("the DisruptionAllowed condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn reasons(d: &Decision) -> Vec<&'static str> {
    d.events.iter().map(|e| e.reason).collect()
}

// TestNoSelector / TestUnavailable: an integer minAvailable counts the selected pods.
#[test]
fn an_integer_budget_counts_ready_pods() {
    let b = pdb(json!({"minAvailable": 3, "selector": {}}), json!({}));
    let d = decide(&b, &[], now());
    assert_eq!(counts(&d), (0, 0, 3, 0));
    assert_eq!(reasons(&d), ["NoPods"]);
    assert_eq!(
        condition(&d),
        ("False".into(), INSUFFICIENT_PODS.into(), String::new())
    );
    assert_eq!(d.status.as_ref().unwrap().observed_generation, Some(2));

    let pods: Vec<Pod> = (0..4).map(|i| pod(&format!("p{i}"), true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let d = decide(&b, &refs, now());
    assert_eq!(counts(&d), (1, 4, 3, 4));
    assert_eq!(
        condition(&d),
        ("True".into(), SUFFICIENT_PODS.into(), String::new())
    );
    assert!(d.events.is_empty());

    // An unready pod and a terminating one are not healthy.
    let mut pods = pods;
    pods[0] = pod("p0", false);
    pods[1].metadata.deletion_timestamp = Some(Time(now()));
    let refs: Vec<&Pod> = pods.iter().collect();
    assert_eq!(counts(&decide(&b, &refs, now())), (0, 2, 3, 4));
}

#[test]
fn an_up_to_date_status_is_not_written_again() {
    let pods: Vec<Pod> = (0..2).map(|i| pod(&format!("p{i}"), true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let b = pdb(json!({"minAvailable": 1, "selector": {}}), json!({}));
    let first = decide(&b, &refs, now());
    let mut stored = b.clone();
    stored.status = first.status.clone();
    let again = decide(&stored, &refs, now());
    assert_eq!(again.status, None);
    // A new generation (the spec changed) is observed with a write.
    stored.metadata.generation = Some(3);
    let d = decide(&stored, &refs, now());
    assert_eq!(d.status.unwrap().observed_generation, Some(3));
}

// TestIntegerMaxUnavailable with a Job's pods: the Job has no scale, so the budget fails safe.
#[test]
fn a_percentage_or_max_unavailable_over_job_pods_fails_safe() {
    let pods = [job_pod("p0"), job_pod("p1")];
    let refs: Vec<&Pod> = pods.iter().collect();
    for spec in [
        json!({"maxUnavailable": 1, "selector": {}}),
        json!({"minAvailable": "50%", "selector": {}}),
    ] {
        let b = pdb(
            spec,
            json!({"disruptionsAllowed": 1, "observedGeneration": 1}),
        );
        let d = decide(&b, &refs, now());
        assert_eq!(
            d.failed.as_deref(),
            Some("jobs.batch does not implement the scale subresource")
        );
        assert_eq!(reasons(&d), ["CalculateExpectedPodCountFailed"]);
        assert_eq!(
            d.events[0].message,
            "Failed to calculate the number of expected pods: jobs.batch does not implement the scale subresource"
        );
        let s = d.status.as_ref().unwrap();
        assert_eq!(s.disruptions_allowed, Some(0));
        // failSafe keeps the observed generation it had.
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(
            condition(&d),
            (
                "False".into(),
                SYNC_FAILED.into(),
                "jobs.batch does not implement the scale subresource".into()
            )
        );
    }
}

// TestNakedPod / TestStatusForUnmanagedPod: pods without a controller are left out of a
// percentage, with an event.
#[test]
fn naked_pods_under_a_percentage_are_unmanaged() {
    let pods = [pod("naked", true)];
    let refs: Vec<&Pod> = pods.iter().collect();
    let b = pdb(
        json!({"minAvailable": "28%", "selector": {"matchLabels": {"app": "a"}}}),
        json!({}),
    );
    let d = decide(&b, &refs, now());
    assert_eq!(d.failed, None);
    assert_eq!(counts(&d), (0, 1, 0, 0));
    assert_eq!(reasons(&d), ["UnmanagedPods"]);
    assert!(d.events[0].message.starts_with(
        "Pods selected by this PodDisruptionBudget (selector: {\"matchLabels\":{\"app\":\"a\"}}) were found to be unmanaged."
    ));
}

// TestUpdateDisruptedPods: an evicted pod counts as gone for two minutes, then is expected
// to have been deleted.
#[test]
fn evicted_pods_count_as_gone_until_their_deletion_is_overdue() {
    let pods: Vec<Pod> = (0..4).map(|i| pod(&format!("p{i}"), true)).collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    let recent = "2026-11-27T11:59:30Z";
    let overdue = "2026-11-27T11:57:00Z";
    let b = pdb(
        json!({"minAvailable": 2, "selector": {}}),
        json!({"disruptedPods": {"p1": recent, "p2": overdue, "gone": recent}}),
    );
    let d = decide(&b, &refs, now());
    // p1 is not healthy while its deletion is awaited; p2 is again.
    assert_eq!(counts(&d), (1, 3, 2, 4));
    let kept: Vec<&String> = d
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.as_ref())
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(kept, ["p1"]);
    assert_eq!(d.recheck_after, Some(Duration::from_secs(90)));
    assert_eq!(reasons(&d), ["NotDeleted"]);
    assert_eq!(d.events[0].on_pod.as_deref(), Some("p2"));
    assert_eq!(
        d.events[0].message,
        "Pod was expected by PDB ns/ns to be deleted but it wasn't"
    );
}

#[test]
fn a_null_selector_selects_nothing_and_an_empty_one_everything() {
    assert!(selector_of(None).is_none());
    let all = selector_of(Some(&LabelSelector::default())).unwrap();
    assert!(all.matches(&BTreeMap::from([("x".to_string(), "y".to_string())])));
    let app: LabelSelector = serde_json::from_value(json!({"matchLabels": {"app": "a"}})).unwrap();
    let app = selector_of(Some(&app)).unwrap();
    assert!(!app.matches(&BTreeMap::new()));
}

// TestStalePodDisruption's cases: only a pod that is not terminating nor finished, with a
// DisruptionTarget True not set by kubelet, has a condition that goes stale.
#[test]
fn stale_disruption_targets_are_reset_after_two_minutes() {
    let marked = |reason: &str, since: &str, phase: &str| {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "generation": 1},
            "status": {"phase": phase, "conditions": [{"type": "DisruptionTarget",
                "status": "True", "reason": reason, "lastTransitionTime": since}]},
        }))
        .unwrap();
        p.metadata.generation = Some(1);
        p
    };
    let recent = marked("EvictionByEvictionAPI", "2026-11-27T11:59:30Z", "Running");
    assert_eq!(
        stale_disruption_wait(&recent, now()),
        Some(Duration::from_secs(90))
    );
    let old = marked("PreemptionByScheduler", "2026-11-27T11:50:00Z", "Running");
    assert_eq!(stale_disruption_wait(&old, now()), Some(Duration::ZERO));
    assert_eq!(
        stale_disruption_wait(
            &marked("TerminationByKubelet", "2026-11-27T11:50:00Z", "Running"),
            now()
        ),
        None
    );
    assert_eq!(
        stale_disruption_wait(
            &marked("EvictionByEvictionAPI", "2026-11-27T11:50:00Z", "Failed"),
            now()
        ),
        None
    );
    let mut deleting = old.clone();
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(stale_disruption_wait(&deleting, now()), None);
    assert_eq!(stale_disruption_wait(&pod("p", true), now()), None);

    assert_eq!(
        reset_disruption_patch(&old, now()),
        json!({"metadata": {"uid": "u", "resourceVersion": "7"},
            "status": {"conditions": [{"type": "DisruptionTarget", "status": "False",
                "reason": null, "message": null, "lastTransitionTime": "2026-11-27T12:00:00Z",
                "observedGeneration": 1}]}})
    );
}
