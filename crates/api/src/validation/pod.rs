//! A solid subset of core `ValidatePodSpec`, `ValidatePodTemplateSpec`, `ValidatePodCreate`,
//! `ValidatePodUpdate` and `ValidatePodStatusUpdate`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, EnvVar, EphemeralContainer, Pod, PodSpec,
    PodTemplateSpec, ResourceRequirements, Toleration, Volume,
};

use super::{annotations, dns_label, dns_subdomain, labels, object_meta, object_meta_update};
use crate::field::{ErrorList, FieldError, Path, Value};
use crate::{names, quantity};

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const DNS_POLICIES: [&str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];
const TERMINATION_MESSAGE_POLICIES: [&str; 2] = ["File", "FallbackToLogsOnError"];
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const ENV_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
/// Field labels `ConvertDownwardAPIFieldLabel` knows for pods.
const DOWNWARD_API_LABELS: [&str; 14] = [
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
const RESOURCE_FIELD_REFS: [&str; 6] = [
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// `ValidatePodTemplateSpec`. Note the upstream path quirk: labels and annotations are
/// reported under `<path>.labels` / `<path>.annotations`, without `metadata`.
pub fn pod_template_spec(template: &PodTemplateSpec, path: &Path) -> ErrorList {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut errs = labels(meta.labels.as_ref(), &path.child("labels"));
    errs.extend(annotations(
        meta.annotations.as_ref(),
        &path.child("annotations"),
    ));
    let spec = template.spec.clone().unwrap_or_default();
    errs.extend(pod_spec(&spec, &path.child("spec")));
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            path.child("spec").child("ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errs
}

/// `ValidatePodSpec` (subset: containers, volumes, policies, names, scheduling basics).
pub fn pod_spec(spec: &PodSpec, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    let volumes = validate_volumes(
        spec.volumes.as_deref().unwrap_or(&[]),
        &path.child("volumes"),
        &mut errs,
    );
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("");
    let grace_period = spec.termination_grace_period_seconds;
    validate_init_containers(
        spec.init_containers.as_deref().unwrap_or(&[]),
        &spec.containers,
        &volumes,
        grace_period,
        &path.child("initContainers"),
        &mut errs,
    );
    validate_containers(
        &spec.containers,
        &volumes,
        grace_period,
        &path.child("containers"),
        &mut errs,
    );
    validate_ephemeral_containers(
        spec.ephemeral_containers.as_deref().unwrap_or(&[]),
        &spec.containers,
        spec.init_containers.as_deref().unwrap_or(&[]),
        &volumes,
        &path.child("ephemeralContainers"),
        &mut errs,
    );
    enum_field(
        restart_policy,
        &RESTART_POLICIES,
        &path.child("restartPolicy"),
        &mut errs,
    );
    enum_field(
        spec.dns_policy.as_deref().unwrap_or(""),
        &DNS_POLICIES,
        &path.child("dnsPolicy"),
        &mut errs,
    );
    errs.extend(labels(
        spec.node_selector.as_ref(),
        &path.child("nodeSelector"),
    ));
    if let Some(sa) = spec
        .service_account_name
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        dns_subdomain(sa, &path.child("serviceAccountName"), &mut errs);
    }
    if let Some(node) = spec.node_name.as_deref().filter(|s| !s.is_empty()) {
        dns_subdomain(node, &path.child("nodeName"), &mut errs);
    }
    if let Some(ads) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&ads)
    {
        errs.push(FieldError::invalid(
            path.child("activeDeadlineSeconds"),
            ads,
            names::in_range(1, i64::from(i32::MAX)),
        ));
    }
    if let Some(h) = spec.hostname.as_deref().filter(|s| !s.is_empty()) {
        dns_label(h, &path.child("hostname"), &mut errs);
    }
    if let Some(s) = spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
        dns_label(s, &path.child("subdomain"), &mut errs);
    }
    if let Some(t) = spec.tolerations.as_deref() {
        validate_tolerations(t, &path.child("tolerations"), &mut errs);
    }
    if let Some(pc) = spec
        .priority_class_name
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        dns_subdomain(pc, &path.child("priorityClassName"), &mut errs);
    }
    if let Some(policy) = spec.preemption_policy.as_deref() {
        super::other::preemption_policy(policy, &path.child("preemptionPolicy"), &mut errs);
    }
    if spec.termination_grace_period_seconds.is_none() {
        errs.push(FieldError::required(
            path.child("terminationGracePeriodSeconds"),
            "",
        ));
    }
    errs
}

