//! Container probe validation, ported from upstream's tables (TestValidateProbe,
//! Test_validateProbe, TestValidateHandler, and the probe rows of TestValidateContainers and
//! TestValidateInitContainers). Objects go through the create pipeline (defaults first, as the
//! server does); every expected error is spelled out as (field path, reason, full message),
//! in upstream's order.

use crate::common;

use common::*;
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::validation;
use serde_json::{Value, json};

const NEG: &str = "must be greater than or equal to 0";
const PORT_CHARSET: &str = "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)";
const HEADER_RE: &str = "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')";

/// Errors of a Pod whose only container is changed by `patch`.
fn pod_errors(patch: Value) -> Vec<Triple> {
    triples(&create_pod(
        json!({"spec": {"containers": [container(patch)]}}),
    ))
}

/// Errors of a Pod whose only container carries `probe` as its `kind` probe.
fn probe_errors(kind: &str, probe: Value) -> Vec<Triple> {
    pod_errors(json!({ kind: probe }))
}

/// Errors of a Pod with a sidecar (restartable init container) changed by `patch`.
fn sidecar_errors(patch: Value) -> Vec<Triple> {
    let mut sidecar = container(json!({"name": "side", "restartPolicy": "Always"}));
    merge(&mut sidecar, &patch);
    triples(&create_pod(json!({"spec": {"initContainers": [sidecar]}})))
}

const C0: &str = "spec.containers[0]";
const PROBES: [&str; 3] = ["livenessProbe", "readinessProbe", "startupProbe"];

fn valid_handlers() -> Vec<Value> {
    vec![
        json!({"exec": {"command": ["echo"]}}),
        json!({"httpGet": {"path": "/", "port": 1, "scheme": "HTTP"}}),
        json!({"httpGet": {"path": "/foo", "port": 65535, "host": "host", "scheme": "HTTPS"}}),
        json!({"httpGet": {"port": "port"}}),
        json!({"httpGet": {"path": "/", "port": "port", "httpHeaders": [{"name": "Host", "value": "foo.example.com"}]}}),
        json!({"httpGet": {"path": "/", "port": "port", "httpHeaders": [
            {"name": "X-Forwarded-For", "value": "1.2.3.4"},
            {"name": "X-Forwarded-For", "value": "5.6.7.8"}
        ]}}),
        json!({"tcpSocket": {"port": 80}}),
        json!({"tcpSocket": {"port": "http-alt", "host": "localhost"}}),
        json!({"grpc": {"port": 9090}}),
        json!({"grpc": {"port": 1, "service": "health"}}),
    ]
}

