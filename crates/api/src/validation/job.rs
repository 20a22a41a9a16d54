//! batch/v1 Job validation (`pkg/apis/batch/validation`, `pkg/registry/batch/job/strategy.go`),
//! with every Job feature gate on, as in the newest releases.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::indexes::{overlap_error, validate_indexes_format};
use super::{
    has_label, immutable, label_selector, nonnegative, object_meta, object_meta_update,
    pod_template_spec, qualified_name, selector_matches,
};
use crate::field::{ErrorList, FieldError, Path, Value};
use crate::keys;
use crate::names;

const MAX_PARALLELISM_INDEXED: i32 = 100_000;
const MAX_FAILED_INDEXES_INDEXED: i32 = 100_000;
const COMPLETIONS_SOFT_LIMIT: i32 = 100_000;
const PARALLELISM_LIMIT_HIGH_COMPLETIONS: i32 = 10_000;
const MAX_FAILED_INDEXES_LIMIT_HIGH_COMPLETIONS: i32 = 10_000;
const MAX_POD_FAILURE_POLICY_RULES: usize = 20;
const MAX_ON_EXIT_CODES_VALUES: usize = 255;
const MAX_ON_POD_CONDITIONS_PATTERNS: usize = 20;
const MAX_MANAGED_BY_LENGTH: usize = 63;
const MAX_SUCCEEDED_INDEXES_LENGTH: usize = 64 * 1024;
const MAX_SUCCESS_POLICY_RULES: usize = 20;

const POD_FAILURE_POLICY_ACTIONS: [&str; 4] = ["Count", "FailIndex", "FailJob", "Ignore"];
const ON_EXIT_CODES_OPERATORS: [&str; 2] = ["In", "NotIn"];
const CONDITION_STATUSES: [&str; 3] = ["False", "True", "Unknown"];

/// Options upstream derives in `validationOptionsForJob`.
#[derive(Debug, Clone, Copy, Default)]
struct JobOpts {
    require_prefixed_labels: bool,
    allow_mutable_scheduling_directives: bool,
    /// `MutablePodResourcesForSuspendedJobs` (beta, on by default since 1.36): containers'
    /// and init containers' `resources.requests`, `limits` and `claims` may change.
    allow_mutable_pod_resources: bool,
}

fn spec_of(job: &Job) -> JobSpec {
    job.spec.clone().unwrap_or_default()
}

fn status_of(job: &Job) -> JobStatus {
    job.status.clone().unwrap_or_default()
}

fn template_labels(spec: &JobSpec) -> BTreeMap<String, String> {
    spec.template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

fn is_indexed(spec: &JobSpec) -> bool {
    spec.completion_mode.as_deref() == Some("Indexed")
}

/// `validateGeneratedSelector`.
fn generated_selector(job: &Job, spec: &JobSpec, prefixed: bool, errs: &mut ErrorList) {
    if spec.manual_selector == Some(true) || spec.selector.is_none() {
        return;
    }
    let uid = job.metadata.uid.as_deref().unwrap_or("");
    let name = job.metadata.name.as_deref().unwrap_or("");
    if uid.is_empty() {
        errs.push(FieldError::required("metadata.uid", ""));
    }
    let tmeta = spec.template.metadata.clone().unwrap_or_default();
    let tpath = Path::new("spec").child("template").child("metadata");
    has_label(&tmeta, &tpath, keys::LEGACY_CONTROLLER_UID_LABEL, uid, errs);
    has_label(&tmeta, &tpath, keys::LEGACY_JOB_NAME_LABEL, name, errs);
    let mut expected = BTreeMap::new();
    if prefixed {
        has_label(&tmeta, &tpath, keys::CONTROLLER_UID_LABEL, uid, errs);
        has_label(&tmeta, &tpath, keys::JOB_NAME_LABEL, name, errs);
        expected.insert(keys::CONTROLLER_UID_LABEL.to_string(), uid.to_string());
        expected.insert(keys::JOB_NAME_LABEL.to_string(), name.to_string());
    }
    expected.insert(
        keys::LEGACY_CONTROLLER_UID_LABEL.to_string(),
        uid.to_string(),
    );
    expected.insert(keys::LEGACY_JOB_NAME_LABEL.to_string(), name.to_string());
    if selector_matches(spec.selector.as_ref(), &expected) == Some(false) {
        errs.push(FieldError::invalid(
            "spec.selector",
            super::render::label_selector(spec.selector.as_ref()),
            "`selector` not auto-generated",
        ));
    }
}

/// `ValidateJob`.
fn validate_job(job: &Job, opts: JobOpts) -> ErrorList {
    let spec = spec_of(job);
    let mut errs = object_meta(&job.metadata, true, names::name_is_dns_subdomain);
    generated_selector(job, &spec, opts.require_prefixed_labels, &mut errs);
    errs.extend(job_spec_with_selector(&spec, &Path::new("spec")));
    if is_indexed(&spec)
        && let Some(c) = spec.completions.filter(|c| *c > 0)
    {
        let name = job.metadata.name.as_deref().unwrap_or("");
        let hostname = format!("{}-{}", name, i64::from(c) - 1);
        if !names::dns1123_label(&hostname).is_empty() {
            errs.push(FieldError::invalid(
                "metadata.name",
                name,
                format!("will not able to create pod with invalid DNS label: {hostname}"),
            ));
        }
    }
    errs
}

/// `ValidateJobSpec`: the spec, the selector, and selector-matches-template.
fn job_spec_with_selector(spec: &JobSpec, path: &Path) -> ErrorList {
    let mut errs = job_spec(spec, path);
    if spec.selector.is_none() {
        errs.push(FieldError::required(path.child("selector"), ""));
    } else {
        errs.extend(label_selector(
            spec.selector.as_ref(),
            &path.child("selector"),
        ));
    }
    let tl = template_labels(spec);
    if selector_matches(spec.selector.as_ref(), &tl) == Some(false) {
        let value = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        errs.push(FieldError::invalid(
            path.child("template").child("metadata").child("labels"),
            Value::json(&value),
            "`selector` does not match template `labels`",
        ));
    }
    errs
}

/// `IsDomainPrefixedPath`.
fn domain_prefixed_path(value: &str, path: &Path, errs: &mut ErrorList) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let Some((host, p)) = value
        .split_once('/')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    for m in names::dns1123_subdomain(host) {
        errs.push(FieldError::invalid(path, host, m));
    }
    let ok = p
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c));
    if !ok {
        errs.push(FieldError::invalid(
            path,
            p,
            names::regex_error("Invalid path", "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+", &[]),
        ));
    }
}

