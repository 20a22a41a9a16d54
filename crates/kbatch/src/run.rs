//! `kbatch run FILE...`: an ephemeral kbatch in a temporary data dir, the manifests applied
//! through its API, live progress of every Job (and the Jobs its CronJobs start) with the pods'
//! log lines, and an exit code that says how it went: 0 when every Job completed, 1 when one
//! failed (with its reason and message), 2 for invalid input (with the API server's field
//! errors).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ApiResource, DynamicObject, LogParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::controllers::ControllerFlags;
use crate::instance::{Executor, Instance, InstanceConfig};

/// Exit codes.
pub const EXIT_COMPLETE: u8 = 0;
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_INVALID: u8 = 2;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Manifests: YAML or JSON, several documents per file allowed, `-` for standard input.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Keep the data dir afterwards and print how to inspect it.
    #[arg(long)]
    pub keep: bool,
    /// Which executor runs pods.
    #[arg(long, value_enum, default_value = "process")]
    pub executor: Executor,
    #[command(flatten)]
    pub controller_flags: ControllerFlags,
}

/// What went wrong before anything ran.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(String);

/// One manifest document.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub source: String,
    pub object: Value,
}

/// The kinds `kbatch run` applies: (apiVersion, kind) → (group, version, plural, namespaced).
fn served(
    api_version: &str,
    kind: &str,
) -> Option<(&'static str, &'static str, &'static str, bool)> {
    match (api_version, kind) {
        ("batch/v1", "Job") => Some(("batch", "v1", "jobs", true)),
        ("batch/v1", "CronJob") => Some(("batch", "v1", "cronjobs", true)),
        ("v1", "Pod") => Some(("", "v1", "pods", true)),
        ("v1", "Namespace") => Some(("", "v1", "namespaces", false)),
        ("v1", "ConfigMap") => Some(("", "v1", "configmaps", true)),
        ("v1", "Secret") => Some(("", "v1", "secrets", true)),
        _ => None,
    }
}

/// Reads and splits the manifests; every document must be an object of a served kind.
pub fn read_manifests(files: &[PathBuf]) -> Result<Vec<Manifest>, InvalidInput> {
    let mut out = Vec::new();
    for path in files {
        let (name, text) = if path == Path::new("-") {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| InvalidInput(format!("reading standard input: {e}")))?;
            ("<stdin>".to_string(), s)
        } else {
            let s = std::fs::read_to_string(path)
                .map_err(|e| InvalidInput(format!("reading {}: {e}", path.display())))?;
            (path.display().to_string(), s)
        };
        out.extend(parse_manifests(&name, &text)?);
    }
    if out.is_empty() {
        return Err(InvalidInput("no objects in the given manifests".into()));
    }
    Ok(out)
}

/// Splits one file's text into documents (YAML, of which JSON is a subset).
pub fn parse_manifests(name: &str, text: &str) -> Result<Vec<Manifest>, InvalidInput> {
    let docs: Vec<Value> = kbatch_apiserver::yaml::from_multiple(text)
        .map_err(|e| InvalidInput(format!("{name}: not valid YAML: {e}")))?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let source = format!("{name} (document {})", i + 1);
        let Some(obj) = doc.as_object() else {
            return Err(InvalidInput(format!(
                "{source}: a manifest must be an object"
            )));
        };
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version.is_empty() || kind.is_empty() {
            return Err(InvalidInput(format!(
                "{source}: apiVersion and kind are required"
            )));
        }
        if served(api_version, kind).is_none() {
            return Err(InvalidInput(format!(
                "{source}: {kind} ({api_version}) is not something kbatch runs; use Job, CronJob, Pod, Namespace, ConfigMap or Secret"
            )));
        }
        out.push(Manifest {
            source,
            object: doc,
        });
    }
    Ok(out)
}

fn describe(m: &Manifest) -> String {
    let kind = m.object.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = m
        .object
        .pointer("/metadata/name")
        .or_else(|| m.object.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{}/{}", kind.to_lowercase(), name)
}

/// What a created object is to the run.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Watched {
    Job { namespace: String, name: String },
    CronJob { namespace: String, name: String },
    Pod { namespace: String, name: String },
}

/// When a kind is created: namespaces first, then what pods read (a pod started before its
/// ConfigMap exists waits in CreateContainerConfigError until the executor's next try), then
/// the workloads, each group in file order.
fn apply_rank(m: &Manifest) -> u8 {
    match m.object.get("kind").and_then(Value::as_str) {
        Some("Namespace") => 0,
        Some("ConfigMap" | "Secret") => 1,
        _ => 2,
    }
}

