//! The simulate runtime (as kwok does): no process; a container "runs" for the pod's
//! `kbatch.dev/simulate-duration` (Go duration, default 0) and exits with its
//! `kbatch.dev/simulate-exit-code` (default 0). Init containers succeed at once; ephemeral
//! containers run as regular ones do (once: they are never restarted).

use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, oneshot};

use crate::env::ConfigError;
use crate::runtime::{Exit, Plan, Started, StopSignal};

pub const DURATION_ANNOTATION: &str = "kbatch.dev/simulate-duration";
pub const EXIT_CODE_ANNOTATION: &str = "kbatch.dev/simulate-exit-code";

const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// The plan of a regular container of `pod`, from its annotations.
pub fn plan(pod: &Pod) -> Result<Plan, ConfigError> {
    let ann = |k: &str| {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(|v| v.trim().to_string())
    };
    let duration = match ann(DURATION_ANNOTATION) {
        None => Duration::ZERO,
        Some(v) => kbatch_cron::parse_go_duration(&v)
            .map_err(|e| ConfigError(format!("annotation {DURATION_ANNOTATION}: {e}")))?,
    };
    let exit_code = match ann(EXIT_CODE_ANNOTATION) {
        None => 0,
        Some(v) => v.parse::<i32>().map_err(|_| {
            ConfigError(format!(
                "annotation {EXIT_CODE_ANNOTATION}: {v:?} is not an integer exit code"
            ))
        })?,
    };
    Ok(Plan::Simulate {
        duration,
        exit_code,
    })
}

/// An init container: done at once.
pub fn init_plan() -> Plan {
    Plan::Simulate {
        duration: Duration::ZERO,
        exit_code: 0,
    }
}

/// A sidecar runs until it is stopped (a year stands for forever: tokio's timers end there).
pub fn sidecar_plan() -> Plan {
    Plan::Simulate {
        duration: Duration::from_secs(365 * 24 * 3600),
        exit_code: 0,
    }
}

pub fn start(duration: Duration, exit_code: i32) -> Started {
    let (stop, mut stop_rx) = mpsc::unbounded_channel();
    let (exit_tx, exit) = oneshot::channel();
    tokio::spawn(async move {
        let outcome = tokio::select! {
            _ = tokio::time::sleep(duration) => Exit {
                exit_code,
                signal: None,
                finished_at: jiff::Timestamp::now(),
            },
            sig = stop_rx.recv() => match sig {
                Some(StopSignal::Term) => Exit::signaled(SIGTERM),
                Some(StopSignal::Kill) | None => Exit::signaled(SIGKILL),
            },
        };
        let _ = exit_tx.send(outcome);
    });
    Started {
        attach: None,
        pid: None,
        start_ticks: None,
        stop,
        exit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ann: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "annotations": ann}})).unwrap()
    }

    #[test]
    fn plans_from_annotations() {
        match plan(&pod(json!({}))).unwrap() {
            Plan::Simulate {
                duration,
                exit_code,
            } => assert_eq!((duration, exit_code), (Duration::ZERO, 0)),
            other => panic!("{other:?}"),
        }
        match plan(&pod(
            json!({DURATION_ANNOTATION: "1500ms", EXIT_CODE_ANNOTATION: "3"}),
        ))
        .unwrap()
        {
            Plan::Simulate {
                duration,
                exit_code,
            } => assert_eq!((duration, exit_code), (Duration::from_millis(1500), 3)),
            other => panic!("{other:?}"),
        }
        let e = plan(&pod(json!({DURATION_ANNOTATION: "soon"}))).unwrap_err();
        assert_eq!(
            e.0,
            "annotation kbatch.dev/simulate-duration: time: invalid duration \"soon\""
        );
        let e = plan(&pod(json!({EXIT_CODE_ANNOTATION: "x"}))).unwrap_err();
        assert!(e.0.contains("not an integer"), "{}", e.0);
    }

    #[tokio::test]
    async fn runs_and_stops() {
        let s = start(Duration::from_millis(10), 4);
        assert_eq!(s.exit.await.unwrap().exit_code, 4);
        let s = start(Duration::from_secs(100), 0);
        s.stop.send(StopSignal::Term).unwrap();
        let e = s.exit.await.unwrap();
        assert_eq!((e.exit_code, e.signal), (143, Some(15)));
    }
}
