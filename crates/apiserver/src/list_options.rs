//! The read-consistency part of ListOptions (`resourceVersion`, `resourceVersionMatch`,
//! `sendInitialEvents`, `allowWatchBookmarks`) as kube-apiserver's list and watch handler
//! takes it: the WatchList defaults first (`SetListOptionsDefaults`: a watch from `""` or `"0"`
//! asks for its initial events), then `ValidateListOptions` with the WatchList feature on (its
//! default since 1.34), whose errors are a 422 naming `ListOptions.meta.k8s.io`.
//!
//! What the options ask of the store is upstream's watch cache's reading of them: a watch
//! with initial events (a "watch list", what client-go's informers send since 1.35) gets the
//! current state as ADDED events, at least as new as its resourceVersion, then, when it allows
//! bookmarks, a bookmark annotated `k8s.io/initial-events-end` at the state's revision.

use std::time::Duration;

use kbatch_api::field::FieldError;
use serde_json::json;

use crate::error::ApiError;
use crate::request::{Query, parse_go_bool};

pub const NOT_OLDER_THAN: &str = "NotOlderThan";
pub const EXACT: &str = "Exact";
/// The annotation of the bookmark that ends a watch's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";
/// How long a read waits for the store to reach the resourceVersion it asked for
/// (upstream's watch cache `blockTimeout`).
pub const FRESHNESS_WAIT: Duration = Duration::from_secs(3);
/// The retry delay a too-large-resourceVersion error suggests (upstream's
/// `resourceVersionTooHighRetrySeconds`).
const TOO_LARGE_RETRY_SECONDS: u64 = 1;

/// The read options of one list or watch request, defaulted and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    pub watch: bool,
    /// `resourceVersion`, parsed: `None` when unset (the most recent state).
    pub resource_version: Option<u64>,
    pub resource_version_match: Option<String>,
    pub send_initial_events: Option<bool>,
    pub allow_watch_bookmarks: bool,
}

/// Where a watch starts and what it sends first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// The current state (once the store has reached `min_rv`) as ADDED events, then its
    /// changes; `end_bookmark` when the initial events end with a bookmark.
    InitialEvents { min_rv: u64, end_bookmark: bool },
    /// Changes after `rv` only.
    After(u64),
    /// Changes after whatever revision is current when the watch starts.
    Now,
}

fn parse_optional_bool(q: &Query, k: &str) -> Result<Option<bool>, ApiError> {
    match q.get(k) {
        None => Ok(None),
        Some(v) => parse_go_bool(v).map(Some).ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid value {v:?} for query parameter {k}: must be a boolean"
            ))
        }),
    }
}

