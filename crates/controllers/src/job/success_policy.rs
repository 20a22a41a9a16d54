//! Success policy of Indexed Jobs: whether the succeeded indexes satisfy one of the rules,
//! which lets the Job succeed before every index has.

use kbatch_api::k8s_openapi::api::batch::v1::SuccessPolicy;

use super::indexed::Intervals;

/// The `SuccessCriteriaMet` message when rule `index` matched, or `None` if no rule matches.
pub fn match_success_policy(
    policy: Option<&SuccessPolicy>,
    completions: i32,
    succeeded: &Intervals,
) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (i, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(listed) = rule.succeeded_indexes.as_deref() {
            let required = Intervals::parse(listed, completions);
            // A list that names no index in range cannot be satisfied meaningfully.
            !required.is_empty() && indexes_rule_met(&required, succeeded, rule.succeeded_count)
        } else if let Some(count) = rule.succeeded_count {
            succeeded.total() >= i64::from(count)
        } else {
            false
        };
        if matched {
            return Some(format!("Matched rules at index {i}"));
        }
    }
    None
}

/// Whether every required index succeeded or, with `count`, at least `count` of them did.
fn indexes_rule_met(required: &Intervals, succeeded: &Intervals, count: Option<i32>) -> bool {
    let (mut r, mut s) = (0usize, 0usize);
    let mut contained: i64 = 0;
    while r < required.0.len() && s < succeeded.0.len() {
        let (ri, si) = (required.0[r], succeeded.0[s]);
        let overlap = i64::from(ri.last.min(si.last)) - i64::from(ri.first.max(si.first)) + 1;
        if overlap > 0 {
            contained += overlap;
        }
        if si.last < ri.last {
            s += 1;
        } else {
            r += 1;
        }
    }
    contained == required.total() || count.is_some_and(|c| contained >= i64::from(c))
}

#[cfg(test)]
// Scenario tables read best as tuples.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use kbatch_api::k8s_openapi::api::batch::v1::SuccessPolicyRule;

    fn rule(indexes: Option<&str>, count: Option<i32>) -> SuccessPolicyRule {
        SuccessPolicyRule {
            succeeded_indexes: indexes.map(Into::into),
            succeeded_count: count,
        }
    }

    #[test]
    fn match_table() {
        // (name, rules, completions, succeeded indexes, want rule index)
        let cases: Vec<(
            &str,
            Option<Vec<SuccessPolicyRule>>,
            i32,
            &str,
            Option<usize>,
        )> = vec![
            ("no policy", None, 10, "0-9", None),
            (
                "nothing succeeded",
                Some(vec![rule(None, Some(1))]),
                10,
                "",
                None,
            ),
            (
                "indexes met",
                Some(vec![rule(Some("0-2"), None)]),
                10,
                "0-3",
                Some(0),
            ),
            (
                "indexes partly met",
                Some(vec![rule(Some("0-2"), None)]),
                10,
                "0,1,4",
                None,
            ),
            (
                "count met",
                Some(vec![rule(None, Some(2))]),
                10,
                "3,7",
                Some(0),
            ),
            (
                "count not met",
                Some(vec![rule(None, Some(3))]),
                10,
                "3,7",
                None,
            ),
            (
                "indexes with count met",
                Some(vec![rule(Some("1,3,5-9"), Some(3))]),
                10,
                "0,3,5,6",
                Some(0),
            ),
            (
                "indexes with count not met",
                Some(vec![rule(Some("1,3,5-9"), Some(4))]),
                10,
                "0,3,5,6",
                None,
            ),
            (
                "second rule matches",
                Some(vec![rule(Some("0"), None), rule(None, Some(2))]),
                10,
                "4,5",
                Some(1),
            ),
            (
                "first rule wins",
                Some(vec![rule(None, Some(1)), rule(Some("4"), None)]),
                10,
                "4",
                Some(0),
            ),
            (
                "rule indexes out of range are ignored",
                Some(vec![rule(Some("20-30"), None)]),
                10,
                "0-9",
                None,
            ),
            (
                "malformed rule skipped",
                Some(vec![rule(Some("x"), None), rule(None, Some(1))]),
                10,
                "2",
                Some(1),
            ),
            (
                "multiple intervals met",
                Some(vec![rule(Some("0,2-4,8"), None)]),
                10,
                "0-5,7-9",
                Some(0),
            ),
        ];
        for (name, rules, c, succ, want) in cases {
            let policy = rules.map(|rules| SuccessPolicy { rules });
            let got = match_success_policy(policy.as_ref(), c, &Intervals::parse(succ, c));
            assert_eq!(
                got,
                want.map(|i| format!("Matched rules at index {i}")),
                "{name}"
            );
        }
    }
}
