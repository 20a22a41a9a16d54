//! Pod failure policy: which rule, if any, a failed pod matches, and what that means for the
//! Job (fail it, fail the pod's index, ignore the failure, or count it). Also the per-index
//! failure-count annotations that backoffLimitPerIndex carries from pod to replacement pod.

use kbatch_api::k8s_openapi::api::batch::v1::{
    Job, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
};
use kbatch_api::k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kbatch_api::keys;

use super::pods;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    FailJob,
    FailIndex,
    Ignore,
    Count,
}

impl Action {
    fn parse(s: &str) -> Option<Action> {
        match s {
            "FailJob" => Some(Action::FailJob),
            "FailIndex" => Some(Action::FailIndex),
            "Ignore" => Some(Action::Ignore),
            "Count" => Some(Action::Count),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::FailJob => "FailJob",
            Action::FailIndex => "FailIndex",
            Action::Ignore => "Ignore",
            Action::Count => "Count",
        }
    }
}

/// The outcome of evaluating the policy against one failed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    /// The matched rule's action; `None` when no rule matched (default handling).
    pub action: Option<Action>,
    /// Whether the failure counts toward backoffLimit (false only for Ignore).
    pub count_failed: bool,
    /// For FailJob: the message of the Job's failure condition.
    pub fail_job_message: Option<String>,
}

const NO_MATCH: Match = Match {
    action: None,
    count_failed: true,
    fail_job_message: None,
};

/// Evaluates `policy` against a failed pod: rules in order, the first match wins. A rule
/// with an action this controller does not know is skipped rather than guessed at.
pub fn match_pod(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Match {
    let Some(policy) = policy else {
        return NO_MATCH;
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pods::name(pod);
    for (i, rule) in policy.rules.iter().enumerate() {
        let Some(action) = Action::parse(&rule.action) else {
            continue;
        };
        let fail_msg = if let Some(req) = rule.on_exit_codes.as_ref() {
            let Some((container, code)) = match_exit_codes(pod, req) else {
                continue;
            };
            format!(
                "Container {container} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {i}",
                action.as_str()
            )
        } else if let Some(patterns) = rule.on_pod_conditions.as_ref() {
            let Some(cond_type) = match_pod_conditions(pod, patterns) else {
                continue;
            };
            format!(
                "Pod {ns}/{name} has condition {cond_type} matching {} rule at index {i}",
                action.as_str()
            )
        } else {
            continue;
        };
        return Match {
            action: Some(action),
            count_failed: action != Action::Ignore,
            fail_job_message: (action == Action::FailJob).then_some(fail_msg),
        };
    }
    NO_MATCH
}

/// The first terminated container (regular containers first, then init containers) with a
/// non-zero exit code that the requirement selects.
fn match_exit_codes(
    pod: &Pod,
    req: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(String, i32)> {
    let status = pod.status.as_ref()?;
    let lists = [
        status.container_statuses.as_deref().unwrap_or(&[]),
        status.init_container_statuses.as_deref().unwrap_or(&[]),
    ];
    lists
        .into_iter()
        .find_map(|l| matching_container(l, req))
        .map(|(c, code)| (c.name.clone(), code))
}

fn matching_container<'a>(
    statuses: &'a [ContainerStatus],
    req: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(&'a ContainerStatus, i32)> {
    statuses.iter().find_map(|cs| {
        let code = cs.state.as_ref()?.terminated.as_ref()?.exit_code;
        if code == 0 {
            return None;
        }
        if req.container_name.as_ref().is_some_and(|n| *n != cs.name) {
            return None;
        }
        let listed = req.values.contains(&code);
        let hit = match req.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        };
        hit.then_some((cs, code))
    })
}

fn match_pod_conditions(
    pod: &Pod,
    patterns: &[kbatch_api::k8s_openapi::api::batch::v1::PodFailurePolicyOnPodConditionsPattern],
) -> Option<String> {
    let conds = pod.status.as_ref()?.conditions.as_ref()?;
    conds.iter().find_map(|c| {
        patterns
            .iter()
            .any(|p| p.type_ == c.type_ && p.status.as_deref().unwrap_or("True") == c.status)
            .then(|| c.type_.clone())
    })
}

/// The FailJob message of the first failed pod that matches a FailJob rule.
pub fn fail_job_message(
    job: &Job,
    pods: &[&Pod],
    is_failed: impl Fn(&Pod) -> bool,
) -> Option<String> {
    let policy = job.spec.as_ref()?.pod_failure_policy.as_ref()?;
    pods.iter()
        .filter(|p| is_failed(p))
        .find_map(|p| match_pod(Some(policy), p).fail_job_message)
}

fn annotation_count(pod: &Pod, key: &str) -> i32 {
    // A missing or malformed count means zero: a pod edited by hand must not stop the Job.
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|v| *v >= 0)
        .unwrap_or(0)
}

/// The counted failures of the pod's index before this pod.
pub fn index_failure_count(pod: &Pod) -> i32 {
    annotation_count(pod, keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION)
}

/// The ignored failures of the pod's index before this pod.
pub fn index_ignored_failure_count(pod: &Pod) -> i32 {
    annotation_count(pod, keys::JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION)
}

/// The (failure, ignored failure) counts a replacement of `replaced` carries.
pub fn new_index_failure_counts(job: &Job, replaced: Option<&Pod>) -> (i32, i32) {
    let Some(p) = replaced else {
        return (0, 0);
    };
    let (mut failed, mut ignored) = (index_failure_count(p), index_ignored_failure_count(p));
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref());
    if match_pod(policy, p).count_failed {
        failed = failed.saturating_add(1);
    } else {
        ignored = ignored.saturating_add(1);
    }
    (failed, ignored)
}

