use base64::Engine;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::*;

/// Request bodies kubectl 1.32 sent, with the JSON kubectl 1.31 sends for the same commands.
pub(crate) const FIXTURES: &[(&str, &str, &str)] = &[
    (
        "kubectl create namespace foo",
        "azhzAAoPCgJ2MRIJTmFtZXNwYWNlEhsKEwoDZm9vEgAaACIAKgAyADgAQgASABoCCgAaACIA",
        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"foo","creationTimestamp":null},"spec":{},"status":{}}"#,
    ),
    (
        "kubectl create job j2 --image=busybox -- echo hi",
        "azhzAAoPCghiYXRjaC92MRIDSm9iEoQBChIKAmoyEgAaACIAKgAyADgAQgASZDJiChAKABIAGgAiACoAMgA4AEIAEk4SKwoCajISB2J1c3lib3gaBGVjaG8aAmhpKgBCAGoAcgCAAQCIAQCQAQCiAQAaBU5ldmVyMgBCAEoAUgBYAGAAaACCAQCKAQCaAQDCAQAaCCAAKAAwADoAGgAiAA==",
        r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j2","creationTimestamp":null},"spec":{"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":[{"name":"j2","image":"busybox","command":["echo","hi"],"resources":{}}],"restartPolicy":"Never"}}},"status":{}}"#,
    ),
    (
        "kubectl create cronjob hello2 --image=busybox --schedule='*/1 * * * *' -- echo hi",
        "azhzAAoTCghiYXRjaC92MRIHQ3JvbkpvYhK1AQoWCgZoZWxsbzISABoAIgAqADIAOABCABKYAQoLKi8xICogKiAqICoaACqGAQoWCgZoZWxsbzISABoAIgAqADIAOABCABJsMmoKEAoAEgAaACIAKgAyADgAQgASVhIvCgZoZWxsbzISB2J1c3lib3gaBGVjaG8aAmhpKgBCAGoAcgCAAQCIAQCQAQCiAQAaCU9uRmFpbHVyZTIAQgBKAFIAWABgAGgAggEAigEAmgEAwgEAGgAaACIA",
        r#"{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"hello2","creationTimestamp":null},"spec":{"schedule":"*/1 * * * *","jobTemplate":{"metadata":{"name":"hello2","creationTimestamp":null},"spec":{"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":[{"name":"hello2","image":"busybox","command":["echo","hi"],"resources":{}}],"restartPolicy":"OnFailure"}}}}},"status":{}}"#,
    ),
    (
        "kubectl create job manual1 --from=cronjob/hello",
        "azhzAAoPCghiYXRjaC92MRIDSm9iEoICCogBCgdtYW51YWwxEgAaACIAKgAyADgAQgBiKwohY3JvbmpvYi5rdWJlcm5ldGVzLmlvL2luc3RhbnRpYXRlEgZtYW51YWxqQgoHQ3JvbkpvYhoFaGVsbG8iJGJmYWM2NDJlLWRkNjktNGVhNy1iMjNhLTM5ZmJlNGYzYzc2YioIYmF0Y2gvdjEwARJrMmkKEAoAEgAaACIAKgAyADgAQgASVRIuCgVoZWxsbxIHYnVzeWJveBoEZWNobxoCaGkqAEIAagByAIABAIgBAJABAKIBABoJT25GYWlsdXJlMgBCAEoAUgBYAGAAaACCAQCKAQCaAQDCAQAaCCAAKAAwADoAGgAiAA==",
        r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"manual1","creationTimestamp":null,"annotations":{"cronjob.kubernetes.io/instantiate":"manual"},"ownerReferences":[{"apiVersion":"batch/v1","kind":"CronJob","name":"hello","uid":"bfac642e-dd69-4ea7-b23a-39fbe4f3c76b","controller":true}]},"spec":{"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":[{"name":"hello","image":"busybox","command":["echo","hi"],"resources":{}}],"restartPolicy":"OnFailure"}}},"status":{}}"#,
    ),
    (
        // kubectl 1.33 against a kbatch server, the CronJob's template defaulted; the JSON is
        // what kubectl 1.31 sent for the same command (names and uid substituted).
        "kubectl create job mb --from=cronjob/cb",
        "azhzAAoPCghiYXRjaC92MRIDSm9iErkCCoABCgJtYhIAGgAiACoAMgA4AEIAYisKIWNyb25qb2Iua3ViZXJuZXRlcy5pby9pbnN0YW50aWF0ZRIGbWFudWFsaj8KB0Nyb25Kb2IaAmNiIiQ4OTc5NDdmYS00ZTc0LTRmNWEtOTQzOC0yNDQzYTlmNjgyMDcqCGJhdGNoL3YxMAESqQEypgEKEAoAEgAaACIAKgAyADgAQgASkQESSQoCY2ISB2J1c3lib3gaBGVjaG8aAmhpKgBCAGoUL2Rldi90ZXJtaW5hdGlvbi1sb2dyBkFsd2F5c4ABAIgBAJABAKIBBEZpbGUaCU9uRmFpbHVyZSAeMgxDbHVzdGVyRmlyc3RCAEoAUgBYAGAAaAByAIIBAIoBAJoBEWRlZmF1bHQtc2NoZWR1bGVywgEAGgggACgAMAA6ABoAIgA=",
        r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"mb","creationTimestamp":null,"annotations":{"cronjob.kubernetes.io/instantiate":"manual"},"ownerReferences":[{"apiVersion":"batch/v1","kind":"CronJob","name":"cb","uid":"897947fa-4e74-4f5a-9438-2443a9f68207","controller":true}]},"spec":{"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":[{"name":"cb","image":"busybox","command":["echo","hi"],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"Always"}],"restartPolicy":"OnFailure","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler"}}},"status":{}}"#,
    ),
];

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("fixture is base64")
}

