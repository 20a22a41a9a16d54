//! Which pods belong to a Job: the claim decision of upstream's controller-ref manager
//! (adopt matching orphans, release owned pods that no longer match). The loop carries the
//! decisions out (adoption is a patch adding the controller reference and the tracking
//! finalizer, after re-reading the Job to make sure it is still the same one).

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::Pod;

use super::pods;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Controlled by this Job and matching its selector: one of its pods.
    Owned,
    /// An orphan that matches the selector: adopt it, then treat it as owned.
    Adopt,
    /// Controlled by this Job but no longer matching: remove the controller reference.
    Release,
    /// Not this Job's business (another controller's, or left as is for now).
    Ignore,
}

/// The claim decision for one pod of the Job's namespace.
pub fn claim_pod(job: &Job, pod: &Pod) -> Claim {
    let Some(selector) = job.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Claim::Ignore;
    };
    let matches = pods::selector_matches(selector, pod.metadata.labels.as_ref());
    let job_deleting = job.metadata.deletion_timestamp.is_some();
    match pods::controller_ref(pod) {
        Some(r) => {
            if job.metadata.uid.as_deref() != Some(r.uid.as_str()) {
                return Claim::Ignore;
            }
            if matches {
                Claim::Owned
            } else if job_deleting || pods::is_deleted(pod) {
                // Releasing on the way out would only race with garbage collection.
                Claim::Ignore
            } else {
                Claim::Release
            }
        }
        None => {
            if !matches || job_deleting || pods::is_deleted(pod) {
                Claim::Ignore
            } else {
                Claim::Adopt
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::testutil::*;
    use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn labelled(mut p: Pod, matching: bool) -> Pod {
        let mut l = std::collections::BTreeMap::new();
        l.insert(
            "foo".to_string(),
            if matching { "bar" } else { "other" }.to_string(),
        );
        p.metadata.labels = Some(l);
        p
    }

    fn orphan(p: Pod) -> Pod {
        let mut p = p;
        p.metadata.owner_references = None;
        p
    }

    fn owned_by(mut p: Pod, uid: &str) -> Pod {
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "other".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        p
    }

    #[test]
    fn claim_table() {
        let job = job_nonindexed(1, Some(1), 6);
        let mut deleting_job = job.clone();
        deleting_job.metadata.deletion_timestamp = Some(Time(long_ago()));
        let p = || new_pod_in_phase("Running");
        // (name, job, pod, want) — from upstream's TestGetPodsForJob cases.
        let cases: Vec<(&str, &Job, Pod, Claim)> = vec![
            (
                "only matching owned",
                &job,
                labelled(p(), true),
                Claim::Owned,
            ),
            (
                "adopt matching orphan",
                &job,
                orphan(labelled(p(), true)),
                Claim::Adopt,
            ),
            (
                "ignore non-matching orphan",
                &job,
                orphan(labelled(p(), false)),
                Claim::Ignore,
            ),
            (
                "no adopt when job is deleting",
                &deleting_job,
                orphan(labelled(p(), true)),
                Claim::Ignore,
            ),
            (
                "no adopt of a deleted pod",
                &job,
                orphan(deleted(labelled(p(), true))),
                Claim::Ignore,
            ),
            (
                "release non-matching owned",
                &job,
                labelled(p(), false),
                Claim::Release,
            ),
            (
                "no release when job is deleting",
                &deleting_job,
                labelled(p(), false),
                Claim::Ignore,
            ),
            (
                "another job's pod",
                &job,
                owned_by(labelled(p(), true), "someone-else"),
                Claim::Ignore,
            ),
        ];
        for (name, job, pod, want) in cases {
            assert_eq!(claim_pod(job, &pod), want, "{name}");
        }
    }
}
