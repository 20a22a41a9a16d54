//! The preStop lifecycle hook, as kubelet runs it (`pkg/kubelet/lifecycle/handlers.go`) before
//! it sends a container its stop signal: an exec command in the container (its env and working
//! directory), an HTTP GET (any response counts as done; only a failed request is an error), or
//! a sleep. The hook gets at most the pod's grace period; SIGTERM follows it, and SIGKILL no
//! sooner than 2 s later (kubelet's minimum grace after a hook).

use std::path::Path;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};

use crate::probe::http;
use crate::probe::run::{self, Action, Outcome};

/// What a hook does, resolved from the container's spec.
#[derive(Debug, Clone)]
pub enum Hook {
    Run(Action),
    Sleep(Duration),
    /// tcpSocket: accepted by the API for compatibility, and kubelet does nothing with it.
    Nothing,
}

/// The preStop hook of `container`, if it has one; `Err` when it can't be resolved (a named
/// port that does not exist), reported like a failed hook.
pub fn pre_stop(
    container: &Container,
    pod_ip: &str,
    env: &[(String, String)],
    workdir: &Path,
) -> Option<Result<Hook, String>> {
    let handler = container.lifecycle.as_ref()?.pre_stop.as_ref()?;
    Some(resolve(handler, container, pod_ip, env, workdir))
}

fn resolve(
    h: &LifecycleHandler,
    container: &Container,
    pod_ip: &str,
    env: &[(String, String)],
    workdir: &Path,
) -> Result<Hook, String> {
    if let Some(sleep) = &h.sleep {
        return Ok(Hook::Sleep(Duration::from_secs(
            u64::try_from(sleep.seconds).unwrap_or(0),
        )));
    }
    if h.exec.is_none() && h.http_get.is_none() {
        return Ok(Hook::Nothing);
    }
    // The same actions a probe runs, built the same way.
    let as_probe = Probe {
        exec: h.exec.clone(),
        http_get: h.http_get.clone(),
        ..Probe::default()
    };
    run::action(&as_probe, container, pod_ip, env, workdir).map(Hook::Run)
}

/// Runs the hook for at most `limit`. `Err` carries kubelet's FailedPreStopHook message.
pub async fn run(hook: Hook, limit: Duration, container: &str, pod: &str) -> Result<(), String> {
    match hook {
        Hook::Nothing => Ok(()),
        Hook::Sleep(d) => {
            tokio::time::sleep(d.min(limit)).await;
            Ok(())
        }
        // A hook's GET is done with any response; only the request itself can fail.
        Hook::Run(Action::Http {
            https,
            host,
            port,
            path,
            headers,
        }) => match http::get(https, &host, port, &path, &headers, limit).await {
            Ok(_) => Ok(()),
            Err(failed) => Err(format!(
                "HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {}",
                failed.error.unwrap_or(failed.output)
            )),
        },
        Hook::Run(action) => {
            let attempt = run::run_once(&action, limit).await;
            match (attempt.outcome, &action) {
                (Outcome::Success, _) => Ok(()),
                (_, Action::Exec { argv, .. }) => {
                    let command = argv.join(" ");
                    Err(format!(
                        "Exec lifecycle hook ([{command}]) for Container {container:?} in Pod {pod:?} failed - error: command '{command}' failed, message: {:?}",
                        attempt.output
                    ))
                }
                (_, _) => Err(attempt.error.unwrap_or(attempt.output)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(lifecycle: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "lifecycle": lifecycle})).unwrap()
    }

    #[tokio::test]
    async fn exec_sleep_and_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let resolve = |l| pre_stop(&container(l), "127.0.0.1", &env, dir.path());
        assert!(pre_stop(&container(json!({})), "127.0.0.1", &env, dir.path()).is_none());

        let ok = resolve(json!({"preStop": {"exec": {"command": ["touch", "stopped"]}}}))
            .unwrap()
            .unwrap();
        assert_eq!(
            run(ok, Duration::from_secs(5), "c", "p_ns(u)").await,
            Ok(())
        );
        assert!(dir.path().join("stopped").exists());

        let bad =
            resolve(json!({"preStop": {"exec": {"command": ["sh", "-c", "echo no; exit 3"]}}}))
                .unwrap()
                .unwrap();
        assert_eq!(
            run(bad, Duration::from_secs(5), "c", "p_ns(u)").await,
            Err("Exec lifecycle hook ([sh -c echo no; exit 3]) for Container \"c\" in Pod \"p_ns(u)\" failed - error: command 'sh -c echo no; exit 3' failed, message: \"no\\n\"".to_string())
        );

        let sleep = resolve(json!({"preStop": {"sleep": {"seconds": 10}}}))
            .unwrap()
            .unwrap();
        let started = std::time::Instant::now();
        assert_eq!(
            run(sleep, Duration::from_millis(200), "c", "p").await,
            Ok(())
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(5),
            "{took:?}"
        );

        let tcp = resolve(json!({"preStop": {"tcpSocket": {"port": 1}}}))
            .unwrap()
            .unwrap();
        assert!(matches!(tcp, Hook::Nothing));
    }

    #[tokio::test]
    async fn an_http_hook_fails_only_when_the_request_does() {
        let dir = tempfile::tempdir().unwrap();
        // Nothing listens there: the request fails.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let hook = pre_stop(
            &container(json!({"preStop": {"httpGet": {"path": "/quit", "port": port}}})),
            "127.0.0.1",
            &[],
            dir.path(),
        )
        .unwrap()
        .unwrap();
        let err = run(hook.clone(), Duration::from_secs(2), "c", "p_ns(u)")
            .await
            .unwrap_err();
        assert!(
            err.starts_with("HTTP lifecycle hook (/quit) for Container \"c\" in Pod \"p_ns(u)\" failed - error: Get \"http://127.0.0.1:"),
            "{err}"
        );
        // A server answering 500: the hook ran.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            if let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            }
        });
        assert_eq!(
            run(hook, Duration::from_secs(2), "c", "p_ns(u)").await,
            Ok(())
        );
        server.abort();
    }
}
