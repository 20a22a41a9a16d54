//! Defaulting and strategy behaviour (SetDefaults_Job/CronJob/PodSpec/Pod, PrepareForCreate,
//! PrepareForUpdate), ported from upstream's defaults and strategy tests.

use crate::common;

use common::*;
use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, Job};
use kbatch_api::k8s_openapi::api::core::v1::{Namespace, Pod};
use kbatch_api::labels::from_pairs as labels;
use kbatch_api::{defaults, keys, strategy};
use serde_json::json;

fn defaulted_job(patch: serde_json::Value) -> Job {
    let mut job: Job = decode(patched(base_job(), patch));
    defaults::job(&mut job);
    job
}

#[test]
fn job_scalar_defaults() {
    // (patch, completions, parallelism, backoffLimit, podReplacementPolicy)
    let cases = [
        (json!({}), Some(1), Some(1), Some(6), "TerminatingOrFailed"),
        (
            json!({"spec": {"parallelism": 3}}),
            None,
            Some(3),
            Some(6),
            "TerminatingOrFailed",
        ),
        (
            json!({"spec": {"completions": 4}}),
            Some(4),
            Some(1),
            Some(6),
            "TerminatingOrFailed",
        ),
        (
            json!({"spec": {"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 1}}),
            Some(2),
            Some(1),
            Some(i32::MAX),
            "TerminatingOrFailed",
        ),
        (
            json!({"spec": {"backoffLimit": 0}}),
            Some(1),
            Some(1),
            Some(0),
            "TerminatingOrFailed",
        ),
        (
            json!({"spec": {"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}),
            Some(1),
            Some(1),
            Some(6),
            "Failed",
        ),
        (
            json!({"spec": {"podReplacementPolicy": "Failed"}}),
            Some(1),
            Some(1),
            Some(6),
            "Failed",
        ),
    ];
    for (patch, completions, parallelism, backoff, prp) in cases {
        let job = defaulted_job(patch.clone());
        let spec = job.spec.expect("spec");
        assert_eq!(spec.completions, completions, "{patch}");
        assert_eq!(spec.parallelism, parallelism, "{patch}");
        assert_eq!(spec.backoff_limit, backoff, "{patch}");
        assert_eq!(spec.pod_replacement_policy.as_deref(), Some(prp), "{patch}");
        assert_eq!(spec.suspend, Some(false));
        assert_eq!(spec.manual_selector, Some(false));
        if spec.completion_mode.as_deref() != Some("Indexed") {
            assert_eq!(spec.completion_mode.as_deref(), Some("NonIndexed"));
        }
    }
}

#[test]
fn job_pod_condition_status_defaults_to_true() {
    let job = defaulted_job(json!({"spec": {"podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}, {"type": "X", "status": "False"}]}
    ]}}}));
    let rule = &job
        .spec
        .expect("spec")
        .pod_failure_policy
        .expect("pfp")
        .rules[0];
    let statuses: Vec<_> = rule
        .on_pod_conditions
        .iter()
        .flatten()
        .map(|p| p.status.clone())
        .collect();
    assert_eq!(
        statuses,
        vec![Some("True".to_string()), Some("False".to_string())]
    );
}

#[test]
fn job_labels_copied_from_template_only_when_job_has_none() {
    let job = defaulted_job(json!({"spec": {"template": {"metadata": {"labels": {"app": "x"}}}}}));
    assert_eq!(job.metadata.labels, Some(labels(&[("app", "x")])));
    let job = defaulted_job(json!({
        "metadata": {"labels": {"own": "y"}},
        "spec": {"template": {"metadata": {"labels": {"app": "x"}}}}
    }));
    assert_eq!(job.metadata.labels, Some(labels(&[("own", "y")])));
    let job = defaulted_job(json!({}));
    assert_eq!(job.metadata.labels, None);
}

#[test]
fn pod_template_defaults_in_job() {
    let job = defaulted_job(json!({"spec": {"template": {"spec": {
        "restartPolicy": null,
        "containers": [
            {"name": "a", "image": "busybox", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "busybox:1.36"},
            {"name": "c", "image": "repo/img@sha256:0123"}
        ],
        "volumes": [{"name": "v"}]
    }}}}));
    let spec = job.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert!(spec.security_context.is_some());
    // enableServiceLinks is a Pod default, not a template one.
    assert_eq!(spec.enable_service_links, None);
    let policies: Vec<_> = spec
        .containers
        .iter()
        .map(|c| c.image_pull_policy.clone().unwrap_or_default())
        .collect();
    assert_eq!(policies, vec!["Always", "IfNotPresent", "IfNotPresent"]);
    let c = &spec.containers[0];
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(
        c.ports.as_ref().expect("ports")[0].protocol.as_deref(),
        Some("TCP")
    );
    assert!(spec.volumes.expect("volumes")[0].empty_dir.is_some());
}

#[test]
fn cronjob_defaults_do_not_apply_job_defaults() {
    let mut cj: CronJob = decode(base_cronjob());
    defaults::cronjob(&mut cj);
    assert_eq!(cj.spec.concurrency_policy.as_deref(), Some("Allow"));
    assert_eq!(cj.spec.suspend, Some(false));
    assert_eq!(cj.spec.successful_jobs_history_limit, Some(3));
    assert_eq!(cj.spec.failed_jobs_history_limit, Some(1));
    let js = cj.spec.job_template.spec.expect("job spec");
    assert_eq!(js.completions, None);
    assert_eq!(js.parallelism, None);
    assert_eq!(js.backoff_limit, None);
    assert_eq!(js.completion_mode, None);
    assert_eq!(js.manual_selector, None);
    assert_eq!(js.pod_replacement_policy, None);
    let ps = js.template.spec.expect("pod spec");
    assert_eq!(ps.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(
        ps.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
}

#[test]
fn pod_defaults() {
    let mut pod: Pod = decode(patched(
        base_pod(),
        json!({"spec": {"containers": [{"name": "c", "image": "busybox:1", "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}
        }}]}}),
    ));
    defaults::pod(&mut pod);
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.enable_service_links, Some(true));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    let req = spec.containers[0]
        .resources
        .clone()
        .and_then(|r| r.requests)
        .expect("requests");
    assert_eq!(req.get("cpu").map(|q| q.0.as_str()), Some("500m"));
    assert_eq!(req.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
}

#[test]
fn namespace_name_label() {
    let mut ns: Namespace = decode(json!({"metadata": {"name": "team-a"}}));
    defaults::namespace(&mut ns);
    assert_eq!(
        ns.metadata
            .labels
            .and_then(|l| l.get(keys::NAMESPACE_NAME_LABEL).cloned()),
        Some("team-a".to_string())
    );
}

#[test]
fn job_create_generates_selector_and_labels() {
    let job = prepared_job(json!({"status": {"active": 3}, "metadata": {"generation": 7}}));
    let spec = job.spec.clone().expect("spec");
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        Some(labels(&[(keys::CONTROLLER_UID_LABEL, UID)]))
    );
    let want = labels(&[
        (keys::CONTROLLER_UID_LABEL, UID),
        (keys::JOB_NAME_LABEL, "pi"),
        (keys::LEGACY_CONTROLLER_UID_LABEL, UID),
        (keys::LEGACY_JOB_NAME_LABEL, "pi"),
    ]);
    assert_eq!(
        spec.template.metadata.and_then(|m| m.labels),
        Some(want.clone())
    );
    // Reads of a job created without labels show the generated ones.
    assert_eq!(job.metadata.labels, Some(want));
    assert_eq!(job.status, Some(Default::default()));
    assert_eq!(job.metadata.generation, Some(1));
    assert!(kbatch_api::validation::job_create(&job).is_empty());
}

#[test]
fn job_create_keeps_user_labels_and_selector_keys() {
    let job = prepared_job(json!({
        "metadata": {"labels": {"team": "a"}},
        "spec": {"template": {"metadata": {"labels": {"job-name": "custom", "app": "x"}}}}
    }));
    let tl = job
        .spec
        .clone()
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.labels)
        .expect("labels");
    assert_eq!(tl.get("job-name").map(String::as_str), Some("custom"));
    assert_eq!(tl.get("app").map(String::as_str), Some("x"));
    assert_eq!(job.metadata.labels, Some(labels(&[("team", "a")])));
    // The conflicting label is reported by validation.
    let errs = kbatch_api::validation::job_create(&job);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.template.metadata.labels[job-name]");
    assert_eq!(errs[0].detail, "must be 'pi'");
}

#[test]
fn job_create_manual_selector_generates_nothing() {
    let job = prepared_job(json!({"spec": {
        "manualSelector": true,
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}}
    }}));
    let spec = job.spec.clone().expect("spec");
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        Some(labels(&[("app", "x")]))
    );
    assert_eq!(
        spec.template.metadata.and_then(|m| m.labels),
        Some(labels(&[("app", "x")]))
    );
    assert!(kbatch_api::validation::job_create(&job).is_empty());
}

