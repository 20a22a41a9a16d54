//! Completion indexes of Indexed Jobs: ordered index intervals, the `completedIndexes` /
//! `failedIndexes` strings, which indexes to create next, and which pods of a repeated or
//! invalid index to remove.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::keys;

use super::pods;

/// An inclusive range of completion indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub first: i32,
    pub last: i32,
}

/// Sorted, non-overlapping, non-adjacent intervals: the canonical form of an index list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<Interval>);

impl Intervals {
    /// Parses an index list leniently, as the controller does with what it reads back from
    /// status: fragments that do not parse are skipped and indexes at or beyond `completions`
    /// are dropped (the list may predate a scale down). Strict parsing is the API server's job.
    pub fn parse(s: &str, completions: i32) -> Intervals {
        let mut out = Intervals::default();
        if s.is_empty() {
            return out;
        }
        for fragment in s.split(',') {
            let mut limits = fragment.split('-');
            let first = match limits.next().map(str::parse::<i32>) {
                Some(Ok(v)) if v >= 0 => v,
                _ => continue,
            };
            if first >= completions {
                // Lists are increasing, so nothing later can be in range either.
                break;
            }
            let last = match limits.next() {
                None => first,
                Some(l) => match l.parse::<i32>() {
                    Ok(v) if v >= first => v.min(completions - 1),
                    _ => continue,
                },
            };
            out.push(Interval { first, last });
        }
        out
    }

    /// Appends an interval that starts after every existing one, merging adjacency.
    fn push(&mut self, iv: Interval) {
        match self.0.last_mut() {
            Some(prev) if prev.last.saturating_add(1) >= iv.first => {
                prev.last = prev.last.max(iv.last);
            }
            _ => self.0.push(iv),
        }
    }

    /// The number of indexes in the list.
    pub fn total(&self) -> i64 {
        self.0
            .iter()
            .map(|iv| i64::from(iv.last) - i64::from(iv.first) + 1)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn has(&self, ix: i32) -> bool {
        // Binary search: index lists of large Jobs hold many intervals.
        self.0
            .binary_search_by(|iv| {
                if iv.last < ix {
                    Ordering::Less
                } else if iv.first > ix {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                }
            })
            .is_ok()
    }

    /// The union with a set of single indexes.
    pub fn with_indexes<I: IntoIterator<Item = i32>>(&self, indexes: I) -> Intervals {
        let set: BTreeSet<i32> = indexes.into_iter().collect();
        let other = Intervals(
            set.into_iter()
                .map(|i| Interval { first: i, last: i })
                .collect(),
        );
        self.merge(&other)
    }

    /// The union of two lists.
    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<Interval> = self.0.iter().chain(other.0.iter()).copied().collect();
        all.sort_by_key(|iv| (iv.first, iv.last));
        let mut out = Intervals::default();
        for iv in all {
            out.push(iv);
        }
        out
    }

    /// The indexes of `self` that are not in `other`.
    pub fn without(&self, other: &Intervals) -> Intervals {
        let mut out = Intervals::default();
        let mut j = 0usize;
        for iv in &self.0 {
            let mut first = iv.first;
            // Skip the intervals of `other` that end before this one starts.
            while j < other.0.len() && other.0[j].last < first {
                j += 1;
            }
            let mut k = j;
            while first <= iv.last {
                match other.0.get(k) {
                    Some(o) if o.first <= iv.last => {
                        if o.first > first {
                            out.push(Interval {
                                first,
                                last: o.first - 1,
                            });
                        }
                        match o.last.checked_add(1) {
                            Some(next) => first = first.max(next),
                            None => break,
                        }
                        k += 1;
                    }
                    _ => {
                        out.push(Interval {
                            first,
                            last: iv.last,
                        });
                        break;
                    }
                }
            }
        }
        out
    }

    /// Every index in the list, in order. Only for lists known to be small.
    pub fn indexes(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.iter().flat_map(|iv| iv.first..=iv.last)
    }
}

impl std::fmt::Display for Intervals {
    /// "1,3-5,7": two consecutive indexes are written as a pair, three or more as a range.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, iv) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if iv.first == iv.last {
                write!(f, "{}", iv.first)?;
            } else if iv.first.checked_add(1) == Some(iv.last) {
                write!(f, "{},{}", iv.first, iv.last)?;
            } else {
                write!(f, "{}-{}", iv.first, iv.last)?;
            }
        }
        Ok(())
    }
}

