//! Well-known label, annotation and finalizer keys, condition types and reasons (upstream names).

/// Label/annotation keys set by the Job API and controller.
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
pub const JOB_INDEX_FAILURE_COUNT_ANNOTATION: &str = "batch.kubernetes.io/job-index-failure-count";
pub const JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION: &str =
    "batch.kubernetes.io/job-index-ignored-failure-count";
pub const CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION: &str =
    "batch.kubernetes.io/cronjob-scheduled-timestamp";
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Generic garbage-collection finalizers.
pub const ORPHAN_FINALIZER: &str = "orphan";
pub const FOREGROUND_DELETION_FINALIZER: &str = "foregroundDeletion";

/// Job condition types.
pub const JOB_COMPLETE: &str = "Complete";
pub const JOB_FAILED: &str = "Failed";
pub const JOB_SUSPENDED: &str = "Suspended";
pub const JOB_FAILURE_TARGET: &str = "FailureTarget";
pub const JOB_SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