impl ReadOptions {
    /// Reads, defaults and validates the options of a list (`watch` false) or watch request.
    pub fn from_query(q: &Query, watch: bool) -> Result<ReadOptions, ApiError> {
        let raw_rv = q.get("resourceVersion");
        let resource_version = crate::handlers::parse_resource_version(raw_rv)?;
        let mut o = ReadOptions {
            watch,
            resource_version,
            resource_version_match: q.get("resourceVersionMatch").map(str::to_string),
            send_initial_events: parse_optional_bool(q, "sendInitialEvents")?,
            allow_watch_bookmarks: q.bool("allowWatchBookmarks")?,
        };
        o.set_defaults();
        let errors = o.validate(q.get("continue").is_some(), raw_rv.is_some());
        if errors.is_empty() {
            Ok(o)
        } else {
            Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &errors))
        }
    }

    /// `SetListOptionsDefaults` with WatchList on: a watch from `""` or `"0"` that says
    /// nothing of initial events gets them, as a watch list would.
    fn set_defaults(&mut self) {
        if self.send_initial_events.is_some() || self.resource_version_match.is_some() {
            return;
        }
        if self.watch && matches!(self.resource_version, None | Some(0)) {
            self.send_initial_events = Some(true);
            self.resource_version_match = Some(NOT_OLDER_THAN.to_string());
        }
    }

    /// `ValidateListOptions` (WatchList on). `rv_set`: the request named a resourceVersion.
    fn validate(&self, continued: bool, rv_set: bool) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let matched = self.resource_version_match.as_deref();
        const FIELD: &str = "resourceVersionMatch";
        if self.watch {
            if self.send_initial_events.is_some() && matched != Some(NOT_OLDER_THAN) {
                errs.push(FieldError::forbidden(
                    FIELD,
                    format!("sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"),
                ));
            }
            if let Some(m) = matched {
                if self.send_initial_events.is_none() {
                    errs.push(FieldError::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != NOT_OLDER_THAN {
                    errs.push(FieldError::not_supported(FIELD, m, &[NOT_OLDER_THAN]));
                }
                if continued {
                    errs.push(FieldError::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return errs;
        }
        if let Some(m) = matched {
            if !rv_set {
                errs.push(FieldError::forbidden(
                    FIELD,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if continued {
                errs.push(FieldError::forbidden(
                    FIELD,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != EXACT && m != NOT_OLDER_THAN {
                errs.push(FieldError::not_supported(
                    FIELD,
                    m,
                    &[EXACT, NOT_OLDER_THAN, ""],
                ));
            }
            if m == EXACT && self.resource_version == Some(0) {
                errs.push(FieldError::forbidden(
                    FIELD,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        errs
    }

    /// How a watch with these options starts, `current` being the store's revision now
    /// (upstream's `getWatchCacheResourceVersion` and `getAllEventsSinceLocked`).
    pub fn watch_start(&self, current: u64) -> WatchStart {
        if self.send_initial_events == Some(true) {
            return WatchStart::InitialEvents {
                // No resourceVersion: the most recent state, read consistently.
                min_rv: self.resource_version.unwrap_or(current),
                end_bookmark: self.allow_watch_bookmarks,
            };
        }
        match self.resource_version {
            // Only reached without initial events said no to: the defaults turn a legacy
            // watch from "0" into a watch list.
            Some(0) if self.send_initial_events.is_none() => WatchStart::InitialEvents {
                min_rv: 0,
                end_bookmark: false,
            },
            Some(0) | None => WatchStart::Now,
            Some(rv) => WatchStart::After(rv),
        }
    }

    /// The revision a list must be read at exactly (`resourceVersionMatch=Exact`).
    pub fn exact_rv(&self) -> Option<u64> {
        match self.resource_version_match.as_deref() {
            Some(EXACT) => self.resource_version,
            _ => None,
        }
    }

    /// The revision a list must be at least as new as, if any: a resourceVersion other than
    /// `"0"`, unless matched exactly.
    pub fn list_min_rv(&self) -> Option<u64> {
        match (
            self.resource_version,
            self.resource_version_match.as_deref(),
        ) {
            (Some(rv), m) if rv > 0 && m != Some(EXACT) => Some(rv),
            _ => None,
        }
    }
}

/// Upstream's `NewTooLargeResourceVersionError`: 504 Timeout, retry after a second.
pub fn too_large_resource_version(requested: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {requested}, current: {current}"),
    );
    e.details = Some(json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": TOO_LARGE_RETRY_SECONDS,
    }));
    e
}

/// The store at `rv` or later, waiting as upstream's watch cache does; else the error above.
pub async fn wait_until_fresh(store: &kbatch_store::Store, rv: u64) -> Result<(), ApiError> {
    if store.wait_for_revision(rv, FRESHNESS_WAIT).await {
        Ok(())
    } else {
        Err(too_large_resource_version(rv, store.revision()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Query {
        let raw: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Query::parse(Some(&raw.join("&")))
    }

    /// The error texts of a request's options (upstream's table reports `field: Type: detail`).
    fn errors(pairs: &[(&str, &str)]) -> Vec<String> {
        let watch = pairs.iter().any(|(k, v)| *k == "watch" && *v == "true");
        match ReadOptions::from_query(&query(pairs), watch) {
            Ok(_) => Vec::new(),
            Err(e) => {
                assert_eq!(e.code, 422, "{e}");
                let causes = e
                    .details
                    .as_ref()
                    .and_then(|d| d.get("causes"))
                    .and_then(|c| c.as_array())
                    .cloned()
                    .unwrap_or_default();
                causes
                    .iter()
                    .map(|c| {
                        format!(
                            "{}: {}",
                            c["field"].as_str().unwrap_or(""),
                            c["message"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            }
        }
    }

    /// Upstream's `TestValidateListOptions` cases, with the WatchList feature on.
    #[test]
    fn validation_table() {
        let ok: &[&[(&str, &str)]] = &[
            &[],
            &[("resourceVersion", "10"), ("resourceVersionMatch", "Exact")],
            &[
                ("resourceVersion", "0"),
                ("resourceVersionMatch", "NotOlderThan"),
            ],
            &[("watch", "true")],
            &[("watch", "true"), ("resourceVersion", "5")],
            &[
                ("watch", "true"),
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan"),
                ("allowWatchBookmarks", "true"),
            ],
            &[
                ("watch", "true"),
                ("sendInitialEvents", "false"),
                ("resourceVersionMatch", "NotOlderThan"),
                ("allowWatchBookmarks", "true"),
            ],
        ];
        for case in ok {
            assert_eq!(errors(case), Vec::<String>::new(), "{case:?}");
        }
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
        let bad: &[Case] = &[
            (
                &[("resourceVersionMatch", "Exact")],
                &[
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ],
            ),
            (
                &[
                    ("resourceVersion", "10"),
                    ("resourceVersionMatch", "Exact"),
                    ("continue", "abc"),
                ],
                &[
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided",
                ],
            ),
            (
                &[
                    ("resourceVersion", "10"),
                    ("resourceVersionMatch", "Newest"),
                ],
                &[
                    r#"resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", """#,
                ],
            ),
            (
                &[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                &[
                    r#"resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0""#,
                ],
            ),
            (
                &[("sendInitialEvents", "true")],
                &["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"],
            ),
            (
                &[
                    ("watch", "true"),
                    ("resourceVersion", "5"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                &[
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ],
            ),
            (
                &[
                    ("watch", "true"),
                    ("resourceVersion", "5"),
                    ("sendInitialEvents", "true"),
                ],
                &[
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ],
            ),
            (
                &[
                    ("watch", "true"),
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "Exact"),
                    ("allowWatchBookmarks", "true"),
                ],
                &[
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    r#"resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan""#,
                ],
            ),
            (
                &[
                    ("watch", "true"),
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("continue", "abc"),
                ],
                &[
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided",
                ],
            ),
        ];
        for (case, want) in bad {
            assert_eq!(errors(case), *want, "{case:?}");
        }
    }

    #[test]
    fn the_invalid_status_names_list_options() {
        let e = ReadOptions::from_query(&query(&[("sendInitialEvents", "true")]), false)
            .expect_err("invalid");
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
        );
        let d = e.details.expect("details");
        assert_eq!(d["group"], "meta.k8s.io");
        assert_eq!(d["kind"], "ListOptions");
    }

    #[test]
    fn malformed_booleans_are_bad_requests() {
        let e = ReadOptions::from_query(&query(&[("sendInitialEvents", "yes")]), true)
            .expect_err("bad");
        assert_eq!(e.code, 400);
    }

    fn start(pairs: &[(&str, &str)], current: u64) -> WatchStart {
        ReadOptions::from_query(&query(pairs), true)
            .expect("valid")
            .watch_start(current)
    }

    #[test]
    fn where_watches_start() {
        // Legacy watches from "" or "0" are watch lists by default; the end bookmark needs
        // bookmarks allowed.
        assert_eq!(
            start(&[], 9),
            WatchStart::InitialEvents {
                min_rv: 9,
                end_bookmark: false
            }
        );
        assert_eq!(
            start(
                &[("resourceVersion", "0"), ("allowWatchBookmarks", "true")],
                9
            ),
            WatchStart::InitialEvents {
                min_rv: 0,
                end_bookmark: true
            }
        );
        // A watch list from a resourceVersion: the state at least that new.
        let list = [
            ("resourceVersion", "12"),
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
        ];
        assert_eq!(
            start(&list, 9),
            WatchStart::InitialEvents {
                min_rv: 12,
                end_bookmark: true
            }
        );
        // Without initial events: from the resourceVersion, or from now.
        assert_eq!(start(&[("resourceVersion", "7")], 9), WatchStart::After(7));
        let no_initial = [
            ("sendInitialEvents", "false"),
            ("resourceVersionMatch", "NotOlderThan"),
        ];
        assert_eq!(start(&no_initial, 9), WatchStart::Now);
        let mut from_zero = no_initial.to_vec();
        from_zero.push(("resourceVersion", "0"));
        assert_eq!(start(&from_zero, 9), WatchStart::Now);
        let mut from_seven = no_initial.to_vec();
        from_seven.push(("resourceVersion", "7"));
        assert_eq!(start(&from_seven, 9), WatchStart::After(7));
    }

    #[test]
    fn lists_wait_for_a_named_revision_unless_exact() {
        let list = |pairs: &[(&str, &str)]| {
            ReadOptions::from_query(&query(pairs), false)
                .expect("valid")
                .list_min_rv()
        };
        assert_eq!(list(&[]), None);
        assert_eq!(list(&[("resourceVersion", "0")]), None);
        assert_eq!(list(&[("resourceVersion", "5")]), Some(5));
        assert_eq!(
            list(&[
                ("resourceVersion", "5"),
                ("resourceVersionMatch", "NotOlderThan")
            ]),
            Some(5)
        );
        assert_eq!(
            list(&[("resourceVersion", "5"), ("resourceVersionMatch", "Exact")]),
            None
        );
    }

    #[test]
    fn too_large_is_upstreams_timeout() {
        let e = too_large_resource_version(20, 11);
        assert_eq!(e.code, 504);
        assert_eq!(e.reason, "Timeout");
        assert_eq!(
            e.message,
            "Timeout: Too large resource version: 20, current: 11"
        );
        let d = e.details.expect("details");
        assert_eq!(d["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(d["retryAfterSeconds"], 1);
    }
}