/// The decoded fixtures equal kubectl 1.31's JSON (as documents: JSON objects' members have
/// no order).
#[test]
fn fixtures_decode_to_the_json_kubectl_sends() {
    for (what, body, expected) in FIXTURES {
        let got = decode_object(&b64(body)).unwrap_or_else(|e| panic!("{what}: {e}"));
        let expected: Value = serde_json::from_str(expected).expect("fixture is JSON");
        assert_eq!(got, expected, "{what}");
    }
}

// A minimal protobuf writer for hand-built bodies.
fn key(num: u32, wire: u8) -> Vec<u8> {
    varint(u64::from(num) << 3 | u64::from(wire))
}
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}
fn v(num: u32, value: u64) -> Vec<u8> {
    [key(num, 0), varint(value)].concat()
}
fn b(num: u32, data: &[u8]) -> Vec<u8> {
    [key(num, 2), varint(data.len() as u64), data.to_vec()].concat()
}
fn s(num: u32, text: &str) -> Vec<u8> {
    b(num, text.as_bytes())
}
fn m(num: u32, parts: &[Vec<u8>]) -> Vec<u8> {
    b(num, &parts.concat())
}
fn entry(num: u32, k: &str, value: Vec<u8>) -> Vec<u8> {
    m(num, &[s(1, k), value])
}
fn envelope(api_version: &str, kind: &str, object: &[Vec<u8>]) -> Vec<u8> {
    [
        MAGIC.to_vec(),
        m(1, &[s(1, api_version), s(2, kind)]),
        m(2, object),
        s(3, ""),
        s(4, ""),
    ]
    .concat()
}
/// An empty ObjectMeta as Go writes it (every value field present, zero).
fn go_meta(name: &str) -> Vec<u8> {
    m(
        1,
        &[
            s(1, name),
            s(2, ""),
            s(3, ""),
            s(4, ""),
            s(5, ""),
            s(6, ""),
            v(7, 0),
            b(8, &[]),
        ],
    )
}

