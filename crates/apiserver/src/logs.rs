//! `GET pods/NAME/log`: container logs as kubelet serves them, read from the files the local
//! executor writes (`kbatch_api::podlog`). The pod's status says which run of the container to
//! read (its containerID names the run), with kubelet's errors for containers that have no log
//! yet; `follow` streams until that run has ended and its file is read to the end.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kbatch_api::field::FieldError;
use kbatch_api::podlog::{self, Renderer, Selection};
use kbatch_store::Store;
use serde_json::Value;

use crate::ServerState;
use crate::error::ApiError;
use crate::request::{Query, Target};

/// How often a followed log is checked for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// The parsed `PodLogOptions`.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub selection: Selection,
}

/// Decode and validate the query as upstream's `ValidatePodLogOptions` does.
pub fn parse_options(q: &Query, name: &str, now: jiff::Timestamp) -> Result<LogOptions, ApiError> {
    let tail = q.int("tailLines")?;
    let limit = q.int("limitBytes")?;
    let since_seconds = q.int("sinceSeconds")?;
    let since_time = match q.get("sinceTime") {
        None => None,
        Some(v) => Some(v.parse::<jiff::Timestamp>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid value {v:?} for query parameter sinceTime: must be an RFC 3339 time"
            ))
        })?),
    };
    let mut errs = Vec::new();
    if let Some(t) = tail.filter(|t| *t < 0) {
        errs.push(FieldError::invalid(
            "tailLines",
            t,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(l) = limit.filter(|l| *l < 1) {
        errs.push(FieldError::invalid(
            "limitBytes",
            l,
            "must be greater than 0",
        ));
    }
    match (since_seconds, since_time) {
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            "",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        )),
        (Some(s), None) if s < 1 => errs.push(FieldError::invalid(
            "sinceSeconds",
            s,
            "must be greater than 0",
        )),
        _ => {}
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid("PodLogOptions", "", name, &errs));
    }
    let since = match (since_seconds, since_time) {
        (Some(s), None) => now.checked_sub(jiff::SignedDuration::from_secs(s)).ok(),
        (None, Some(t)) => Some(t),
        _ => None,
    };
    Ok(LogOptions {
        container: q.get("container").map(str::to_string),
        follow: q.bool("follow")?,
        previous: q.bool("previous")?,
        selection: Selection {
            since,
            tail_lines: tail.and_then(|t| u64::try_from(t).ok()),
            limit_bytes: limit.and_then(|l| u64::try_from(l).ok()),
            timestamps: q.bool("timestamps")?,
        },
    })
}

/// The `name`s of a pod spec's container list `key` (`containers`, `initContainers`, ...).
pub(crate) fn names_of(spec: &Value, key: &str) -> Vec<String> {
    spec.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Upstream's `validateContainer`: the container asked for, or the only one.
pub fn choose_container(
    pod: &Value,
    pod_name: &str,
    asked: Option<&str>,
) -> Result<String, ApiError> {
    let spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    let containers = names_of(&spec, "containers");
    let all: Vec<String> = names_of(&spec, "initContainers")
        .into_iter()
        .chain(containers.iter().cloned())
        .chain(names_of(&spec, "ephemeralContainers"))
        .collect();
    match asked {
        Some(c) if all.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {pod_name}"
        ))),
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                all.join(" ")
            ))),
        },
    }
}

fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .filter_map(|k| {
        pod.pointer(&format!("/status/{k}"))
            .and_then(Value::as_array)
    })
    .flatten()
    .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
}