fn enum_field(value: &str, allowed: &[&str], path: &Path, errs: &mut ErrorList) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !allowed.contains(&value) {
        errs.push(FieldError::not_supported(path, value, allowed));
    }
}

/// Every volume source key in a serialized `Volume` (everything but `name`).
pub(crate) fn volume_sources(vol: &Volume) -> Vec<String> {
    match serde_json::to_value(vol) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter(|(k, v)| k != "name" && !v.is_null())
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    }
}

/// `ValidateVolumes`: returns the names of the valid volumes.
fn validate_volumes(volumes: &[Volume], path: &Path, errs: &mut ErrorList) -> BTreeSet<String> {
    let mut names_ok = BTreeSet::new();
    for (i, vol) in volumes.iter().enumerate() {
        let p = path.index(i);
        let mut el = Vec::new();
        let sources = volume_sources(vol);
        match sources.as_slice() {
            [] => el.push(FieldError::required(&p, "must specify a volume type")),
            [_] => {}
            [_, rest @ ..] => {
                for s in rest {
                    el.push(FieldError::forbidden(
                        p.child(s),
                        "may not specify more than 1 volume type",
                    ));
                }
            }
        }
        let name_path = p.child("name");
        if vol.name.is_empty() {
            el.push(FieldError::required(&name_path, ""));
        } else {
            dns_label(&vol.name, &name_path, &mut el);
        }
        if names_ok.contains(&vol.name) {
            el.push(FieldError::duplicate(&name_path, &vol.name));
        }
        if el.is_empty() {
            names_ok.insert(vol.name.clone());
        } else {
            errs.extend(el);
        }
    }
    names_ok
}

fn validate_init_containers(
    inits: &[Container],
    regular: &[Container],
    volumes: &BTreeSet<String>,
    grace_period: Option<i64>,
    path: &Path,
    errs: &mut ErrorList,
) {
    let mut all: BTreeSet<&str> = regular.iter().map(|c| c.name.as_str()).collect();
    for (i, c) in inits.iter().enumerate() {
        let p = path.index(i);
        validate_container_common(c, volumes, &p, errs);
        let mut restartable = false;
        if let Some(rp) = c.restart_policy.as_deref() {
            if rp == "Always" {
                restartable = true;
            } else {
                errs.push(FieldError::not_supported(
                    p.child("restartPolicy"),
                    rp,
                    &["Always"],
                ));
            }
        }
        if all.contains(c.name.as_str()) {
            errs.push(FieldError::duplicate(p.child("name"), &c.name));
        } else if !c.name.is_empty() {
            all.insert(c.name.as_str());
        }
        if restartable {
            super::lifecycle::container_lifecycle(c, grace_period, &p, errs);
            super::probe::container_probes(c, &p, errs);
        } else {
            let msg = "may not be set for init containers without restartPolicy=Always";
            if c.lifecycle.is_some() {
                errs.push(FieldError::forbidden(p.child("lifecycle"), msg));
            }
            if c.liveness_probe.is_some() {
                errs.push(FieldError::forbidden(p.child("livenessProbe"), msg));
            }
            if c.readiness_probe.is_some() {
                errs.push(FieldError::forbidden(p.child("readinessProbe"), msg));
            }
            if c.startup_probe.is_some() {
                errs.push(FieldError::forbidden(p.child("startupProbe"), msg));
            }
        }
    }
}

