//! Container lifecycle hook validation, as core `validateLifecycle`: the `postStart` and
//! `preStop` handlers go through the handler check shared with probes (`probe::handler`; a
//! lifecycle handler may carry exec, httpGet, tcpSocket or sleep, tcpSocket being deprecated
//! but still accepted). `stopSignal` (feature ContainerStopSignals) is not checked: its rules
//! could not be confirmed against the release kbatch follows. Regular containers and sidecars
//! (restartable init containers) get these rules; regular init containers may not carry a
//! lifecycle at all (checked by the caller).
//!
//! Validation runs on defaulted objects: an empty `httpGet.path` or `httpGet.scheme` of a hook
//! has already been filled in (`defaults::container`), as upstream.

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use super::probe::{Handler, handler};
use crate::field::{ErrorList, Path};

/// `validateLifecycle` of a container at `path`: postStart, then preStop. `grace_period` is the
/// pod's `terminationGracePeriodSeconds`, the upper bound of a sleep action.
pub(crate) fn container_lifecycle(
    c: &Container,
    grace_period: Option<i64>,
    path: &Path,
    errs: &mut ErrorList,
) {
    let Some(l) = &c.lifecycle else {
        return;
    };
    let path = path.child("lifecycle");
    if let Some(h) = &l.post_start {
        lifecycle_handler(h, grace_period, &path.child("postStart"), errs);
    }
    if let Some(h) = &l.pre_stop {
        lifecycle_handler(h, grace_period, &path.child("preStop"), errs);
    }
}

/// `validateHandler` for a lifecycle hook: exec, httpGet, tcpSocket, sleep (no grpc).
fn lifecycle_handler(h: &LifecycleHandler, grace: Option<i64>, path: &Path, errs: &mut ErrorList) {
    handler(
        &[
            h.exec.as_ref().map(Handler::Exec),
            h.http_get.as_ref().map(Handler::HttpGet),
            h.tcp_socket.as_ref().map(Handler::TcpSocket),
            h.sleep.as_ref().map(Handler::Sleep),
        ],
        grace,
        path,
        errs,
    );
}
