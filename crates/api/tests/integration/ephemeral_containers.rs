//! Ephemeral containers: upstream's `validateEphemeralContainers` rules and
//! `ValidatePodEphemeralContainersUpdate` through the subresource's pipeline (defaults, the
//! ephemeral containers strategy, validation), each with the exact field path and message;
//! their defaults; and the main resource's refusal to change them.

use crate::common;

use common::*;
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::{defaults, strategy, validation};
use serde_json::{Value, json};

const DUP: &str = "FieldValueDuplicate";
const NF: &str = "FieldValueNotFound";
const EPH: &str = "Forbidden: cannot be set for an Ephemeral Container";

/// A stored pod: `base_pod` with an init container and `patch`, created.
fn stored(patch: Value) -> Pod {
    let mut base = json!({"spec": {"initContainers": [{"name": "init", "image": "busybox"}]}});
    merge(&mut base, &patch);
    prepared_pod(base)
}

/// The subresource's pipeline: `old` with `spec.ephemeralContainers` (and `patch`) from the
/// request, defaulted, prepared as upstream's ephemeral containers strategy, validated.
fn ephemeral_update(old: &Pod, ephemeral: Value, patch: Value) -> (Pod, Vec<Triple>) {
    let mut doc = serde_json::to_value(old).expect("encodes");
    merge(&mut doc, &patch);
    doc["spec"]["ephemeralContainers"] = ephemeral;
    let mut new: Pod = decode(doc);
    defaults::pod(&mut new);
    strategy::pod_ephemeral_containers_prepare_for_update(&mut new, old);
    let errs = validation::pod_ephemeral_containers_update(&new, old);
    (new, triples(&errs))
}

fn ec(patch: Value) -> Value {
    let mut c = json!({"name": "debugger", "image": "busybox"});
    merge(&mut c, &patch);
    c
}

const P: &str = "spec.ephemeralContainers[0]";

