//! `pods/eviction`, as kube-apiserver's `EvictionREST`: a policy/v1 (or v1beta1) Eviction
//! deletes its pod with the Eviction's delete options, after marking it with the
//! `DisruptionTarget` condition (`EvictionByEvictionAPI`), so that a Job's pod failure policy
//! can tell an eviction from a crash. A pod that is pending, finished or already being deleted
//! is deleted at the revision it was read at, retried on conflict as upstream retries (20
//! times, 500 ms apart). A running pod covered by a PodDisruptionBudget goes only when the
//! budget allows one more disruption, which the eviction takes (`pdb`); an unready one when
//! the budget is met anyway or says `AlwaysAllow`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};

use crate::State;
use crate::error::ApiError;
use crate::handlers::{self, DeleteOptions};
use crate::object::{self, rfc3339};
use crate::pdb;
use crate::request::{Query, Target};
use crate::resources::{self, Kind};
use crate::storage_metrics;
use kbatch_store::StoreError;

/// The versions of Eviction the subresource takes (upstream's `AcceptsGroupVersion`).
const ACCEPTED_VERSIONS: &[&str] = &["policy/v1", "policy/v1beta1"];
/// Upstream's `EvictionsRetry`: 20 steps of 500 ms.
const RETRY_STEPS: usize = 20;
const RETRY_DELAY: Duration = Duration::from_millis(500);
/// How often the condition's write is retried after losing a race (upstream's
/// `GuaranteedUpdate` retries without bound; each lost race means another write landed).
const MAX_WRITE_RETRIES: usize = 1_000;

use kbatch_api::conditions::DISRUPTION_TARGET;
pub const EVICTION_REASON: &str = "EvictionByEvictionAPI";
pub const EVICTION_MESSAGE: &str = "Eviction API: evicting";

