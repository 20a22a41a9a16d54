//! The Job controller's metrics, under upstream's names and labels (subsystem
//! `job_controller`).

use crate::runtime::metrics::{CounterVec, HistogramVec, exponential_buckets};

pub const JOB_SYNC_DURATION_SECONDS: HistogramVec = HistogramVec {
    name: "job_controller_job_sync_duration_seconds",
    help: "The time it took to sync a job",
    labels: &["completion_mode", "result", "action"],
    buckets: || exponential_buckets(0.004, 2.0, 15),
};

pub const JOB_SYNCS_TOTAL: CounterVec = CounterVec {
    name: "job_controller_job_syncs_total",
    help: "The number of job syncs",
    labels: &["completion_mode", "result", "action"],
};

pub const JOBS_FINISHED_TOTAL: CounterVec = CounterVec {
    name: "job_controller_jobs_finished_total",
    help: "The number of finished jobs",
    labels: &["completion_mode", "result", "reason"],
};

pub const JOB_PODS_FINISHED_TOTAL: CounterVec = CounterVec {
    name: "job_controller_job_pods_finished_total",
    help: "The number of finished Pods that are fully tracked",
    labels: &["completion_mode", "result"],
};

pub const TERMINATED_PODS_TRACKING_FINALIZER_TOTAL: CounterVec = CounterVec {
    name: "job_controller_terminated_pods_tracking_finalizer_total",
    help: "The number of terminated pods (phase=Failed|Succeeded) that have the finalizer batch.kubernetes.io/job-tracking",
    labels: &["event"],
};

pub const JOB_PODS_CREATION_TOTAL: CounterVec = CounterVec {
    name: "job_controller_job_pods_creation_total",
    help: "The number of Pods created by the Job controller labelled with a reason for the Pod creation",
    labels: &["reason", "status"],
};

pub const JOBS_BY_EXTERNAL_CONTROLLER_TOTAL: CounterVec = CounterVec {
    name: "job_controller_jobs_by_external_controller_total",
    help: "The number of Jobs managed by an external controller",
    labels: &["controller_name"],
};

pub const POD_FAILURES_HANDLED_BY_FAILURE_POLICY_TOTAL: CounterVec = CounterVec {
    name: "job_controller_pod_failures_handled_by_failure_policy_total",
    help: "The number of failed Pods handled by failure policy with respect to the failure policy action applied based on the matched rule",
    labels: &["action"],
};

pub const JOB_FINISHED_INDEXES_TOTAL: CounterVec = CounterVec {
    name: "job_controller_job_finished_indexes_total",
    help: "The number of finished indexes",
    labels: &["status", "backoffLimit"],
};

pub const STALE_SYNC_SKIPS_TOTAL: CounterVec = CounterVec {
    name: "job_controller_stale_sync_skips_total",
    help: "Total number of Job syncs skipped due to a stale watch cache.",
    labels: &["group", "resource"],
};

pub const ACTION_RECONCILING: &str = "reconciling";
pub const ACTION_TRACKING: &str = "tracking";
pub const ACTION_PODS_CREATED: &str = "pods_created";
pub const ACTION_PODS_DELETED: &str = "pods_deleted";