#[test]
fn a_valid_ephemeral_container_is_added_and_defaulted() {
    let old = stored(json!({"metadata": {"labels": {"app": "a"}}}));
    let (new, errs) = ephemeral_update(
        &old,
        json!([ec(
            json!({"targetContainerName": "c", "stdin": true, "tty": true,
                          "resources": {}, "securityContext": {"privileged": true},
                          "volumeMounts": [], "env": [{"name": "A", "value": "b"}]})
        )]),
        json!({"metadata": {"labels": {"app": "b"}, "finalizers": ["x/y"]},
               "spec": {"activeDeadlineSeconds": 10, "containers": [{"name": "c", "image": "alpine"}]}}),
    );
    assert_eq!(errs, Vec::<Triple>::new());
    let spec = new.spec.as_ref().unwrap();
    let e = &spec.ephemeral_containers.as_ref().unwrap()[0];
    assert_eq!(
        e.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(e.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(e.image_pull_policy.as_deref(), Some("Always"));
    // Everything else is the stored pod's; the generation moves with the spec.
    assert_eq!(spec.containers[0].image.as_deref(), Some("busybox"));
    assert_eq!(spec.active_deadline_seconds, None);
    assert_eq!(new.metadata.labels, old.metadata.labels);
    assert_eq!(new.metadata.finalizers, None);
    assert_eq!(new.status, old.status);
    assert_eq!(new.metadata.generation, Some(2));
}

#[test]
fn pull_policy_defaults_follow_the_tag() {
    let old = stored(json!({}));
    let (new, _) = ephemeral_update(
        &old,
        json!([
            ec(json!({"image": "busybox:1.36"})),
            ec(json!({"name": "b", "image": "busybox:latest"}))
        ]),
        json!({}),
    );
    let ecs = new.spec.unwrap().ephemeral_containers.unwrap();
    assert_eq!(ecs[0].image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(ecs[1].image_pull_policy.as_deref(), Some("Always"));
}

#[test]
fn each_rule_with_upstreams_path_and_message() {
    let cases: Vec<(&str, Value, Vec<Triple>)> = vec![
        (
            "name clashes with a container",
            json!([ec(json!({"name": "c"}))]),
            vec![e(&format!("{P}.name"), DUP, "Duplicate value: \"c\"")],
        ),
        (
            "name clashes with an init container",
            json!([ec(json!({"name": "init"}))]),
            vec![e(&format!("{P}.name"), DUP, "Duplicate value: \"init\"")],
        ),
        (
            "name clashes with another ephemeral container",
            json!([ec(json!({})), ec(json!({}))]),
            vec![e(
                "spec.ephemeralContainers[1].name",
                DUP,
                "Duplicate value: \"debugger\"",
            )],
        ),
        (
            "target must be a regular or init container",
            json!([
                ec(json!({"name": "a"})),
                ec(json!({"name": "b", "targetContainerName": "a"}))
            ]),
            vec![e(
                "spec.ephemeralContainers[1].targetContainerName",
                NF,
                "Not found: \"a\"",
            )],
        ),
        (
            "an init container is a valid target",
            json!([ec(json!({"targetContainerName": "init"}))]),
            vec![],
        ),
        (
            "name and image are required",
            json!([{"name": ""}]),
            vec![
                e(&format!("{P}.name"), REQ, "Required value"),
                e(&format!("{P}.image"), REQ, "Required value"),
            ],
        ),
        (
            "image without surrounding spaces",
            json!([ec(json!({"image": " busybox"}))]),
            vec![invalid(
                &format!("{P}.image"),
                "\" busybox\"",
                "must not have leading or trailing whitespace",
            )],
        ),
        (
            "the fields outside the allow-list, in Go field order",
            json!([ec(json!({
                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                "startupProbe": {"exec": {"command": ["true"]}},
                "readinessProbe": {"exec": {"command": ["true"]}},
                "livenessProbe": {"exec": {"command": ["true"]}},
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}],
                "restartPolicy": "Always",
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "resources": {"requests": {"cpu": "1"}},
                "ports": [{"containerPort": 80}],
            }))]),
            vec![
                e(&format!("{P}.ports"), FORB, EPH),
                e(&format!("{P}.resources"), FORB, EPH),
                e(&format!("{P}.resizePolicy"), FORB, EPH),
                e(&format!("{P}.restartPolicy"), FORB, EPH),
                e(&format!("{P}.restartPolicyRules"), FORB, EPH),
                e(&format!("{P}.livenessProbe"), FORB, EPH),
                e(&format!("{P}.readinessProbe"), FORB, EPH),
                e(&format!("{P}.startupProbe"), FORB, EPH),
                e(&format!("{P}.lifecycle"), FORB, EPH),
            ],
        ),
        (
            "empty resources are the zero value",
            json!([ec(json!({"resources": {}}))]),
            vec![],
        ),
        (
            "subPath mounts",
            json!([ec(json!({"volumeMounts": [
                {"name": "v", "mountPath": "/a", "subPath": "x"},
                {"name": "v", "mountPath": "/b", "subPathExpr": "$(X)"},
            ]}))]),
            vec![
                e(
                    &format!("{P}.volumeMounts[0].subPath"),
                    FORB,
                    "Forbidden: cannot be set for an Ephemeral Container",
                ),
                e(
                    &format!("{P}.volumeMounts[1].subPathExpr"),
                    FORB,
                    "Forbidden: cannot be set for an Ephemeral Container",
                ),
            ],
        ),
        (
            "container rules apply (pull policy)",
            json!([ec(json!({"imagePullPolicy": "Sometimes"}))]),
            vec![e(
                &format!("{P}.imagePullPolicy"),
                NSUP,
                "Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            )],
        ),
    ];
    let with_volume = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
    for (what, ephemeral, want) in cases {
        let old = stored(with_volume.clone());
        let got = ephemeral_update(&old, ephemeral, json!({})).1;
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn existing_ones_may_not_change_or_go() {
    let old = stored(json!({}));
    let (added, errs) = ephemeral_update(&old, json!([ec(json!({}))]), json!({}));
    assert!(errs.is_empty(), "{errs:?}");

    // Reordered and one more: fine.
    let (_, errs) = ephemeral_update(
        &added,
        json!([ec(json!({"name": "second"})), ec(json!({}))]),
        json!({}),
    );
    assert!(errs.is_empty(), "{errs:?}");

    let (_, errs) = ephemeral_update(&added, json!([]), json!({}));
    assert_eq!(
        errs,
        [e(
            "spec.ephemeralContainers",
            FORB,
            "Forbidden: existing ephemeral containers \"debugger\" may not be removed\n",
        )]
    );

    let (_, errs) = ephemeral_update(&added, json!([ec(json!({"image": "alpine"}))]), json!({}));
    assert_eq!(errs.len(), 1, "{errs:?}");
    let (field, reason, msg) = &errs[0];
    assert_eq!(
        (field.as_str(), reason.as_str()),
        ("spec.ephemeralContainers", FORB)
    );
    assert!(
        msg.starts_with(
            "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be changed\n"
        ),
        "{msg}"
    );
    assert!(msg.contains("\"alpine\""), "{msg}");
}

#[test]
fn static_pods_take_none() {
    let old = stored(json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}));
    // Every other error gives way to this one.
    let got = ephemeral_update(&old, json!([ec(json!({"name": "c"}))]), json!({})).1;
    assert_eq!(
        got,
        [e(
            "[]",
            FORB,
            "Forbidden: static pods do not support ephemeral containers"
        )]
    );
}

#[test]
fn the_main_update_may_not_change_them() {
    let old = stored(json!({}));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().ephemeral_containers = Some(vec![decode(ec(json!({})))]);
    defaults::pod(&mut new);
    strategy::pod_prepare_for_update(&mut new, &old);
    let errs = validation::pod_update(&new, &old);
    assert_eq!(errs.len(), 1, "{errs:?}");
    let msg = errs[0].to_string();
    assert!(
        msg.starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"),
        "{msg}"
    );
    assert!(msg.contains("ephemeralContainers"), "{msg}");
}

#[test]
fn pod_create_still_refuses_them() {
    let errs = create_pod(json!({"spec": {"ephemeralContainers": [ec(json!({}))]}}));
    assert_eq!(
        triples(&errs),
        [e(
            "spec.ephemeralContainers",
            FORB,
            "Forbidden: cannot be set on create"
        )]
    );
}
