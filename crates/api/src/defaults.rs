//! Versioned defaulting (`pkg/apis/batch/v1/defaults.go`, `pkg/apis/core/v1/defaults.go`),
//! run on every decode, storage reads included.

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EphemeralContainer, HTTPGetAction, Namespace, Pod, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, Secret, Volume,
};

/// `SetDefaults_Job` plus the pod-template defaults.
pub fn job(job: &mut Job) {
    let spec = job.spec.get_or_insert_with(Default::default);
    job_spec(spec);
    // Job labels default to the template labels when the job has none.
    let tlabels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    if let Some(l) = tlabels
        && job.metadata.labels.as_ref().is_none_or(|j| j.is_empty())
    {
        job.metadata.labels = Some(l);
    }
    pod_template(&mut spec.template);
}

fn job_spec(spec: &mut JobSpec) {
    if spec.completions.is_none() && spec.parallelism.is_none() {
        spec.completions = Some(1);
        spec.parallelism = Some(1);
    }
    if spec.parallelism.is_none() {
        spec.parallelism = Some(1);
    }
    if spec.backoff_limit.is_none() {
        spec.backoff_limit = Some(if spec.backoff_limit_per_index.is_some() {
            i32::MAX
        } else {
            6
        });
    }
    if spec.completion_mode.is_none() {
        spec.completion_mode = Some("NonIndexed".to_string());
    }
    if spec.suspend.is_none() {
        spec.suspend = Some(false);
    }
    if let Some(pfp) = spec.pod_failure_policy.as_mut() {
        for rule in pfp.rules.iter_mut() {
            for pat in rule.on_pod_conditions.iter_mut().flatten() {
                if pat.status.as_deref().unwrap_or("").is_empty() {
                    pat.status = Some("True".to_string());
                }
            }
        }
    }
    if spec.pod_replacement_policy.is_none() {
        spec.pod_replacement_policy = Some(
            if spec.pod_failure_policy.is_some() {
                "Failed"
            } else {
                "TerminatingOrFailed"
            }
            .to_string(),
        );
    }
    if spec.manual_selector.is_none() {
        spec.manual_selector = Some(false);
    }
}

/// `SetDefaults_CronJob`; the job template gets only the pod-template defaults.
pub fn cronjob(cj: &mut CronJob) {
    let spec = &mut cj.spec;
    if spec.concurrency_policy.as_deref().unwrap_or("").is_empty() {
        spec.concurrency_policy = Some("Allow".to_string());
    }
    if spec.suspend.is_none() {
        spec.suspend = Some(false);
    }
    if spec.successful_jobs_history_limit.is_none() {
        spec.successful_jobs_history_limit = Some(3);
    }
    if spec.failed_jobs_history_limit.is_none() {
        spec.failed_jobs_history_limit = Some(1);
    }
    // Go's job template spec is a value, so its pod template is always defaulted.
    let js = spec.job_template.spec.get_or_insert_with(Default::default);
    pod_template(&mut js.template);
}

/// Pod-template defaults (the pod spec and its containers).
pub fn pod_template(t: &mut PodTemplateSpec) {
    pod_spec(t.spec.get_or_insert_with(Default::default));
}

/// `SetDefaults_Pod` plus the pod spec defaults.
pub fn pod(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    pod_spec(spec);
    if spec.enable_service_links.is_none() {
        spec.enable_service_links = Some(true);
    }
    // Requests default to limits where missing (pods only, not templates).
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        let Some(res) = c.resources.as_mut() else {
            continue;
        };
        let Some(limits) = res.limits.clone() else {
            continue;
        };
        let requests = res.requests.get_or_insert_with(Default::default);
        for (k, v) in limits {
            requests.entry(k).or_insert(v);
        }
    }
}

