//! Lifecycle hooks as kubelet runs them (`pkg/kubelet/lifecycle/handlers.go`): postStart right
//! after a container starts (the container counts as running, and the pod's next container
//! starts, only once it is done; a failed one kills the container), preStop before the stop
//! signal (for at most the grace period; SIGTERM follows, and SIGKILL no sooner than 2 s
//! later). A hook is an exec command beside the container (its env and working directory), an
//! HTTP GET (any response will do; only a failed request is an error), or a sleep; kubelet
//! cannot run a tcpSocket one, which the API still accepts, and reports it failed.

use std::path::Path;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};
use kbatch_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kbatch_cron::go_quote;

use crate::probe::http;
use crate::probe::run::{self, Action, ExecEnd};

/// What a hook does, resolved from the container's spec.
#[derive(Debug, Clone)]
pub enum Hook {
    Run(Action),
    Sleep(Duration),
    /// A handler kubelet cannot run (tcpSocket): its failure message.
    Invalid(String),
}

/// Where in a container's run a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    PostStart,
    PreStop,
}

/// The hook of `container` at `point`, if it has one; `Err` when it can't be resolved (a named
/// port that does not exist), reported like a failed hook.
pub fn at(
    point: Point,
    container: &Container,
    pod_ip: &str,
    env: &[(String, String)],
    workdir: &Path,
) -> Option<Result<Hook, String>> {
    let lifecycle = container.lifecycle.as_ref()?;
    let handler = match point {
        Point::PostStart => lifecycle.post_start.as_ref()?,
        Point::PreStop => lifecycle.pre_stop.as_ref()?,
    };
    Some(resolve(handler, container, pod_ip, env, workdir))
}

fn resolve(
    h: &LifecycleHandler,
    container: &Container,
    pod_ip: &str,
    env: &[(String, String)],
    workdir: &Path,
) -> Result<Hook, String> {
    // The order of kubelet's switch: exec, httpGet, sleep, and nothing else.
    if h.exec.is_none() && h.http_get.is_none() {
        if let Some(sleep) = &h.sleep {
            return Ok(Hook::Sleep(Duration::from_secs(
                u64::try_from(sleep.seconds).unwrap_or(0),
            )));
        }
        return Ok(Hook::Invalid(format!(
            "Cannot run handler: invalid handler: {}",
            go_handler_text(h)
        )));
    }
    let mut http_get = h.http_get.clone();
    if let Some(get) = &mut http_get {
        // A hook's GET says it comes from kubelet's lifecycle runner, unless the hook says.
        let headers = get.http_headers.get_or_insert_with(Vec::new);
        if !headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("user-agent"))
        {
            headers.push(kbatch_api::k8s_openapi::api::core::v1::HTTPHeader {
                name: "User-Agent".to_string(),
                value: http::LIFECYCLE_USER_AGENT.to_string(),
            });
        }
    }
    // The same actions a probe runs, built the same way.
    let as_probe = Probe {
        exec: h.exec.clone(),
        http_get,
        ..Probe::default()
    };
    run::action(&as_probe, container, pod_ip, env, workdir).map(Hook::Run)
}

/// Go's `%v` of a `*LifecycleHandler` kubelet cannot run (its generated String()), as its
/// "invalid handler" error prints it.
fn go_handler_text(h: &LifecycleHandler) -> String {
    let tcp = match &h.tcp_socket {
        None => "nil".to_string(),
        Some(t) => {
            // `%v` of an IntOrString value: its fields, {Type IntVal StrVal}.
            let port = match &t.port {
                IntOrString::Int(n) => format!("{{0 {n} }}"),
                IntOrString::String(s) => format!("{{1 0 {s}}}"),
            };
            format!(
                "&TCPSocketAction{{Port:{port},Host:{},}}",
                t.host.as_deref().unwrap_or("")
            )
        }
    };
    format!("&LifecycleHandler{{Exec:nil,HTTPGet:nil,TCPSocket:{tcp},Sleep:nil,}}")
}

