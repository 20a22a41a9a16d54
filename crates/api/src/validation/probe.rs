//! Container probe validation, as core `validateLivenessProbe`, `validateReadinessProbe`,
//! `validateStartupProbe`, `validateProbe`, and the shared `validateHandler` with its
//! per-action checks (also used for lifecycle hooks, see `lifecycle.rs`). Regular containers and sidecars (restartable init containers) get these
//! rules; regular init containers may not carry probes at all (checked by the caller).
//!
//! Validation runs on defaulted objects (`defaults::probe_defaults`), so zero timeouts,
//! periods and thresholds, an empty `httpGet.path` and an empty `httpGet.scheme` have already
//! been filled in when a request reaches these checks, as upstream.

use k8s_openapi::api::core::v1::{
    Container, ExecAction, GRPCAction, HTTPGetAction, Probe, SleepAction, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::nonnegative;
use crate::field::{ErrorList, FieldError, Path};
use crate::names;

/// `supportedHTTPSchemes`, sorted as upstream lists them.
const HTTP_SCHEMES: [&str; 2] = ["HTTP", "HTTPS"];
const MORE_THAN_ONE_HANDLER: &str = "may not specify more than 1 handler type";

/// The three probes of a regular container or a sidecar, in upstream's order.
pub(crate) fn container_probes(c: &Container, path: &Path, errs: &mut ErrorList) {
    if let Some(p) = &c.liveness_probe {
        let lp = path.child("livenessProbe");
        probe(p, &lp, errs);
        success_threshold_is_one(p, &lp, errs);
    }
    if let Some(p) = &c.readiness_probe {
        let rp = path.child("readinessProbe");
        probe(p, &rp, errs);
        if let Some(t) = p.termination_grace_period_seconds {
            errs.push(FieldError::invalid(
                rp.child("terminationGracePeriodSeconds"),
                t,
                "must not be set for readinessProbes",
            ));
        }
    }
    if let Some(p) = &c.startup_probe {
        let sp = path.child("startupProbe");
        probe(p, &sp, errs);
        success_threshold_is_one(p, &sp, errs);
    }
}

/// Liveness and startup probes only make sense with a single success.
fn success_threshold_is_one(p: &Probe, path: &Path, errs: &mut ErrorList) {
    let st = p.success_threshold.unwrap_or(0);
    if st != 1 {
        errs.push(FieldError::invalid(
            path.child("successThreshold"),
            st,
            "must be 1",
        ));
    }
}

/// `validateProbe`: the handler, then the numeric fields.
fn probe(p: &Probe, path: &Path, errs: &mut ErrorList) {
    probe_handler(p, path, errs);
    for (value, name) in [
        (p.initial_delay_seconds, "initialDelaySeconds"),
        (p.timeout_seconds, "timeoutSeconds"),
        (p.period_seconds, "periodSeconds"),
        (p.success_threshold, "successThreshold"),
        (p.failure_threshold, "failureThreshold"),
    ] {
        nonnegative(i64::from(value.unwrap_or(0)), &path.child(name), errs);
    }
    if let Some(t) = p.termination_grace_period_seconds
        && t <= 0
    {
        errs.push(FieldError::invalid(
            path.child("terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
}

/// One handler action (of a probe or a lifecycle hook), borrowed from its owner.
pub(super) enum Handler<'a> {
    Exec(&'a ExecAction),
    HttpGet(&'a HTTPGetAction),
    TcpSocket(&'a TCPSocketAction),
    Grpc(&'a GRPCAction),
    Sleep(&'a SleepAction),
}

impl Handler<'_> {
    fn field(&self) -> &'static str {
        match self {
            Handler::Exec(_) => "exec",
            Handler::HttpGet(_) => "httpGet",
            Handler::TcpSocket(_) => "tcpSocket",
            Handler::Grpc(_) => "grpc",
            Handler::Sleep(_) => "sleep",
        }
    }

    fn validate(&self, grace_period: Option<i64>, path: &Path, errs: &mut ErrorList) {
        match self {
            Handler::Exec(a) => exec_action(a, path, errs),
            Handler::HttpGet(a) => http_get_action(a, path, errs),
            Handler::TcpSocket(a) => tcp_socket_action(a, path, errs),
            Handler::Grpc(a) => grpc_action(a, path, errs),
            Handler::Sleep(a) => sleep_action(a, grace_period, path, errs),
        }
    }
}

/// `validateProbe`'s handler: a probe may carry exec, httpGet, tcpSocket or grpc.
fn probe_handler(p: &Probe, path: &Path, errs: &mut ErrorList) {
    handler(
        &[
            p.exec.as_ref().map(Handler::Exec),
            p.http_get.as_ref().map(Handler::HttpGet),
            p.tcp_socket.as_ref().map(Handler::TcpSocket),
            p.grpc.as_ref().map(Handler::Grpc),
        ],
        None,
        path,
        errs,
    );
}

/// `validateHandler`: exactly one action. `actions` lists the owner's possible actions in
/// upstream's order (exec, httpGet, tcpSocket, grpc, sleep); every action after the first set
/// one is forbidden and its contents go unchecked. `grace_period` is the pod's
/// `terminationGracePeriodSeconds`, which bounds a sleep action.
pub(super) fn handler(
    actions: &[Option<Handler<'_>>],
    grace_period: Option<i64>,
    path: &Path,
    errs: &mut ErrorList,
) {
    let mut found = false;
    for h in actions.iter().flatten() {
        let hp = path.child(h.field());
        if found {
            errs.push(FieldError::forbidden(hp, MORE_THAN_ONE_HANDLER));
        } else {
            found = true;
            h.validate(grace_period, &hp, errs);
        }
    }
    if !found {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
}

/// `validateSleepAction` with `PodLifecycleSleepActionAllowZero` on (locked on upstream):
/// zero is allowed; negative values and values above the pod's grace period are not. The
/// error is reported at the `sleep` field itself. Without a grace period nothing is checked
/// (upstream leaves that to the grace-period check).
fn sleep_action(a: &SleepAction, grace_period: Option<i64>, path: &Path, errs: &mut ErrorList) {
    if let Some(grace) = grace_period
        && (a.seconds < 0 || a.seconds > grace)
    {
        errs.push(FieldError::invalid(
            path,
            a.seconds,
            format!("must be non-negative and less than terminationGracePeriodSeconds ({grace})"),
        ));
    }
}

/// `validateExecAction`.
fn exec_action(a: &ExecAction, path: &Path, errs: &mut ErrorList) {
    if a.command.as_deref().unwrap_or(&[]).is_empty() {
        errs.push(FieldError::required(path.child("command"), ""));
    }
}

/// `validateHTTPGetAction`: path, port, scheme, then each header name (reported under
/// `httpHeaders` without an index, as upstream).
fn http_get_action(a: &HTTPGetAction, path: &Path, errs: &mut ErrorList) {
    if a.path.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(path.child("path"), ""));
    }
    port_num_or_name(&a.port, &path.child("port"), errs);
    let scheme = a.scheme.as_deref().unwrap_or("");
    if !HTTP_SCHEMES.contains(&scheme) {
        errs.push(FieldError::not_supported(
            path.child("scheme"),
            scheme,
            &HTTP_SCHEMES,
        ));
    }
    for h in a.http_headers.iter().flatten() {
        for m in names::http_header_name(&h.name) {
            errs.push(FieldError::invalid(path.child("httpHeaders"), &h.name, m));
        }
    }
}

/// `validateTCPSocketAction`.
fn tcp_socket_action(a: &TCPSocketAction, path: &Path, errs: &mut ErrorList) {
    port_num_or_name(&a.port, &path.child("port"), errs);
}

/// `validateGRPCAction`: the port is a number only.
fn grpc_action(a: &GRPCAction, path: &Path, errs: &mut ErrorList) {
    port_num_or_name(&IntOrString::Int(a.port), &path.child("port"), errs);
}

/// `ValidatePortNumOrName`: a number in 1..=65535 or an IANA service name.
pub(crate) fn port_num_or_name(port: &IntOrString, path: &Path, errs: &mut ErrorList) {
    match port {
        IntOrString::Int(n) => {
            for m in names::port_num(*n) {
                errs.push(FieldError::invalid(path, *n, m));
            }
        }
        IntOrString::String(s) => {
            for m in names::port_name(s) {
                errs.push(FieldError::invalid(path, s, m));
            }
        }
    }
}
