//! The `ServiceAccount` admission plugin on pod create, as kube-apiserver runs it: a pod that
//! names no account gets `default`; the account must exist (the default one is looked up
//! again for a while, since the service account controller creates it soon after its
//! namespace); the account's `imagePullSecrets` go to a pod that has none; an account annotated
//! `kubernetes.io/enforce-mountable-secrets: "true"` limits the pod to the secrets it lists;
//! mirror pods may reference neither accounts nor secrets.
//!
//! The token volume upstream mounts (`kube-api-access-*`) is not added: this server issues no
//! service account tokens.

use std::time::Duration;

use serde_json::{Value, json};

use crate::State;
use crate::error::ApiError;
use crate::handlers::parse_stored;
use crate::resources::{self, Kind};
use kbatch_api::serviceaccount::{
    DEFAULT_SERVICE_ACCOUNT_NAME, ENFORCE_MOUNTABLE_SECRETS_ANNOTATION,
};
use kbatch_api::strconv::parse_go_bool;

/// kubelet's annotation on the API server's copy of a static pod.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// How often the default account is looked up before the pod is refused (upstream's
/// `numAttempts` for it; any other account is looked up once).
const DEFAULT_ACCOUNT_ATTEMPTS: usize = 10;

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The account a new pod runs as: its `serviceAccountName`, else v1's deprecated
/// `serviceAccount` (the conversion reads it before admission), else `default`. The bool
/// tells whether admission chose it (no name given).
pub fn account_name(pod: &Value) -> (String, bool) {
    match str_at(pod, "/spec/serviceAccountName").or_else(|| str_at(pod, "/spec/serviceAccount")) {
        Some(name) => (name.to_string(), false),
        None => (DEFAULT_SERVICE_ACCOUNT_NAME.to_string(), true),
    }
}

/// Whether the pod is a mirror pod, and then its refusal, if any (`Validate` for mirror pods).
pub fn mirror_pod_refusal(pod: &Value) -> Option<Option<String>> {
    let annotations = pod.pointer("/metadata/annotations")?.as_object()?;
    if !annotations.contains_key(MIRROR_POD_ANNOTATION) {
        return None;
    }
    if str_at(pod, "/spec/serviceAccountName").is_some() {
        return Some(Some(
            "a mirror pod may not reference service accounts".into(),
        ));
    }
    if !secret_references(pod).is_empty() {
        return Some(Some("a mirror pod may not reference secrets".into()));
    }
    if pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .any(|s| s.get("serviceAccountToken").is_some())
    {
        return Some(Some(
            "a mirror pod may not use ServiceAccountToken volume projections".into(),
        ));
    }
    Some(None)
}

/// Every secret name the pod refers to (upstream's `VisitPodSecretNames`, all containers).
fn secret_references(pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |v: Option<&Value>| {
        if let Some(n) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
            out.push(n.to_string());
        }
    };
    let spec = pod.get("spec");
    for s in spec
        .and_then(|s| s.get("imagePullSecrets"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(s.get("name"));
    }
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec
            .and_then(|s| s.get(kind))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for e in c
                .get("envFrom")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                push(e.pointer("/secretRef/name"));
            }
            for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
                push(e.pointer("/valueFrom/secretKeyRef/name"));
            }
        }
    }
    for v in spec
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(v.pointer("/secret/secretName"));
        for s in v
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            push(s.pointer("/secret/name"));
        }
        for key in [
            "azureFile/secretName",
            "cephfs/secretRef/name",
            "cinder/secretRef/name",
        ] {
            push(v.pointer(&format!("/{key}")));
        }
        for source in ["flexVolume", "csi", "iscsi", "rbd", "scaleIO", "storageos"] {
            push(v.pointer(&format!("/{source}/secretRef/name")));
        }
        push(v.pointer("/csi/nodePublishSecretRef/name"));
    }
    out
}

/// `limitSecretReferences`: with the account's annotation, the pod's secret volumes, its
/// containers' `secretKeyRef` variables and its pull secrets must be ones the account lists.
pub fn limit_secret_references(sa: &Value, pod: &Value) -> Result<(), String> {
    let sa_name = str_at(sa, "/metadata/name").unwrap_or("");
    let names = |pointer: &str| -> Vec<&str> {
        sa.pointer(pointer)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("name").and_then(Value::as_str))
            .collect()
    };
    let mountable = names("/secrets");
    let spec = pod.get("spec");
    for v in spec
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(secret) = v.get("secret") {
            let name = secret
                .get("secretName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !mountable.contains(&name) {
                return Err(format!(
                    "volume with secret.secretName=\"{name}\" is not allowed because service account {sa_name} does not reference that secret"
                ));
            }
        }
    }
    for (kind, what) in [
        ("initContainers", "init container"),
        ("containers", "container"),
    ] {
        for c in spec
            .and_then(|s| s.get(kind))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
                let Some(secret) = e
                    .pointer("/valueFrom/secretKeyRef/name")
                    .and_then(Value::as_str)
                else {
                    continue;
                };
                if !mountable.contains(&secret) {
                    return Err(format!(
                        "{what} {} with envVar {} referencing secret.secretName=\"{secret}\" is not allowed because service account {sa_name} does not reference that secret",
                        c.get("name").and_then(Value::as_str).unwrap_or(""),
                        e.get("name").and_then(Value::as_str).unwrap_or(""),
                    ));
                }
            }
        }
    }
    let pull = names("/imagePullSecrets");
    for (i, r) in spec
        .and_then(|s| s.get("imagePullSecrets"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        if !pull.contains(&name) {
            return Err(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account {sa_name} does not reference that imagePullSecret"
            ));
        }
    }
    Ok(())
}