/// The completion index of a pod, from its annotation; `None` when missing or malformed.
pub fn completion_index(pod: &Pod) -> Option<i32> {
    let v = pod
        .metadata
        .annotations
        .as_ref()?
        .get(keys::JOB_COMPLETION_INDEX_ANNOTATION)?;
    match v.parse::<i32>() {
        Ok(ix) if ix >= 0 => Some(ix),
        _ => None,
    }
}

/// The completion index when it is valid for a Job with `completions`.
pub fn valid_index(pod: &Pod, completions: i32) -> Option<i32> {
    completion_index(pod).filter(|&ix| ix < completions)
}

/// Indexes of the given pods (any value, in range or not).
pub fn indexes_of<'a, I: IntoIterator<Item = &'a Pod>>(pods: I) -> BTreeSet<i32> {
    pods.into_iter().filter_map(completion_index).collect()
}

/// The lowest `count` indexes below `completions` that are not in `non_pending`.
pub fn first_pending_indexes(non_pending: &Intervals, count: usize, completions: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if count == 0 {
        return out;
    }
    let mut candidate: i32 = 0;
    for iv in &non_pending.0 {
        while candidate < completions && out.len() < count && candidate < iv.first {
            out.push(candidate);
            candidate += 1;
        }
        if candidate <= iv.last {
            candidate = iv.last.saturating_add(1);
        }
    }
    while candidate < completions && out.len() < count {
        out.push(candidate);
        candidate += 1;
    }
    out
}

/// Splits active pods of an Indexed Job into those that must go and the rest. Going, in
/// this order: pods without a valid index, the extra pods of a repeated index (each index
/// keeps its best pod by deletion preference), then pods whose index is at or beyond
/// `completions`, by index.
pub fn split_invalid_and_duplicates<'a>(
    active: &[&'a Pod],
    completions: i32,
) -> (Vec<&'a Pod>, Vec<&'a Pod>) {
    let mut rm = Vec::new();
    let mut keep = Vec::new();
    let mut in_range: BTreeMap<i32, Vec<&'a Pod>> = BTreeMap::new();
    let mut out_of_range: BTreeMap<i32, Vec<&'a Pod>> = BTreeMap::new();
    for &p in active {
        match completion_index(p) {
            None => rm.push(p),
            Some(ix) if ix >= completions => out_of_range.entry(ix).or_default().push(p),
            Some(ix) => in_range.entry(ix).or_default().push(p),
        }
    }
    for (_, mut group) in in_range {
        // The last pod in deletion-preference order is the one most worth keeping.
        group.sort_by(|a, b| pods::active_pods_cmp(a, b));
        if let Some(best) = group.pop() {
            rm.extend(group);
            keep.push(best);
        }
    }
    rm.extend(out_of_range.into_values().flatten());
    (rm, keep)
}

/// The succeeded indexes recorded in `completedIndexes` (within range) and those plus the
/// indexes of succeeded pods not yet accounted for (still holding the tracking finalizer).
pub fn succeeded_indexes(
    completed_indexes: &str,
    pods: &[&Pod],
    completions: i32,
) -> (Intervals, Intervals) {
    let prev = Intervals::parse(completed_indexes, completions);
    let new = pods
        .iter()
        .filter(|p| super::pods::is_succeeded(p) && super::pods::has_tracking_finalizer(p))
        .filter_map(|p| valid_index(p, completions));
    let all = prev.with_indexes(new);
    (prev, all)
}

/// `<job>-<index>-`, cut so that the prefix fits in the 58 characters a generated name may
/// use while keeping the index suffix intact.
pub fn generate_name_with_index(job_name: &str, index: i32) -> String {
    const MAX_GENERATED_NAME_LENGTH: usize = 58;
    let suffix = format!("-{index}-");
    let full = format!("{job_name}{suffix}");
    if full.len() <= MAX_GENERATED_NAME_LENGTH {
        return full;
    }
    let keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(suffix.len());
    let mut cut = keep.min(job_name.len());
    while !job_name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &job_name[..cut])
}