#[test]
fn job_update_resets_status_and_bumps_generation_on_spec_change() {
    let mut old = prepared_job(json!({}));
    old.status = Some(decode(json!({"active": 1})));
    let mut same = old.clone();
    same.status = Some(decode(json!({"active": 5, "succeeded": 2})));
    strategy::job_prepare_for_update(&mut same, &old);
    assert_eq!(same.status, old.status);
    assert_eq!(same.metadata.generation, Some(1));

    let mut changed = old.clone();
    if let Some(s) = changed.spec.as_mut() {
        s.parallelism = Some(3);
    }
    strategy::job_prepare_for_update(&mut changed, &old);
    assert_eq!(changed.metadata.generation, Some(2));

    let mut status_write = old.clone();
    if let Some(s) = status_write.spec.as_mut() {
        s.parallelism = Some(9);
    }
    status_write.status = Some(decode(json!({"active": 2})));
    strategy::job_status_prepare_for_update(&mut status_write, &old);
    assert_eq!(status_write.spec, old.spec);
    assert_eq!(status_write.status, Some(decode(json!({"active": 2}))));
}

#[test]
fn cronjob_strategies() {
    let old = prepared_cronjob(json!({}));
    assert_eq!(old.metadata.generation, Some(1));
    assert_eq!(old.status, Some(Default::default()));
    let mut new = old.clone();
    new.spec.schedule = "0 * * * *".to_string();
    new.status = Some(decode(json!({"active": [{"name": "x"}]})));
    strategy::cronjob_prepare_for_update(&mut new, &old);
    assert_eq!(new.metadata.generation, Some(2));
    assert_eq!(new.status, old.status);
    let mut st = old.clone();
    st.spec.schedule = "1 * * * *".to_string();
    strategy::cronjob_status_prepare_for_update(&mut st, &old);
    assert_eq!(st.spec, old.spec);
}