/// kubelet's `validateContainerLogStatus`: the containerID whose log to read.
pub fn log_container_id(
    pod: &Value,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<String, ApiError> {
    let err = |m: String| Err(ApiError::bad_request(m));
    let Some(cs) = container_status(pod, container) else {
        return err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let id_of = |v: Option<&Value>| {
        v.and_then(|t| t.get("containerID"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let last_terminated = cs.pointer("/lastState/terminated");
    let state = cs.get("state");
    let running = state.and_then(|s| s.get("running"));
    let terminated = state.and_then(|s| s.get("terminated"));
    let waiting = state.and_then(|s| s.get("waiting"));
    let current = cs
        .get("containerID")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if previous {
        return match id_of(last_terminated) {
            Some(id) => Ok(id),
            None => err(format!(
                "previous terminated container {container:?} in pod {pod_name:?} not found"
            )),
        };
    }
    if running.is_some() {
        return Ok(current);
    }
    if let Some(t) = terminated {
        return match id_of(Some(t)).or_else(|| id_of(last_terminated)) {
            Some(id) => Ok(id),
            None => err(format!(
                "container {container:?} in pod {pod_name:?} is terminated"
            )),
        };
    }
    if let Some(last) = last_terminated {
        return match id_of(Some(last)) {
            Some(id) => Ok(id),
            None => err(format!(
                "container {container:?} in pod {pod_name:?} is terminated"
            )),
        };
    }
    if let Some(w) = waiting {
        let reason = w.get("reason").and_then(Value::as_str).unwrap_or("");
        return err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {reason}"
        ));
    }
    err(format!(
        "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
    ))
}

fn text_response(body: Body) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

fn read_from(path: PathBuf, offset: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

async fn read_file(path: PathBuf, offset: u64) -> Result<Vec<u8>, ApiError> {
    tokio::task::spawn_blocking(move || read_from(path, offset))
        .await
        .map_err(|e| ApiError::internal(format!("reading a log: {e}")))?
        .map_err(|e| ApiError::internal(format!("reading a log: {e}")))
}

pub async fn pod_log(st: &ServerState, t: &Target, q: &Query) -> Result<Response, ApiError> {
    let res = t.resource;
    let name = t.name.clone().unwrap_or_default();
    let ns = t.namespace.clone().unwrap_or_default();
    let key = res.key(&ns, &name);
    let obj = st
        .store
        .get(&key)
        .ok_or_else(|| ApiError::not_found(res.plural, res.group, &name))?;
    let pod = crate::handlers::parse_stored(&obj)?;
    let opts = parse_options(q, &name, st.now())?;
    let container = choose_container(&pod, &name, opts.container.as_deref())?;
    let unscheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if unscheduled {
        // Upstream: no node to ask, an empty log.
        return Ok(text_response(Body::empty()));
    }
    let container_id = log_container_id(&pod, &name, &container, opts.previous)?;
    let (Some(root), Some(run)) = (st.log_dir(), podlog::run_of_container_id(&container_id)) else {
        return Ok(text_response(Body::empty()));
    };
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let path = podlog::log_file(&root, &ns, &name, &uid, &container, run);
    if !opts.follow {
        let data = read_file(path, 0).await?;
        return Ok(text_response(Body::from(podlog::render(
            &data,
            &opts.selection,
        ))));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let follow = Follow {
        store: st.store.clone(),
        key,
        uid,
        container,
        container_id,
        path,
        selection: opts.selection,
        shutdown: st.shutdown.subscribe(),
    };
    tokio::spawn(follow.run(tx));
    Ok(text_response(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    )))
}

struct Follow {
    store: Store,
    key: String,
    uid: String,
    container: String,
    container_id: String,
    path: PathBuf,
    selection: Selection,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Follow {
    /// The followed run is still running (same pod, same containerID, state running).
    fn still_running(&self) -> bool {
        let Some(obj) = self.store.get(&self.key) else {
            return false;
        };
        let Ok(pod) = crate::handlers::parse_stored_bytes(&obj.raw()) else {
            return false;
        };
        if pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(self.uid.as_str()) {
            return false;
        }
        container_status(&pod, &self.container).is_some_and(|cs| {
            cs.pointer("/state/running").is_some()
                && cs.get("containerID").and_then(Value::as_str) == Some(self.container_id.as_str())
        })
    }

    async fn run(mut self, tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) {
        let mut renderer = Renderer::new(self.selection.clone());
        let mut offset: u64 = 0;
        let mut pending: Vec<u8> = Vec::new();
        let mut first = true;
        loop {
            // Checked before reading: once the run has ended its file is complete, so what
            // this read finds is all there is.
            let running = self.still_running();
            let data = match read_file(self.path.clone(), offset).await {
                Ok(d) => d,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e.message))).await;
                    return;
                }
            };
            offset += data.len() as u64;
            if first {
                first = false;
                let start = self
                    .selection
                    .tail_lines
                    .map_or(0, |n| podlog::tail_offset(&data, n));
                pending.extend_from_slice(&data[start..]);
            } else {
                pending.extend_from_slice(&data);
            }
            let mut out = Vec::new();
            let used = renderer.feed(&pending, &mut out);
            pending.drain(..used);
            if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                return;
            }
            if renderer.is_done() || !running || tx.is_closed() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
                _ = self.shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"nodeName": "n",
                "initContainers": [{"name": "init"}],
                "containers": [{"name": "a"}, {"name": "b"}]},
            "status": status,
        })
    }

    #[test]
    fn container_choice_matches_upstream() {
        let p = pod(json!({}));
        let e = choose_container(&p, "p", None).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [init a b]"
        );
        assert_eq!(e.code, 400);
        assert_eq!(choose_container(&p, "p", Some("init")).unwrap(), "init");
        let e = choose_container(&p, "p", Some("zz")).unwrap_err();
        assert_eq!(e.message, "container zz is not valid for pod p");
        let single = json!({"spec": {"containers": [{"name": "main"}]}});
        assert_eq!(choose_container(&single, "p", None).unwrap(), "main");
    }

    #[test]
    fn which_run_is_read() {
        let p = pod(json!({"containerStatuses": [
            {"name": "a", "containerID": "kbatch://u/a/2", "restartCount": 2,
             "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "containerID": "kbatch://u/a/1"}}},
            {"name": "b", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}},
             "lastState": {}},
        ]}));
        assert_eq!(
            log_container_id(&p, "p", "a", false).unwrap(),
            "kbatch://u/a/2"
        );
        assert_eq!(
            log_container_id(&p, "p", "a", true).unwrap(),
            "kbatch://u/a/1"
        );
        let e = log_container_id(&p, "p", "b", false).unwrap_err();
        assert_eq!(
            e.message,
            "container \"b\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        let e = log_container_id(&p, "p", "b", true).unwrap_err();
        assert_eq!(
            e.message,
            "previous terminated container \"b\" in pod \"p\" not found"
        );
        let e = log_container_id(&p, "p", "init", false).unwrap_err();
        assert_eq!(
            e.message,
            "container \"init\" in pod \"p\" is not available"
        );
    }

    #[test]
    fn options_are_validated_as_upstream() {
        let now = jiff::Timestamp::now();
        let q = Query::parse(Some("tailLines=-1&limitBytes=0"));
        let e = parse_options(&q, "p", now).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PodLogOptions \"p\" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: 0: must be greater than 0]"
        );
        let q = Query::parse(Some("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z"));
        let e = parse_options(&q, "p", now).unwrap_err();
        assert!(
            e.message
                .contains("at most one of `sinceTime` or `sinceSeconds` may be specified"),
            "{}",
            e.message
        );
        let q = Query::parse(Some("sinceSeconds=10&timestamps=true&follow=1&container=c"));
        let o = parse_options(&q, "p", now).unwrap();
        assert!(o.follow && o.selection.timestamps);
        assert_eq!(o.container.as_deref(), Some("c"));
        assert_eq!(
            o.selection.since,
            Some(
                now.checked_sub(jiff::SignedDuration::from_secs(10))
                    .unwrap()
            )
        );
    }
}