/// Hand-built Pod bodies: nested messages, maps of quantities, IntOrString, inlined structs,
/// pointer zeros kept and value zeros dropped, times.
#[test]
fn pod_bodies_decode_field_by_field() {
    let init = m(
        20,
        &[s(1, "init"), s(2, "busybox"), s(3, "true"), b(8, &[])],
    );
    let main = m(
        2,
        &[
            s(1, "main"),
            s(2, "img"),
            m(
                6,
                &[s(1, "http"), v(2, 0), v(3, 8080), s(4, "TCP"), s(5, "")],
            ),
            m(7, &[s(1, "A"), s(2, "1")]),
            m(7, &[s(1, "B"), s(2, "")]),
            m(
                8,
                &[
                    entry(1, "cpu", m(2, &[s(1, "500m")])),
                    entry(2, "memory", m(2, &[s(1, "64Mi")])),
                ],
            ),
            // livenessProbe: inlined handler, httpGet with a named port; zero delay dropped.
            m(
                10,
                &[
                    m(
                        1,
                        &[m(
                            2,
                            &[
                                s(1, "/healthz"),
                                m(2, &[v(1, 1), v(2, 0), s(3, "http")]),
                                s(3, ""),
                                s(4, "HTTP"),
                            ],
                        )],
                    ),
                    v(2, 0),
                    v(4, 10),
                ],
            ),
            // readinessProbe: a numeric port; terminationGracePeriodSeconds (pointer) 0 kept.
            m(
                11,
                &[
                    m(1, &[m(2, &[m(2, &[v(1, 0), v(2, 8080), s(3, "")])])]),
                    v(7, 0),
                ],
            ),
            s(13, ""),
            v(16, 0),
        ],
    );
    let spec = m(
        2,
        &[
            init,
            main,
            s(3, "Always"),
            v(4, 0),
            v(5, 30),
            v(11, 0),
            m(14, &[v(3, 0)]),
            m(
                22,
                &[
                    s(1, "k"),
                    s(2, "Exists"),
                    s(3, ""),
                    s(4, "NoSchedule"),
                    v(5, 0),
                ],
            ),
            m(22, &[s(2, "Exists")]),
            entry(7, "disk", s(2, "ssd")),
            v(25, u64::MAX), // priority -1 as a sign-extended int32
        ],
    );
    let meta = m(
        1,
        &[
            s(1, "p"),
            s(3, ""),
            v(7, 0),
            m(8, &[v(1, 1_700_000_000), v(2, 5)]),
            entry(11, "app", s(2, "web")),
            entry(11, "empty", s(2, "")),
            s(14, "example.com/f"),
        ],
    );
    let status = m(
        3,
        &[s(1, ""), m(7, &[v(1, 1_700_000_000), v(2, 123_456_789)])],
    );
    let body = envelope("v1", "Pod", &[meta, spec, status]);
    let got = decode_object(&body).expect("decode");
    let expected = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "labels": {"app": "web", "empty": ""},
            "finalizers": ["example.com/f"]
        },
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"], "resources": {}}],
            "containers": [{
                "name": "main",
                "image": "img",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}, {"name": "B"}],
                "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "64Mi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"port": 8080}, "terminationGracePeriodSeconds": 0}
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "activeDeadlineSeconds": 30,
            "nodeSelector": {"disk": "ssd"},
            "securityContext": {"runAsNonRoot": false},
            "tolerations": [
                {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 0},
                {"operator": "Exists"}
            ],
            "priority": -1
        },
        "status": {"startTime": "2023-11-14T22:13:20Z"}
    });
    assert_eq!(got, expected);
}

/// Other cheap kinds: a Lease with MicroTimes, an Event, DeleteOptions under any version.
#[test]
fn lease_event_and_delete_options() {
    let lease = envelope(
        "coordination.k8s.io/v1",
        "Lease",
        &[
            go_meta("l"),
            m(
                2,
                &[
                    s(1, "me"),
                    v(2, 15),
                    m(4, &[v(1, 1_700_000_000), v(2, 123_456_789)]),
                    v(5, 0),
                ],
            ),
        ],
    );
    assert_eq!(
        decode_object(&lease).expect("lease"),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "l", "creationTimestamp": null},
               "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                        "renewTime": "2023-11-14T22:13:20.123456Z", "leaseTransitions": 0}})
    );
    let del = [
        MAGIC.to_vec(),
        m(1, &[s(1, "batch/v1"), s(2, "DeleteOptions")]),
        m(2, &[s(4, "Background"), v(1, 0)]),
    ]
    .concat();
    assert_eq!(
        decode_object(&del).expect("delete options"),
        json!({"apiVersion": "batch/v1", "kind": "DeleteOptions",
               "gracePeriodSeconds": 0, "propagationPolicy": "Background"})
    );
}