/// `validateJobSpec`: everything but the selector; shared with CronJob job templates.
pub(crate) fn job_spec(spec: &JobSpec, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    let opt = |v: Option<i32>| v.map(i64::from);
    for (v, name) in [
        (opt(spec.parallelism), "parallelism"),
        (opt(spec.completions), "completions"),
        (spec.active_deadline_seconds, "activeDeadlineSeconds"),
        (opt(spec.backoff_limit), "backoffLimit"),
        (
            opt(spec.ttl_seconds_after_finished),
            "ttlSecondsAfterFinished",
        ),
        (opt(spec.backoff_limit_per_index), "backoffLimitPerIndex"),
    ] {
        if let Some(v) = v {
            nonnegative(v, &path.child(name), &mut errs);
        }
    }
    if let Some(m) = spec.max_failed_indexes {
        nonnegative(i64::from(m), &path.child("maxFailedIndexes"), &mut errs);
        if spec.backoff_limit_per_index.is_none() {
            errs.push(FieldError::required(
                path.child("backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
    }
    if let Some(mb) = spec.managed_by.as_deref() {
        domain_prefixed_path(mb, &path.child("managedBy"), &mut errs);
        if mb.len() > MAX_MANAGED_BY_LENGTH {
            errs.push(FieldError::too_long(
                path.child("managedBy"),
                MAX_MANAGED_BY_LENGTH,
            ));
        }
    }
    if let Some(mode) = spec.completion_mode.as_deref() {
        if mode != "NonIndexed" && mode != "Indexed" {
            errs.push(FieldError::not_supported(
                path.child("completionMode"),
                mode,
                &["NonIndexed", "Indexed"],
            ));
        }
        if mode == "Indexed" {
            if spec.completions.is_none() {
                errs.push(FieldError::required(
                    path.child("completions"),
                    "when completion mode is Indexed",
                ));
            }
            if let Some(p) = spec.parallelism.filter(|p| *p > MAX_PARALLELISM_INDEXED) {
                errs.push(FieldError::invalid(
                    path.child("parallelism"),
                    p,
                    format!(
                        "must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode is Indexed"
                    ),
                ));
            }
            if let (Some(c), Some(m)) = (spec.completions, spec.max_failed_indexes)
                && m > c
            {
                errs.push(FieldError::invalid(
                    path.child("maxFailedIndexes"),
                    m,
                    "must be less than or equal to completions",
                ));
            }
            if let Some(m) = spec
                .max_failed_indexes
                .filter(|m| *m > MAX_FAILED_INDEXES_INDEXED)
            {
                errs.push(FieldError::invalid(
                    path.child("maxFailedIndexes"),
                    m,
                    format!("must be less than or equal to {MAX_FAILED_INDEXES_INDEXED}"),
                ));
            }
            if spec.completions.is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT)
                && spec.backoff_limit_per_index.is_some()
            {
                if spec.max_failed_indexes.is_none() {
                    errs.push(FieldError::required(
                        path.child("maxFailedIndexes"),
                        format!(
                            "must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"
                        ),
                    ));
                }
                let high = format!(
                    "must be less than or equal to {PARALLELISM_LIMIT_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
                );
                if let Some(p) = spec
                    .parallelism
                    .filter(|p| *p > PARALLELISM_LIMIT_HIGH_COMPLETIONS)
                {
                    errs.push(FieldError::invalid(path.child("parallelism"), p, high));
                }
                if let Some(m) = spec
                    .max_failed_indexes
                    .filter(|m| *m > MAX_FAILED_INDEXES_LIMIT_HIGH_COMPLETIONS)
                {
                    errs.push(FieldError::invalid(
                        path.child("maxFailedIndexes"),
                        m,
                        format!(
                            "must be less than or equal to {MAX_FAILED_INDEXES_LIMIT_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
                        ),
                    ));
                }
            }
        }
    }
    if spec.completion_mode.is_none() || spec.completion_mode.as_deref() == Some("NonIndexed") {
        if let Some(b) = spec.backoff_limit_per_index {
            errs.push(FieldError::invalid(
                path.child("backoffLimitPerIndex"),
                b,
                "requires indexed completion mode",
            ));
        }
        if let Some(m) = spec.max_failed_indexes {
            errs.push(FieldError::invalid(
                path.child("maxFailedIndexes"),
                m,
                "requires indexed completion mode",
            ));
        }
    }
    if spec.pod_failure_policy.is_some() {
        pod_failure_policy(spec, &path.child("podFailurePolicy"), &mut errs);
    }
    if let Some(sp) = &spec.success_policy {
        if !is_indexed(spec) {
            errs.push(FieldError::invalid(
                path.child("successPolicy"),
                super::render::success_policy(sp),
                "requires indexed completion mode",
            ));
        } else {
            success_policy(spec, &path.child("successPolicy"), &mut errs);
        }
    }
    if let Some(rp) = spec.pod_replacement_policy.as_deref() {
        let p = path.child("podReplacementPolicy");
        if spec.pod_failure_policy.is_some() {
            if rp != "Failed" {
                errs.push(FieldError::not_supported(p, rp, &["Failed"]));
            }
        } else if rp != "Failed" && rp != "TerminatingOrFailed" {
            errs.push(FieldError::not_supported(
                p,
                rp,
                &["Failed", "TerminatingOrFailed"],
            ));
        }
    }
    errs.extend(pod_template_spec(&spec.template, &path.child("template")));
    let restart = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("");
    let rp_path = path.child("template").child("spec").child("restartPolicy");
    if restart == "Always" || restart.is_empty() {
        errs.push(FieldError::required(
            rp_path,
            "valid values: \"OnFailure\", \"Never\"",
        ));
    } else if restart != "OnFailure" && restart != "Never" {
        errs.push(FieldError::not_supported(
            rp_path,
            restart,
            &["OnFailure", "Never"],
        ));
    } else if spec.pod_failure_policy.is_some() && restart != "Never" {
        errs.push(FieldError::invalid(
            rp_path,
            restart,
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
    errs
}

/// Go's `fmt.Sprintf("%q", []string{...})`: `["A" "B"]`.
fn go_quoted_list(items: &[&str]) -> String {
    let q: Vec<String> = items.iter().map(|s| crate::field::quote(s)).collect();
    format!("[{}]", q.join(" "))
}

fn pod_failure_policy(spec: &JobSpec, path: &Path, errs: &mut ErrorList) {
    let Some(pfp) = &spec.pod_failure_policy else {
        return;
    };
    let rules_path = path.child("rules");
    if pfp.rules.len() > MAX_POD_FAILURE_POLICY_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            pfp.rules.len(),
            MAX_POD_FAILURE_POLICY_RULES,
        ));
    }
    let tspec = spec.template.spec.clone().unwrap_or_default();
    let container_names: Vec<&str> = tspec
        .containers
        .iter()
        .chain(tspec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    for (i, rule) in pfp.rules.iter().enumerate() {
        let rp = rules_path.index(i);
        let ap = rp.child("action");
        let action = rule.action.as_str();
        if action.is_empty() {
            errs.push(FieldError::required(
                ap,
                format!(
                    "valid values: {}",
                    go_quoted_list(&POD_FAILURE_POLICY_ACTIONS)
                ),
            ));
        } else if action == "FailIndex" {
            if spec.backoff_limit_per_index.is_none() {
                errs.push(FieldError::invalid(
                    ap,
                    action,
                    "requires the backoffLimitPerIndex to be set",
                ));
            }
        } else if !POD_FAILURE_POLICY_ACTIONS.contains(&action) {
            errs.push(FieldError::not_supported(
                ap,
                action,
                &POD_FAILURE_POLICY_ACTIONS,
            ));
        }
        if let Some(oec) = &rule.on_exit_codes {
            let ep = rp.child("onExitCodes");
            let op = oec.operator.as_str();
            if op.is_empty() {
                errs.push(FieldError::required(
                    ep.child("operator"),
                    format!("valid values: {}", go_quoted_list(&ON_EXIT_CODES_OPERATORS)),
                ));
            } else if !ON_EXIT_CODES_OPERATORS.contains(&op) {
                errs.push(FieldError::not_supported(
                    ep.child("operator"),
                    op,
                    &ON_EXIT_CODES_OPERATORS,
                ));
            }
            if let Some(cn) = &oec.container_name
                && !container_names.contains(&cn.as_str())
            {
                errs.push(FieldError::invalid(
                    ep.child("containerName"),
                    cn,
                    "must be one of the container or initContainer names in the pod template",
                ));
            }
            let vp = ep.child("values");
            if oec.values.is_empty() {
                errs.push(FieldError::invalid(
                    &vp,
                    Value::json(&oec.values),
                    "at least one value is required",
                ));
            } else if oec.values.len() > MAX_ON_EXIT_CODES_VALUES {
                errs.push(FieldError::too_many(
                    &vp,
                    oec.values.len(),
                    MAX_ON_EXIT_CODES_VALUES,
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            let mut ordered = true;
            for (j, v) in oec.values.iter().enumerate() {
                if op == "In" && *v == 0 {
                    errs.push(FieldError::invalid(
                        vp.index(j),
                        *v,
                        "must not be 0 for the In operator",
                    ));
                }
                if !seen.insert(*v) {
                    errs.push(FieldError::duplicate(vp.index(j), *v));
                }
                if j > 0 && oec.values[j - 1] > *v {
                    ordered = false;
                }
            }
            if !ordered {
                errs.push(FieldError::invalid(
                    &vp,
                    Value::json(&oec.values),
                    "must be ordered",
                ));
            }
        }
        let conds = rule.on_pod_conditions.as_deref().unwrap_or(&[]);
        if !conds.is_empty() {
            let cp = rp.child("onPodConditions");
            if conds.len() > MAX_ON_POD_CONDITIONS_PATTERNS {
                errs.push(FieldError::too_many(
                    &cp,
                    conds.len(),
                    MAX_ON_POD_CONDITIONS_PATTERNS,
                ));
            }
            for (j, pat) in conds.iter().enumerate() {
                let pp = cp.index(j);
                qualified_name(&pat.type_, &pp.child("type"), errs);
                let st = pat.status.as_deref().unwrap_or("");
                if st.is_empty() {
                    errs.push(FieldError::required(
                        pp.child("status"),
                        format!("valid values: {}", go_quoted_list(&CONDITION_STATUSES)),
                    ));
                } else if !CONDITION_STATUSES.contains(&st) {
                    errs.push(FieldError::not_supported(
                        pp.child("status"),
                        st,
                        &CONDITION_STATUSES,
                    ));
                }
            }
        }
        match (rule.on_exit_codes.is_some(), !conds.is_empty()) {
            (true, true) => errs.push(FieldError::invalid_no_value(
                &rp,
                "specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (false, false) => errs.push(FieldError::invalid_no_value(
                &rp,
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            _ => {}
        }
    }
}

fn success_policy(spec: &JobSpec, path: &Path, errs: &mut ErrorList) {
    let Some(sp) = &spec.success_policy else {
        return;
    };
    let rules_path = path.child("rules");
    if sp.rules.is_empty() {
        errs.push(FieldError::required(
            &rules_path,
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if sp.rules.len() > MAX_SUCCESS_POLICY_RULES {
        errs.push(FieldError::too_many(
            &rules_path,
            sp.rules.len(),
            MAX_SUCCESS_POLICY_RULES,
        ));
    }
    // Upstream dereferences completions here (a server panic when it is nil); we only skip
    // the checks that need it, the Required error on completions has already been reported.
    let completions = spec.completions;
    for (i, rule) in sp.rules.iter().enumerate() {
        let rp = rules_path.index(i);
        if rule.succeeded_count.is_none() && rule.succeeded_indexes.is_none() {
            errs.push(FieldError::required(
                &rp,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total: Option<i64> = None;
        if let Some(si) = &rule.succeeded_indexes {
            let sip = rp.child("succeededIndexes");
            if si.len() > MAX_SUCCEEDED_INDEXES_LENGTH {
                errs.push(FieldError::too_long(&sip, MAX_SUCCEEDED_INDEXES_LENGTH));
            }
            if let Some(c) = completions {
                match validate_indexes_format(si, c) {
                    Ok(n) => total = Some(n),
                    Err(e) => {
                        total = Some(0);
                        errs.push(FieldError::invalid(
                            &sip,
                            si,
                            format!("error parsing succeededIndexes: {e}"),
                        ))
                    }
                }
            }
        }
        if let Some(sc) = rule.succeeded_count {
            let cp = rp.child("succeededCount");
            nonnegative(i64::from(sc), &cp, errs);
            if let Some(c) = completions
                && sc > c
            {
                errs.push(FieldError::invalid(
                    &cp,
                    sc,
                    format!(
                        "must be less than or equal to {c} (the number of specified completions)"
                    ),
                ));
            }
            if let Some(total) = total
                && i64::from(sc) > total
            {
                errs.push(FieldError::invalid(
                    &cp,
                    sc,
                    format!(
                        "must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"
                    ),
                ));
            }
        }
    }
}

/// Validation of a Job on create (`jobStrategy.Validate`).
pub fn job_create(job: &Job) -> ErrorList {
    validate_job(
        job,
        JobOpts {
            require_prefixed_labels: true,
            allow_mutable_scheduling_directives: false,
            allow_mutable_pod_resources: false,
        },
    )
}

/// Warnings on create (`jobStrategy.WarningsOnCreate`, the name part).
pub fn job_warnings(job: &Job) -> Vec<String> {
    name_warning(job.metadata.name.as_deref().unwrap_or(""))
}

pub(crate) fn name_warning(name: &str) -> Vec<String> {
    let msgs = names::dns1123_label(name);
    if msgs.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "metadata.name: this is used in Pod names and hostnames, which can result in surprising behavior; a DNS label is recommended: [{}]",
            msgs.join(" ")
        )]
    }
}

/// Validation of a Job update (`jobStrategy.ValidateUpdate`): the full create validation of
/// the new object, then the metadata and spec update rules.
pub fn job_update(new: &Job, old: &Job) -> ErrorList {
    let old_spec = spec_of(old);
    let new_spec = spec_of(new);
    let old_labels = template_labels(&old_spec);
    // Both KEP-5440 relaxations hold for the same Jobs.
    let safe = safely_suspended(&old_spec, &status_of(old));
    let opts = JobOpts {
        require_prefixed_labels: old_labels.contains_key(keys::JOB_NAME_LABEL)
            && old_labels.contains_key(keys::CONTROLLER_UID_LABEL),
        allow_mutable_scheduling_directives: safe,
        allow_mutable_pod_resources: safe,
    };
    let mut errs = validate_job(new, opts);
    errs.extend(object_meta_update(&new.metadata, &old.metadata));
    let path = Path::new("spec");
    errs.extend(job_spec_with_selector(&new_spec, &path));
    // Completions: immutable, except for Indexed jobs scaled together with parallelism.
    let cp = path.child("completions");
    if !is_indexed(&new_spec) {
        immutable(&new_spec.completions, &old_spec.completions, &cp, &mut errs);
    } else if new_spec.completions != old_spec.completions
        && let Some(c) = new_spec.completions
        && Some(c) != new_spec.parallelism
    {
        errs.push(FieldError::invalid(
            cp,
            c,
            "can only be modified in tandem with spec.parallelism",
        ));
    }
    if new_spec.selector != old_spec.selector {
        errs.push(FieldError::invalid(
            path.child("selector"),
            super::render::label_selector(new_spec.selector.as_ref()),
            super::IMMUTABLE_MSG,
        ));
    }
    template_update(&new_spec, &old_spec, opts, &path, &mut errs);
    immutable(
        &new_spec.completion_mode,
        &old_spec.completion_mode,
        &path.child("completionMode"),
        &mut errs,
    );
    immutable(
        &new_spec.pod_failure_policy,
        &old_spec.pod_failure_policy,
        &path.child("podFailurePolicy"),
        &mut errs,
    );
    immutable(
        &new_spec.backoff_limit_per_index,
        &old_spec.backoff_limit_per_index,
        &path.child("backoffLimitPerIndex"),
        &mut errs,
    );
    immutable(
        &new_spec.managed_by,
        &old_spec.managed_by,
        &path.child("managedBy"),
        &mut errs,
    );
    if new_spec.success_policy != old_spec.success_policy {
        let value = new_spec
            .success_policy
            .as_ref()
            .map(super::render::success_policy)
            .unwrap_or_else(|| Value("null".to_string()));
        errs.push(FieldError::invalid(
            path.child("successPolicy"),
            value,
            super::IMMUTABLE_MSG,
        ));
    }
    errs
}

/// `validatePodTemplateUpdate`: the template is immutable, except scheduling directives and
/// template labels/annotations of a suspended job that never started.
/// A suspended Job no pod of which runs with its template any more, so that the template's
/// scheduling directives and resources may change (KEP-5440, whose gates are on by default
/// since 1.36): suspended, no active pod, and either never started or with its `Suspended`
/// condition set (a Job suspended after it ran, once its pods are gone).
fn safely_suspended(old_spec: &JobSpec, old_status: &JobStatus) -> bool {
    old_spec.suspend == Some(true)
        && old_status.active.unwrap_or(0) == 0
        && (old_status.start_time.is_none()
            || is_condition_true(old_status.conditions.as_ref(), keys::JOB_SUSPENDED))
}

/// Takes the new template's containers' (and init containers') resources into `old`, so that
/// the immutability check that follows ignores them: requests, limits and claims, which are
/// all a container's `resources` holds.
fn take_container_resources(old: &mut PodSpec, new: &PodSpec) {
    fn take(old: &mut [Container], new: &[Container]) {
        for (o, n) in old.iter_mut().zip(new) {
            o.resources.clone_from(&n.resources);
        }
    }
    take(&mut old.containers, &new.containers);
    if let (Some(o), Some(n)) = (old.init_containers.as_mut(), new.init_containers.as_ref()) {
        take(o, n);
    }
}

fn template_update(new: &JobSpec, old: &JobSpec, opts: JobOpts, path: &Path, errs: &mut ErrorList) {
    let template = &new.template;
    let mut old_t = old.template.clone();
    if opts.allow_mutable_pod_resources
        && let (Some(ospec), Some(nspec)) = (old_t.spec.as_mut(), template.spec.as_ref())
    {
        take_container_resources(ospec, nspec);
    }
    if opts.allow_mutable_scheduling_directives {
        let nspec = template.spec.clone().unwrap_or_default();
        let mut ospec = old_t.spec.clone().unwrap_or_default();
        match (&nspec.affinity, &mut ospec.affinity) {
            (None, Some(oa)) => {
                oa.node_affinity = None;
                if *oa == Default::default() {
                    ospec.affinity = None;
                }
            }
            (Some(na), None) => {
                ospec.affinity = Some(k8s_openapi::api::core::v1::Affinity {
                    node_affinity: na.node_affinity.clone(),
                    ..Default::default()
                });
            }
            (Some(na), Some(oa)) => oa.node_affinity = na.node_affinity.clone(),
            (None, None) => {}
        }
        ospec.node_selector = nspec.node_selector.clone();
        ospec.tolerations = nspec.tolerations.clone();
        ospec.scheduling_gates = nspec.scheduling_gates.clone();
        if old_t.spec.is_some() || template.spec.is_some() {
            old_t.spec = Some(ospec);
        }
        let nmeta = template.metadata.clone().unwrap_or_default();
        let mut ometa = old_t.metadata.clone().unwrap_or_default();
        ometa.labels = nmeta.labels.clone();
        ometa.annotations = nmeta.annotations.clone();
        if old_t.metadata.is_some() || template.metadata.is_some() {
            old_t.metadata = Some(ometa);
        }
    }
    immutable(template, &old_t, &path.child("template"), errs);
}

pub fn is_condition_true(conditions: Option<&Vec<JobCondition>>, type_: &str) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Validation of a `/status` update (`jobStatusStrategy.ValidateUpdate`), with the
/// `JobManagedBy` rules: most run only when the fields they look at changed.
pub fn job_status_update(new: &Job, old: &Job) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    let spec = spec_of(new);
    let st = status_of(new);
    let ost = status_of(old);
    let sp = Path::new("status");
    let conds = st.conditions.as_ref();
    let oconds = ost.conditions.as_ref();
    let ct = |t: &str| is_condition_true(conds, t);
    let oct = |t: &str| is_condition_true(oconds, t);
    let complete = ct(keys::JOB_COMPLETE);
    let failed = ct(keys::JOB_FAILED);
    let failure_target = ct(keys::JOB_FAILURE_TARGET);
    let scm = ct(keys::JOB_SUCCESS_CRITERIA_MET);
    let finished = complete || failed;
    let ofinished = oct(keys::JOB_COMPLETE) || oct(keys::JOB_FAILED);

    let indexed = is_indexed(&spec);
    let finished_changed = finished != ofinished;
    let complete_changed = complete != oct(keys::JOB_COMPLETE);
    let failed_changed = failed != oct(keys::JOB_FAILED);
    let failure_target_changed = failure_target != oct(keys::JOB_FAILURE_TARGET);
    let scm_changed = scm != oct(keys::JOB_SUCCESS_CRITERIA_MET);
    let completed_changed = st.completed_indexes.as_deref().unwrap_or("")
        != ost.completed_indexes.as_deref().unwrap_or("");
    let failed_idx_changed = st.failed_indexes != ost.failed_indexes;
    let active = st.active.unwrap_or(0);
    let active_changed = active != ost.active.unwrap_or(0);
    let start_changed = st.start_time != ost.start_time;
    let completion_changed = st.completion_time != ost.completion_time;
    let uncounted_changed = st.uncounted_terminated_pods != ost.uncounted_terminated_pods;
    let ready_changed = st.ready != ost.ready;
    let terminating_changed = st.terminating != ost.terminating;
    let suspended_zero = spec.suspend == Some(true) && spec.completions == Some(0);

    // validateJobStatus
    nonnegative(i64::from(active), &sp.child("active"), &mut errs);
    nonnegative(
        i64::from(st.succeeded.unwrap_or(0)),
        &sp.child("succeeded"),
        &mut errs,
    );
    nonnegative(
        i64::from(st.failed.unwrap_or(0)),
        &sp.child("failed"),
        &mut errs,
    );
    if let Some(r) = st.ready {
        nonnegative(i64::from(r), &sp.child("ready"), &mut errs);
    }
    if let Some(t) = st.terminating {
        nonnegative(i64::from(t), &sp.child("terminating"), &mut errs);
    }
    let uncounted = st.uncounted_terminated_pods.clone().unwrap_or_default();
    let up = sp.child("uncountedTerminatedPods");
    let mut seen = std::collections::BTreeSet::new();
    for (list, name) in [
        (&uncounted.succeeded, "succeeded"),
        (&uncounted.failed, "failed"),
    ] {
        for (i, uid) in list.iter().flatten().enumerate() {
            let p = up.child(name).index(i);
            if uid.is_empty() {
                errs.push(FieldError::invalid(p, uid, "must not be empty"));
            } else if !seen.insert(uid.as_str()) {
                errs.push(FieldError::duplicate(p, uid));
            }
        }
    }
    let cond_path = sp.child("conditions");
    if (complete_changed || failed_changed) && complete && failed {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set Complete=True and Failed=true conditions",
        ));
    }
    if (complete_changed || failure_target_changed) && complete && failure_target {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set Complete=True and FailureTarget=true conditions",
        ));
    }
    let ctp = sp.child("completionTime");
    if complete_changed || completion_changed {
        if let Some(t) = &st.completion_time
            && !complete
        {
            errs.push(FieldError::invalid(
                &ctp,
                Value::json(t),
                "cannot set completionTime when there is no Complete=True condition",
            ));
        }
        if st.completion_time.is_none() && complete {
            errs.push(FieldError::required(
                &ctp,
                "completionTime is required for Complete jobs",
            ));
        }
    }
    if (start_changed || completion_changed)
        && let (Some(s), Some(c)) = (&st.start_time, &st.completion_time)
        && c.0 < s.0
    {
        errs.push(FieldError::invalid(
            &ctp,
            Value::json(c),
            "must be equal to or after `startTime`",
        ));
    }
    if (failed_changed || failed_idx_changed) && failed && !failure_target {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set Failed=True condition without the FailureTarget=true condition",
        ));
    }
    if (complete_changed || scm_changed) && complete && !scm {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
        ));
    }
    if (finished_changed || active_changed) && active > 0 && finished {
        errs.push(FieldError::invalid(
            sp.child("active"),
            active,
            "active>0 is invalid for finished job",
        ));
    }
    if (finished_changed || start_changed) && !suspended_zero && st.start_time.is_none() && finished
    {
        errs.push(FieldError::required(
            sp.child("startTime"),
            "startTime is required for finished job",
        ));
    }
    let uncounted_len = uncounted.succeeded.as_ref().map_or(0, Vec::len)
        + uncounted.failed.as_ref().map_or(0, Vec::len);
    if (finished_changed || uncounted_changed) && finished && uncounted_len > 0 {
        errs.push(FieldError::invalid(
            &up,
            super::render::uncounted(st.uncounted_terminated_pods.as_ref()),
            "must be empty for finished job",
        ));
    }
    let completed = st.completed_indexes.as_deref().unwrap_or("");
    if completed_changed
        && let Some(c) = spec.completions
        && let Err(e) = validate_indexes_format(completed, c)
    {
        errs.push(FieldError::invalid(
            sp.child("completedIndexes"),
            completed,
            format!("error parsing completedIndexes: {e}"),
        ));
    }
    if failed_idx_changed
        && let (Some(c), Some(_), Some(fi)) = (
            spec.completions,
            spec.backoff_limit_per_index,
            st.failed_indexes.as_deref(),
        )
        && let Err(e) = validate_indexes_format(fi, c)
    {
        errs.push(FieldError::invalid(
            sp.child("failedIndexes"),
            fi,
            format!("error parsing failedIndexes: {e}"),
        ));
    }
    if completed_changed && !completed.is_empty() && !indexed {
        errs.push(FieldError::invalid(
            sp.child("completedIndexes"),
            completed,
            "cannot set non-empty completedIndexes when non-indexed completion mode",
        ));
    }
    if failed_idx_changed
        && spec.backoff_limit_per_index.is_none()
        && let Some(fi) = st.failed_indexes.as_deref()
    {
        errs.push(FieldError::invalid(
            sp.child("failedIndexes"),
            fi,
            "cannot set non-null failedIndexes when backoffLimitPerIndex is null",
        ));
    }
    if (failed_idx_changed || completed_changed)
        && let (Some(c), Some(fi)) = (spec.completions, st.failed_indexes.as_deref())
        && let Some(msg) = overlap_error(completed, fi, c)
    {
        errs.push(FieldError::invalid(sp.child("failedIndexes"), fi, msg));
    }
    if (finished_changed || terminating_changed)
        && finished
        && let Some(t) = st.terminating.filter(|t| *t > 0)
    {
        errs.push(FieldError::invalid(
            sp.child("terminating"),
            t,
            "terminating>0 is invalid for finished job",
        ));
    }
    if (ready_changed || active_changed)
        && let Some(r) = st.ready.filter(|r| *r > active)
    {
        errs.push(FieldError::invalid(
            sp.child("ready"),
            r,
            "cannot set more ready pods than active",
        ));
    }
    if scm && failed {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set SuccessCriteriaMet=True and Failed=true conditions",
        ));
    }
    if scm && failure_target {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set SuccessCriteriaMet=True and FailureTarget=true conditions",
        ));
    }
    if spec.success_policy.is_some() && !scm && complete {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True",
        ));
    }

    // ValidateJobStatusUpdate
    for t in [
        keys::JOB_FAILED,
        keys::JOB_COMPLETE,
        keys::JOB_FAILURE_TARGET,
    ] {
        if oct(t) && !ct(t) {
            errs.push(FieldError::invalid_no_value(
                &cond_path,
                format!("cannot disable the terminal {t}=True condition"),
            ));
        }
    }
    let failed_n = st.failed.unwrap_or(0);
    if failed_n < ost.failed.unwrap_or(0) {
        errs.push(FieldError::invalid(
            sp.child("failed"),
            failed_n,
            "cannot decrease the failed counter",
        ));
    }
    let succeeded_n = st.succeeded.unwrap_or(0);
    let reject_succeeded_decrease = !indexed || spec.completions != spec.parallelism;
    if reject_succeeded_decrease && succeeded_n < ost.succeeded.unwrap_or(0) {
        errs.push(FieldError::invalid(
            sp.child("succeeded"),
            succeeded_n,
            "cannot decrease the succeeded counter",
        ));
    }
    if let (Some(n), Some(o)) = (&st.completion_time, &ost.completion_time)
        && n != o
    {
        errs.push(FieldError::invalid(
            &ctp,
            Value::json(n),
            super::IMMUTABLE_MSG,
        ));
    }
    let resuming = oct(keys::JOB_SUSPENDED) && !ct(keys::JOB_SUSPENDED);
    if start_changed && ost.start_time.is_some() && spec.suspend != Some(true) && !resuming {
        errs.push(FieldError::invalid(
            sp.child("startTime"),
            Value::json(&st.start_time),
            "field is immutable for unsuspended job once set",
        ));
    }
    if oct(keys::JOB_SUCCESS_CRITERIA_MET) && !scm {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot disable the SuccessCriteriaMet=True condition",
        ));
    }
    if oct(keys::JOB_COMPLETE) && !oct(keys::JOB_SUCCESS_CRITERIA_MET) && scm {
        errs.push(FieldError::invalid_no_value(
            &cond_path,
            "cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions",
        ));
    }
    errs
}