/// What admission does with a found account (`Admit` after the lookup, then `Validate`):
/// returns the spec fields it added, which the request's managedFields do not record.
pub fn apply(
    pod: &mut Value,
    sa: &Value,
    name: &str,
    chosen: bool,
) -> Result<Vec<&'static str>, String> {
    let mut added = Vec::new();
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        if chosen {
            spec.insert("serviceAccountName".into(), json!(name));
            added.extend(["serviceAccountName", "serviceAccount"]);
        }
        let has_pull_secrets = spec
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let from_account: Vec<Value> = sa
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| json!({"name": r.get("name").and_then(Value::as_str).unwrap_or("")}))
            .collect();
        if !has_pull_secrets && !from_account.is_empty() {
            spec.insert("imagePullSecrets".into(), Value::Array(from_account));
            added.push("imagePullSecrets");
        }
    }
    let enforce = sa
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ENFORCE_MOUNTABLE_SECRETS_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(parse_go_bool)
        .unwrap_or(false);
    if enforce {
        limit_secret_references(sa, pod)?;
    }
    Ok(added)
}

/// The account, read from the store; the default one again, 100-200 ms apart, while missing.
async fn lookup(st: &State, namespace: &str, name: &str) -> Result<Option<Value>, ApiError> {
    let res = resources::by_kind(Kind::ServiceAccount);
    let attempts = if name == DEFAULT_SERVICE_ACCOUNT_NAME {
        DEFAULT_ACCOUNT_ATTEMPTS
    } else {
        1
    };
    let interval = Duration::from_millis(rand::random_range(100..200));
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(interval).await;
        }
        if let Some(o) = st.store.get(&res.key(namespace, name)) {
            return Ok(Some(parse_stored(&o)?));
        }
    }
    Ok(None)
}