fn qos(resources: serde_json::Value) -> String {
    let pod = prepared_pod(json!({"spec": {"containers": [
        {"name": "c", "image": "busybox", "resources": resources}
    ]}}));
    pod.status.and_then(|s| s.qos_class).unwrap_or_default()
}

#[test]
fn pod_create_sets_pending_and_qos() {
    let pod = prepared_pod(json!({"status": {"phase": "Running"}}));
    let st = pod.status.clone().expect("status");
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    assert_eq!(st.qos_class.as_deref(), Some("BestEffort"));
    assert_eq!(qos(json!({})), "BestEffort");
    assert_eq!(qos(json!({"requests": {"cpu": "100m"}})), "Burstable");
    // Requests default to limits, so equal limits on both resources are Guaranteed.
    assert_eq!(
        qos(json!({"limits": {"cpu": "1", "memory": "1Gi"}})),
        "Guaranteed"
    );
    assert_eq!(
        qos(json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}})),
        "Burstable"
    );
    assert_eq!(qos(json!({"limits": {"cpu": "1"}})), "Burstable");
}

#[test]
fn pod_status_prepare_keeps_spec_and_owners() {
    let mut old = prepared_pod(json!({"metadata": {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": true}
    ]}}));
    old.status = Some(decode(
        json!({"phase": "Pending", "qosClass": "BestEffort", "observedGeneration": 1}),
    ));
    let mut new = old.clone();
    new.metadata.owner_references = None;
    if let Some(s) = new.spec.as_mut() {
        s.node_name = Some("elsewhere".to_string());
    }
    new.status = Some(decode(json!({"phase": "Running"})));
    strategy::pod_status_prepare_for_update(&mut new, &old);
    assert_eq!(new.spec, old.spec);
    assert_eq!(new.metadata.owner_references, old.metadata.owner_references);
    let st = new.status.expect("status");
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(st.qos_class.as_deref(), Some("BestEffort"));
    assert_eq!(st.observed_generation, Some(1));
}

#[test]
fn pod_status_update_of_a_deleting_pod_keeps_its_deletion_timestamp() {
    let mut old = prepared_pod(json!({}));
    old.metadata.deletion_timestamp = Some(decode(json!("2024-01-01T00:00:00Z")));
    let mut new = old.clone();
    new.metadata.deletion_timestamp = None;
    new.status = Some(decode(json!({"phase": "Failed"})));
    strategy::pod_status_prepare_for_update(&mut new, &old);
    assert_eq!(
        new.metadata.deletion_timestamp,
        old.metadata.deletion_timestamp
    );
    assert!(kbatch_api::validation::pod_status_update(&new, &old).is_empty());
}

