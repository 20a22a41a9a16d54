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

    #[test]
    fn match_success_policy_upstream_table() {
        use crate::job::indexed::Interval;
        type Rules<'a> = &'a [(Option<&'a str>, Option<i32>)];
        // (name, succeeded intervals, rules, want matched rule); completions is 10 throughout.
        let cases: &[(&str, &[(i32, i32)], Option<Rules>, Option<usize>)] = &[
            ("successPolicy is null", &[(0, 0)], None, None),
            ("any rules are nothing", &[(0, 0)], Some(&[]), None),
            (
                "succeededIndexes is invalid format",
                &[(0, 0)],
                Some(&[(Some("invalid-form"), None)]),
                None,
            ),
            (
                "succeededIndexes matched",
                &[(0, 2), (4, 7)],
                Some(&[(Some("0-2"), None)]),
                Some(0),
            ),
            (
                "succeededIndexes didn't match",
                &[(0, 2)],
                Some(&[(Some("3"), None)]),
                None,
            ),
            (
                "succeededCount matched",
                &[(0, 2)],
                Some(&[(None, Some(2))]),
                Some(0),
            ),
            (
                "succeededCount didn't match",
                &[(0, 2)],
                Some(&[(None, Some(4))]),
                None,
            ),
            (
                "multiple rules, one met",
                &[(0, 2), (4, 7)],
                Some(&[(Some("9"), None), (Some("4,6"), None)]),
                Some(1),
            ),
            (
                "multiple rules, all met",
                &[(0, 2), (4, 7)],
                Some(&[(Some("0,1"), None), (Some("5"), None)]),
                Some(0),
            ),
            (
                "indexes and count met",
                &[(0, 2), (4, 7)],
                Some(&[(Some("3-6"), Some(2))]),
                Some(0),
            ),
            (
                "indexes and count not met",
                &[(0, 2), (6, 7)],
                Some(&[(Some("3-6"), Some(2))]),
                None,
            ),
            ("no succeeded indexes", &[], Some(&[(None, Some(4))]), None),
            (
                "rule is a proper subset",
                &[(1, 5), (6, 9)],
                Some(&[(Some("2-4,6-8"), None)]),
                Some(0),
            ),
            (
                "rule equals succeeded",
                &[(2, 4), (6, 9)],
                Some(&[(Some("2-4,6-9"), None)]),
                Some(0),
            ),
            (
                "rule is a subset",
                &[(2, 5), (7, 15)],
                Some(&[(Some("2-4,8-12"), None)]),
                Some(0),
            ),
            (
                "rule is an empty set",
                &[(1, 3)],
                Some(&[(Some(""), None)]),
                None,
            ),
            (
                "succeeded is an empty set",
                &[],
                Some(&[(Some(""), None)]),
                None,
            ),
            (
                "rule outside succeeded",
                &[(1, 3), (5, 7)],
                Some(&[(Some("10-12,14-16"), None)]),
                None,
            ),
            (
                "rule overlaps at first",
                &[(2, 4), (6, 8)],
                Some(&[(Some("1-3,5-7"), None)]),
                None,
            ),
            (
                "rule overlaps at first, with count",
                &[(2, 4), (6, 8)],
                Some(&[(Some("1-3,5-7"), Some(4))]),
                Some(0),
            ),
            (
                "rule overlaps at last",
                &[(1, 3), (5, 7)],
                Some(&[(Some("2-4,6-9"), None)]),
                None,
            ),
            (
                "rule overlaps at last, with count",
                &[(1, 3), (5, 7)],
                Some(&[(Some("2-4,6-9"), Some(4))]),
                Some(0),
            ),
            (
                "rule completely overlaps",
                &[(1, 3), (7, 8)],
                Some(&[(Some("0-4,6-9"), None)]),
                None,
            ),
            (
                "rule completely overlaps, with count",
                &[(1, 3), (7, 8)],
                Some(&[(Some("0-4,6-9"), Some(5))]),
                Some(0),
            ),
            (
                "rule overlaps multiple at last",
                &[(1, 3), (5, 9)],
                Some(&[(Some("0-6,8-9"), None)]),
                None,
            ),
            (
                "rule overlaps multiple at last, with count",
                &[(1, 3), (5, 9)],
                Some(&[(Some("0-6,8-9"), Some(7))]),
                Some(0),
            ),
            (
                "rule overlaps at first and equals at last",
                &[(1, 5), (7, 10)],
                Some(&[(Some("0-5,7-9"), None)]),
                None,
            ),
            (
                "rule overlaps at first and equals at last, with count",
                &[(1, 5), (7, 10)],
                Some(&[(Some("0-5,7-9"), Some(8))]),
                Some(0),
            ),
            (
                "first rule overlaps at first",
                &[(1, 10)],
                Some(&[(Some("0-3,6-9"), None)]),
                None,
            ),
            (
                "first rule overlaps at first, with count",
                &[(1, 10)],
                Some(&[(Some("0-3,6-9"), Some(7))]),
                Some(0),
            ),
        ];
        for (name, succeeded, rules, want) in cases {
            let policy = rules.map(|r| SuccessPolicy {
                rules: r.iter().map(|(ix, c)| rule(*ix, *c)).collect(),
            });
            let succeeded = Intervals(
                succeeded
                    .iter()
                    .map(|&(first, last)| Interval { first, last })
                    .collect(),
            );
            let got = match_success_policy(policy.as_ref(), 10, &succeeded);
            assert_eq!(
                got,
                want.map(|i| format!("Matched rules at index {i}")),
                "{name}"
            );
        }
    }
}