/// `SetDefaults_PodSpec` and the per-container, port, probe and volume defaults.
pub fn pod_spec(spec: &mut PodSpec) {
    if spec.dns_policy.as_deref().unwrap_or("").is_empty() {
        spec.dns_policy = Some("ClusterFirst".to_string());
    }
    if spec.restart_policy.as_deref().unwrap_or("").is_empty() {
        spec.restart_policy = Some("Always".to_string());
    }
    if spec.security_context.is_none() {
        spec.security_context = Some(PodSecurityContext::default());
    }
    if spec.termination_grace_period_seconds.is_none() {
        spec.termination_grace_period_seconds = Some(30);
    }
    if spec.scheduler_name.as_deref().unwrap_or("").is_empty() {
        spec.scheduler_name = Some("default-scheduler".to_string());
    }
    // v1's deprecated alias `serviceAccount`: read when `serviceAccountName` is missing, and
    // always given back as the name (the v1 conversion of PodSpec).
    if spec
        .service_account_name
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        spec.service_account_name = spec.service_account.take().filter(|s| !s.is_empty());
    }
    spec.service_account = spec.service_account_name.clone();
    let host_network = spec.host_network == Some(true);
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        container(c);
        if host_network {
            for p in c.ports.iter_mut().flatten() {
                if p.host_port.unwrap_or(0) == 0 {
                    p.host_port = Some(p.container_port);
                }
            }
        }
    }
    // `SetDefaults_EphemeralContainer` defaults the common part as a container's; the
    // host-network port and request defaults stay with the other container kinds, as upstream.
    for ec in spec.ephemeral_containers.iter_mut().flatten() {
        let (mut c, target) = ephemeral_to_container(std::mem::take(ec));
        container(&mut c);
        *ec = container_to_ephemeral(c, target);
    }
    for v in spec.volumes.iter_mut().flatten() {
        volume(v);
    }
}

/// An ephemeral container's `EphemeralContainerCommon` as the `Container` it copies (Go
/// converts one to the other in place), with its `targetContainerName` beside it.
pub fn ephemeral_to_container(ec: EphemeralContainer) -> (Container, Option<String>) {
    let c = Container {
        args: ec.args,
        command: ec.command,
        env: ec.env,
        env_from: ec.env_from,
        image: ec.image,
        image_pull_policy: ec.image_pull_policy,
        lifecycle: ec.lifecycle,
        liveness_probe: ec.liveness_probe,
        name: ec.name,
        ports: ec.ports,
        readiness_probe: ec.readiness_probe,
        resize_policy: ec.resize_policy,
        resources: ec.resources,
        restart_policy: ec.restart_policy,
        restart_policy_rules: ec.restart_policy_rules,
        security_context: ec.security_context,
        startup_probe: ec.startup_probe,
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        termination_message_path: ec.termination_message_path,
        termination_message_policy: ec.termination_message_policy,
        tty: ec.tty,
        volume_devices: ec.volume_devices,
        volume_mounts: ec.volume_mounts,
        working_dir: ec.working_dir,
    };
    (c, ec.target_container_name)
}

/// The inverse of `ephemeral_to_container`.
pub(crate) fn container_to_ephemeral(c: Container, target: Option<String>) -> EphemeralContainer {
    EphemeralContainer {
        args: c.args,
        command: c.command,
        env: c.env,
        env_from: c.env_from,
        image: c.image,
        image_pull_policy: c.image_pull_policy,
        lifecycle: c.lifecycle,
        liveness_probe: c.liveness_probe,
        name: c.name,
        ports: c.ports,
        readiness_probe: c.readiness_probe,
        resize_policy: c.resize_policy,
        resources: c.resources,
        restart_policy: c.restart_policy,
        restart_policy_rules: c.restart_policy_rules,
        security_context: c.security_context,
        startup_probe: c.startup_probe,
        stdin: c.stdin,
        stdin_once: c.stdin_once,
        target_container_name: target,
        termination_message_path: c.termination_message_path,
        termination_message_policy: c.termination_message_policy,
        tty: c.tty,
        volume_devices: c.volume_devices,
        volume_mounts: c.volume_mounts,
        working_dir: c.working_dir,
    }
}

fn volume(v: &mut Volume) {
    if crate::validation::volume_sources(v).is_empty() {
        v.empty_dir = Some(Default::default());
    }
}

