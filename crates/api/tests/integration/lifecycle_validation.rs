//! Container lifecycle hook validation, ported from upstream's tables (the lifecycle rows of
//! TestValidateContainers and TestValidateInitContainers, the sleep-action rows of
//! TestValidatePodSpec). Objects go through the create pipeline
//! (defaults first, as the server does); every expected error is spelled out as
//! (field path, reason, full message), in upstream's order.

use crate::common;

use common::*;
use serde_json::{Value, json};

const NO_HANDLER: &str = "Required value: must specify a handler type";
const MORE_THAN_ONE: &str = "Forbidden: may not specify more than 1 handler type";

const C0: &str = "spec.containers[0]";
const S0: &str = "spec.initContainers[0]";
const HOOKS: [&str; 2] = ["postStart", "preStop"];

fn sleep_detail(grace: i64) -> String {
    format!("must be non-negative and less than terminationGracePeriodSeconds ({grace})")
}

/// Errors of a Pod whose only container has `lifecycle`, with `spec` merged into the spec.
fn pod_errors_with(lifecycle: Value, spec: Value) -> Vec<Triple> {
    let mut s = json!({"containers": [container(json!({"lifecycle": lifecycle}))]});
    merge(&mut s, &spec);
    triples(&create_pod(json!({ "spec": s })))
}

fn pod_errors(lifecycle: Value) -> Vec<Triple> {
    pod_errors_with(lifecycle, json!({}))
}

/// Errors of a Pod whose only container has `handler` as its `hook`.
fn hook_errors(hook: &str, handler: Value) -> Vec<Triple> {
    pod_errors(json!({ hook: handler }))
}

/// Errors of a Pod with a sidecar (restartable init container) carrying `lifecycle`.
fn sidecar_errors_with(lifecycle: Value, spec: Value) -> Vec<Triple> {
    let sidecar = container(json!({
        "name": "side", "restartPolicy": "Always", "lifecycle": lifecycle
    }));
    let mut s = json!({"initContainers": [sidecar]});
    merge(&mut s, &spec);
    triples(&create_pod(json!({ "spec": s })))
}

/// Errors of a Job whose template's only container carries `lifecycle`.
fn job_errors_with(lifecycle: Value, spec: Value) -> Vec<Triple> {
    let mut s = json!({"containers": [container(json!({"lifecycle": lifecycle}))]});
    merge(&mut s, &spec);
    triples(&create_job(json!({"spec": {"template": {"spec": s}}})))
}

fn valid_handlers() -> Vec<Value> {
    vec![
        json!({"exec": {"command": ["ls", "-l"]}}),
        json!({"httpGet": {"path": "/", "port": 80, "host": "localhost", "scheme": "HTTP"}}),
        json!({"httpGet": {"path": "/foo", "port": 65535, "scheme": "HTTPS"}}),
        json!({"httpGet": {"port": "http", "httpHeaders": [{"name": "Host", "value": "x"}]}}),
        // Deprecated for hooks, but still accepted as upstream does.
        json!({"tcpSocket": {"port": 8080}}),
        json!({"tcpSocket": {"port": "http-alt"}}),
        json!({"sleep": {"seconds": 1}}),
        json!({"sleep": {"seconds": 0}}),
        json!({"sleep": {"seconds": 30}}),
    ]
}