#[cfg(test)]
// Scenario tables read best as tuples.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::job::testutil::*;
    use kbatch_api::k8s_openapi::api::batch::v1::{
        PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
    };

    fn exit_rule(
        action: &str,
        container: Option<&str>,
        op: &str,
        values: &[i32],
    ) -> PodFailurePolicyRule {
        PodFailurePolicyRule {
            action: action.into(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: container.map(Into::into),
                operator: op.into(),
                values: values.to_vec(),
            }),
            on_pod_conditions: None,
        }
    }

    fn cond_rule(action: &str, type_: &str, status: Option<&str>) -> PodFailurePolicyRule {
        PodFailurePolicyRule {
            action: action.into(),
            on_exit_codes: None,
            on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                type_: type_.into(),
                status: status.map(Into::into),
            }]),
        }
    }

    fn policy(rules: Vec<PodFailurePolicyRule>) -> PodFailurePolicy {
        PodFailurePolicy { rules }
    }

    /// A failed pod "default/mypod" with containers (name, exit code) and init containers.
    fn failed(containers: &[(&str, i32)], init: &[(&str, i32)]) -> Pod {
        let mut p = new_pod_in_phase("Failed");
        p.metadata.name = Some("mypod".into());
        p.metadata.namespace = Some("default".into());
        for (n, c) in containers {
            add_container_exit(&mut p, n, *c, false);
        }
        for (n, c) in init {
            add_container_exit(&mut p, n, *c, true);
        }
        p
    }

    #[test]
    fn match_table() {
        let ignore_disruption = cond_rule("Ignore", "DisruptionTarget", None);
        // (name, rules, pod, want action, want count, want message)
        let cases: Vec<(
            &str,
            PodFailurePolicy,
            Pod,
            Option<Action>,
            bool,
            Option<&str>,
        )> = vec![
            (
                "FailJob on exit code",
                policy(vec![exit_rule("FailJob", None, "In", &[1, 2, 3])]),
                failed(&[("main-container", 2)], &[]),
                Some(Action::FailJob),
                true,
                Some(
                    "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 0",
                ),
            ),
            (
                "container name restriction does not match",
                policy(vec![exit_rule("FailJob", Some("other"), "In", &[2])]),
                failed(&[("main-container", 2)], &[]),
                None,
                true,
                None,
            ),
            (
                "container name restriction matches the second container",
                policy(vec![exit_rule("FailJob", Some("b"), "In", &[5])]),
                failed(&[("a", 5), ("b", 5)], &[]),
                Some(Action::FailJob),
                true,
                Some(
                    "Container b for pod default/mypod failed with exit code 5 matching FailJob rule at index 0",
                ),
            ),
            (
                "NotIn matches",
                policy(vec![exit_rule("FailJob", None, "NotIn", &[5, 6, 7])]),
                failed(&[("main-container", 42)], &[]),
                Some(Action::FailJob),
                true,
                Some(
                    "Container main-container for pod default/mypod failed with exit code 42 matching FailJob rule at index 0",
                ),
            ),
            (
                "NotIn does not match a listed code",
                policy(vec![exit_rule("FailJob", None, "NotIn", &[5, 6, 7])]),
                failed(&[("main-container", 5)], &[]),
                None,
                true,
                None,
            ),
            (
                "exit code 0 never matches NotIn",
                policy(vec![exit_rule("FailJob", None, "NotIn", &[5])]),
                failed(&[("main-container", 0)], &[]),
                None,
                true,
                None,
            ),
            (
                "init container exit code",
                policy(vec![exit_rule("FailJob", None, "In", &[5])]),
                failed(&[("main-container", 0)], &[("init-container", 5)]),
                Some(Action::FailJob),
                true,
                Some(
                    "Container init-container for pod default/mypod failed with exit code 5 matching FailJob rule at index 0",
                ),
            ),
            (
                "first matching rule wins: Ignore",
                policy(vec![
                    exit_rule("Ignore", None, "In", &[1, 2, 3]),
                    exit_rule("FailJob", None, "In", &[2, 3, 4]),
                ]),
                failed(&[("main-container", 2)], &[]),
                Some(Action::Ignore),
                false,
                None,
            ),
            (
                "first matching rule wins: Count",
                policy(vec![
                    exit_rule("Count", None, "In", &[1, 2]),
                    exit_rule("FailJob", None, "In", &[2]),
                ]),
                failed(&[("main-container", 2)], &[]),
                Some(Action::Count),
                true,
                None,
            ),
            (
                "FailJob message names the matched rule index",
                policy(vec![
                    exit_rule("Ignore", None, "In", &[10]),
                    exit_rule("FailJob", None, "In", &[5, 6, 7]),
                ]),
                failed(&[("main-container", 5)], &[]),
                Some(Action::FailJob),
                true,
                Some(
                    "Container main-container for pod default/mypod failed with exit code 5 matching FailJob rule at index 1",
                ),
            ),
            (
                "FailIndex",
                policy(vec![exit_rule("FailIndex", None, "In", &[3])]),
                failed(&[("main-container", 3)], &[]),
                Some(Action::FailIndex),
                true,
                None,
            ),
            (
                "Ignore DisruptionTarget",
                policy(vec![ignore_disruption.clone()]),
                with_condition(failed(&[], &[]), "DisruptionTarget", "True"),
                Some(Action::Ignore),
                false,
                None,
            ),
            (
                "pod condition with the wrong status",
                policy(vec![ignore_disruption]),
                with_condition(failed(&[], &[]), "DisruptionTarget", "False"),
                None,
                true,
                None,
            ),
            (
                "FailJob on pod condition",
                policy(vec![cond_rule("FailJob", "DisruptionTarget", Some("True"))]),
                with_condition(failed(&[], &[]), "DisruptionTarget", "True"),
                Some(Action::FailJob),
                true,
                Some(
                    "Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 0",
                ),
            ),
            (
                "Count on pod condition",
                policy(vec![cond_rule("Count", "DisruptionTarget", None)]),
                with_condition(failed(&[], &[]), "DisruptionTarget", "True"),
                Some(Action::Count),
                true,
                None,
            ),
            (
                "unknown action is skipped",
                policy(vec![exit_rule("Explode", None, "In", &[1])]),
                failed(&[("main-container", 1)], &[]),
                None,
                true,
                None,
            ),
            (
                "no rules",
                policy(vec![]),
                failed(&[("main-container", 1)], &[]),
                None,
                true,
                None,
            ),
        ];
        for (name, pol, pod, action, count, msg) in cases {
            let m = match_pod(Some(&pol), &pod);
            assert_eq!(m.action, action, "{name}");
            assert_eq!(m.count_failed, count, "{name}");
            assert_eq!(m.fail_job_message.as_deref(), msg, "{name}");
        }
    }

    #[test]
    fn failure_counts_for_replacements() {
        let mut job = job_nonindexed(1, Some(1), 6);
        let mut p = failed(&[("main-container", 1)], &[]);
        assert_eq!(new_index_failure_counts(&job, None), (0, 0));
        assert_eq!(new_index_failure_counts(&job, Some(&p)), (1, 0));
        annotate(&mut p, keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION, "2");
        assert_eq!(new_index_failure_counts(&job, Some(&p)), (3, 0));
        if let Some(s) = job.spec.as_mut() {
            s.pod_failure_policy = Some(policy(vec![exit_rule("Ignore", None, "In", &[1])]));
        }
        assert_eq!(new_index_failure_counts(&job, Some(&p)), (2, 1));
        annotate(&mut p, keys::JOB_INDEX_FAILURE_COUNT_ANNOTATION, "bogus");
        assert_eq!(index_failure_count(&p), 0);
    }

    /// A failed pod "default/mypod": containers (name, exit code or still running), init
    /// containers, and pod conditions (type, status).
    fn pod(
        containers: &[(&str, Option<i32>)],
        init: &[(&str, i32)],
        conds: &[(&str, &str)],
    ) -> Pod {
        let mut p = failed(&[], &[]);
        for (n, c) in containers {
            match c {
                Some(code) => add_container_exit(&mut p, n, *code, false),
                None => {
                    if let Some(s) = p.status.as_mut() {
                        s.container_statuses
                            .get_or_insert_with(Vec::new)
                            .push(ContainerStatus {
                                name: n.to_string(),
                                ..Default::default()
                            });
                    }
                }
            }
        }
        for (n, c) in init {
            add_container_exit(&mut p, n, *c, true);
        }
        for (t, st) in conds {
            p = with_condition(p, t, st);
        }
        p
    }

    #[test]
    fn match_pod_failure_policy_upstream_table() {
        let dt = "DisruptionTarget";
        // (name, rules, pod, want message, want count, want action)
        let cases: Vec<(
            &str,
            Option<Vec<PodFailurePolicyRule>>,
            Pod,
            Option<&str>,
            bool,
            Option<Action>,
        )> = vec![
            (
                "unknown action for rule matching by exit codes - skip rule with unknown action",
                Some(vec![
                    exit_rule("UnknownAction", None, "In", &[1, 2]),
                    exit_rule("FailJob", None, "In", &[2, 3]),
                ]),
                pod(&[("main-container", Some(2))], &[], &[]),
                Some(
                    "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 1",
                ),
                true,
                Some(Action::FailJob),
            ),
            (
                "unknown action for rule matching by pod conditions - skip rule with unknown action",
                Some(vec![
                    cond_rule("UnkonwnAction", dt, Some("True")),
                    cond_rule("Ignore", dt, Some("True")),
                ]),
                pod(&[], &[], &[(dt, "True")]),
                None,
                false,
                Some(Action::Ignore),
            ),
            (
                "unknown operator - rule is skipped for onExitCodes",
                Some(vec![
                    exit_rule("Ignore", None, "UnknownOperator", &[1, 2]),
                    exit_rule("FailJob", None, "In", &[2, 3]),
                ]),
                pod(&[("main-container", Some(2))], &[], &[]),
                Some(
                    "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 1",
                ),
                true,
                Some(Action::FailJob),
            ),
            (
                "no policy rules",
                None,
                pod(&[("", Some(2))], &[], &[]),
                None,
                true,
                None,
            ),
            (
                "ignore rule matched for exit codes",
                Some(vec![exit_rule("Ignore", None, "In", &[1, 2, 3])]),
                pod(&[("", Some(2))], &[], &[]),
                None,
                false,
                Some(Action::Ignore),
            ),
            (
                "ignore rule matched on negative exit codes - needed for Windows support",
                Some(vec![exit_rule(
                    "Ignore",
                    None,
                    "In",
                    &[-1073741676, -1073741510],
                )]),
                pod(&[("", Some(-1073741510))], &[], &[]),
                None,
                false,
                Some(Action::Ignore),
            ),
            (
                "FailJob rule matched for exit codes",
                Some(vec![exit_rule("FailJob", None, "In", &[1, 2, 3])]),
                pod(&[("main-container", Some(2))], &[], &[]),
                Some(
                    "Container main-container for pod default/mypod failed with exit code 2 matching FailJob rule at index 0",
                ),
                true,
                Some(Action::FailJob),
            ),
            (
                "successful containers are skipped by the rules",
                Some(vec![exit_rule("FailJob", None, "NotIn", &[111])]),
                pod(
                    &[
                        ("main-container", Some(111)),
                        ("suppport-container", Some(0)),
                    ],
                    &[("init-container", 0)],
                    &[],
                ),
                None,
                true,
                None,
            ),
            (
                "FailIndex rule matched for exit codes",
                Some(vec![exit_rule("FailIndex", None, "In", &[1, 2, 3])]),
                pod(&[("", Some(2))], &[], &[]),
                None,
                true,
                Some(Action::FailIndex),
            ),
            (
                "pod failure policy with NotIn operator and value 0",
                Some(vec![exit_rule("FailJob", None, "NotIn", &[0])]),
                pod(
                    &[("main-container", Some(1)), ("suppport-container", Some(0))],
                    &[],
                    &[],
                ),
                Some(
                    "Container main-container for pod default/mypod failed with exit code 1 matching FailJob rule at index 0",
                ),
                true,
                Some(Action::FailJob),
            ),
            (
                "second jobfail rule matched for exit codes",
                Some(vec![
                    exit_rule("Count", None, "In", &[1, 2, 3]),
                    exit_rule("FailJob", None, "In", &[4, 5, 6]),
                ]),
                pod(&[("main-container", Some(6))], &[], &[]),
                Some(
                    "Container main-container for pod default/mypod failed with exit code 6 matching FailJob rule at index 1",
                ),
                true,
                Some(Action::FailJob),
            ),
            (
                "count rule matched for exit codes",
                Some(vec![exit_rule("Count", None, "In", &[1, 2, 3])]),
                pod(&[("foo", None), ("bar", Some(2))], &[], &[]),
                None,
                true,
                Some(Action::Count),
            ),
            (
                "FailIndex rule matched for pod conditions",
                Some(vec![cond_rule("FailIndex", dt, Some("True"))]),
                pod(&[], &[], &[(dt, "True")]),
                None,
                true,
                Some(Action::FailIndex),
            ),
            (
                "ignore rule matched for pod conditions",
                Some(vec![cond_rule("Ignore", dt, Some("True"))]),
                pod(&[], &[], &[(dt, "True")]),
                None,
                false,
                Some(Action::Ignore),
            ),
            (
                "ignore rule matches by the status=False",
                Some(vec![cond_rule("Ignore", dt, Some("False"))]),
                pod(&[], &[], &[(dt, "False")]),
                None,
                false,
                Some(Action::Ignore),
            ),
            (
                "ignore rule matches by the status=Unknown",
                Some(vec![cond_rule("Ignore", dt, Some("Unknown"))]),
                pod(&[], &[], &[(dt, "Unknown")]),
                None,
                false,
                Some(Action::Ignore),
            ),
            (
                "ignore rule does not match when status for pattern is False, but actual True",
                Some(vec![cond_rule("Ignore", dt, Some("False"))]),
                pod(&[], &[], &[(dt, "True")]),
                None,
                true,
                None,
            ),
            (
                "ignore rule does not match when status for pattern is True, but actual False",
                Some(vec![cond_rule("Ignore", dt, Some("True"))]),
                pod(&[], &[], &[(dt, "False")]),
                None,
                true,
                None,
            ),
            (
                "default - do not match condition with status=False",
                Some(vec![cond_rule("Ignore", dt, None)]),
                pod(&[], &[], &[(dt, "False")]),
                None,
                true,
                None,
            ),
            (
                "job fail rule matched for pod conditions",
                Some(vec![cond_rule("FailJob", dt, Some("True"))]),
                pod(&[], &[], &[(dt, "True")]),
                Some(
                    "Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 0",
                ),
                true,
                Some(Action::FailJob),
            ),
            (
                "count rule matched for pod conditions",
                Some(vec![cond_rule("Count", dt, Some("True"))]),
                pod(&[], &[], &[(dt, "True")]),
                None,
                true,
                Some(Action::Count),
            ),
            (
                "no rule matched: the first rule counts",
                Some(vec![
                    exit_rule("Count", None, "NotIn", &[8]),
                    exit_rule("Ignore", None, "In", &[1, 2, 3]),
                    exit_rule("FailJob", None, "NotIn", &[5, 6, 7]),
                    cond_rule("Count", "ResourceLimitExceeded", Some("True")),
                    cond_rule("Ignore", dt, Some("True")),
                ]),
                pod(&[("", Some(32))], &[], &[]),
                None,
                true,
                Some(Action::Count),
            ),
            (
                "expected matching rule returned",
                Some(vec![
                    cond_rule("FailJob", "MaxFailedIndexesExceeded", Some("True")),
                    cond_rule("Ignore", dt, Some("True")),
                ]),
                pod(&[], &[], &[(dt, "True")]),
                None,
                false,
                Some(Action::Ignore),
            ),
        ];
        for (name, rules, p, msg, count, action) in cases {
            let pol = rules.map(policy);
            let m = match_pod(pol.as_ref(), &p);
            assert_eq!(m.fail_job_message.as_deref(), msg, "{name}: message");
            assert_eq!(m.count_failed, count, "{name}: count");
            assert_eq!(m.action, action, "{name}: action");
        }
    }
}