fn validate_containers(
    containers: &[Container],
    volumes: &BTreeSet<String>,
    grace_period: Option<i64>,
    path: &Path,
    errs: &mut ErrorList,
) {
    if containers.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let mut all: BTreeSet<&str> = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let p = path.index(i);
        validate_container_common(c, volumes, &p, errs);
        if !all.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(p.child("name"), &c.name));
        }
        super::lifecycle::container_lifecycle(c, grace_period, &p, errs);
        super::probe::container_probes(c, &p, errs);
        if c.restart_policy.is_some() {
            errs.push(FieldError::forbidden(
                p.child("restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
    }
}

/// What `validateFieldAllowList` reports for an ephemeral container field that is set.
const EPHEMERAL_FORBIDDEN: &str = "cannot be set for an Ephemeral Container";

/// `validateEphemeralContainers`: each one validated as a container (and as a pod's, for its
/// image), its name unique across every container of the pod, its target an existing regular
/// or init container, and only the fields of upstream's allow-list set.
fn validate_ephemeral_containers(
    ephemeral: &[EphemeralContainer],
    containers: &[Container],
    inits: &[Container],
    volumes: &BTreeSet<String>,
    path: &Path,
    errs: &mut ErrorList,
) {
    if ephemeral.is_empty() {
        return;
    }
    let others: BTreeSet<&str> = containers
        .iter()
        .chain(inits)
        .map(|c| c.name.as_str())
        .collect();
    let mut all = others.clone();
    for (i, ec) in ephemeral.iter().enumerate() {
        let p = path.index(i);
        let (c, _) = crate::defaults::ephemeral_to_container(ec.clone());
        validate_container_common(&c, volumes, &p, errs);
        image_whitespace(&c, &p, errs);
        if !all.insert(ec.name.as_str()) {
            errs.push(FieldError::duplicate(p.child("name"), &ec.name));
        }
        if let Some(target) = ec
            .target_container_name
            .as_deref()
            .filter(|t| !t.is_empty())
            && !others.contains(target)
        {
            errs.push(FieldError::not_found(
                p.child("targetContainerName"),
                target,
            ));
        }
        for field in ephemeral_disallowed_fields(ec) {
            errs.push(FieldError::forbidden(p.child(field), EPHEMERAL_FORBIDDEN));
        }
        // Subpath mounts are bind mounts that outlive the container until the pod exits.
        for (j, vm) in ec.volume_mounts.iter().flatten().enumerate() {
            let vp = p.child("volumeMounts").index(j);
            if vm.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
                errs.push(FieldError::forbidden(
                    vp.child("subPath"),
                    EPHEMERAL_FORBIDDEN,
                ));
            }
            if vm.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                errs.push(FieldError::forbidden(
                    vp.child("subPathExpr"),
                    EPHEMERAL_FORBIDDEN,
                ));
            }
        }
    }
}

/// The fields outside upstream's `allowedEphemeralContainerFields` that hold something other
/// than their Go zero value, in the Go struct's field order. (`resources: {}` is the zero
/// struct; an empty list sent as `[]` decodes to a non-nil slice in Go, so it counts as set.)
fn ephemeral_disallowed_fields(ec: &EphemeralContainer) -> Vec<&'static str> {
    let resources_set = ec
        .resources
        .as_ref()
        .is_some_and(|r| r.limits.is_some() || r.requests.is_some() || r.claims.is_some());
    [
        ("ports", ec.ports.is_some()),
        ("resources", resources_set),
        ("resizePolicy", ec.resize_policy.is_some()),
        ("restartPolicy", ec.restart_policy.is_some()),
        ("restartPolicyRules", ec.restart_policy_rules.is_some()),
        ("livenessProbe", ec.liveness_probe.is_some()),
        ("readinessProbe", ec.readiness_probe.is_some()),
        ("startupProbe", ec.startup_probe.is_some()),
        ("lifecycle", ec.lifecycle.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(name, _)| name)
    .collect()
}