#[test]
fn valid_hooks_in_pod_sidecar_and_job() {
    let mut failures = Vec::new();
    for handler in valid_handlers() {
        for hook in HOOKS {
            let l = json!({ hook: handler.clone() });
            for (what, got) in [
                ("pod", pod_errors(l.clone())),
                ("sidecar", sidecar_errors_with(l.clone(), json!({}))),
                ("job", job_errors_with(l.clone(), json!({}))),
            ] {
                if !got.is_empty() {
                    failures.push(format!("{what} {hook} {handler}: {got:#?}"));
                }
            }
        }
    }
    // Both hooks at once, and an empty lifecycle.
    let both = json!({
        "postStart": {"exec": {"command": ["true"]}},
        "preStop": {"sleep": {"seconds": 5}}
    });
    if !pod_errors(both.clone()).is_empty() || !sidecar_errors_with(both, json!({})).is_empty() {
        failures.push("postStart and preStop together".to_string());
    }
    if !pod_errors(json!({})).is_empty() {
        failures.push("empty lifecycle".to_string());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn http_get_hook_is_defaulted() {
    // SetDefaults_HTTPGetAction applies to hooks too: an empty path and scheme are filled in
    // before validation (otherwise path would be Required and scheme NotSupported).
    let pod = prepared_pod(
        json!({"spec": {"containers": [container(json!({"lifecycle": {
            "postStart": {"httpGet": {"port": 80}},
            "preStop": {"httpGet": {"port": 80, "path": "", "scheme": ""}}
        }}))]}}),
    );
    let l = pod.spec.unwrap().containers[0].lifecycle.clone().unwrap();
    for h in [l.post_start.unwrap(), l.pre_stop.unwrap()] {
        let g = h.http_get.unwrap();
        assert_eq!(g.path.as_deref(), Some("/"));
        assert_eq!(g.scheme.as_deref(), Some("HTTP"));
    }
    assert_eq!(
        hook_errors("preStop", json!({"httpGet": {"port": 80}})),
        vec![]
    );
}

#[test]
fn hook_without_handler() {
    for hook in HOOKS {
        let f = format!("{C0}.lifecycle.{hook}");
        assert_eq!(hook_errors(hook, json!({})), vec![e(&f, REQ, NO_HANDLER)]);
    }
    // Both hooks empty: postStart first, then preStop.
    assert_eq!(
        pod_errors(json!({"postStart": {}, "preStop": {}})),
        vec![
            e(&format!("{C0}.lifecycle.postStart"), REQ, NO_HANDLER),
            e(&format!("{C0}.lifecycle.preStop"), REQ, NO_HANDLER),
        ]
    );
}

#[test]
fn hook_with_more_than_one_handler() {
    let p = format!("{C0}.lifecycle.preStop");
    let forbidden = |h: &str| e(&format!("{p}.{h}"), FORB, MORE_THAN_ONE);
    assert_eq!(
        hook_errors(
            "preStop",
            json!({"exec": {"command": ["true"]}, "sleep": {"seconds": 1}})
        ),
        vec![forbidden("sleep")]
    );
    // exec, httpGet, tcpSocket, sleep order: the first is checked, the rest only forbidden
    // (their contents unchecked).
    assert_eq!(
        hook_errors(
            "preStop",
            json!({
                "sleep": {"seconds": -1}, "tcpSocket": {"port": 0},
                "httpGet": {"port": 0}, "exec": {"command": []}
            })
        ),
        vec![
            e(&format!("{p}.exec.command"), REQ, "Required value"),
            forbidden("httpGet"),
            forbidden("tcpSocket"),
            forbidden("sleep"),
        ]
    );
    assert_eq!(
        hook_errors(
            "postStart",
            json!({"httpGet": {"port": 0}, "tcpSocket": {"port": 80}})
        ),
        vec![
            invalid(
                &format!("{C0}.lifecycle.postStart.httpGet.port"),
                "0",
                PORT_RANGE
            ),
            e(
                &format!("{C0}.lifecycle.postStart.tcpSocket"),
                FORB,
                MORE_THAN_ONE
            ),
        ]
    );
}

#[test]
fn exec_without_command() {
    for hook in HOOKS {
        let f = format!("{C0}.lifecycle.{hook}.exec.command");
        let want = vec![e(&f, REQ, "Required value")];
        assert_eq!(hook_errors(hook, json!({"exec": {}})), want, "{hook}");
        assert_eq!(
            hook_errors(hook, json!({"exec": {"command": []}})),
            want,
            "{hook}"
        );
    }
}

#[test]
fn http_get_bad_port_and_scheme() {
    let p = format!("{C0}.lifecycle.postStart.httpGet");
    let port = format!("{p}.port");
    let run = |h: Value| hook_errors("postStart", json!({ "httpGet": h }));
    assert_eq!(
        run(json!({"port": 0})),
        vec![invalid(&port, "0", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": 65536})),
        vec![invalid(&port, "65536", PORT_RANGE)]
    );
    assert_eq!(
        run(json!({"port": "8080"})),
        vec![invalid(&port, "\"8080\"", PORT_LETTER)]
    );
    assert_eq!(
        run(json!({"port": 80, "scheme": "FTP"})),
        vec![e(
            &format!("{p}.scheme"),
            NSUP,
            "Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\""
        )]
    );
    assert_eq!(
        run(json!({"port": 0, "scheme": "ftp"})),
        vec![
            invalid(&port, "0", PORT_RANGE),
            e(
                &format!("{p}.scheme"),
                NSUP,
                "Unsupported value: \"ftp\": supported values: \"HTTP\", \"HTTPS\""
            ),
        ]
    );
}

#[test]
fn tcp_socket_bad_port() {
    let f = format!("{C0}.lifecycle.preStop.tcpSocket.port");
    assert_eq!(
        hook_errors("preStop", json!({"tcpSocket": {"port": 0}})),
        vec![invalid(&f, "0", PORT_RANGE)]
    );
    assert_eq!(
        hook_errors("preStop", json!({"tcpSocket": {"port": "123"}})),
        vec![invalid(&f, "\"123\"", PORT_LETTER)]
    );
}

#[test]
fn sleep_seconds_against_grace_period() {
    for hook in HOOKS {
        let f = format!("{C0}.lifecycle.{hook}.sleep");
        let sleep = |s: i64| json!({ hook: {"sleep": {"seconds": s}} });
        // Defaulted grace period (30): 0 and 30 are fine, -1 and 31 are not.
        assert_eq!(pod_errors(sleep(0)), vec![], "{hook} zero");
        assert_eq!(pod_errors(sleep(30)), vec![], "{hook} equal to grace");
        assert_eq!(
            pod_errors(sleep(-1)),
            vec![invalid(&f, "-1", &sleep_detail(30))],
            "{hook} negative"
        );
        assert_eq!(
            pod_errors(sleep(31)),
            vec![invalid(&f, "31", &sleep_detail(30))],
            "{hook} above grace"
        );
        // An explicit grace period is the bound.
        let grace = |g: i64| json!({ "terminationGracePeriodSeconds": g });
        assert_eq!(pod_errors_with(sleep(5), grace(5)), vec![]);
        assert_eq!(
            pod_errors_with(sleep(6), grace(5)),
            vec![invalid(&f, "6", &sleep_detail(5))]
        );
        assert_eq!(pod_errors_with(sleep(0), grace(0)), vec![]);
        assert_eq!(
            pod_errors_with(sleep(1), grace(0)),
            vec![invalid(&f, "1", &sleep_detail(0))]
        );
    }
}

#[test]
fn rules_apply_inside_a_sidecar() {
    let l = |h: Value| json!({ "preStop": h });
    assert_eq!(
        sidecar_errors_with(l(json!({})), json!({})),
        vec![e(&format!("{S0}.lifecycle.preStop"), REQ, NO_HANDLER)]
    );
    assert_eq!(
        sidecar_errors_with(l(json!({"exec": {}})), json!({})),
        vec![e(
            &format!("{S0}.lifecycle.preStop.exec.command"),
            REQ,
            "Required value"
        )]
    );
    assert_eq!(
        sidecar_errors_with(
            l(json!({"sleep": {"seconds": 11}})),
            json!({"terminationGracePeriodSeconds": 10})
        ),
        vec![invalid(
            &format!("{S0}.lifecycle.preStop.sleep"),
            "11",
            &sleep_detail(10)
        )]
    );
    // Lifecycle is checked before the probes, as upstream.
    let sidecar = container(json!({
        "name": "side", "restartPolicy": "Always",
        "lifecycle": {"postStart": {}},
        "livenessProbe": {}
    }));
    assert_eq!(
        triples(&create_pod(json!({"spec": {"initContainers": [sidecar]}}))),
        vec![
            e(&format!("{S0}.lifecycle.postStart"), REQ, NO_HANDLER),
            e(&format!("{S0}.livenessProbe"), REQ, NO_HANDLER),
        ]
    );
}

#[test]
fn regular_init_container_lifecycle_is_forbidden_not_validated() {
    let init = container(json!({"name": "init", "lifecycle": {"postStart": {}}}));
    assert_eq!(
        triples(&create_pod(json!({"spec": {"initContainers": [init]}}))),
        vec![e(
            &format!("{S0}.lifecycle"),
            FORB,
            "Forbidden: may not be set for init containers without restartPolicy=Always"
        )]
    );
}

#[test]
fn rules_apply_inside_a_job_template() {
    let t = "spec.template.spec.containers[0].lifecycle";
    assert_eq!(
        job_errors_with(json!({"postStart": {}}), json!({})),
        vec![e(&format!("{t}.postStart"), REQ, NO_HANDLER)]
    );
    assert_eq!(
        job_errors_with(json!({"preStop": {"sleep": {"seconds": 31}}}), json!({})),
        vec![invalid(
            &format!("{t}.preStop.sleep"),
            "31",
            &sleep_detail(30)
        )]
    );
    assert_eq!(
        job_errors_with(
            json!({"preStop": {"exec": {"command": ["x"]}, "httpGet": {"port": 1}}}),
            json!({})
        ),
        vec![e(&format!("{t}.preStop.httpGet"), FORB, MORE_THAN_ONE)]
    );
}