/// Runs the hook, for at most `limit` when given (a preStop hook's grace period; kubelet gives
/// a postStart hook no limit). `Err` carries kubelet's message for the hook's failure.
pub async fn run(
    hook: Hook,
    limit: Option<Duration>,
    container: &str,
    pod: &str,
) -> Result<(), String> {
    let limit_or_none = limit.unwrap_or(Duration::ZERO);
    let (container, pod) = (go_quote(container), go_quote(pod));
    match hook {
        Hook::Invalid(message) => Err(message),
        Hook::Sleep(d) => {
            tokio::time::sleep(limit.map_or(d, |l| d.min(l))).await;
            Ok(())
        }
        // A hook's GET is done with any response; only the request itself can fail.
        Hook::Run(Action::Http {
            https,
            host,
            port,
            path,
            headers,
        }) => match http::get(https, &host, port, &path, &headers, limit_or_none).await {
            Ok(_) => Ok(()),
            Err(failed) => Err(format!(
                "HTTP lifecycle hook ({path}) for Container {container} in Pod {pod} failed - error: {}",
                failed.error.unwrap_or(failed.output)
            )),
        },
        Hook::Run(Action::Exec {
            argv,
            env,
            workdir,
            container_pid,
        }) => {
            let command = argv.join(" ");
            let ran = run::exec(&argv, &env, &workdir, container_pid, limit_or_none).await;
            let (error, output) = match ran {
                ExecEnd::Exited { code: 0, .. } => return Ok(()),
                // CRI's ExecSync error for a non-zero exit, then stdout and stderr together.
                ExecEnd::Exited {
                    code,
                    mut stdout,
                    stderr,
                } => {
                    let error = format!(
                        "command '{command}' exited with {code}: {}",
                        String::from_utf8_lossy(&stderr)
                    );
                    stdout.extend_from_slice(&stderr);
                    (error, String::from_utf8_lossy(&stdout).into_owned())
                }
                ExecEnd::NotStarted(e) | ExecEnd::Errored(e) => (e, String::new()),
                ExecEnd::TimedOut => (format!("command '{command}' timed out"), String::new()),
            };
            Err(format!(
                "Exec lifecycle hook ([{command}]) for Container {container} in Pod {pod} failed - error: {error}, message: {}",
                go_quote(&output)
            ))
        }
        // `resolve` builds only exec and httpGet actions.
        Hook::Run(Action::Tcp { .. } | Action::Grpc { .. } | Action::Unsupported(_)) => {
            Err("Cannot run handler: invalid handler".to_string())
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
        let resolve = |l| at(Point::PreStop, &container(l), "127.0.0.1", &env, dir.path());
        assert!(resolve(json!({})).is_none());

        let ok = resolve(json!({"preStop": {"exec": {"command": ["touch", "stopped"]}}}))
            .unwrap()
            .unwrap();
        assert_eq!(
            run(ok, Some(Duration::from_secs(5)), "c", "p_ns(u)").await,
            Ok(())
        );
        assert!(dir.path().join("stopped").exists());

        // CRI's error names the exit code and stderr; the message is stdout then stderr.
        let bad = resolve(
            json!({"preStop": {"exec": {"command": ["sh", "-c", "echo no; echo why >&2; exit 3"]}}}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            run(bad, Some(Duration::from_secs(5)), "c", "p_ns(u)").await,
            Err("Exec lifecycle hook ([sh -c echo no; echo why >&2; exit 3]) for Container \"c\" in Pod \"p_ns(u)\" failed - error: command 'sh -c echo no; echo why >&2; exit 3' exited with 3: why\n, message: \"no\\nwhy\\n\"".to_string())
        );
        let missing = resolve(json!({"postStart": {"exec": {"command": ["no-such-binary"]}}}));
        assert!(missing.is_none(), "a postStart hook is not a preStop one");
        let missing = at(
            Point::PostStart,
            &container(json!({"postStart": {"exec": {"command": ["no-such-binary"]}}})),
            "127.0.0.1",
            &env,
            dir.path(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            run(missing, None, "c", "p").await,
            Err("Exec lifecycle hook ([no-such-binary]) for Container \"c\" in Pod \"p\" failed - error: exec: \"no-such-binary\": executable file not found in $PATH, message: \"\"".to_string())
        );

        let sleep = resolve(json!({"preStop": {"sleep": {"seconds": 10}}}))
            .unwrap()
            .unwrap();
        let started = std::time::Instant::now();
        assert_eq!(
            run(sleep, Some(Duration::from_millis(200)), "c", "p").await,
            Ok(())
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(5),
            "{took:?}"
        );

        // kubelet has no runner for tcpSocket hooks: they fail, with its %v of the handler.
        let tcp = resolve(json!({"preStop": {"tcpSocket": {"port": 8080}}}))
            .unwrap()
            .unwrap();
        assert_eq!(
            run(tcp, None, "c", "p").await,
            Err("Cannot run handler: invalid handler: &LifecycleHandler{Exec:nil,HTTPGet:nil,TCPSocket:&TCPSocketAction{Port:{0 8080 },Host:,},Sleep:nil,}".to_string())
        );
        let named = resolve(json!({"preStop": {"tcpSocket": {"port": "http", "host": "h"}}}))
            .unwrap()
            .unwrap();
        assert!(
            matches!(&named, Hook::Invalid(m) if m.ends_with("TCPSocket:&TCPSocketAction{Port:{1 0 http},Host:h,},Sleep:nil,}")),
            "{named:?}"
        );
    }

    #[tokio::test]
    async fn an_http_hook_fails_only_when_the_request_does() {
        let dir = tempfile::tempdir().unwrap();
        // Nothing listens there: the request fails.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let hook = at(
            Point::PreStop,
            &container(json!({"preStop": {"httpGet": {"path": "/quit", "port": port}}})),
            "127.0.0.1",
            &[],
            dir.path(),
        )
        .unwrap()
        .unwrap();
        let err = run(hook.clone(), Some(Duration::from_secs(2)), "c", "p_ns(u)")
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
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let n = conn.read(&mut buf).await.unwrap();
            conn.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        assert_eq!(
            run(hook, Some(Duration::from_secs(2)), "c", "p_ns(u)").await,
            Ok(())
        );
        let head = server.await.unwrap();
        assert!(
            head.contains("\r\nUser-Agent: kube-lifecycle/1.37\r\n"),
            "{head}"
        );
    }
}