#[test]
fn valid_probe_of_each_handler_kind() {
    let mut failures = Vec::new();
    for handler in valid_handlers() {
        for kind in PROBES {
            let got = probe_errors(kind, handler.clone());
            if !got.is_empty() {
                failures.push(format!("pod {kind} {handler}: {got:#?}"));
            }
            let got = sidecar_errors(json!({ kind: handler.clone() }));
            if !got.is_empty() {
                failures.push(format!("sidecar {kind} {handler}: {got:#?}"));
            }
            let got = triples(&create_job(json!({"spec": {"template": {"spec": {
                "containers": [container(json!({ kind: handler.clone() }))]
            }}}})));
            if !got.is_empty() {
                failures.push(format!("job {kind} {handler}: {got:#?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn valid_probe_with_every_numeric_field_set() {
    // TestValidateProbe's success cases: each field positive (defaults fill the others).
    for name in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "failureThreshold",
    ] {
        let probe = json!({"exec": {"command": ["echo"]}, name: 10});
        for kind in PROBES {
            assert_eq!(probe_errors(kind, probe.clone()), vec![], "{kind} {name}");
        }
    }
    let full = json!({
        "exec": {"command": ["echo"]}, "initialDelaySeconds": 0, "timeoutSeconds": 5,
        "periodSeconds": 7, "successThreshold": 1, "failureThreshold": 9,
        "terminationGracePeriodSeconds": 1
    });
    assert_eq!(probe_errors("livenessProbe", full.clone()), vec![]);
    assert_eq!(probe_errors("startupProbe", full), vec![]);
}

#[test]
fn probe_without_handler() {
    for kind in PROBES {
        let want = vec![e(
            &format!("{C0}.{kind}"),
            REQ,
            "Required value: must specify a handler type",
        )];
        assert_eq!(probe_errors(kind, json!({})), want, "{kind}");
        assert_eq!(
            probe_errors(kind, json!({"periodSeconds": 5})),
            want,
            "{kind}"
        );
    }
}

#[test]
fn more_than_one_handler() {
    let p = format!("{C0}.livenessProbe");
    let forbidden = |h: &str| {
        e(
            &format!("{p}.{h}"),
            FORB,
            "Forbidden: may not specify more than 1 handler type",
        )
    };
    assert_eq!(
        probe_errors(
            "livenessProbe",
            json!({"exec": {"command": ["true"]}, "httpGet": {"port": 80}})
        ),
        vec![forbidden("httpGet")]
    );
    // The first handler (exec, httpGet, tcpSocket, grpc order) is checked; later ones are
    // only reported as extra, their contents unchecked.
    assert_eq!(
        probe_errors(
            "livenessProbe",
            json!({
                "grpc": {"port": 0}, "tcpSocket": {"port": 0},
                "httpGet": {"port": 0}, "exec": {"command": []}
            })
        ),
        vec![
            e(&format!("{p}.exec.command"), REQ, "Required value"),
            forbidden("httpGet"),
            forbidden("tcpSocket"),
            forbidden("grpc"),
        ]
    );
    assert_eq!(
        probe_errors(
            "livenessProbe",
            json!({"tcpSocket": {"port": 70000}, "grpc": {"port": 80}})
        ),
        vec![
            invalid(&format!("{p}.tcpSocket.port"), "70000", PORT_RANGE),
            forbidden("grpc"),
        ]
    );
}

#[test]
fn success_threshold_must_be_one_for_liveness_and_startup() {
    let tcp = json!({"tcpSocket": {"port": 80}, "successThreshold": 2});
    for kind in ["livenessProbe", "startupProbe"] {
        assert_eq!(
            probe_errors(kind, tcp.clone()),
            vec![invalid(
                &format!("{C0}.{kind}.successThreshold"),
                "2",
                "must be 1"
            )],
            "{kind}"
        );
    }
    assert_eq!(probe_errors("readinessProbe", tcp), vec![]);
    // Zero means unset and is defaulted to 1 before validation.
    let zero = json!({"tcpSocket": {"port": 80}, "successThreshold": 0});
    assert_eq!(probe_errors("livenessProbe", zero.clone()), vec![]);
    assert_eq!(probe_errors("startupProbe", zero), vec![]);
}

fn all_negative() -> Value {
    json!({
        "tcpSocket": {"port": 80},
        "initialDelaySeconds": -1, "timeoutSeconds": -1, "periodSeconds": -1,
        "successThreshold": -1, "failureThreshold": -1, "terminationGracePeriodSeconds": -1
    })
}

fn negative_rows(p: &str) -> Vec<Triple> {
    [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ]
    .iter()
    .map(|f| invalid(&format!("{p}.{f}"), "-1", NEG))
    .chain([invalid(
        &format!("{p}.terminationGracePeriodSeconds"),
        "-1",
        "must be greater than 0",
    )])
    .collect()
}

#[test]
fn negative_numbers_in_upstream_order() {
    for kind in ["livenessProbe", "startupProbe"] {
        let p = format!("{C0}.{kind}");
        let mut want = negative_rows(&p);
        want.push(invalid(&format!("{p}.successThreshold"), "-1", "must be 1"));
        assert_eq!(probe_errors(kind, all_negative()), want, "{kind}");
    }
    let p = format!("{C0}.readinessProbe");
    let mut want = negative_rows(&p);
    want.push(invalid(
        &format!("{p}.terminationGracePeriodSeconds"),
        "-1",
        "must not be set for readinessProbes",
    ));
    assert_eq!(probe_errors("readinessProbe", all_negative()), want);
}

#[test]
fn each_negative_field_alone() {
    // Test_validateProbe's rows, on a readiness probe (no successThreshold == 1 rule).
    let p = format!("{C0}.readinessProbe");
    for name in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        assert_eq!(
            probe_errors(
                "readinessProbe",
                json!({"exec": {"command": ["echo"]}, name: -10})
            ),
            vec![invalid(&format!("{p}.{name}"), "-10", NEG)],
            "{name}"
        );
    }
}

#[test]
fn termination_grace_period_seconds() {
    for kind in ["livenessProbe", "startupProbe"] {
        let f = format!("{C0}.{kind}.terminationGracePeriodSeconds");
        for (v, rendered) in [(0, "0"), (-1, "-1")] {
            assert_eq!(
                probe_errors(
                    kind,
                    json!({"exec": {"command": ["echo"]}, "terminationGracePeriodSeconds": v})
                ),
                vec![invalid(&f, rendered, "must be greater than 0")],
                "{kind} {v}"
            );
        }
        assert_eq!(
            probe_errors(
                kind,
                json!({"exec": {"command": ["echo"]}, "terminationGracePeriodSeconds": 1})
            ),
            vec![],
            "{kind}"
        );
    }
    let f = format!("{C0}.readinessProbe.terminationGracePeriodSeconds");
    assert_eq!(
        probe_errors(
            "readinessProbe",
            json!({"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": 10})
        ),
        vec![invalid(&f, "10", "must not be set for readinessProbes")]
    );
    assert_eq!(
        probe_errors(
            "readinessProbe",
            json!({"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": 0})
        ),
        vec![
            invalid(&f, "0", "must be greater than 0"),
            invalid(&f, "0", "must not be set for readinessProbes"),
        ]
    );
}

#[test]
fn http_get_action() {
    let p = format!("{C0}.readinessProbe.httpGet");
    let port = format!("{p}.port");
    let run = |h: Value| probe_errors("readinessProbe", json!({ "httpGet": h }));
    // Port numbers and names.
    assert_eq!(
        run(json!({"port": 0})),
        vec![invalid(&port, "0", PORT_RANGE)]
    );
    assert_eq!(run(json!({})), vec![invalid(&port, "0", PORT_RANGE)]);
    assert_eq!(
        run(json!({"path": "/foo", "port": 65536, "host": "host"})),
        vec![invalid(&port, "65536", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": -1})),
        vec![invalid(&port, "-1", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": "8080"})),
        vec![invalid(&port, "\"8080\"", PORT_LETTER)]
    );
    assert_eq!(
        run(json!({"port": "Port_Name"})),
        vec![invalid(&port, "\"Port_Name\"", PORT_CHARSET)]
    );
    assert_eq!(
        run(json!({"port": "-http--alternative-"})),
        vec![
            invalid(
                &port,
                "\"-http--alternative-\"",
                "must be no more than 15 characters"
            ),
            invalid(
                &port,
                "\"-http--alternative-\"",
                "must not contain consecutive hyphens"
            ),
            invalid(
                &port,
                "\"-http--alternative-\"",
                "must not begin or end with a hyphen"
            ),
        ]
    );
    // Scheme.
    assert_eq!(
        run(json!({"port": 80, "scheme": "FTP"})),
        vec![e(
            &format!("{p}.scheme"),
            NSUP,
            "Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\""
        )]
    );
    assert_eq!(
        run(json!({"port": 80, "scheme": "http"})),
        vec![e(
            &format!("{p}.scheme"),
            NSUP,
            "Unsupported value: \"http\": supported values: \"HTTP\", \"HTTPS\""
        )]
    );
    // Header names, reported under httpHeaders without an index.
    let headers = format!("{p}.httpHeaders");
    assert_eq!(
        run(
            json!({"port": "port", "httpHeaders": [{"name": "Host:", "value": "foo.example.com"}]})
        ),
        vec![invalid(&headers, "\"Host:\"", HEADER_RE)]
    );
    assert_eq!(
        run(json!({"port": "port", "httpHeaders": [
            {"name": "Good", "value": "x"},
            {"name": "X_Forwarded_For", "value": "foo.example.com"},
            {"name": "", "value": "y"}
        ]})),
        vec![
            invalid(&headers, "\"X_Forwarded_For\"", HEADER_RE),
            invalid(&headers, "\"\"", HEADER_RE),
        ]
    );
    // Everything at once: port, scheme, then headers.
    assert_eq!(
        run(json!({"port": 0, "scheme": "FTP", "httpHeaders": [{"name": "a b", "value": ""}]})),
        vec![
            invalid(&port, "0", PORT_RANGE),
            e(
                &format!("{p}.scheme"),
                NSUP,
                "Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\""
            ),
            invalid(&headers, "\"a b\"", HEADER_RE),
        ]
    );
}

/// A defaulted Pod whose liveness probe is then changed by `f`, validated as is: what a
/// request would look like if it could skip the defaults.
fn undefaulted_http_get(
    f: impl FnOnce(&mut kbatch_api::k8s_openapi::api::core::v1::HTTPGetAction),
) -> Vec<Triple> {
    let mut pod: Pod = prepared_pod(json!({"spec": {"containers": [container(
        json!({"livenessProbe": {"httpGet": {"port": 80}}})
    )]}}));
    let spec = pod.spec.as_mut().expect("spec");
    let probe = spec.containers[0].liveness_probe.as_mut().expect("probe");
    f(probe.http_get.as_mut().expect("httpGet"));
    triples(&validation::pod_create(&pod))
}

#[test]
fn http_get_path_and_scheme_are_defaulted_then_required() {
    // Through the pipeline an empty path and scheme become "/" and "HTTP".
    assert_eq!(
        probe_errors(
            "livenessProbe",
            json!({"httpGet": {"path": "", "port": 80, "scheme": ""}})
        ),
        vec![]
    );
    let p = format!("{C0}.livenessProbe.httpGet");
    assert_eq!(
        undefaulted_http_get(|h| h.path = Some(String::new())),
        vec![e(&format!("{p}.path"), REQ, "Required value")]
    );
    assert_eq!(
        undefaulted_http_get(|h| h.path = None),
        vec![e(&format!("{p}.path"), REQ, "Required value")]
    );
    // TestValidateHandler's `{Path: "", Port: FromString(""), Host: ""}`.
    assert_eq!(
        undefaulted_http_get(|h| {
            h.path = None;
            h.scheme = None;
            h.port = kbatch_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                String::new(),
            );
        }),
        vec![
            e(&format!("{p}.path"), REQ, "Required value"),
            invalid(&format!("{p}.port"), "\"\"", PORT_CHARSET),
            invalid(&format!("{p}.port"), "\"\"", PORT_LETTER),
            e(
                &format!("{p}.scheme"),
                NSUP,
                "Unsupported value: \"\": supported values: \"HTTP\", \"HTTPS\""
            ),
        ]
    );
}

#[test]
fn tcp_socket_action() {
    let port = format!("{C0}.startupProbe.tcpSocket.port");
    let run = |t: Value| probe_errors("startupProbe", json!({ "tcpSocket": t }));
    assert_eq!(run(json!({})), vec![invalid(&port, "0", PORT_RANGE)]);
    assert_eq!(
        run(json!({"port": 0})),
        vec![invalid(&port, "0", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": 65536})),
        vec![invalid(&port, "65536", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": "abcdefghijklmnop"})),
        vec![invalid(
            &port,
            "\"abcdefghijklmnop\"",
            "must be no more than 15 characters"
        )]
    );
    assert_eq!(
        run(json!({"port": ""})),
        vec![
            invalid(&port, "\"\"", PORT_CHARSET),
            invalid(&port, "\"\"", PORT_LETTER),
        ]
    );
    assert_eq!(run(json!({"port": 65535})), vec![]);
}

#[test]
fn grpc_action() {
    let port = format!("{C0}.livenessProbe.grpc.port");
    let run = |g: Value| probe_errors("livenessProbe", json!({ "grpc": g }));
    assert_eq!(run(json!({})), vec![invalid(&port, "0", PORT_RANGE)]);
    assert_eq!(
        run(json!({"port": 0, "service": "svc"})),
        vec![invalid(&port, "0", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": 70000})),
        vec![invalid(&port, "70000", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": -5})),
        vec![invalid(&port, "-5", PORT_RANGE)]
    );
}

#[test]
fn exec_action_requires_a_command() {
    let f = format!("{C0}.readinessProbe.exec.command");
    for exec in [json!({}), json!({"command": []})] {
        assert_eq!(
            probe_errors("readinessProbe", json!({ "exec": exec })),
            vec![e(&f, REQ, "Required value")],
            "{exec}"
        );
    }
}

#[test]
fn sidecar_probes_follow_the_regular_container_rules() {
    let p = "spec.initContainers[0]";
    assert_eq!(
        sidecar_errors(
            json!({"livenessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2}})
        ),
        vec![invalid(
            &format!("{p}.livenessProbe.successThreshold"),
            "2",
            "must be 1"
        )]
    );
    assert_eq!(
        sidecar_errors(json!({"startupProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2}})),
        vec![invalid(
            &format!("{p}.startupProbe.successThreshold"),
            "2",
            "must be 1"
        )]
    );
    assert_eq!(
        sidecar_errors(
            json!({"readinessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2}})
        ),
        vec![]
    );
    assert_eq!(
        sidecar_errors(json!({"readinessProbe": {
            "tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": 10
        }})),
        vec![invalid(
            &format!("{p}.readinessProbe.terminationGracePeriodSeconds"),
            "10",
            "must not be set for readinessProbes"
        )]
    );
    assert_eq!(
        sidecar_errors(json!({
            "livenessProbe": {},
            "readinessProbe": {"exec": {"command": []}},
            "startupProbe": {"httpGet": {"port": "8080"}}
        })),
        vec![
            e(
                &format!("{p}.livenessProbe"),
                REQ,
                "Required value: must specify a handler type"
            ),
            e(
                &format!("{p}.readinessProbe.exec.command"),
                REQ,
                "Required value"
            ),
            invalid(
                &format!("{p}.startupProbe.httpGet.port"),
                "\"8080\"",
                PORT_LETTER
            ),
        ]
    );
}

#[test]
fn regular_init_container_probes_are_forbidden_not_inspected() {
    // TestValidateInitContainers: "Disallowed field with other errors should only return a
    // single Forbidden".
    let init = container(json!({"name": "init", "startupProbe": {
        "tcpSocket": {"port": 80},
        "initialDelaySeconds": -1, "timeoutSeconds": -1, "periodSeconds": -1,
        "successThreshold": -1, "failureThreshold": -1, "terminationGracePeriodSeconds": -1
    }}));
    assert_eq!(
        triples(&create_pod(json!({"spec": {"initContainers": [init]}}))),
        vec![e(
            "spec.initContainers[0].startupProbe",
            FORB,
            "Forbidden: may not be set for init containers without restartPolicy=Always"
        )]
    );
}

#[test]
fn probes_in_job_and_cronjob_pod_templates() {
    let bad = container(json!({
        "livenessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2},
        "readinessProbe": {},
        "startupProbe": {"httpGet": {"port": 0, "scheme": "FTP"}}
    }));
    let rows = |c0: &str| {
        vec![
            invalid(
                &format!("{c0}.livenessProbe.successThreshold"),
                "2",
                "must be 1",
            ),
            e(
                &format!("{c0}.readinessProbe"),
                REQ,
                "Required value: must specify a handler type",
            ),
            invalid(&format!("{c0}.startupProbe.httpGet.port"), "0", PORT_RANGE),
            e(
                &format!("{c0}.startupProbe.httpGet.scheme"),
                NSUP,
                "Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\"",
            ),
        ]
    };
    assert_eq!(
        triples(&create_job(
            json!({"spec": {"template": {"spec": {"containers": [bad.clone()]}}}})
        )),
        rows("spec.template.spec.containers[0]")
    );
    assert_eq!(
        triples(&create_cronjob(json!({"spec": {"jobTemplate": {"spec": {
            "template": {"spec": {"containers": [bad.clone()]}}
        }}}}))),
        rows("spec.jobTemplate.spec.template.spec.containers[0]")
    );
    assert_eq!(pod_errors(bad), rows(C0));
}

#[test]
fn probe_errors_sit_between_duplicate_name_and_restart_policy() {
    let good = container(json!({}));
    let bad = container(json!({
        "restartPolicy": "Always",
        "livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 3}
    }));
    assert_eq!(
        triples(&create_pod(json!({"spec": {"containers": [good, bad]}}))),
        vec![
            (
                "spec.containers[1].name".to_string(),
                "FieldValueDuplicate".to_string(),
                "spec.containers[1].name: Duplicate value: \"c\"".to_string(),
            ),
            invalid(
                "spec.containers[1].livenessProbe.successThreshold",
                "3",
                "must be 1"
            ),
            e(
                "spec.containers[1].restartPolicy",
                FORB,
                "Forbidden: may not be set for non-init containers"
            ),
        ]
    );
}