/// The access reviews: the body kubectl 1.32 sent for `kubectl auth can-i create pods` (the
/// JSON is Go's encoding of the review it built), and a SubjectAccessReview's `extra`, a map
/// of string lists.
#[test]
fn access_review_bodies() {
    let can_i = b64(
        "azhzAAoyChdhdXRob3JpemF0aW9uLms4cy5pby92MRIXU2VsZlN1YmplY3RBY2Nlc3NSZXZpZXcSPwoQCgASABoAIgAqADIAOABCABIhCh8KB2RlZmF1bHQSBmNyZWF0ZRoAIgAqBHBvZHMyADoAGggIABIAGgAgABoAIgA=",
    );
    assert_eq!(
        decode_object(&can_i).expect("self subject access review"),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "metadata": {"creationTimestamp": null},
               "spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}},
               "status": {"allowed": false}})
    );
    let sar = envelope(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        &[
            go_meta(""),
            m(
                2,
                &[
                    m(2, &[s(1, "/metrics"), s(2, "get")]),
                    s(3, "jane"),
                    s(4, "dev"),
                    entry(5, "scopes", m(2, &[s(1, "a"), s(1, "b")])),
                    entry(5, "none", m(2, &[])),
                ],
            ),
        ],
    );
    assert_eq!(
        decode_object(&sar).expect("subject access review"),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "metadata": {"creationTimestamp": null},
               "spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                        "user": "jane", "groups": ["dev"],
                        "extra": {"scopes": ["a", "b"], "none": []}}})
    );
}

/// ConfigMap and Secret bodies as `kubectl create configmap|secret` writes them: maps of
/// strings, maps of bytes (base64 in JSON, any byte allowed, an entry without a value is
/// empty), the secret type, and no `immutable` unless set.
#[test]
fn configmap_and_secret_bodies() {
    let cm = envelope(
        "v1",
        "ConfigMap",
        &[
            go_meta("c"),
            entry(2, "a", s(2, "1")),
            entry(3, "bin", b(2, &[0, 0xff, b'x'])),
            entry(3, "empty", Vec::new()),
        ],
    );
    assert_eq!(
        decode_object(&cm).expect("configmap"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "creationTimestamp": null},
               "data": {"a": "1"}, "binaryData": {"bin": "AP94", "empty": ""}})
    );
    let secret = envelope(
        "v1",
        "Secret",
        &[
            go_meta("s"),
            entry(2, "k", b(2, b"v")),
            entry(4, "plain", s(2, "text")),
            s(3, "Opaque"),
            v(5, 1),
        ],
    );
    assert_eq!(
        decode_object(&secret).expect("secret"),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "s", "creationTimestamp": null}, "immutable": true,
               "data": {"k": "dg=="}, "stringData": {"plain": "text"}, "type": "Opaque"})
    );
}

/// A struct field written twice is merged; packed repeated varints are accepted.
#[test]
fn merges_and_packed_fields() {
    let spec = [
        m(2, &[m(6, &[m(2, &[m(2, &[s(1, "c")])])])]),
        m(2, &[m(6, &[m(2, &[s(3, "Never")])]), v(1, 2)]),
    ];
    let body = envelope("batch/v1", "Job", &[spec[0].clone(), spec[1].clone()]);
    assert_eq!(
        decode_object(&body).expect("decode")["spec"],
        json!({"parallelism": 2, "template": {"spec": {"containers": [{"name": "c"}], "restartPolicy": "Never"}}})
    );
    // PodFailurePolicyOnExitCodesRequirement.values (repeated int32), packed and not.
    let rule = m(
        1,
        &[s(1, "FailJob"), m(2, &[s(2, "In"), b(3, &[1, 2]), v(3, 3)])],
    );
    let body = envelope("batch/v1", "Job", &[m(2, &[m(11, &[rule])])]);
    assert_eq!(
        decode_object(&body).expect("decode")["spec"]["podFailurePolicy"],
        json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1, 2, 3]}}]})
    );
}

