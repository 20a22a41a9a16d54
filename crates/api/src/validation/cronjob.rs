//! batch/v1 CronJob validation (`ValidateCronJobCreate`, `ValidateCronJobUpdate`).

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobTemplateSpec};

use super::job::{job_spec, name_warning};
use super::{nonnegative, object_meta, object_meta_update};
use crate::field::{ErrorList, FieldError, Path, Value};
use crate::names;

/// 63 minus the 11 characters of the `-<timestamp>` suffix the controller appends.
const MAX_CRONJOB_NAME_LENGTH: usize = 52;

/// Validation of a CronJob on create.
pub fn cronjob_create(cj: &CronJob) -> ErrorList {
    let mut errs = object_meta(&cj.metadata, true, names::name_is_dns_subdomain);
    let spec = &cj.spec;
    errs.extend(cronjob_spec(spec, None, &Path::new("spec")));
    let name = cj.metadata.name.as_deref().unwrap_or("");
    if name.len() > MAX_CRONJOB_NAME_LENGTH {
        errs.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be no more than 52 characters",
        ));
    }
    errs
}

/// Validation of a CronJob update: nothing in the spec is immutable, and the 52-character
/// name limit is not applied (old objects must stay updatable).
pub fn cronjob_update(new: &CronJob, old: &CronJob) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    let spec = &new.spec;
    let old_spec = &old.spec;
    errs.extend(cronjob_spec(spec, Some(old_spec), &Path::new("spec")));
    errs
}

/// Validation of a CronJob `/status` update: upstream validates nothing there.
pub fn cronjob_status_update(_new: &CronJob, _old: &CronJob) -> ErrorList {
    Vec::new()
}

/// Warnings on create: the DNS-label name warning and the TZ-in-schedule warning.
pub fn cronjob_warnings(cj: &CronJob) -> Vec<String> {
    let mut w = name_warning(cj.metadata.name.as_deref().unwrap_or(""));
    if cj.spec.schedule.contains("TZ") {
        w.push("cannot use TZ or CRON_TZ in spec.spec.schedule, use timeZone instead, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details".to_string());
    }
    w
}

fn cronjob_spec(spec: &CronJobSpec, old: Option<&CronJobSpec>, path: &Path) -> ErrorList {
    let mut errs = Vec::new();
    let sched_path = path.child("schedule");
    if spec.schedule.is_empty() {
        errs.push(FieldError::required(&sched_path, ""));
    } else {
        let allow_tz = old.is_some_and(|o| o.schedule.contains("TZ"));
        schedule_format(
            &spec.schedule,
            allow_tz,
            spec.time_zone.is_some(),
            &sched_path,
            &mut errs,
        );
    }
    if let Some(s) = spec.starting_deadline_seconds {
        nonnegative(s, &path.child("startingDeadlineSeconds"), &mut errs);
    }
    if old.is_none_or(|o| o.time_zone != spec.time_zone) {
        time_zone(
            spec.time_zone.as_deref(),
            &path.child("timeZone"),
            &mut errs,
        );
    }
    let cp = path.child("concurrencyPolicy");
    match spec.concurrency_policy.as_deref().unwrap_or("") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required(cp, "")),
        other => errs.push(FieldError::not_supported(
            cp,
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    errs.extend(job_template_spec(
        &spec.job_template,
        &path.child("jobTemplate"),
    ));
    if let Some(l) = spec.successful_jobs_history_limit {
        nonnegative(
            i64::from(l),
            &path.child("successfulJobsHistoryLimit"),
            &mut errs,
        );
    }
    if let Some(l) = spec.failed_jobs_history_limit {
        nonnegative(
            i64::from(l),
            &path.child("failedJobsHistoryLimit"),
            &mut errs,
        );
    }
    errs
}

/// The schedule and time zone rules of a new CronJob alone (`spec.schedule`, `spec.timeZone`),
/// for tools that check a schedule before it is used.
pub fn schedule_and_time_zone(schedule: &str, tz: Option<&str>) -> ErrorList {
    let spec = Path::new("spec");
    let mut errs = ErrorList::new();
    if schedule.is_empty() {
        errs.push(FieldError::required(spec.child("schedule"), ""));
    } else {
        schedule_format(
            schedule,
            false,
            tz.is_some(),
            &spec.child("schedule"),
            &mut errs,
        );
    }
    time_zone(tz, &spec.child("timeZone"), &mut errs);
    errs
}

fn schedule_format(
    schedule: &str,
    allow_tz: bool,
    has_time_zone: bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    if let Err(e) = kbatch_cron::Schedule::parse(schedule) {
        errs.push(FieldError::invalid(path, schedule, e.to_string()));
    }
    let has_tz = schedule.contains("TZ");
    if allow_tz && has_tz && has_time_zone {
        errs.push(FieldError::invalid(
            path,
            schedule,
            "cannot use both timeZone field and TZ or CRON_TZ in schedule",
        ));
    } else if !allow_tz && has_tz {
        errs.push(FieldError::invalid(
            path,
            schedule,
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ));
    }
}

/// Each `/`-separated part of a zone name: 1-14 of `[A-Za-z.\-_0-9+]`, not `.`/`..`, no
/// leading `-` (the IANA naming rules upstream enforces before loading the zone).
fn zone_part_ok(part: &str) -> bool {
    part != "."
        && part != ".."
        && !part.starts_with('-')
        && (1..=14).contains(&part.len())
        && part
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'+'))
}

fn time_zone(tz: Option<&str>, path: &Path, errs: &mut ErrorList) {
    let Some(tz) = tz else {
        return;
    };
    let value = Value::from(tz);
    if tz.is_empty() {
        errs.push(FieldError::invalid(
            path,
            value,
            "timeZone must be nil or non-empty string",
        ));
        return;
    }
    let unknown = format!("unknown time zone {tz}");
    if !tz.split('/').all(zone_part_ok) {
        errs.push(FieldError::invalid(path, value, unknown));
        return;
    }
    if tz.eq_ignore_ascii_case("Local") {
        errs.push(FieldError::invalid(
            path,
            value.clone(),
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    // Go's LoadLocation accepts "UTC" and "" specially; "Local" loads the host zone.
    if tz == "UTC" || tz.eq_ignore_ascii_case("Local") {
        return;
    }
    // jiff's lookup ignores case; Go's LoadLocation does not, so insist on the exact name.
    let known = jiff::tz::db()
        .get(tz)
        .is_ok_and(|z| z.iana_name() == Some(tz));
    if !known {
        errs.push(FieldError::invalid(path, value, unknown));
    }
}

/// `ValidateJobTemplateSpec`: the job spec rules, and the selector is always generated.
fn job_template_spec(t: &JobTemplateSpec, path: &Path) -> ErrorList {
    let spec = t.spec.clone().unwrap_or_default();
    let sp = path.child("spec");
    let mut errs = job_spec(&spec, &sp);
    if let Some(sel) = &spec.selector {
        errs.push(FieldError::invalid(
            sp.child("selector"),
            super::render::label_selector(Some(sel)),
            "`selector` will be auto-generated",
        ));
    }
    if spec.manual_selector == Some(true) {
        errs.push(FieldError::not_supported(
            sp.child("manualSelector"),
            Value("true".to_string()),
            &["nil", "false"],
        ));
    }
    errs
}