/// `validateContainerOnlyForPod`: a pod's container image may not have surrounding spaces.
fn image_whitespace(c: &Container, p: &Path, errs: &mut ErrorList) {
    let image = c.image.as_deref().unwrap_or("");
    if image.trim() != image {
        errs.push(FieldError::invalid(
            p.child("image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
}

fn validate_container_common(
    c: &Container,
    volumes: &BTreeSet<String>,
    p: &Path,
    errs: &mut ErrorList,
) {
    if c.name.is_empty() {
        errs.push(FieldError::required(p.child("name"), ""));
    } else {
        dns_label(&c.name, &p.child("name"), errs);
    }
    if c.image.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(p.child("image"), ""));
    }
    enum_field(
        c.termination_message_policy.as_deref().unwrap_or(""),
        &TERMINATION_MESSAGE_POLICIES,
        &p.child("terminationMessagePolicy"),
        errs,
    );
    validate_ports(c.ports.as_deref().unwrap_or(&[]), &p.child("ports"), errs);
    validate_env(c.env.as_deref().unwrap_or(&[]), &p.child("env"), errs);
    validate_volume_mounts(c, volumes, &p.child("volumeMounts"), errs);
    enum_field(
        c.image_pull_policy.as_deref().unwrap_or(""),
        &PULL_POLICIES,
        &p.child("imagePullPolicy"),
        errs,
    );
    if let Some(r) = &c.resources {
        validate_resources(r, &p.child("resources"), errs);
    }
}

fn validate_ports(ports: &[ContainerPort], path: &Path, errs: &mut ErrorList) {
    let mut seen = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = path.index(i);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = names::port_name(name);
            if !msgs.is_empty() {
                for m in msgs {
                    errs.push(FieldError::invalid(p.child("name"), name, m));
                }
            } else if !seen.insert(name) {
                errs.push(FieldError::duplicate(p.child("name"), name));
            }
        }
        if port.container_port == 0 {
            errs.push(FieldError::required(p.child("containerPort"), ""));
        } else {
            for m in names::port_num(port.container_port) {
                errs.push(FieldError::invalid(
                    p.child("containerPort"),
                    port.container_port,
                    m,
                ));
            }
        }
        if let Some(hp) = port.host_port.filter(|hp| *hp != 0) {
            for m in names::port_num(hp) {
                errs.push(FieldError::invalid(p.child("hostPort"), hp, m));
            }
        }
        enum_field(
            port.protocol.as_deref().unwrap_or(""),
            &PROTOCOLS,
            &p.child("protocol"),
            errs,
        );
    }
}

/// `IsRelaxedEnvVarName` (the relaxed rule is GA): printable ASCII except space and `=`.
fn env_var_name_errors(name: &str) -> Vec<String> {
    if name
        .bytes()
        .all(|c| (0x21..=0x7e).contains(&c) && c != b'=')
    {
        Vec::new()
    } else {
        vec!["a valid environment variable name must consist only of printable ASCII characters other than '='".to_string()]
    }
}

fn validate_env(env: &[EnvVar], path: &Path, errs: &mut ErrorList) {
    for (i, ev) in env.iter().enumerate() {
        let p = path.index(i);
        if ev.name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        } else {
            for m in env_var_name_errors(&ev.name) {
                errs.push(FieldError::invalid(p.child("name"), &ev.name, m));
            }
        }
        let Some(from) = &ev.value_from else {
            continue;
        };
        let vp = p.child("valueFrom");
        let mut sources = 0;
        if let Some(fr) = &from.field_ref {
            sources += 1;
            let fp = vp.child("fieldRef");
            let api_version = fr.api_version.as_deref().unwrap_or("");
            if api_version.is_empty() {
                errs.push(FieldError::required(fp.child("apiVersion"), ""));
            } else if fr.field_path.is_empty() {
                errs.push(FieldError::required(fp.child("fieldPath"), ""));
            } else if api_version != "v1" {
                errs.push(FieldError::invalid(
                    fp.child("fieldPath"),
                    &fr.field_path,
                    format!("error converting fieldPath: unsupported pod version: {api_version}"),
                ));
            } else {
                validate_env_field_path(&fr.field_path, &fp, errs);
            }
        }
        if let Some(rr) = &from.resource_field_ref {
            sources += 1;
            let rp = vp.child("resourceFieldRef");
            if rr.resource.is_empty() {
                errs.push(FieldError::required(rp.child("resource"), ""));
            } else if !RESOURCE_FIELD_REFS.contains(&rr.resource.as_str())
                && !rr.resource.starts_with("limits.hugepages-")
                && !rr.resource.starts_with("requests.hugepages-")
            {
                errs.push(FieldError::not_supported(
                    rp.child("resource"),
                    &rr.resource,
                    &RESOURCE_FIELD_REFS,
                ));
            }
        }
        if let Some(cm) = &from.config_map_key_ref {
            sources += 1;
            key_ref(&cm.name, &cm.key, &vp.child("configMapKeyRef"), errs);
        }
        if let Some(s) = &from.secret_key_ref {
            sources += 1;
            key_ref(&s.name, &s.key, &vp.child("secretKeyRef"), errs);
        }
        if from.file_key_ref.is_some() {
            sources += 1;
        }
        let value_set = ev.value.as_deref().is_some_and(|v| !v.is_empty());
        if sources == 0 {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if value_set {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not be specified when `value` is not empty",
            ));
        } else if sources > 1 {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
}

