//! Job conditions: creating them and updating them in place the way upstream does, so that an
//! unchanged condition keeps its timestamps.

use kbatch_api::k8s_openapi::api::batch::v1::JobCondition;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbatch_api::k8s_openapi::jiff::Timestamp;

/// A `True` condition with both timestamps at `now`.
pub fn new(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    with_status(type_, "True", reason, message, now)
}

fn with_status(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn find<'a>(conds: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conds.iter().find(|c| c.type_ == type_)
}

pub fn is_true(conds: &[JobCondition], type_: &str) -> bool {
    find(conds, type_).is_some_and(|c| c.status == "True")
}

/// Sets the condition of `type_` to the given status, reason and message. An existing one
/// that differs in any of them is replaced whole (fresh timestamps); a missing one is added
/// unless its status would be `False`, which says nothing new. Returns whether it changed.
pub fn ensure(
    conds: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status
            || c.reason.as_deref().unwrap_or("") != reason
            || c.message.as_deref().unwrap_or("") != message
        {
            *c = with_status(type_, status, reason, message, now);
            return true;
        }
        return false;
    }
    if status != "False" {
        conds.push(with_status(type_, status, reason, message, now));
        return true;
    }
    false
}

#[cfg(test)]
// Scenario tables read best as tuples.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    #[test]
    fn ensure_table() {
        let t0 = Timestamp::UNIX_EPOCH;
        let t1 = Timestamp::from_second(100).unwrap_or(t0);
        // (existing (status, reason, msg), wanted (status, reason, msg), want changed, want len)
        let cases: &[(Option<(&str, &str, &str)>, (&str, &str, &str), bool, usize)] = &[
            (None, ("False", "r", "m"), false, 0),
            (None, ("True", "r", "m"), true, 1),
            (Some(("True", "r", "m")), ("True", "r", "m"), false, 1),
            (Some(("True", "r", "m")), ("False", "r", "m"), true, 1),
            (Some(("True", "r", "m")), ("True", "r2", "m"), true, 1),
            (Some(("False", "r", "m")), ("False", "r", "m2"), true, 1),
        ];
        for (existing, (s, r, m), changed, len) in cases {
            let mut conds: Vec<JobCondition> = existing
                .iter()
                .map(|(s, r, m)| with_status("Suspended", s, r, m, t0))
                .collect();
            assert_eq!(
                ensure(&mut conds, "Suspended", s, r, m, t1),
                *changed,
                "{existing:?} -> {s} {r} {m}"
            );
            assert_eq!(conds.len(), *len);
            if *changed {
                assert_eq!(conds[0].last_transition_time, Some(Time(t1)));
            }
        }
    }
}