/// Admission of a new pod (`pod`, a pod document in `namespace`): Forbidden, as upstream
/// words it, when its account is missing or refuses its secrets.
pub async fn admit_pod(
    st: &State,
    namespace: &str,
    pod: &mut Value,
    pod_name: &str,
) -> Result<Vec<&'static str>, ApiError> {
    let forbidden = |why: &str| ApiError::forbidden_named("pods", "", pod_name, why);
    if let Some(refusal) = mirror_pod_refusal(pod) {
        return match refusal {
            Some(why) => Err(forbidden(&why)),
            None => Ok(Vec::new()),
        };
    }
    let (name, chosen) = account_name(pod);
    let Some(sa) = lookup(st, namespace, &name).await? else {
        return Err(forbidden(&format!(
            "error looking up service account {namespace}/{name}: serviceaccount \"{name}\" not found"
        )));
    };
    apply(pod, &sa, &name, chosen).map_err(|why| forbidden(&why))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn the_account_is_the_named_one_else_the_deprecated_alias_else_default() {
        assert_eq!(account_name(&pod(json!({}))), ("default".into(), true));
        assert_eq!(
            account_name(&pod(json!({"serviceAccountName": ""}))),
            ("default".into(), true)
        );
        assert_eq!(
            account_name(&pod(json!({"serviceAccountName": "builder"}))),
            ("builder".into(), false)
        );
        assert_eq!(
            account_name(&pod(json!({"serviceAccount": "old"}))),
            ("old".into(), false)
        );
        assert_eq!(
            account_name(&pod(
                json!({"serviceAccountName": "new", "serviceAccount": "old"})
            )),
            ("new".into(), false)
        );
    }

    // Upstream's TestAssignsDefaultServiceAccountAndBoundTokenWithNoSecretTokens (the account
    // part) and TestFetchesUncachedServiceAccount.
    #[test]
    fn a_pod_without_an_account_gets_default_and_those_fields_are_admissions() {
        let sa = json!({"metadata": {"name": "default", "namespace": "ns"}});
        let mut p = pod(json!({"containers": [{"name": "c"}]}));
        let added = apply(&mut p, &sa, "default", true).unwrap();
        assert_eq!(
            p.pointer("/spec/serviceAccountName"),
            Some(&json!("default"))
        );
        assert_eq!(added, vec!["serviceAccountName", "serviceAccount"]);
        assert!(p.pointer("/spec/imagePullSecrets").is_none());

        let mut p = pod(json!({"serviceAccountName": "default"}));
        assert!(apply(&mut p, &sa, "default", false).unwrap().is_empty());
    }

    // TestAddImagePullSecrets / TestDoNotAddImagePullSecrets.
    #[test]
    fn pull_secrets_come_from_the_account_only_when_the_pod_has_none() {
        let sa = json!({"metadata": {"name": "default"},
            "imagePullSecrets": [{"name": "foo"}, {"name": "bar"}]});
        let mut p = pod(json!({}));
        let added = apply(&mut p, &sa, "default", false).unwrap();
        assert_eq!(
            p.pointer("/spec/imagePullSecrets"),
            Some(&json!([{"name": "foo"}, {"name": "bar"}]))
        );
        assert_eq!(added, vec!["imagePullSecrets"]);

        let mut p = pod(json!({"imagePullSecrets": [{"name": "foo"}]}));
        assert!(apply(&mut p, &sa, "default", false).unwrap().is_empty());
        assert_eq!(
            p.pointer("/spec/imagePullSecrets"),
            Some(&json!([{"name": "foo"}]))
        );
    }

    // TestAllowsReferencedSecret / TestRejectsUnreferencedSecretVolumes /
    // TestRejectsUnreferencedImagePullSecrets / TestAllowUnreferencedSecretVolumesForPermissiveSAs.
    #[test]
    fn the_enforce_annotation_limits_the_pod_to_the_accounts_secrets() {
        let sa = |enforce: &str| {
            json!({"metadata": {"name": "default",
                "annotations": {ENFORCE_MOUNTABLE_SECRETS_ANNOTATION: enforce}},
                "secrets": [{"name": "foo"}]})
        };
        let volume =
            |name: &str| pod(json!({"volumes": [{"name": "v", "secret": {"secretName": name}}]}));
        assert!(apply(&mut volume("foo"), &sa("true"), "default", false).is_ok());
        assert_eq!(
            apply(&mut volume("bar"), &sa("true"), "default", false),
            Err("volume with secret.secretName=\"bar\" is not allowed because service account default does not reference that secret".into())
        );
        // Not enforced: any value but Go's true spellings.
        assert!(apply(&mut volume("bar"), &sa("false"), "default", false).is_ok());
        assert!(apply(&mut volume("bar"), &sa("yes"), "default", false).is_ok());

        let env = |kind: &str| {
            pod(json!({kind: [{"name": "c", "env": [{"name": "E",
                "valueFrom": {"secretKeyRef": {"name": "bar", "key": "k"}}}]}]}))
        };
        assert_eq!(
            apply(&mut env("containers"), &sa("true"), "default", false),
            Err("container c with envVar E referencing secret.secretName=\"bar\" is not allowed because service account default does not reference that secret".into())
        );
        assert_eq!(
            apply(&mut env("initContainers"), &sa("1"), "default", false),
            Err("init container c with envVar E referencing secret.secretName=\"bar\" is not allowed because service account default does not reference that secret".into())
        );
        let mut pull = pod(json!({"imagePullSecrets": [{"name": "foo"}]}));
        assert_eq!(
            apply(&mut pull, &sa("true"), "default", false),
            Err("imagePullSecrets[0].name=\"foo\" is not allowed because service account default does not reference that imagePullSecret".into())
        );
    }

    // TestIgnoresMirrorPod / TestRejectsMirrorPodWithServiceAccount / ...WithSecretVolumes.
    #[test]
    fn mirror_pods_name_no_account_and_no_secret() {
        let mirror = |spec: Value| json!({"metadata": {"name": "m", "annotations": {MIRROR_POD_ANNOTATION: "x"}}, "spec": spec});
        assert_eq!(mirror_pod_refusal(&pod(json!({}))), None);
        assert_eq!(mirror_pod_refusal(&mirror(json!({}))), Some(None));
        assert_eq!(
            mirror_pod_refusal(&mirror(json!({"serviceAccountName": "default"}))),
            Some(Some(
                "a mirror pod may not reference service accounts".into()
            ))
        );
        assert_eq!(
            mirror_pod_refusal(&mirror(
                json!({"volumes": [{"name": "v", "secret": {"secretName": "s"}}]})
            )),
            Some(Some("a mirror pod may not reference secrets".into()))
        );
        assert_eq!(
            mirror_pod_refusal(&mirror(json!({"containers": [{"name": "c",
                "envFrom": [{"secretRef": {"name": "s"}}]}]}))),
            Some(Some("a mirror pod may not reference secrets".into()))
        );
        assert_eq!(
            mirror_pod_refusal(&mirror(json!({"volumes": [{"name": "v",
                "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}))),
            Some(Some(
                "a mirror pod may not use ServiceAccountToken volume projections".into()
            ))
        );
    }
}