/// `SetDefaults_Container`, ports, probes, lifecycle hooks and downward-API field selectors.
pub fn container(c: &mut Container) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        let policy = if image_tag_is_latest(c.image.as_deref().unwrap_or("")) {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.image_pull_policy = Some(policy.to_string());
    }
    if c.termination_message_path
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        c.termination_message_path = Some("/dev/termination-log".to_string());
    }
    if c.termination_message_policy
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        c.termination_message_policy = Some("File".to_string());
    }
    for p in c.ports.iter_mut().flatten() {
        if p.protocol.as_deref().unwrap_or("").is_empty() {
            p.protocol = Some("TCP".to_string());
        }
    }
    for probe in [
        c.liveness_probe.as_mut(),
        c.readiness_probe.as_mut(),
        c.startup_probe.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        probe_defaults(probe);
    }
    if let Some(l) = c.lifecycle.as_mut() {
        for h in [l.post_start.as_mut(), l.pre_stop.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(a) = h.http_get.as_mut() {
                http_get_defaults(a);
            }
        }
    }
    for ev in c.env.iter_mut().flatten() {
        if let Some(fr) = ev.value_from.as_mut().and_then(|f| f.field_ref.as_mut())
            && fr.api_version.as_deref().unwrap_or("").is_empty()
        {
            fr.api_version = Some("v1".to_string());
        }
    }
}

fn probe_defaults(p: &mut Probe) {
    for (field, default) in [
        (&mut p.timeout_seconds, 1),
        (&mut p.period_seconds, 10),
        (&mut p.success_threshold, 1),
        (&mut p.failure_threshold, 3),
    ] {
        if field.unwrap_or(0) == 0 {
            *field = Some(default);
        }
    }
    if let Some(h) = p.http_get.as_mut() {
        http_get_defaults(h);
    }
}

/// `SetDefaults_HTTPGetAction`, for probes and lifecycle hooks alike.
fn http_get_defaults(h: &mut HTTPGetAction) {
    if h.path.as_deref().unwrap_or("").is_empty() {
        h.path = Some("/".to_string());
    }
    if h.scheme.as_deref().unwrap_or("").is_empty() {
        h.scheme = Some("HTTP".to_string());
    }
}

/// Whether the image reference has the `latest` tag, explicitly or by having neither a tag
/// nor a digest (what `parsers.ParseImageName` yields).
pub fn image_tag_is_latest(image: &str) -> bool {
    if image.is_empty() || image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// `SetDefaults_Namespace`: the immutable `kubernetes.io/metadata.name` label.
pub fn namespace(ns: &mut Namespace) {
    if let Some(name) = ns.metadata.name.clone().filter(|n| !n.is_empty()) {
        ns.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(crate::keys::NAMESPACE_NAME_LABEL.to_string(), name);
    }
}

/// `SetDefaults_Secret` (type `Opaque`), then what upstream's v1 → internal conversion does
/// to every decoded Secret: `stringData` is merged into `data`, its keys overwriting, and
/// dropped (it is write-only: never stored nor returned).
pub fn secret(secret: &mut Secret) {
    if secret.type_.as_deref().unwrap_or("").is_empty() {
        secret.type_ = Some(crate::keys::SECRET_TYPE_OPAQUE.to_string());
    }
    if let Some(string_data) = secret.string_data.take()
        && !string_data.is_empty()
    {
        let data = secret.data.get_or_insert_with(Default::default);
        for (k, v) in string_data {
            data.insert(k, ByteString(v.into_bytes()));
        }
    }
}

/// `SetDefaults_PriorityClass`: preemptionPolicy PreemptLowerPriority.
pub fn priority_class(pc: &mut k8s_openapi::api::scheduling::v1::PriorityClass) {
    if pc.preemption_policy.is_none() {
        pc.preemption_policy = Some(crate::priority::PREEMPT_LOWER_PRIORITY.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags() {
        for (img, latest) in [
            ("busybox", true),
            ("busybox:latest", true),
            ("busybox:1.36", false),
            ("localhost:5000/busybox", true),
            ("localhost:5000/busybox:v1", false),
            ("busybox@sha256:abc", false),
            ("", false),
        ] {
            assert_eq!(image_tag_is_latest(img), latest, "{img}");
        }
    }
}