#[test]
fn pod_update_keeps_status() {
    let old = prepared_pod(json!({}));
    let mut new = old.clone();
    new.status = Some(decode(json!({"phase": "Succeeded"})));
    strategy::pod_prepare_for_update(&mut new, &old);
    assert_eq!(new.status, old.status);
    assert_eq!(new.metadata.generation, Some(1));
}

/// A pod spec with a grpc probe in `mode` and an httpGet probe over `protocol`, 1.37's alpha
/// fields, on a container and an init container.
fn alpha_probe_spec(mode: Option<&str>, protocol: Option<&str>) -> serde_json::Value {
    json!({
        "containers": [{"name": "c", "image": "busybox",
            "livenessProbe": {"grpc": {"port": 9090, "mode": mode}},
            "readinessProbe": {"httpGet": {"port": 8080, "protocol": protocol}}}],
        "initContainers": [{"name": "i", "image": "busybox", "restartPolicy": "Always",
            "startupProbe": {"grpc": {"port": 9091, "mode": mode}}}]
    })
}

/// (grpc modes, httpGet protocols) of a spec's probes, in container order.
fn alpha_probe_fields(
    spec: &kbatch_api::k8s_openapi::api::core::v1::PodSpec,
) -> (Vec<Option<String>>, Vec<Option<String>>) {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let probes: Vec<_> = containers
        .flat_map(|c| [&c.liveness_probe, &c.readiness_probe, &c.startup_probe])
        .flatten()
        .collect();
    (
        probes
            .iter()
            .filter_map(|p| p.grpc.as_ref())
            .map(|g| g.mode.clone())
            .collect(),
        probes
            .iter()
            .filter_map(|p| p.http_get.as_ref())
            .map(|h| h.protocol.clone())
            .collect(),
    )
}

/// With their feature gates off (GRPCContainerProbeTLS, H2CContainerProbe), as by default,
/// upstream drops the alpha probe fields from new pods, Job and CronJob templates.
#[test]
fn alpha_probe_fields_are_dropped_on_create() {
    let spec = alpha_probe_spec(Some("TLS"), Some("HTTP2"));
    let none = (vec![None, None], vec![None]);

    let pod = prepared_pod(json!({"spec": spec.clone()}));
    assert_eq!(alpha_probe_fields(pod.spec.as_ref().unwrap()), none);

    let job = prepared_job(json!({"spec": {"template": {"spec": spec.clone()}}}));
    let template = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(alpha_probe_fields(template), none);

    let cj =
        prepared_cronjob(json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}}));
    let template = cj
        .spec
        .job_template
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(alpha_probe_fields(template), none);
}

/// On update, a field the stored object already uses is kept (each field on its own), one it
/// does not use is dropped.
#[test]
fn alpha_probe_fields_in_use_survive_an_update() {
    let update = |old: serde_json::Value, new: serde_json::Value| {
        let old: Pod = decode(patched(base_pod(), json!({"spec": old})));
        let mut new: Pod = decode(patched(base_pod(), json!({"spec": new})));
        strategy::pod_prepare_for_update(&mut new, &old);
        alpha_probe_fields(new.spec.as_ref().unwrap())
    };
    let both = alpha_probe_spec(Some("TLS"), Some("HTTP2"));
    assert_eq!(
        update(alpha_probe_spec(None, None), both.clone()),
        (vec![None, None], vec![None])
    );
    assert_eq!(
        update(both.clone(), both.clone()),
        (
            vec![Some("TLS".into()), Some("TLS".into())],
            vec![Some("HTTP2".into())]
        )
    );
    assert_eq!(
        update(alpha_probe_spec(Some("Plaintext"), None), both.clone()),
        (vec![Some("TLS".into()), Some("TLS".into())], vec![None])
    );

    let job_update = |old: serde_json::Value, new: serde_json::Value| {
        let old = prepared_job(json!({"spec": {"template": {"spec": old}}}));
        let mut new: Job = decode(patched(
            base_job(),
            json!({"spec": {"template": {"spec": new}}}),
        ));
        strategy::job_prepare_for_update(&mut new, &old);
        alpha_probe_fields(new.spec.as_ref().unwrap().template.spec.as_ref().unwrap())
    };
    // The stored Job never holds them (dropped on create), so an update drops them too.
    assert_eq!(
        job_update(both.clone(), both),
        (vec![None, None], vec![None])
    );
}