/// The manifests in the order they are created.
fn apply_order(manifests: &[Manifest]) -> Vec<&Manifest> {
    let mut ordered: Vec<&Manifest> = manifests.iter().collect();
    // Stable: file order within a rank.
    ordered.sort_by_key(|m| apply_rank(m));
    ordered
}

/// Creates the manifests' objects (see `apply_order`). An API error is invalid input.
async fn apply(client: &Client, manifests: &[Manifest]) -> Result<Vec<Watched>, InvalidInput> {
    let mut watched = Vec::new();
    for m in apply_order(manifests) {
        let api_version = m
            .object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = m.object.get("kind").and_then(Value::as_str).unwrap_or("");
        let Some((group, version, plural, namespaced)) = served(api_version, kind) else {
            continue;
        };
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let namespace = m
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), &namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let obj: DynamicObject = serde_json::from_value(m.object.clone())
            .map_err(|e| InvalidInput(format!("{}: {e}", m.source)))?;
        let created = api
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| {
                InvalidInput(format!("{} ({}): {}", describe(m), m.source, api_error(&e)))
            })?;
        let name = created.name_any();
        println!("{}/{} created", kind.to_lowercase(), name);
        match kind {
            "Job" => watched.push(Watched::Job { namespace, name }),
            "CronJob" => watched.push(Watched::CronJob { namespace, name }),
            "Pod" => watched.push(Watched::Pod { namespace, name }),
            _ => {}
        }
    }
    Ok(watched)
}

/// The API server's words for an error: its Status message (which names the fields).
fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

/// A Job's line of progress.
#[derive(Clone, Debug, PartialEq, Eq)]
struct JobLine {
    active: i32,
    succeeded: i32,
    failed: i32,
    completions: Option<i32>,
    /// `Complete` or `Failed` with reason and message, once finished.
    finished: Option<(String, String, String)>,
}