/// POST pods/NAME/eviction.
pub async fn evict(
    st: &State,
    t: &Target,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let mut eviction = handlers::decode_body(headers, body)?;
    check_type(&mut eviction)?;
    let url_ns = t.namespace.as_deref().unwrap_or("");
    match object::meta_str(&eviction, "namespace") {
        None | Some("") => {}
        Some(ns) if ns == url_ns => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    if object::meta_str(&eviction, "name").unwrap_or("") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let opts = eviction_delete_options(&eviction, q)?;
    let pod_target = Target {
        subresource: None,
        ..t.clone()
    };
    let key = t.resource.key(url_ns, &name);

    // A pod whose eviction disrupts nothing more (pending, finished or being deleted) is
    // deleted at once, at the revision it was read at unless the client chose one.
    let mut attempt = 0;
    let (pod, pod_rv) = loop {
        attempt += 1;
        let cur = st
            .store
            .get(&key)
            .ok_or_else(|| ApiError::not_found("pods", "", &name))?;
        let pod = handlers::parse_stored(&cur)?;
        if !can_ignore_budget(&pod) {
            break (pod, cur.rv);
        }
        let mut pinned = opts.clone();
        if should_enforce_revision(&pod) && opts.resource_version.is_none() {
            pinned.resource_version = Some(cur.rv.to_string());
        }
        match mark_and_delete(st, &pod_target, &key, &name, pinned).await {
            Ok(()) => return Ok(handlers::created_success()),
            Err(e) if e.code == 409 && opts.resource_version.is_none() && attempt < RETRY_STEPS => {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            Err(e) => return Err(e),
        }
    };
    // A running pod: the budget that covers it, if any, must allow the disruption.
    let budgets = covering_budgets(st, url_ns, &pod)?;
    let mut budget_name = None;
    let mut pinned = false;
    let mut delete_opts = opts.clone();
    match budgets.as_slice() {
        [] => {}
        [(budget_key, budget)] => {
            let bname = object::meta_str(budget, "name").unwrap_or("").to_string();
            if !is_ready(&pod) && pdb::unready_pod_may_go(budget) {
                // Deleted only if it has not become ready since it was read.
                if delete_opts.resource_version.is_none() {
                    delete_opts.resource_version = Some(pod_rv.to_string());
                }
                pinned = true;
            } else {
                take_disruption(st, budget_key, &bname, &name, opts.dry_run).await?;
            }
            budget_name = Some(bname);
        }
        _ => return Err(pdb::several_budgets()),
    }
    match mark_and_delete(st, &pod_target, &key, &name, delete_opts).await {
        Ok(()) => Ok(handlers::created_success()),
        Err(e) if e.code == 409 && pinned && opts.resource_version.is_none() => {
            Err(pdb::still_processing(budget_name.as_deref().unwrap_or("")))
        }
        Err(e) => Err(e),
    }
}

/// The budgets of the pod's namespace that cover it, with their keys.
fn covering_budgets(
    st: &State,
    namespace: &str,
    pod: &Value,
) -> Result<Vec<(String, Value)>, ApiError> {
    let res = resources::by_kind(Kind::PodDisruptionBudget);
    let labels: BTreeMap<String, String> = pod
        .pointer("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let page = st.store.list(&res.prefix(Some(namespace)), None, None);
    let mut out = Vec::new();
    for o in page.items.iter() {
        let budget = handlers::parse_stored(o)?;
        if pdb::covers(&budget, &labels) {
            let name = object::meta_str(&budget, "name").unwrap_or("").to_string();
            out.push((res.key(namespace, &name), budget));
        }
    }
    Ok(out)
}

/// Takes one allowed disruption from the budget, retried on conflict as upstream's
/// `RetryOnConflict(EvictionsRetry)` (the budget read again each time).
async fn take_disruption(
    st: &State,
    key: &str,
    budget_name: &str,
    pod_name: &str,
    dry_run: bool,
) -> Result<(), ApiError> {
    let res = resources::by_kind(Kind::PodDisruptionBudget);
    for _ in 0..RETRY_STEPS {
        let cur = st
            .store
            .get(key)
            .ok_or_else(|| ApiError::not_found("poddisruptionbudgets", "policy", budget_name))?;
        let budget = handlers::parse_stored(&cur)?;
        // Kept to the second, as the API's times are.
        let now = jiff::Timestamp::from_second(st.now().as_second()).unwrap_or(st.now());
        let Some(updated) = pdb::check_and_decrement(&budget, pod_name, now, dry_run)? else {
            return Ok(());
        };
        match storage_metrics::update(&st.store, key.to_string(), updated, Some(cur.rv)).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict { .. }) => tokio::time::sleep(RETRY_DELAY).await,
            Err(e) => return Err(handlers::store_err(res, budget_name, e)),
        }
    }
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Timeout: couldn't update PodDisruptionBudget \"{budget_name}\" due to conflicts"),
    );
    e.details = Some(json!({"retryAfterSeconds": 10}));
    Err(e)
}

/// `podutil.IsPodReady`.
fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// The body must be an Eviction of a version the subresource takes; it is read as policy/v1.
fn check_type(v: &mut Value) -> Result<(), ApiError> {
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if !api_version.is_empty() && !ACCEPTED_VERSIONS.contains(&api_version) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )));
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("apiVersion");
    }
    handlers::check_type_of("policy/v1", "Eviction", v)
}

/// The Eviction's delete options, with the request's dry run when they name none (upstream's
/// `propagateDryRun`).
fn eviction_delete_options(eviction: &Value, q: &Query) -> Result<DeleteOptions, ApiError> {
    let none = json!({});
    let body = eviction
        .get("deleteOptions")
        .filter(|o| o.is_object())
        .unwrap_or(&none);
    let dry_run = if q.dry_run()? { "dryRun=All" } else { "" };
    handlers::delete_options_of(body, &Query::parse(Some(dry_run)))
}

/// Upstream's `canIgnorePDB`: a pod that is pending, finished or already being deleted.
fn can_ignore_budget(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending")
        || pod.pointer("/metadata/deletionTimestamp").is_some()
}