fn validate_env_field_path(field_path: &str, fp: &Path, errs: &mut ErrorList) {
    // `metadata.labels['k']` / `metadata.annotations['k']` subscripts.
    if let Some(open) = field_path.find("['")
        && field_path.ends_with("']")
        && open + 2 <= field_path.len() - 2
    {
        let base = &field_path[..open];
        let sub = &field_path[open + 2..field_path.len() - 2];
        match base {
            "metadata.annotations" => {
                super::qualified_name(&sub.to_lowercase(), fp, errs);
            }
            "metadata.labels" => super::qualified_name(sub, fp, errs),
            _ => errs.push(FieldError::invalid(
                fp.child("fieldPath"),
                field_path,
                format!("error converting fieldPath: field label not supported: {field_path}"),
            )),
        }
        return;
    }
    if !DOWNWARD_API_LABELS.contains(&field_path) {
        errs.push(FieldError::invalid(
            fp.child("fieldPath"),
            field_path,
            format!("error converting fieldPath: field label not supported: {field_path}"),
        ));
    } else if !ENV_FIELD_PATHS.contains(&field_path) {
        errs.push(FieldError::not_supported(
            fp.child("fieldPath"),
            field_path,
            &ENV_FIELD_PATHS,
        ));
    }
}

fn key_ref(name: &str, key: &str, p: &Path, errs: &mut ErrorList) {
    dns_subdomain(name, &p.child("name"), errs);
    if key.is_empty() {
        errs.push(FieldError::required(p.child("key"), ""));
    } else {
        let mut msgs = Vec::new();
        if key.len() > 253 {
            msgs.push("must be no more than 253 characters".to_string());
        }
        if !key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
        {
            msgs.push(names::regex_error(
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                "[-._a-zA-Z0-9]+",
                &["key.name", "KEY_NAME", "key-name"],
            ));
        }
        if key == "." {
            msgs.push("must not be '.'".to_string());
        } else if key == ".." {
            msgs.push("must not be '..'".to_string());
        } else if key.starts_with("..") {
            msgs.push("must not start with '..'".to_string());
        }
        for m in msgs {
            errs.push(FieldError::invalid(p.child("key"), key, m));
        }
    }
}

fn validate_volume_mounts(
    c: &Container,
    volumes: &BTreeSet<String>,
    path: &Path,
    errs: &mut ErrorList,
) {
    let mut mount_points = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let p = path.index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        }
        if !volumes.contains(&m.name) {
            errs.push(FieldError::not_found(p.child("name"), &m.name));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(p.child("mountPath"), ""));
        }
        if !mount_points.insert(m.mount_path.as_str()) {
            errs.push(FieldError::invalid(
                p.child("mountPath"),
                &m.mount_path,
                "must be unique",
            ));
        }
        let sub_path = m.sub_path.as_deref().unwrap_or("");
        if let Some(expr) = m.sub_path_expr.as_deref().filter(|s| !s.is_empty())
            && !sub_path.is_empty()
        {
            errs.push(FieldError::invalid(
                p.child("subPathExpr"),
                expr,
                "subPathExpr and subPath are mutually exclusive",
            ));
        }
    }
}

fn is_native_resource(name: &str) -> bool {
    match name.split_once('/') {
        None => true,
        Some((prefix, _)) => prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io"),
    }
}

fn overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !name.starts_with("hugepages-")
}