fn job_line(job: &Job) -> JobLine {
    let status = job.status.clone().unwrap_or_default();
    let finished = status.conditions.iter().flatten().find_map(|c| {
        ((c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True").then(|| {
            (
                c.type_.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
    });
    JobLine {
        active: status.active.unwrap_or(0),
        succeeded: status.succeeded.unwrap_or(0),
        failed: status.failed.unwrap_or(0),
        completions: job.spec.as_ref().and_then(|s| s.completions),
        finished,
    }
}

fn render(name: &str, line: &JobLine, elapsed: Duration) -> String {
    let of = line
        .completions
        .map(|c| format!("{}/{c}", line.succeeded))
        .unwrap_or_else(|| line.succeeded.to_string());
    let state = match &line.finished {
        Some((t, _, _)) if t == "Complete" => "Complete".to_string(),
        Some((_, reason, _)) => format!("Failed ({reason})"),
        None => "Running".to_string(),
    };
    format!(
        "job/{name}: {state}, {} active, {of} succeeded, {} failed, {:.1}s",
        line.active,
        line.failed,
        elapsed.as_secs_f64()
    )
}

/// Terminal output: log lines scroll above a block of one status line per Job, which is
/// redrawn in place; without a terminal, status lines are printed when they change.
struct Display {
    tty: bool,
    footer: usize,
}

impl Display {
    fn print(&mut self, log_line: Option<&str>, status: &[String]) {
        let mut out = std::io::stdout().lock();
        if self.tty {
            if self.footer > 0 {
                // Up to the first status line, then clear to the end of the screen.
                let _ = write!(out, "\x1b[{}F\x1b[J", self.footer);
            }
            if let Some(l) = log_line {
                let _ = writeln!(out, "{l}");
            }
            for s in status {
                let _ = writeln!(out, "{s}");
            }
            self.footer = status.len();
        } else {
            if let Some(l) = log_line {
                let _ = writeln!(out, "{l}");
            }
            for s in status {
                let _ = writeln!(out, "{s}");
            }
        }
        let _ = out.flush();
    }
}

enum Update {
    Job(Box<Job>),
    Log(String),
}

/// Follows the Jobs (and the Jobs of the CronJobs) until every watched Job is finished.
async fn follow(client: &Client, watched: &[Watched]) -> anyhow::Result<u8> {
    let started = Instant::now();
    let mut jobs_wanted: BTreeSet<(String, String)> = BTreeSet::new();
    let mut cronjobs: BTreeSet<(String, String)> = BTreeSet::new();
    for w in watched {
        match w {
            Watched::Job { namespace, name } => {
                jobs_wanted.insert((namespace.clone(), name.clone()));
            }
            Watched::CronJob { namespace, name } => {
                cronjobs.insert((namespace.clone(), name.clone()));
            }
            Watched::Pod { .. } => {}
        }
    }
    if jobs_wanted.is_empty() {
        println!("no Job to wait for: following until interrupted (Ctrl-C)");
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Update>();
    let job_task = {
        let tx = tx.clone();
        let api: Api<Job> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Ok(Some(job)) = stream.try_next().await {
                if tx.send(Update::Job(Box::new(job))).is_err() {
                    return;
                }
            }
        })
    };
    let log_task = tokio::spawn(follow_logs(client.clone(), tx.clone()));
    let warning_task = tokio::spawn(follow_warnings(client.clone(), tx.clone()));
    drop(tx);

    let mut display = Display {
        tty: std::io::stdout().is_terminal(),
        footer: 0,
    };
    let mut lines: BTreeMap<(String, String), JobLine> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let interrupted = crate::up::wait_for_signal();
    tokio::pin!(interrupted);
    let code = loop {
        let update = tokio::select! {
            u = rx.recv() => u,
            _ = &mut interrupted => {
                println!("interrupted");
                break 130;
            }
        };
        let Some(update) = update else {
            anyhow::bail!("lost the watch on Jobs");
        };
        match update {
            Update::Log(l) => {
                // On a terminal the status block is redrawn below the new line; without one,
                // status lines are printed only when they change.
                let status = if display.tty {
                    status_lines(&lines, started)
                } else {
                    Vec::new()
                };
                display.print(Some(&l), &status);
            }
            Update::Job(job) => {
                let key = (job.namespace().unwrap_or_default(), job.name_any());
                let from_cronjob = job.owner_references().iter().any(|r| {
                    r.kind == "CronJob" && cronjobs.contains(&(key.0.clone(), r.name.clone()))
                });
                if !jobs_wanted.contains(&key) && !from_cronjob {
                    continue;
                }
                let line = job_line(&job);
                if lines.get(&key) == Some(&line) {
                    continue;
                }
                if let Some((t, reason, message)) = &line.finished
                    && t == "Failed"
                    && jobs_wanted.contains(&key)
                {
                    failures.push(format!("job/{} failed: {reason}: {message}", key.1));
                }
                lines.insert(key, line);
                let status = if display.tty {
                    status_lines(&lines, started)
                } else {
                    // Without a terminal, print only the line that changed.
                    status_lines(&lines, started)
                        .into_iter()
                        .filter(|s| s.starts_with(&format!("job/{}:", job.name_any())))
                        .collect()
                };
                display.print(None, &status);
                let all_done = !jobs_wanted.is_empty()
                    && jobs_wanted
                        .iter()
                        .all(|k| lines.get(k).is_some_and(|l| l.finished.is_some()));
                if all_done {
                    break if failures.is_empty() {
                        EXIT_COMPLETE
                    } else {
                        EXIT_FAILED
                    };
                }
            }
        }
    };
    // The last pods' final log lines may still be in flight.
    let drain_until = Instant::now() + Duration::from_millis(300);
    while let Ok(Some(Update::Log(l))) =
        tokio::time::timeout_at(drain_until.into(), rx.recv()).await
    {
        let status = if display.tty {
            status_lines(&lines, started)
        } else {
            Vec::new()
        };
        display.print(Some(&l), &status);
    }
    job_task.abort();
    log_task.abort();
    warning_task.abort();
    for f in &failures {
        eprintln!("{f}");
    }
    Ok(code)
}

fn status_lines(lines: &BTreeMap<(String, String), JobLine>, started: Instant) -> Vec<String> {
    lines
        .iter()
        .map(|((_, name), l)| render(name, l, started.elapsed()))
        .collect()
}

/// Prints each new Warning event, once, among the log lines (`[object] Reason: message`): why
/// a pod does not start (`FailedScheduling`, `FailedMount`, `Failed`) or keeps restarting.
async fn follow_warnings(client: Client, tx: mpsc::UnboundedSender<Update>) {
    let api: Api<Event> = Api::all(client);
    let config = watcher::Config::default().fields("type=Warning");
    let mut stream = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    while let Ok(Some(event)) = stream.try_next().await {
        let (uid, message) = (
            event.metadata.uid.clone().unwrap_or_default(),
            event.message.clone().unwrap_or_default(),
        );
        // A repeat of an event (its count going up) is not printed again.
        if !seen.insert((uid, message.clone())) {
            continue;
        }
        let object = event.involved_object.name.clone().unwrap_or_default();
        let reason = event.reason.clone().unwrap_or_default();
        if tx
            .send(Update::Log(format!("[{object}] {reason}: {message}")))
            .is_err()
        {
            return;
        }
    }
}

/// Streams the log of every container of every pod once it has started, each line prefixed
/// with `[pod]` (or `[pod/container]` for pods with several containers).
async fn follow_logs(client: Client, tx: mpsc::UnboundedSender<Update>) {
    let api: Api<Pod> = Api::all(client.clone());
    let mut followed: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Ok(Some(pod)) = stream.try_next().await {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let containers: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
            .collect();
        let started: BTreeSet<String> = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .filter(|cs| {
                cs.state
                    .as_ref()
                    .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
            })
            .map(|cs| cs.name.clone())
            .collect();
        for c in &containers {
            if !started.contains(c) || !followed.insert((ns.clone(), name.clone(), c.clone())) {
                continue;
            }
            let prefix = if containers.len() > 1 {
                format!("[{name}/{c}]")
            } else {
                format!("[{name}]")
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let (pod_name, container, tx) = (name.clone(), c.clone(), tx.clone());
            tokio::spawn(async move {
                let lp = LogParams {
                    container: Some(container),
                    follow: true,
                    ..LogParams::default()
                };
                let Ok(reader) = api.log_stream(&pod_name, &lp).await else {
                    return;
                };
                let mut lines = reader.lines();
                while let Some(Ok(line)) = lines.next().await {
                    if tx.send(Update::Log(format!("{prefix} {line}"))).is_err() {
                        return;
                    }
                }
            });
        }
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let manifests = match read_manifests(&args.files) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_INVALID);
        }
    };
    let controllers = args
        .controller_flags
        .manager_config("job,cronjob,ttl,podgc,tainteviction,serviceaccount,disruption")?;
    let dir = tempfile::Builder::new()
        .prefix("kbatch-run-")
        .tempdir()
        .context("creating a temporary data dir")?;
    let data_dir = dir.path().to_path_buf();
    let instance = Instance::start(InstanceConfig {
        data_dir: data_dir.clone(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        executor: args.executor,
        watch_history_events: kbatch_store::StoreOptions::default().history_events,
        max_pods: 110,
        event_ttl: crate::instance::DEFAULT_EVENT_TTL,
        // An ephemeral instance has no `kubectl top` to serve.
        metric_resolution: None,
        controllers,
    })
    .await?;
    let client = instance.client()?;
    let code = match apply(&client, &manifests).await {
        Ok(watched) => follow(&client, &watched).await,
        Err(e) => {
            eprintln!("error: {e}");
            Ok(EXIT_INVALID)
        }
    };
    instance.stop().await;
    if args.keep {
        let kept = dir.keep();
        println!("kept the data dir {}; to look inside:", kept.display());
        println!(
            "  kbatch up --data-dir {} --executor none &",
            kept.display()
        );
        println!(
            "  KUBECONFIG={}/kubeconfig kubectl get jobs,pods",
            kept.display()
        );
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_and_skips_empty_ones() {
        let text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ns1}\n";
        let ms = parse_manifests("f.yaml", text).expect("valid");
        assert_eq!(ms.len(), 2);
        assert_eq!(describe(&ms[0]), "job/a");
        assert_eq!(describe(&ms[1]), "namespace/ns1");
    }

    #[test]
    fn namespaces_then_configuration_then_workloads() {
        let text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\n---\n\
            apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n\
            apiVersion: v1\nkind: Namespace\nmetadata: {name: ns1}\n---\n\
            apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n\
            apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
        let ms = parse_manifests("f.yaml", text).expect("valid");
        let order: Vec<String> = apply_order(&ms).into_iter().map(describe).collect();
        assert_eq!(
            order,
            ["namespace/ns1", "secret/s", "configmap/c", "job/a", "pod/p"]
        );
    }

    #[test]
    fn rejects_what_it_cannot_run() {
        let e = parse_manifests("f.yaml", "apiVersion: apps/v1\nkind: Deployment\n")
            .expect_err("not served");
        assert!(
            e.0.contains("Deployment (apps/v1) is not something kbatch runs"),
            "{e}"
        );
        let e = parse_manifests("f.yaml", "kind: Job\n").expect_err("no apiVersion");
        assert!(e.0.contains("apiVersion and kind are required"), "{e}");
        let e = parse_manifests("f.yaml", "- a\n- b\n").expect_err("a list");
        assert!(e.0.contains("must be an object"), "{e}");
        let e = parse_manifests("f.yaml", "a: [\n").expect_err("bad YAML");
        assert!(e.0.starts_with("f.yaml: not valid YAML"), "{e}");
    }

    #[test]
    fn renders_progress() {
        let line = JobLine {
            active: 2,
            succeeded: 1,
            failed: 0,
            completions: Some(4),
            finished: None,
        };
        assert_eq!(
            render("pi", &line, Duration::from_millis(1500)),
            "job/pi: Running, 2 active, 1/4 succeeded, 0 failed, 1.5s"
        );
        let failed = JobLine {
            finished: Some(("Failed".into(), "BackoffLimitExceeded".into(), "m".into())),
            ..line
        };
        assert!(render("pi", &failed, Duration::ZERO).contains("Failed (BackoffLimitExceeded)"));
    }
}