#[test]
fn bad_bodies_are_errors_with_a_path() {
    let err = |body: &[u8]| decode_object(body).expect_err("must fail").to_string();
    assert!(err(b"{\"kind\":\"Job\"}").contains("prefix"));
    assert!(err(&[MAGIC.as_slice(), &[0x0a, 0x05, 0x0a]].concat()).contains("end of data"));
    assert!(err(&envelope("batch/v1", "Gadget", &[])).contains("no kind \"Gadget\""));
    assert!(err(&envelope("v2", "Job", &[])).contains("registered for version \"v2\""));
    assert!(err(&[MAGIC.as_slice(), &m(2, &[])].concat()).contains("no kind"));
    let enc = [
        MAGIC.to_vec(),
        m(1, &[s(1, "v1"), s(2, "Pod")]),
        s(3, "gzip"),
    ]
    .concat();
    assert!(err(&enc).contains("content encoding"));
    // containers[0].name as a varint: wrong wire type, reported at its path.
    let bad = envelope("v1", "Pod", &[m(2, &[m(2, &[v(1, 7)])])]);
    assert_eq!(
        err(&bad),
        "spec.containers[0].name: wire type 0 where 2 was expected"
    );
    let overflow = [MAGIC.as_slice(), &[0x28], &[0xff; 11]].concat();
    assert!(err(&overflow).contains("varint"));
    let bad_port = envelope(
        "v1",
        "Pod",
        &[m(
            2,
            &[m(2, &[m(10, &[m(1, &[m(2, &[m(2, &[v(1, 7)])])])])])],
        )],
    );
    assert_eq!(
        err(&bad_port),
        "spec.containers[0].livenessProbe.httpGet.port: invalid IntOrString type 7"
    );
}

/// Unknown fields of every wire type are skipped, at the envelope and inside objects.
#[test]
fn unknown_fields_are_ignored() {
    let mut fixed = key(99, 1);
    fixed.extend([0; 8]);
    let mut fixed32 = key(98, 5);
    fixed32.extend([0; 4]);
    let object = [go_meta("u"), v(97, 1), s(96, "x"), fixed.clone(), fixed32];
    let body = [envelope("v1", "Namespace", &object), fixed].concat();
    assert_eq!(
        decode_object(&body).expect("decode"),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "u", "creationTimestamp": null}})
    );
}

/// Random bytes, truncations and single-byte mutations of real bodies never panic.
#[test]
fn random_and_damaged_bodies_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b38_7300);
    let bodies: Vec<Vec<u8>> = FIXTURES.iter().map(|(_, b, _)| b64(b)).collect();
    for body in &bodies {
        for cut in 0..body.len() {
            let _ = decode_object(&body[..cut]);
        }
        for _ in 0..2000 {
            let mut damaged = body.clone();
            let flips = rng.random_range(1..4);
            for _ in 0..flips {
                let i = rng.random_range(4..damaged.len());
                damaged[i] = rng.random();
            }
            let _ = decode_object(&damaged);
        }
    }
    for _ in 0..20_000 {
        let len = rng.random_range(0..64);
        let mut data: Vec<u8> = MAGIC.to_vec();
        data.extend((0..len).map(|_| rng.random::<u8>()));
        let _ = decode_object(&data);
    }
    // Deep nesting of an unknown field, and a huge length prefix.
    let mut deep = Vec::new();
    for _ in 0..10_000 {
        deep = b(5, &deep);
    }
    let _ = decode_object(&[MAGIC.as_slice(), &deep].concat());
    let huge = [MAGIC.as_slice(), &[0x12, 0xff, 0xff, 0xff, 0xff, 0x0f]].concat();
    assert!(decode_object(&huge).is_err());
}

#[test]
fn times_follow_go() {
    assert_eq!(time(&[], false), Ok(Value::Null));
    // Time keeps whole seconds; a present zero is the epoch, not null.
    assert_eq!(time(&v(2, 999), false), Ok(json!("1970-01-01T00:00:00Z")));
    assert_eq!(
        time(&[v(1, 1), v(2, 1_500)].concat(), true),
        Ok(json!("1970-01-01T00:00:01.000001Z"))
    );
    // Before the epoch with a fraction: time.Unix normalizes.
    assert_eq!(
        time(&[v(1, u64::MAX), v(2, 500_000_000)].concat(), true),
        Ok(json!("1969-12-31T23:59:59.500000Z"))
    );
    assert!(time(&v(1, 300_000_000_000), false).is_err());
}