fn validate_resource_name(name: &str, p: &Path, errs: &mut ErrorList) {
    let before = errs.len();
    super::qualified_name(name, p, errs);
    if errs.len() > before {
        return;
    }
    if !name.contains('/') {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage")
            && !name.starts_with("hugepages-")
        {
            errs.push(FieldError::invalid(
                p,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && name.starts_with("requests.") {
        errs.push(FieldError::invalid(
            p,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

fn validate_resources(r: &ResourceRequirements, path: &Path, errs: &mut ErrorList) {
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let empty = BTreeMap::new();
    let limits = r.limits.as_ref().unwrap_or(&empty);
    let mut parsed_limits = BTreeMap::new();
    for (name, q) in limits {
        let p = lim_path.key(name);
        validate_resource_name(name, &p, errs);
        if let Some(v) = quantity_value(&q.0, &p, errs) {
            parsed_limits.insert(name.as_str(), v);
        }
    }
    for (name, q) in r.requests.iter().flatten() {
        let p = req_path.key(name);
        validate_resource_name(name, &p, errs);
        let Some(v) = quantity_value(&q.0, &p, errs) else {
            continue;
        };
        if let Some(lim) = parsed_limits.get(name.as_str()) {
            let lim_str = limits.get(name).map(|l| l.0.as_str()).unwrap_or("");
            if v != *lim && !overcommit_allowed(name) {
                errs.push(FieldError::invalid(
                    &req_path,
                    &q.0,
                    format!("must be equal to {name} limit of {lim_str}"),
                ));
            } else if v > *lim {
                errs.push(FieldError::invalid(
                    &req_path,
                    &q.0,
                    format!("must be less than or equal to {name} limit of {lim_str}"),
                ));
            }
        } else if !limits.contains_key(name) && !overcommit_allowed(name) {
            errs.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            ));
        }
    }
}

fn quantity_value(s: &str, p: &Path, errs: &mut ErrorList) -> Option<f64> {
    match quantity::parse(s) {
        Ok(q) if q.is_negative() => {
            errs.push(FieldError::invalid(p, s, super::NEGATIVE_MSG));
            None
        }
        Ok(q) => Some(q.value),
        Err(e) => {
            errs.push(FieldError::invalid(p, s, e.to_string()));
            None
        }
    }
}

fn validate_tolerations(tolerations: &[Toleration], path: &Path, errs: &mut ErrorList) {
    for (i, t) in tolerations.iter().enumerate() {
        let p = path.index(i);
        let key = t.key.as_deref().unwrap_or("");
        let op = t.operator.as_deref().unwrap_or("");
        let effect = t.effect.as_deref().unwrap_or("");
        let value = t.value.as_deref().unwrap_or("");
        if !key.is_empty() {
            super::qualified_name(key, &p.child("key"), errs);
        }
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                p.child("operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                p.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let msgs = names::label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        p.child("operator"),
                        value,
                        msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        p.child("operator"),
                        Value::json(t),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                p.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            errs.push(FieldError::not_supported(
                p.child("effect"),
                effect,
                &TAINT_EFFECTS,
            ));
        }
    }
}

/// `ValidatePodCreate`: metadata (DNS-subdomain name), spec, and no ephemeral containers.
pub fn pod_create(pod: &Pod) -> ErrorList {
    let mut errs = object_meta(&pod.metadata, true, names::name_is_dns_subdomain);
    let spec = pod.spec.clone().unwrap_or_default();
    let sp = Path::new("spec");
    errs.extend(pod_spec(&spec, &sp));
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            sp.child("ephemeralContainers"),
            "cannot be set on create",
        ));
    }
    errs
}

const UPDATABLE_POD_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodUpdate`: only images, activeDeadlineSeconds (shortened), tolerations
/// (additions), scheduling gates (removals) and a negative grace period set to 1 may change.
pub fn pod_update(new: &Pod, old: &Pod) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    let sp = Path::new("spec");
    let new_spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    errs.extend(pod_spec(&new_spec, &sp));

    if new_spec.containers.len() != old_spec.containers.len() {
        errs.push(FieldError::forbidden(
            sp.child("containers"),
            "pod updates may not add or remove containers",
        ));
        return errs;
    }
    let new_inits = new_spec.init_containers.as_deref().unwrap_or(&[]);
    let old_inits = old_spec.init_containers.as_deref().unwrap_or(&[]);
    if new_inits.len() != old_inits.len() {
        errs.push(FieldError::forbidden(
            sp.child("initContainers"),
            "pod updates may not add or remove containers",
        ));
        return errs;
    }
    let ads = sp.child("activeDeadlineSeconds");
    match (
        new_spec.active_deadline_seconds,
        old_spec.active_deadline_seconds,
    ) {
        (Some(n), _) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            errs.push(FieldError::invalid(
                &ads,
                n,
                names::in_range(0, i64::from(i32::MAX)),
            ));
            return errs;
        }
        (Some(n), Some(o)) if o < n => {
            errs.push(FieldError::invalid(
                &ads,
                n,
                "must be less than or equal to previous value",
            ));
            return errs;
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            &ads,
            Value("null".to_string()),
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }

    // Apply every allowed mutation to a copy of the old spec; anything left differs illegally.
    let mut munged = old_spec.clone();
    for (m, n) in munged.containers.iter_mut().zip(&new_spec.containers) {
        m.image = n.image.clone();
    }
    if let Some(inits) = munged.init_containers.as_mut() {
        for (m, n) in inits.iter_mut().zip(new_inits) {
            m.image = n.image.clone();
        }
    }
    munged.active_deadline_seconds = new_spec.active_deadline_seconds;
    if old_spec
        .termination_grace_period_seconds
        .is_some_and(|g| g < 0)
        && new_spec.termination_grace_period_seconds == Some(1)
    {
        munged.termination_grace_period_seconds = Some(1);
    }
    let old_tols = old_spec.tolerations.as_deref().unwrap_or(&[]);
    let new_tols = new_spec.tolerations.as_deref().unwrap_or(&[]);
    let tol_errs = toleration_update_errors(new_tols, old_tols, &sp.child("tolerations"));
    if tol_errs.is_empty() {
        munged.tolerations = new_spec.tolerations.clone();
    } else {
        errs.extend(tol_errs);
    }
    let old_gates = old_spec.scheduling_gates.as_deref().unwrap_or(&[]);
    let mut gates_ok = true;
    for g in new_spec.scheduling_gates.iter().flatten() {
        if !old_gates.iter().any(|o| o.name == g.name) {
            gates_ok = false;
            errs.push(FieldError::forbidden(
                sp.child("schedulingGates"),
                format!(
                    "only deletion is allowed, but found new scheduling gate '{}'",
                    g.name
                ),
            ));
        }
    }
    if gates_ok {
        munged.scheduling_gates = new_spec.scheduling_gates.clone();
    }
    if munged != new_spec {
        errs.push(FieldError::forbidden(
            &sp,
            format!(
                "pod updates may not change fields other than {UPDATABLE_POD_FIELDS}\n{}",
                spec_diff(&munged, &new_spec)
            ),
        ));
    }
    errs
}

/// The annotation of a mirror pod, the API server's copy of a static pod.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `ValidatePodEphemeralContainersUpdate`, after the ephemeral containers strategy kept only
/// `spec.ephemeralContainers` of the new pod: the pod stays valid, static pods take none, and
/// the ephemeral containers already there are neither removed nor changed (matched by name,
/// since a patch need not keep their order).
pub fn pod_ephemeral_containers_update(new: &Pod, old: &Pod) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    let new_spec = new.spec.clone().unwrap_or_default();
    errs.extend(pod_spec(&new_spec, &Path::new("spec")));
    if old
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
    {
        // Upstream replaces every other error with this one, on `field.NewPath("")`, which
        // Go renders as `[]`.
        return vec![FieldError::forbidden(
            "[]",
            "static pods do not support ephemeral containers",
        )];
    }
    let path = Path::new("spec").child("ephemeralContainers");
    let new_ecs = new_spec.ephemeral_containers.as_deref().unwrap_or(&[]);
    let old_spec = old.spec.as_ref();
    for o in old_spec
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
    {
        // Go's index keeps the last of equal names.
        match new_ecs.iter().rev().find(|n| n.name == o.name) {
            None => errs.push(FieldError::forbidden(
                &path,
                format!(
                    "existing ephemeral containers {} may not be removed\n",
                    crate::field::quote(&o.name)
                ),
            )),
            Some(n) if n != o => errs.push(FieldError::forbidden(
                &path,
                format!(
                    "existing ephemeral containers {} may not be changed\n{}",
                    crate::field::quote(&o.name),
                    struct_diff("core.EphemeralContainer", o, n)
                ),
            )),
            Some(_) => {}
        }
    }
    errs
}

/// A short diff of the top-level spec fields that differ (upstream prints a full `cmp.Diff`).
fn spec_diff(old: &PodSpec, new: &PodSpec) -> String {
    struct_diff("core.PodSpec", old, new)
}

/// The top-level fields of two values of Go type `go_type` that differ, one `-`/`+` pair each.
fn struct_diff<T: serde::Serialize>(go_type: &str, old: &T, new: &T) -> String {
    let (Ok(serde_json::Value::Object(o)), Ok(serde_json::Value::Object(n))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return String::new();
    };
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    let mut out = format!("  {go_type}{{\n");
    for k in keys {
        let (a, b) = (o.get(k), n.get(k));
        if a != b {
            let show = |v: Option<&serde_json::Value>| {
                v.map(|v| v.to_string()).unwrap_or_else(|| "null".into())
            };
            out.push_str(&format!("-\t{k}: {},\n+\t{k}: {},\n", show(a), show(b)));
        }
    }
    out.push_str("  }\n");
    out
}

/// `ValidateTolerationsInPodUpdate`: existing tolerations stay; only `tolerationSeconds` of
/// NoExecute tolerations may be lowered, and new ones may be added.
fn toleration_update_errors(new: &[Toleration], old: &[Toleration], path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    for o in old {
        let found = new.iter().any(|n| {
            let mut a = o.clone();
            let mut b = n.clone();
            a.toleration_seconds = None;
            b.toleration_seconds = None;
            a == b
                && match (o.toleration_seconds, n.toleration_seconds) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(x), Some(y)) => y <= x,
                }
        });
        if !found {
            errs.push(FieldError::forbidden(
                path,
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            return errs;
        }
    }
    errs
}

/// `ValidatePodStatusUpdate` (subset): metadata, custom condition types, nodeName, and the
/// terminated-to-running container state rule.
pub fn pod_status_update(new: &Pod, old: &Pod) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    let status = new.status.clone().unwrap_or_default();
    let old_status = old.status.clone().unwrap_or_default();
    for (i, c) in status.conditions.iter().flatten().enumerate() {
        if matches!(c.type_.as_str(), "PodScheduled" | "Ready" | "Initialized") {
            continue;
        }
        // Upstream reports these under `metadata.conditions[i].Type`.
        super::qualified_name(
            &c.type_,
            &Path::new("metadata")
                .child("conditions")
                .index(i)
                .child("Type"),
            &mut errs,
        );
    }
    let sp = Path::new("status");
    let new_spec = new.spec.clone().unwrap_or_default();
    let old_spec = old.spec.clone().unwrap_or_default();
    if new_spec.node_name != old_spec.node_name {
        errs.push(FieldError::forbidden(
            sp.child("nodeName"),
            "may not be changed directly",
        ));
    }
    if let Some(nn) = status
        .nominated_node_name
        .as_deref()
        .filter(|s| !s.is_empty())
        && status.nominated_node_name != old_status.nominated_node_name
    {
        dns_subdomain(nn, &sp.child("nominatedNodeName"), &mut errs);
    }
    let restart = old_spec.restart_policy.as_deref().unwrap_or("");
    state_transition(
        status.container_statuses.as_deref().unwrap_or(&[]),
        old_status.container_statuses.as_deref().unwrap_or(&[]),
        restart,
        |_| false,
        &sp.child("containerStatuses"),
        &mut errs,
    );
    let sidecars: BTreeSet<&str> = old_spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    state_transition(
        status.init_container_statuses.as_deref().unwrap_or(&[]),
        old_status.init_container_statuses.as_deref().unwrap_or(&[]),
        restart,
        |name| sidecars.contains(name),
        &sp.child("initContainerStatuses"),
        &mut errs,
    );
    state_transition(
        status
            .ephemeral_container_statuses
            .as_deref()
            .unwrap_or(&[]),
        old_status
            .ephemeral_container_statuses
            .as_deref()
            .unwrap_or(&[]),
        "Never",
        |_| false,
        &sp.child("ephemeralContainerStatuses"),
        &mut errs,
    );
    errs
}

fn terminated(s: &ContainerStatus) -> Option<i32> {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .map(|t| t.exit_code)
}

fn state_transition(
    new: &[ContainerStatus],
    old: &[ContainerStatus],
    restart_policy: &str,
    exempt: impl Fn(&str) -> bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    if restart_policy == "Always" {
        return;
    }
    for (i, o) in old.iter().enumerate() {
        let Some(code) = terminated(o) else {
            continue;
        };
        if (code != 0 && restart_policy == "OnFailure") || exempt(&o.name) {
            continue;
        }
        for n in new {
            if n.name == o.name && terminated(n).is_none() {
                errs.push(FieldError::forbidden(
                    path.index(i).child("state"),
                    "may not be transitioned to non-terminated state",
                ));
            }
        }
    }
}
