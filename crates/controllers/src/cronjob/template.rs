//! The Job a CronJob creates for a scheduled time, and the small facts about Jobs the
//! controller reads.

use std::collections::BTreeMap;

use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, Job};
use kbatch_api::k8s_openapi::api::core::v1::ObjectReference;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_api::k8s_openapi::jiff::tz::TimeZone;
use kbatch_api::keys;

/// A time zone name that does not load; the Job cannot be stamped in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

/// The Job's name for a scheduled time: the CronJob's name and the minutes since the epoch.
/// It is the same for every attempt at that time, so a second create fails with
/// AlreadyExists instead of starting the Job twice (the scheduler's granularity is a minute).
pub fn get_job_name(cj: &CronJob, scheduled: Timestamp) -> String {
    format!(
        "{}-{}",
        cj.metadata.name.as_deref().unwrap_or(""),
        scheduled.as_second() / 60
    )
}

/// `t` as Go's RFC 3339 layout prints it in `tz`: whole seconds, `Z` for a zero offset.
pub fn format_rfc3339(t: Timestamp, tz: &TimeZone) -> String {
    let zoned = t.to_zoned(tz.clone());
    let offset = zoned.offset().seconds();
    let local = zoned.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if offset == 0 {
        return format!("{local}Z");
    }
    let sign = if offset < 0 { '-' } else { '+' };
    let abs = offset.unsigned_abs();
    format!("{local}{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60)
}

/// `t` in UTC as Go's RFC 1123 layout with a numeric zone prints it.
pub fn format_rfc1123z_utc(t: Timestamp) -> String {
    t.to_zoned(TimeZone::UTC)
        .strftime("%a, %d %b %Y %H:%M:%S +0000")
        .to_string()
}

/// The controller reference every created Job carries.
pub fn controller_ref(cj: &CronJob) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: cj.metadata.name.clone().unwrap_or_default(),
        uid: cj.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The zone the scheduled-timestamp annotation is written in: spec.timeZone, else UTC (not
/// the controller's zone: an unset zone loads as UTC).
fn annotation_zone(cj: &CronJob) -> Result<TimeZone, TemplateError> {
    let name = cj.spec.time_zone.as_deref().unwrap_or("");
    match kbatch_cron::load_location(name) {
        Ok(Some(tz)) => Ok(tz),
        // "Local" is the controller's zone, which this code does not know; UTC keeps the
        // annotation well-formed. The API server rejects "Local" anyway.
        Ok(None) => Ok(TimeZone::UTC),
        Err(e) => Err(TemplateError(e.to_string())),
    }
}

/// The Job to create for `scheduled`: the template's labels, annotations and spec, the
/// deterministic name, the scheduled-timestamp annotation and the controller reference.
pub fn get_job_from_template(cj: &CronJob, scheduled: Timestamp) -> Result<Job, TemplateError> {
    let template = &cj.spec.job_template;
    let meta = template.metadata.as_ref();
    let labels: BTreeMap<String, String> = meta.and_then(|m| m.labels.clone()).unwrap_or_default();
    let mut annotations: BTreeMap<String, String> =
        meta.and_then(|m| m.annotations.clone()).unwrap_or_default();
    let tz = annotation_zone(cj)?;
    annotations.insert(
        keys::CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION.to_string(),
        format_rfc3339(scheduled, &tz),
    );
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(get_job_name(cj, scheduled)),
            namespace: cj.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(cj)]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    })
}

/// The reference to a Job kept in status.active.
pub fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The terminal condition of a Job: the first True `Complete` or `Failed`.
pub fn finished_condition(job: &Job) -> Option<&'static str> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds.iter().find_map(|c| {
        if c.status != "True" {
            return None;
        }
        match c.type_.as_str() {
            keys::JOB_COMPLETE => Some(keys::JOB_COMPLETE),
            keys::JOB_FAILED => Some(keys::JOB_FAILED),
            _ => None,
        }
    })
}

pub fn is_job_finished(job: &Job) -> bool {
    finished_condition(job).is_some()
}

/// Whether the Job has a True `Complete` condition (regardless of what comes first).
pub fn is_job_succeeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == keys::JOB_COMPLETE && c.status == "True")
        })
}

/// Whether `job`'s controller reference names `cj` (UID included).
pub fn is_controlled_by(job: &Job, cj: &CronJob) -> bool {
    controller_of(job).is_some_and(|r| Some(&r.uid) == cj.metadata.uid.as_ref())
}

pub fn controller_of(job: &Job) -> Option<&OwnerReference> {
    job.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// The Jobs a CronJob reconciles: those in its namespace whose controller reference carries
/// its name. Upstream compares the name only (not kind or UID), and so does this.
/// (`jobs` may be the cache's shared Jobs: only those kept need copying.)
pub fn jobs_to_be_reconciled<'a, J: std::borrow::Borrow<Job>>(
    cj: &CronJob,
    jobs: &'a [J],
) -> Vec<&'a Job> {
    let name = cj.metadata.name.as_deref().unwrap_or("");
    jobs.iter()
        .map(|j| j.borrow())
        .filter(|j| j.metadata.namespace == cj.metadata.namespace)
        .filter(|j| controller_of(j).is_some_and(|r| r.name == name))
        .collect()
}