/// Upstream's `shouldEnforceResourceVersion`: all but finished pods and pods being deleted.
fn should_enforce_revision(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed")
        && pod.pointer("/metadata/deletionTimestamp").is_none()
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Upstream's `addConditionAndDeletePod`: the DisruptionTarget condition is written to the
/// latest pod (unless this is a dry run), checked against the delete's preconditions, then the
/// pod is deleted with those options (a precondition on the revision moves to the revision the
/// condition's write made).
async fn mark_and_delete(
    st: &State,
    pod_target: &Target,
    key: &str,
    name: &str,
    mut opts: DeleteOptions,
) -> Result<(), ApiError> {
    if !opts.dry_run {
        let mut written = false;
        for _ in 0..MAX_WRITE_RETRIES {
            let cur = st
                .store
                .get(key)
                .ok_or_else(|| ApiError::not_found("pods", "", name))?;
            let mut pod = handlers::parse_stored(&cur)?;
            check_preconditions(&pod, &cur.rv.to_string(), &opts, name)?;
            let now = rfc3339(st.now());
            if !set_disruption_target(&mut pod, &now) {
                written = true;
                break;
            }
            match storage_metrics::update(&st.store, key.to_string(), pod, Some(cur.rv)).await {
                Ok(o) => {
                    if opts.resource_version.is_some() {
                        opts.resource_version = Some(o.rv.to_string());
                    }
                    written = true;
                    break;
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound(_)) => {
                    return Err(ApiError::not_found("pods", "", name));
                }
                Err(e) => return Err(handlers::store_err(pod_target.resource, name, e)),
            }
        }
        if !written {
            return Err(ApiError::modified_conflict("pods", "", name));
        }
    }
    handlers::delete(st, pod_target, &opts).await.map(|_| ())
}

/// The delete's preconditions, checked against the pod the condition is written to, in the
/// words of upstream's `getLatestPod`.
fn check_preconditions(
    pod: &Value,
    rv: &str,
    opts: &DeleteOptions,
    name: &str,
) -> Result<(), ApiError> {
    let uid = object::meta_str(pod, "uid").unwrap_or("");
    if let Some(want) = opts.uid.as_deref().filter(|u| !u.is_empty())
        && want != uid
    {
        return Err(ApiError::conflict(
            "Pod",
            "",
            name,
            &format!(
                "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    if let Some(want) = opts.resource_version.as_deref().filter(|r| !r.is_empty())
        && want != rv
    {
        return Err(ApiError::conflict(
            "Pod",
            "",
            name,
            &format!(
                "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
            ),
        ));
    }
    Ok(())
}

/// Upstream's `UpdatePodCondition` with the eviction's condition: added, or replaced keeping
/// its transition time when its status is unchanged. Its `observedGeneration` is the pod's
/// generation (`CalculatePodConditionObservedGeneration` with observed generation tracking
/// on). Returns whether anything changed.
pub fn set_disruption_target(pod: &mut Value, now: &str) -> bool {
    set_condition(
        pod,
        DISRUPTION_TARGET,
        EVICTION_REASON,
        EVICTION_MESSAGE,
        now,
    )
}

fn set_condition(pod: &mut Value, ty: &str, reason: &str, message: &str, now: &str) -> bool {
    let generation = pod
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .filter(|g| *g != 0);
    let Some(obj) = pod.as_object_mut() else {
        return false;
    };
    let status = obj.entry("status").or_insert_with(|| json!({}));
    let Some(status) = status.as_object_mut() else {
        return false;
    };
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    let Some(conds) = conds.as_array_mut() else {
        return false;
    };
    let mut cond = json!({"type": ty, "status": "True", "lastProbeTime": null,
        "lastTransitionTime": now, "reason": reason, "message": message});
    if let Some(g) = generation {
        cond["observedGeneration"] = json!(g);
    }
    match conds
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
    {
        None => {
            conds.push(cond);
            true
        }
        Some(old) => {
            if old.get("status").and_then(Value::as_str) == Some("True") {
                cond["lastTransitionTime"] = old
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or(Value::Null);
            }
            let same =
                |k: &str| old.get(k).unwrap_or(&Value::Null) == cond.get(k).unwrap_or(&Value::Null);
            let unchanged = [
                "status",
                "reason",
                "message",
                "lastProbeTime",
                "lastTransitionTime",
                "observedGeneration",
            ]
            .iter()
            .all(|k| same(k));
            *old = cond;
            !unchanged
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, deleting: bool) -> Value {
        let mut p = json!({"metadata": {"name": "p", "uid": "u1", "generation": 2},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:30Z");
        }
        p
    }

    #[test]
    fn which_pods_skip_the_budget_and_which_are_pinned_to_their_revision() {
        // (phase, deleting, can ignore the budget, revision enforced)
        let rows = [
            ("Pending", false, true, true),
            ("Running", false, false, true),
            ("Succeeded", false, true, false),
            ("Failed", false, true, false),
            ("Running", true, true, false),
            ("Unknown", false, false, true),
        ];
        for (phase, deleting, ignore, enforce) in rows {
            let p = pod(phase, deleting);
            assert_eq!(can_ignore_budget(&p), ignore, "{phase} {deleting}");
            assert_eq!(should_enforce_revision(&p), enforce, "{phase} {deleting}");
        }
    }

    #[test]
    fn the_condition_is_added_then_kept_with_its_transition_time() {
        let mut p = pod("Running", false);
        assert!(set_disruption_target(&mut p, "2024-01-01T00:01:00Z"));
        let c = &p["status"]["conditions"][1];
        assert_eq!(c["type"], "DisruptionTarget");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "EvictionByEvictionAPI");
        assert_eq!(c["message"], "Eviction API: evicting");
        assert_eq!(c["lastTransitionTime"], "2024-01-01T00:01:00Z");
        assert_eq!(c["observedGeneration"], 2);
        // Again: nothing changes, the first time stays.
        assert!(!set_disruption_target(&mut p, "2024-01-01T00:02:00Z"));
        assert_eq!(
            p["status"]["conditions"][1]["lastTransitionTime"],
            "2024-01-01T00:01:00Z"
        );
        assert_eq!(p["status"]["conditions"].as_array().map(Vec::len), Some(2));
        // One written False by someone else turns True with a new transition time.
        p["status"]["conditions"][1]["status"] = json!("False");
        assert!(set_disruption_target(&mut p, "2024-01-01T00:03:00Z"));
        assert_eq!(
            p["status"]["conditions"][1]["lastTransitionTime"],
            "2024-01-01T00:03:00Z"
        );
        // Another reason is replaced, its time kept.
        p["status"]["conditions"][1]["reason"] = json!("PreemptionByScheduler");
        assert!(set_disruption_target(&mut p, "2024-01-01T00:04:00Z"));
        assert_eq!(
            p["status"]["conditions"][1]["reason"],
            "EvictionByEvictionAPI"
        );
        assert_eq!(
            p["status"]["conditions"][1]["lastTransitionTime"],
            "2024-01-01T00:03:00Z"
        );
    }

    #[test]
    fn a_pod_without_status_gets_one() {
        let mut p = json!({"metadata": {"name": "p"}});
        assert!(set_disruption_target(&mut p, "2024-01-01T00:00:00Z"));
        assert_eq!(p["status"]["conditions"][0]["type"], "DisruptionTarget");
        assert!(
            p["status"]["conditions"][0]
                .get("observedGeneration")
                .is_none()
        );
    }

    #[test]
    fn preconditions_are_worded_as_upstreams() {
        let p = pod("Running", false);
        let opts = DeleteOptions {
            uid: Some("other".into()),
            ..Default::default()
        };
        let e = check_preconditions(&p, "7", &opts, "p").unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on Pod \"p\": the UID in the precondition (other) does not match the UID in record (u1). The object might have been deleted and then recreated"
        );
        let opts = DeleteOptions {
            resource_version: Some("6".into()),
            ..Default::default()
        };
        let e = check_preconditions(&p, "7", &opts, "p").unwrap_err();
        assert!(e.message.ends_with("the ResourceVersion in the precondition (6) does not match the ResourceVersion in record (7). The object might have been modified"), "{}", e.message);
        let opts = DeleteOptions {
            uid: Some("u1".into()),
            resource_version: Some("7".into()),
            ..Default::default()
        };
        assert!(check_preconditions(&p, "7", &opts, "p").is_ok());
    }
}