#[cfg(test)]
// Scenario tables read best as tuples.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    fn iv(v: &[(i32, i32)]) -> Intervals {
        Intervals(
            v.iter()
                .map(|&(first, last)| Interval { first, last })
                .collect(),
        )
    }

    #[test]
    fn parse_table() {
        let cases: &[(&str, i32, &[(i32, i32)])] = &[
            ("", 0, &[]),
            ("", 4, &[]),
            ("1,3", 4, &[(1, 1), (3, 3)]),
            ("0-2", 4, &[(0, 2)]),
            ("0,1,2", 4, &[(0, 2)]),
            ("1-3,5,7-9", 10, &[(1, 3), (5, 5), (7, 9)]),
            ("2-4,6,8-15", 10, &[(2, 4), (6, 6), (8, 9)]),
            ("0-2,3-4,5", 6, &[(0, 5)]),
            ("a,1,b-2,3", 5, &[(1, 1), (3, 3)]),
            ("0,5", 3, &[(0, 0)]),
            ("10-11", 10, &[]),
        ];
        for (s, c, want) in cases {
            assert_eq!(
                Intervals::parse(s, *c),
                iv(want),
                "parse {s:?} completions {c}"
            );
        }
    }

    #[test]
    fn format_table() {
        let cases: &[(&[(i32, i32)], &str)] = &[
            (&[], ""),
            (&[(0, 0)], "0"),
            (&[(0, 1)], "0,1"),
            (&[(0, 2)], "0-2"),
            (&[(1, 1), (3, 5), (7, 8), (10, 10)], "1,3-5,7,8,10"),
        ];
        for (v, want) in cases {
            assert_eq!(iv(v).to_string(), *want);
        }
    }

    #[test]
    fn with_indexes_and_merge_table() {
        let cases: &[(&[(i32, i32)], &[i32], &[(i32, i32)])] = &[
            (&[], &[], &[]),
            (&[], &[2, 4, 5, 6, 8], &[(2, 2), (4, 6), (8, 8)]),
            (
                &[(3, 5), (7, 7), (9, 9)],
                &[0, 1, 3],
                &[(0, 1), (3, 5), (7, 7), (9, 9)],
            ),
            (
                &[(3, 5), (7, 7), (9, 9)],
                &[0, 1, 2],
                &[(0, 5), (7, 7), (9, 9)],
            ),
            (&[(3, 5), (7, 9)], &[6], &[(3, 9)]),
            (&[(0, 2)], &[1, 2, 5], &[(0, 2), (5, 5)]),
        ];
        for (base, add, want) in cases {
            assert_eq!(iv(base).with_indexes(add.iter().copied()), iv(want));
        }
        assert_eq!(
            iv(&[(0, 1), (5, 6)]).merge(&iv(&[(2, 3), (8, 9)])),
            iv(&[(0, 3), (5, 6), (8, 9)])
        );
        assert_eq!(iv(&[(0, 10)]).merge(&iv(&[(2, 3)])), iv(&[(0, 10)]));
    }

    #[test]
    fn first_pending_indexes_table() {
        let cases: &[(&[(i32, i32)], usize, i32, &[i32])] = &[
            (&[], 0, 3, &[]),
            (&[], 2, 3, &[0, 1]),
            (&[(0, 0), (2, 2)], 3, 5, &[1, 3, 4]),
            (&[(1, 2)], 3, 5, &[0, 3, 4]),
            (&[(0, 4)], 2, 5, &[]),
            (&[(2, 4), (6, 6), (8, 9)], 5, 20, &[0, 1, 5, 7, 10]),
            (&[], 10, 3, &[0, 1, 2]),
        ];
        for (np, count, c, want) in cases {
            assert_eq!(first_pending_indexes(&iv(np), *count, *c), want.to_vec());
        }
    }

    fn index_phase(ix: &str, phase: &str) -> Pod {
        let mut p = crate::job::testutil::new_pod_in_phase(phase);
        if ix != "-" {
            crate::job::testutil::annotate(&mut p, keys::JOB_COMPLETION_INDEX_ANNOTATION, ix);
        }
        p
    }

    fn to_index_phases(pods: &[&Pod]) -> Vec<(String, String)> {
        pods.iter()
            .map(|p| {
                let ix = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(keys::JOB_COMPLETION_INDEX_ANNOTATION))
                    .cloned()
                    .unwrap_or_else(|| "-".into());
                (ix, super::pods::phase(p).to_string())
            })
            .collect()
    }

    #[test]
    fn calculate_succeeded_indexes_table() {
        // (name, completedIndexes, pods (index, phase), completions, want prev, want all)
        let s = "Succeeded";
        let f = "Failed";
        let cases: &[(
            &str,
            &str,
            &[(&str, &str)],
            i32,
            &[(i32, i32)],
            &[(i32, i32)],
        )] = &[
            ("one index", "", &[("1", s)], 2, &[], &[(1, 1)]),
            (
                "two separate",
                "",
                &[("2", f), ("5", s), ("5", s), ("10", f), ("10", s)],
                11,
                &[],
                &[(5, 5), (10, 10)],
            ),
            (
                "two intervals",
                "",
                &[
                    ("0", "Running"),
                    ("1", "Pending"),
                    ("2", s),
                    ("3", s),
                    ("5", s),
                    ("6", s),
                    ("7", s),
                ],
                8,
                &[],
                &[(2, 3), (5, 7)],
            ),
            (
                "one index and one interval",
                "",
                &[
                    ("0", s),
                    ("1", f),
                    ("2", s),
                    ("3", s),
                    ("4", s),
                    ("5", s),
                    ("-", s),
                    ("-2", s),
                ],
                6,
                &[],
                &[(0, 0), (2, 5)],
            ),
            (
                "out of range",
                "",
                &[
                    ("0", s),
                    ("1", s),
                    ("2", s),
                    ("3", f),
                    ("4", s),
                    ("5", s),
                    ("-", s),
                    ("-2", s),
                ],
                5,
                &[],
                &[(0, 2), (4, 4)],
            ),
            (
                "prev interval out of range",
                "0-5,8-10",
                &[],
                8,
                &[(0, 5)],
                &[(0, 5)],
            ),
            (
                "prev interval partially out of range",
                "0-5,8-10",
                &[],
                10,
                &[(0, 5), (8, 9)],
                &[(0, 5), (8, 9)],
            ),
            (
                "prev and new separate",
                "0,4,5,10-12",
                &[("2", s), ("7", s), ("8", s)],
                13,
                &[(0, 0), (4, 5), (10, 12)],
                &[(0, 0), (2, 2), (4, 5), (7, 8), (10, 12)],
            ),
            (
                "prev between new",
                "3,4,6",
                &[("2", s), ("7", s), ("8", s)],
                9,
                &[(3, 4), (6, 6)],
                &[(2, 4), (6, 8)],
            ),
            (
                "new between prev",
                "2,7,8",
                &[("3", s), ("4", s), ("6", s)],
                9,
                &[(2, 2), (7, 8)],
                &[(2, 4), (6, 8)],
            ),
            (
                "new within prev",
                "2-7",
                &[("0", s), ("3", s), ("5", s), ("9", s)],
                10,
                &[(2, 7)],
                &[(0, 0), (2, 7), (9, 9)],
            ),
            (
                "corrupted interval",
                "0,1-foo,bar",
                &[("3", s)],
                4,
                &[(0, 0)],
                &[(0, 0), (3, 3)],
            ),
        ];
        for (name, prev, pods, c, want_prev, want_all) in cases {
            let pods: Vec<Pod> = pods.iter().map(|(ix, ph)| index_phase(ix, ph)).collect();
            let pods: Vec<&Pod> = pods.iter().collect();
            let (got_prev, got_all) = succeeded_indexes(prev, &pods, *c);
            assert_eq!(got_prev, iv(want_prev), "{name}: prev");
            assert_eq!(got_all, iv(want_all), "{name}: all");
        }
    }

    #[test]
    fn intervals_have_index_table() {
        let cases: &[(&[(i32, i32)], i32, bool)] = &[
            (&[], 4, false),
            (&[(2, 4), (5, 7)], 1, false),
            (&[(2, 4), (6, 8)], 9, false),
            (&[(2, 4), (6, 8)], 5, false),
            (&[(2, 4), (6, 8)], 2, true),
            (&[(2, 4), (6, 8)], 8, true),
        ];
        for (l, ix, want) in cases {
            assert_eq!(iv(l).has(*ix), *want, "{l:?} has {ix}");
        }
    }

    #[test]
    fn first_pending_indexes_upstream_table() {
        // (name, count, completions, active (index, phase), succeeded, want)
        let cases: &[(&str, usize, i32, &[(&str, &str)], &[(i32, i32)], &[i32])] = &[
            ("cnt greater than completions", 5, 3, &[], &[], &[0, 1, 2]),
            ("cnt less than completions", 2, 5, &[], &[], &[0, 1]),
            (
                "first pods active",
                3,
                10,
                &[("0", "Running"), ("1", "Pending")],
                &[],
                &[2, 3, 4],
            ),
            (
                "last pods active or succeeded",
                6,
                6,
                &[("6", "Pending")],
                &[(4, 5)],
                &[0, 1, 2, 3],
            ),
            (
                "mixed",
                5,
                20,
                &[
                    ("3", "Pending"),
                    ("5", "Running"),
                    ("8", "Pending"),
                    ("-", "Running"),
                    ("-3", "Running"),
                ],
                &[(2, 4), (9, 9)],
                &[0, 1, 6, 7, 10],
            ),
        ];
        for (name, count, c, active, succ, want) in cases {
            let pods: Vec<Pod> = active.iter().map(|(ix, ph)| index_phase(ix, ph)).collect();
            let non_pending = iv(succ).with_indexes(indexes_of(pods.iter()));
            assert_eq!(
                first_pending_indexes(&non_pending, *count, *c),
                want.to_vec(),
                "{name}"
            );
        }
    }

    #[test]
    fn duplicated_index_pods_for_removal_table() {
        type IP<'a> = &'a [(&'a str, &'a str)];
        let (p, r) = ("Pending", "Running");
        // (name, pods, completions, want removed, want kept)
        let cases: &[(&str, IP, i32, IP, IP)] = &[
            (
                "all unique",
                &[("-", p), ("2", p), ("5", r), ("6", r)],
                6,
                &[("-", p), ("6", r)],
                &[("2", p), ("5", r)],
            ),
            (
                "all with index",
                &[
                    ("5", p),
                    ("0", r),
                    ("3", p),
                    ("0", r),
                    ("3", r),
                    ("0", p),
                    ("6", r),
                    ("6", p),
                ],
                6,
                &[("0", p), ("0", r), ("3", p), ("6", r), ("6", p)],
                &[("0", r), ("3", r), ("5", p)],
            ),
            (
                "mixed",
                &[
                    ("-", p),
                    ("invalid", r),
                    ("-2", r),
                    ("0", p),
                    ("1", p),
                    ("1", p),
                    ("1", r),
                ],
                6,
                &[("-", p), ("invalid", r), ("-2", r), ("1", p), ("1", p)],
                &[("0", p), ("1", r)],
            ),
        ];
        for (name, pods, c, want_rm, want_keep) in cases {
            let pods: Vec<Pod> = pods.iter().map(|(ix, ph)| index_phase(ix, ph)).collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            let (rm, keep) = split_invalid_and_duplicates(&refs, *c);
            let owned = |v: IP| -> Vec<(String, String)> {
                v.iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect()
            };
            assert_eq!(to_index_phases(&rm), owned(want_rm), "{name}: removed");
            assert_eq!(to_index_phases(&keep), owned(want_keep), "{name}: kept");
        }
    }

    #[test]
    fn pod_generate_name_with_index_table() {
        let cases: &[(&str, i32, &str)] = &[
            ("indexed-job", 1, "indexed-job-1-"),
            (
                "hhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhooooo",
                1,
                "hhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhh-1-",
            ),
            (
                "hhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhoo",
                1,
                "hhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhhooooohhhhh-1-",
            ),
        ];
        for (job, ix, want) in cases {
            assert_eq!(generate_name_with_index(job, *ix), *want);
        }
    }

    #[test]
    fn generate_name_keeps_index_suffix() {
        assert_eq!(generate_name_with_index("foobar", 3), "foobar-3-");
        let long = "a".repeat(70);
        let got = generate_name_with_index(&long, 12);
        assert_eq!(got.len(), 58);
        assert!(got.ends_with("-12-"));
    }

    #[test]
    fn without_table() {
        let cases: &[(&[(i32, i32)], &[(i32, i32)], &[(i32, i32)])] = &[
            (&[], &[(0, 3)], &[]),
            (&[(0, 5)], &[], &[(0, 5)]),
            (&[(0, 5)], &[(2, 3)], &[(0, 1), (4, 5)]),
            (&[(0, 5)], &[(0, 5)], &[]),
            (&[(0, 5), (8, 9)], &[(4, 8)], &[(0, 3), (9, 9)]),
            (&[(2, 4)], &[(0, 0), (3, 3), (7, 9)], &[(2, 2), (4, 4)]),
            (&[(0, 1), (3, 4), (6, 7)], &[(1, 6)], &[(0, 0), (7, 7)]),
        ];
        for (a, b, want) in cases {
            assert_eq!(iv(a).without(&iv(b)), iv(want), "{a:?} - {b:?}");
        }
    }

    #[test]
    fn has_uses_intervals() {
        let l = iv(&[(1, 3), (7, 7)]);
        assert!(l.has(1) && l.has(3) && l.has(7));
        assert!(!l.has(0) && !l.has(4) && !l.has(8));
        assert_eq!(l.total(), 4);
    }
}
