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

/// Label every namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Job condition reasons set by the Job controller.
pub const JOB_REASON_BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
pub const JOB_REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const JOB_REASON_MAX_FAILED_INDEXES_EXCEEDED: &str = "MaxFailedIndexesExceeded";
pub const JOB_REASON_FAILED_INDEXES: &str = "FailedIndexes";
pub const JOB_REASON_POD_FAILURE_POLICY: &str = "PodFailurePolicy";
pub const JOB_REASON_SUCCESS_POLICY: &str = "SuccessPolicy";
pub const JOB_REASON_COMPLETIONS_REACHED: &str = "CompletionsReached";
pub const JOB_REASON_SUSPENDED: &str = "JobSuspended";
pub const JOB_REASON_RESUMED: &str = "JobResumed";

/// Pod phases and QoS classes.
pub const POD_PENDING: &str = "Pending";
pub const POD_RUNNING: &str = "Running";
pub const POD_SUCCEEDED: &str = "Succeeded";
pub const POD_FAILED: &str = "Failed";
pub const QOS_GUARANTEED: &str = "Guaranteed";
pub const QOS_BURSTABLE: &str = "Burstable";
pub const QOS_BEST_EFFORT: &str = "BestEffort";

/// The pod condition the scheduler owns, and its reason and message while scheduling gates
/// hold the pod back (the API server sets them when such a pod is created).
pub const POD_SCHEDULED: &str = "PodScheduled";
pub const REASON_SCHEDULING_GATED: &str = "SchedulingGated";
pub const MESSAGE_SCHEDULING_GATED: &str =
    "Scheduling is blocked due to non-empty scheduling gates";

/// Secret types (`Opaque` is the default) and the data keys and annotation their
/// validation reads.
pub const SECRET_TYPE_OPAQUE: &str = "Opaque";
pub const SECRET_TYPE_SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const SECRET_TYPE_BASIC_AUTH: &str = "kubernetes.io/basic-auth";
pub const SECRET_TYPE_SSH_AUTH: &str = "kubernetes.io/ssh-auth";
pub const SECRET_TYPE_TLS: &str = "kubernetes.io/tls";
pub const SERVICE_ACCOUNT_NAME_KEY: &str = "kubernetes.io/service-account.name";
pub const DOCKER_CONFIG_KEY: &str = ".dockercfg";
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
pub const BASIC_AUTH_USERNAME_KEY: &str = "username";
pub const BASIC_AUTH_PASSWORD_KEY: &str = "password";
pub const SSH_AUTH_PRIVATE_KEY: &str = "ssh-privatekey";
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_PRIVATE_KEY_KEY: &str = "tls.key";
