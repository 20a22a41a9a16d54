//! kubectl against a real `kbatch up`: every everyday command, its output compared with what
//! kubectl prints against a real cluster for the same objects (the column sets and cell
//! texts of upstream's printers, the messages of kubectl's commands). Times (AGE, DURATION,
//! LAST SEEN) and generated names and uids vary from run to run, so table cells are matched
//! against patterns for those and literally for everything else.
//!
//! Needs kubectl on PATH (fails, not skips, without it).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

/// `kbatch up` with the controllers and the simulate executor (pods succeed at once).
async fn cluster() -> Server {
    Server::start_with(&[
        "--executor",
        "simulate",
        "--controllers",
        "job,cronjob,ttl,podgc,serviceaccount",
    ])
    .await
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// A running `kubectl ... -w`, stopped when dropped.
struct Watching {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Watching {
    fn next(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a line from kubectl -w")
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubectl with the server's kubeconfig and a discovery cache of its own.
struct Kubectl<'a> {
    server: &'a Server,
    cache: tempfile::TempDir,
}

impl<'a> Kubectl<'a> {
    fn new(server: &'a Server) -> Self {
        let cache = tempfile::Builder::new()
            .prefix("kubectl-cache-")
            .tempdir()
            .expect("create a kubectl cache dir");
        Kubectl { server, cache }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.server.data_dir().join("kubeconfig")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg(format!("--cache-dir={}", self.cache.path().display()))
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .stdin(Stdio::null());
        cmd
    }

    /// Starts a kubectl that keeps printing (`get -w`); its lines come from `Watching::next`.
    fn watch(&self, args: &[&str]) -> Watching {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kubectl");
        let stdout = child.stdout.take().expect("kubectl stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watching { child, lines }
    }

    fn run_with(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &Path)]) -> Out {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = common::run_captured(cmd, stdin);
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn run(&self, args: &[&str]) -> Out {
        self.run_with(args, None, &[])
    }

    /// Runs kubectl, asserting success; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        self.assert_ok(args, &out);
        out.stdout
    }

    /// Runs kubectl with `input` on stdin, asserting success; its stdout.
    fn ok_stdin(&self, args: &[&str], input: &str) -> String {
        let out = self.run_with(args, Some(input), &[]);
        self.assert_ok(args, &out);
        out.stdout
    }

    fn assert_ok(&self, args: &[&str], out: &Out) {
        assert!(
            out.ok,
            "kubectl {} failed:\n{}\n{}\nserver logs:\n{}",
            args.join(" "),
            out.stdout,
            out.stderr,
            self.server.logs()
        );
    }

    /// Runs kubectl, asserting failure; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.ok,
            "kubectl {} succeeded but should fail:\n{}",
            args.join(" "),
            out.stdout
        );
        out.stderr
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl -o json: {e}\n{out}"))
    }

    /// Polls `f` until it returns `Some`, for at most `secs` seconds.
    fn until<T>(&self, secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; server logs:\n{}",
                self.server.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The cells of a line printed by kubectl's table printer: columns are padded with at least
/// three spaces, cell texts never hold two spaces in a row.
fn cells(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// A Kubernetes short duration (`0s`, `5s`, `3m2s`, `10m`, `2h5m`, `3d`, `<unknown>`).
fn is_age(s: &str) -> bool {
    if s == "<unknown>" {
        return true;
    }
    let mut digits = false;
    for c in s.chars() {
        match c {
            '0'..='9' => digits = true,
            's' | 'm' | 'h' | 'd' | 'y' if digits => digits = false,
            _ => return false,
        }
    }
    !s.is_empty() && !digits
}

fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// One expected cell: a literal, or `<age>`, `<uid>`, `<any>`, a literal prefix ending in
/// `*` (generated names), or a literal suffix after a leading `*`.
fn cell_matches(expected: &str, got: &str) -> bool {
    match expected {
        "<age>" => is_age(got),
        "<any>" => !got.is_empty(),
        _ if expected.contains("<uid>") => {
            let (pre, post) = expected.split_once("<uid>").unwrap_or((expected, ""));
            got.strip_prefix(pre)
                .and_then(|r| r.strip_suffix(post))
                .is_some_and(is_uid)
        }
        _ if expected.len() > 1 && expected.starts_with('*') => got.ends_with(&expected[1..]),
        _ if expected.ends_with('*') => got.starts_with(&expected[..expected.len() - 1]),
        _ => expected == got,
    }
}

/// Asserts a printed table: the header exactly, then the rows in order, cell by cell.
fn assert_table(out: &str, header: &[&str], rows: &[&[&str]]) {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "no table printed");
    assert_eq!(cells(lines[0]), header, "header of:\n{out}");
    assert_eq!(lines.len() - 1, rows.len(), "rows of:\n{out}");
    for (line, want) in lines[1..].iter().zip(rows) {
        let got = cells(line);
        assert_eq!(got.len(), want.len(), "cells of {line:?} in:\n{out}");
        for (g, w) in got.iter().zip(want.iter()) {
            assert!(cell_matches(w, g), "cell {g:?} is not {w:?} in:\n{out}");
        }
    }
}

fn assert_contains_all(out: &str, wants: &[&str]) {
    for want in wants {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
}

/// A Job of `completions` pods named `name` with the label `app=<name>`.
fn job_yaml(name: &str, completions: u32, extra_label: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels:
    app: {name}{extra_label}
spec:
  completions: {completions}
  parallelism: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [\"sh\", \"-c\", \"echo hi\"]
"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a manifest");
    path
}

fn job_complete(k: &Kubectl, name: &str) -> bool {
    k.run(&[
        "get",
        "job",
        name,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Complete\")].status}",
    ])
    .stdout
        == "True"
}

/// apply creates, a changed manifest is configured, an unchanged one is unchanged; create -f
/// on an existing object is AlreadyExists with the file named; get of a missing one NotFound.
#[tokio::test]
async fn apply_create_and_errors() {
    let server = cluster().await;
    let k = Kubectl::new(&server);
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(dir.path(), "job.yaml", &job_yaml("hello", 2, ""));
    let fs = f.to_str().expect("utf-8 path");

    assert_eq!(k.ok(&["apply", "-f", fs]), "job.batch/hello created\n");
    let job = k.json(&["get", "job", "hello"]);
    let last = job["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .expect("apply records the last-applied configuration");
    assert!(last.contains("\"name\":\"hello\""), "{last}");

    write(
        dir.path(),
        "job.yaml",
        &job_yaml("hello", 2, "\n    tier: batch"),
    );
    assert_eq!(k.ok(&["apply", "-f", fs]), "job.batch/hello configured\n");
    assert_eq!(k.ok(&["apply", "-f", fs]), "job.batch/hello unchanged\n");
    let labels = k.ok(&["get", "job", "hello", "-o", "jsonpath={.metadata.labels}"]);
    assert_eq!(labels, r#"{"app":"hello","tier":"batch"}"#);

    // Dropping a label from the manifest removes it (three-way merge with last-applied).
    write(dir.path(), "job.yaml", &job_yaml("hello", 2, ""));
    assert_eq!(k.ok(&["apply", "-f", fs]), "job.batch/hello configured\n");
    let labels = k.ok(&["get", "job", "hello", "-o", "jsonpath={.metadata.labels}"]);
    assert_eq!(labels, r#"{"app":"hello"}"#);

    let err = k.fails(&["create", "-f", fs]);
    assert_eq!(
        err.trim(),
        format!(
            "Error from server (AlreadyExists): error when creating \"{fs}\": jobs.batch \"hello\" already exists"
        )
    );
    let err = k.fails(&["get", "job", "nope"]);
    assert_eq!(
        err.trim(),
        "Error from server (NotFound): jobs.batch \"nope\" not found"
    );

    // create -f from stdin, then an invalid object: the server's 422 as kubectl prints it.
    let out = k.ok_stdin(&["create", "-f", "-"], &job_yaml("second", 1, ""));
    assert_eq!(out, "job.batch/second created\n");
    let bad = job_yaml("bad", 1, "").replace("parallelism: 1", "parallelism: -1");
    let out = k.run_with(&["create", "-f", "-"], Some(&bad), &[]);
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        "The Job \"bad\" is invalid: spec.parallelism: Invalid value: -1: must be greater than or equal to 0"
    );

    // An unknown field: kubectl's default (strict) validation is done by the server.
    let unknown = job_yaml("typo", 1, "").replace("parallelism: 1", "parallelizm: 1");
    let out = k.run_with(&["create", "-f", "-"], Some(&unknown), &[]);
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": Job in version \"v1\" cannot be handled as a Job: strict decoding error: unknown field \"spec.parallelizm\""
    );
}

/// get in every output form the docs show: tables (plain, wide, -A, --show-labels, -L),
/// -l and --field-selector, -o yaml/json/jsonpath/name, and -w.
#[tokio::test]
async fn get_tables_and_outputs() {
    let server = cluster().await;
    let k = Kubectl::new(&server);
    k.ok_stdin(&["apply", "-f", "-"], &job_yaml("hello", 2, ""));
    k.until(30, "hello Complete", || {
        job_complete(&k, "hello").then_some(())
    });

    let out = k.ok(&["get", "jobs"]);
    assert_table(
        &out,
        &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        &[&["hello", "Complete", "2/2", "<age>", "<age>"]],
    );
    let out = k.ok(&["get", "jobs", "-o", "wide"]);
    assert_table(
        &out,
        &[
            "NAME",
            "STATUS",
            "COMPLETIONS",
            "DURATION",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ],
        &[&[
            "hello",
            "Complete",
            "2/2",
            "<age>",
            "<age>",
            "main",
            "busybox",
            "batch.kubernetes.io/controller-uid=<uid>",
        ]],
    );
    let out = k.ok(&["get", "pods"]);
    assert_table(
        &out,
        &["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        &[
            &["hello-*", "0/1", "Completed", "0", "<age>"],
            &["hello-*", "0/1", "Completed", "0", "<age>"],
        ],
    );
    let out = k.ok(&["get", "pods", "-o", "wide"]);
    let header = [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED NODE",
        "READINESS GATES",
    ];
    let row: &[&str] = &[
        "hello-*",
        "0/1",
        "Completed",
        "0",
        "<age>",
        "<any>",
        "kbatch-node",
        "<none>",
        "<none>",
    ];
    assert_table(&out, &header, &[row, row]);

    // -A adds NAMESPACE; a Job in another namespace shows up.
    k.ok(&["create", "namespace", "other"]);
    k.ok_stdin(
        &["apply", "-n", "other", "-f", "-"],
        &job_yaml("there", 1, ""),
    );
    let out = k.ok(&["get", "jobs", "-A"]);
    assert_table(
        &out,
        &[
            "NAMESPACE",
            "NAME",
            "STATUS",
            "COMPLETIONS",
            "DURATION",
            "AGE",
        ],
        &[
            &["default", "hello", "Complete", "2/2", "<age>", "<age>"],
            &["other", "there", "<any>", "*/1", "<age>", "<age>"],
        ],
    );
    let out = k.ok(&["get", "ns"]);
    assert_table(
        &out,
        &["NAME", "STATUS", "AGE"],
        &[
            &["default", "Active", "<age>"],
            &["kube-node-lease", "Active", "<age>"],
            &["kube-public", "Active", "<age>"],
            &["kube-system", "Active", "<age>"],
            &["other", "Active", "<age>"],
        ],
    );
    let out = k.ok(&["get", "nodes"]);
    assert_table(
        &out,
        &["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        &[&["kbatch-node", "Ready", "<none>", "<age>", "v1.*"]],
    );
    let out = k.ok(&["get", "nodes", "-o", "wide"]);
    assert_eq!(
        cells(out.lines().next().unwrap_or_default()),
        [
            "NAME",
            "STATUS",
            "ROLES",
            "AGE",
            "VERSION",
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME"
        ]
    );

    // Labels: --show-labels, -L, -l (equality, set-based, negation).
    k.ok(&["label", "job", "hello", "env=dev"]);
    let out = k.ok(&["get", "job", "hello", "--show-labels"]);
    assert_table(
        &out,
        &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "LABELS"],
        &[&[
            "hello",
            "Complete",
            "2/2",
            "<age>",
            "<age>",
            "app=hello,env=dev",
        ]],
    );
    let out = k.ok(&["get", "jobs", "-L", "env"]);
    assert_table(
        &out,
        &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "ENV"],
        &[&["hello", "Complete", "2/2", "<age>", "<age>", "dev"]],
    );
    assert_eq!(
        k.ok(&["get", "jobs", "-l", "env in (dev,prod)", "-o", "name"]),
        "job.batch/hello\n"
    );
    let out = k.run(&["get", "jobs", "-l", "env!=dev"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr.trim(),
        "No resources found in default namespace."
    );
    let names = k.ok(&[
        "get",
        "pods",
        "-l",
        "job-name=hello",
        "--field-selector",
        "status.phase=Succeeded",
        "-o",
        "name",
    ]);
    assert_eq!(names.lines().count(), 2, "{names}");
    assert!(
        names.lines().all(|l| l.starts_with("pod/hello-")),
        "{names}"
    );
    let out = k.run(&["get", "pods", "--field-selector", "status.phase=Running"]);
    assert_eq!(
        out.stderr.trim(),
        "No resources found in default namespace."
    );

    // -o yaml / json / jsonpath.
    let yaml = k.ok(&["get", "job", "hello", "-o", "yaml"]);
    let v: Value = serde_saphyr::from_str(&yaml).expect("kubectl -o yaml parses");
    assert_eq!(v["apiVersion"], "batch/v1");
    assert_eq!(v["kind"], "Job");
    assert_eq!(v["spec"]["completions"], 2);
    assert_eq!(v["status"]["succeeded"], 2);
    let list = k.json(&["get", "jobs"]);
    assert_eq!(list["kind"], "List");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["items"][0]["kind"], "Job");
    assert_eq!(
        k.ok(&["get", "jobs", "-o", "jsonpath={.items[*].metadata.name}"]),
        "hello"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "job",
            "hello",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.status.succeeded}"
        ]),
        "busybox 2"
    );

    // -w: the current rows, then one row per change.
    let watch = k.watch(&["get", "jobs", "-w"]);
    assert_eq!(
        cells(&watch.next()),
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    );
    assert_eq!(cells(&watch.next())[0], "hello");
    k.ok_stdin(&["apply", "-f", "-"], &job_yaml("later", 1, ""));
    let line = watch.next();
    let c = cells(&line);
    assert_eq!(c[0], "later", "{line}");
    assert!(cell_matches("*/1", &c[2]), "{line}");
}

/// describe job, pod and cronjob: the fields kubectl prints and the events of the object.
#[tokio::test]
async fn describe_shows_events() {
    let server = cluster().await;
    let k = Kubectl::new(&server);
    k.ok_stdin(&["apply", "-f", "-"], &job_yaml("hello", 2, ""));
    k.until(30, "hello Complete", || {
        job_complete(&k, "hello").then_some(())
    });

    let out = k.ok(&["describe", "job", "hello"]);
    assert_contains_all(
        &out,
        &[
            "Name:             hello",
            "Namespace:        default",
            "Parallelism:      1",
            "Completions:      2",
            "Completion Mode:  NonIndexed",
            "Backoff Limit:    6",
            "Pods Statuses:    0 Active (0 Ready) / 2 Succeeded / 0 Failed",
            "  Type    Reason            Age   From            Message",
        ],
    );
    let events: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .skip(3)
        .collect();
    assert_eq!(events.len(), 3, "{out}");
    for (line, (reason, message)) in events.iter().zip([
        ("SuccessfulCreate", "Created pod: hello-*"),
        ("SuccessfulCreate", "Created pod: hello-*"),
        ("Completed", "Job completed"),
    ]) {
        let c = cells(line);
        assert_eq!(c.len(), 5, "{line}");
        assert_eq!(c[0], "Normal");
        assert_eq!(c[1], reason);
        assert!(is_age(&c[2]), "{line}");
        assert_eq!(c[3], "job-controller");
        assert!(cell_matches(message, &c[4]), "{line}");
    }

    // `get events` with the field selectors describe uses.
    let out = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Job,involvedObject.name=hello",
    ]);
    assert_table(
        &out,
        &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        &[
            &[
                "<age>",
                "Normal",
                "SuccessfulCreate",
                "job/hello",
                "Created pod: hello-*",
            ],
            &[
                "<age>",
                "Normal",
                "SuccessfulCreate",
                "job/hello",
                "Created pod: hello-*",
            ],
            &["<age>", "Normal", "Completed", "job/hello", "Job completed"],
        ],
    );

    let pod = k.ok(&["get", "pods", "-l", "job-name=hello", "-o", "name"]);
    let pod = pod.lines().next().expect("a pod of hello");
    let out = k.ok(&["describe", pod]);
    assert_contains_all(
        &out,
        &[
            "Namespace:        default",
            // The ServiceAccount admission gives every pod an account, as on a cluster.
            "Service Account:  default",
            "Node:             kbatch-node/",
            "Status:           Succeeded",
            "Controlled By:  Job/hello",
            "      Reason:       Completed",
            "      Exit Code:    0",
        ],
    );
    // The pod's story as the scheduler and kubelet tell it.
    let pod_name = pod.trim_start_matches("pod/");
    let out = k.until(10, "the pod's events", || {
        let out = k.ok(&["describe", pod]);
        out.contains("Started container main").then_some(out)
    });
    let events: Vec<Vec<String>> = out
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .skip(3)
        .map(cells)
        .collect();
    let scheduled = format!("Successfully assigned default/{pod_name} to kbatch-node");
    for (reason, from, message) in [
        ("Scheduled", "default-scheduler", scheduled.as_str()),
        ("Created", "kubelet", "Created container: main"),
        ("Started", "kubelet", "Started container main"),
    ] {
        assert!(
            events
                .iter()
                .any(|c| c.len() == 5 && c[1] == reason && c[3] == from && c[4] == message),
            "no {reason} event from {from}: {out}"
        );
    }

    // A Job created from the CronJob by hand is one the CronJob controller did not create:
    // upstream warns UnexpectedJob on the CronJob, and describe shows it.
    k.ok(&[
        "create",
        "cronjob",
        "nightly",
        "--image=busybox",
        "--schedule=0 3 * * *",
        "--",
        "echo",
        "hi",
    ]);
    k.ok(&["create", "job", "manual", "--from=cronjob/nightly"]);
    let out = k.until(30, "the UnexpectedJob event", || {
        let out = k.ok(&["describe", "cronjob", "nightly"]);
        out.contains("UnexpectedJob").then_some(out)
    });
    assert_contains_all(
        &out,
        &[
            "Schedule:                      0 3 * * *",
            "Concurrency Policy:            Allow",
            "Suspend:                       False",
            "Successful Job History Limit:  3",
            "Failed Job History Limit:      1",
            "Last Schedule Time:  <unset>",
            "Saw a job that the controller did not create or forgot: manual",
            "cronjob-controller",
        ],
    );
    // -o wide adds the template's containers and images and the selector.
    let columns = [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "SUSPEND",
        "ACTIVE",
        "LAST SCHEDULE",
        "AGE",
    ];
    let row = [
        "nightly",
        "0 3 * * *",
        "<none>",
        "False",
        "0",
        "<none>",
        "<age>",
    ];
    assert_table(&k.ok(&["get", "cronjobs"]), &columns, &[&row]);
    let wide_columns = [&columns[..], &["CONTAINERS", "IMAGES", "SELECTOR"]].concat();
    let wide_row = [&row[..], &["nightly", "busybox", "<none>"]].concat();
    assert_table(
        &k.ok(&["get", "cj", "-o", "wide"]),
        &wide_columns,
        &[&wide_row],
    );
}

/// patch in its three forms, label, annotate and edit change what they say and print what
/// kubectl prints.
#[tokio::test]
async fn patch_label_annotate_edit() {
    let server = cluster().await;
    let k = Kubectl::new(&server);
    k.ok(&[
        "create",
        "cronjob",
        "cj",
        "--image=busybox",
        "--schedule=0 3 * * *",
        "--",
        "echo",
        "hi",
    ]);

    // Strategic merge (the default): the container list merges by name, so a patch naming
    // one container changes its image and keeps its command.
    let out = k.ok(&[
        "patch",
        "cronjob",
        "cj",
        "-p",
        r#"{"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"cj","image":"busybox:1.36"}]}}}}}}"#,
    ]);
    assert_eq!(out, "cronjob.batch/cj patched\n");
    let c = k.json(&["get", "cronjob", "cj"])["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        ["containers"]
        .clone();
    assert_eq!(c.as_array().map(Vec::len), Some(1), "{c}");
    assert_eq!(c[0]["image"], "busybox:1.36");
    assert_eq!(c[0]["command"], serde_json::json!(["echo", "hi"]));

    // Merge patch: a list is replaced whole; null removes.
    k.ok(&[
        "patch",
        "cronjob",
        "cj",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"suspend":true},"metadata":{"annotations":{"a":"1","b":"2"}}}"#,
    ]);
    k.ok(&[
        "patch",
        "cronjob",
        "cj",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"annotations":{"a":null}}}"#,
    ]);
    let cj = k.json(&["get", "cronjob", "cj"]);
    assert_eq!(cj["spec"]["suspend"], true);
    assert_eq!(cj["metadata"]["annotations"], serde_json::json!({"b": "2"}));

    // JSON patch, including a failing test op.
    let out = k.ok(&[
        "patch",
        "cronjob",
        "cj",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/schedule","value":"*/5 * * * *"}]"#,
    ]);
    assert_eq!(out, "cronjob.batch/cj patched\n");
    assert_eq!(
        k.ok(&["get", "cj", "cj", "-o", "jsonpath={.spec.schedule}"]),
        "*/5 * * * *"
    );
    let err = k.fails(&[
        "patch",
        "cronjob",
        "cj",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/schedule","value":"not a schedule"}]"#,
    ]);
    assert!(
        err.contains(
            "The CronJob \"cj\" is invalid: spec.schedule: Invalid value: \"not a schedule\""
        ),
        "{err}"
    );
    // A patch that changes nothing.
    let out = k.ok(&[
        "patch",
        "cronjob",
        "cj",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);
    assert_eq!(out, "cronjob.batch/cj patched (no change)\n");

    // label / annotate: add, refuse to overwrite without --overwrite, overwrite, remove.
    assert_eq!(
        k.ok(&["label", "cj", "cj", "team=a"]),
        "cronjob.batch/cj labeled\n"
    );
    let err = k.fails(&["label", "cj", "cj", "team=b"]);
    assert_eq!(
        err.trim(),
        "error: 'team' already has a value (a), and --overwrite is false"
    );
    assert_eq!(
        k.ok(&["label", "cj", "cj", "team=b", "--overwrite"]),
        "cronjob.batch/cj labeled\n"
    );
    assert_eq!(
        k.ok(&["annotate", "cj", "cj", "note=hello world"]),
        "cronjob.batch/cj annotated\n"
    );
    let cj = k.json(&["get", "cronjob", "cj"]);
    assert_eq!(cj["metadata"]["labels"]["team"], "b");
    assert_eq!(cj["metadata"]["annotations"]["note"], "hello world");
    assert_eq!(
        k.ok(&["label", "cj", "cj", "team-"]),
        "cronjob.batch/cj unlabeled\n"
    );
    assert!(
        k.json(&["get", "cronjob", "cj"])["metadata"]["labels"]
            .get("team")
            .is_none()
    );

    // edit with EDITOR: a script that changes the schedule in the file kubectl hands it.
    let dir = tempfile::tempdir().expect("tempdir");
    let editor = dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's|^  schedule: .*|  schedule: 30 4 * * *|' \"$1\"\n",
    )
    .expect("write the editor script");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(&editor)
        .status()
        .expect("chmod");
    assert!(status.success());
    let out = k.run_with(&["edit", "cronjob", "cj"], None, &[("EDITOR", &editor)]);
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "cronjob.batch/cj edited\n");
    assert_eq!(
        k.ok(&["get", "cj", "cj", "-o", "jsonpath={.spec.schedule}"]),
        "30 4 * * *"
    );
    // An edit that saves an invalid object is refused and the object is unchanged. kubectl
    // reopens the editor with the server's causes as comments; the script makes the same
    // edit again, so kubectl gives up and keeps a copy that holds those comments.
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's|^  schedule: .*|  schedule: bogus|' \"$1\"\n",
    )
    .expect("rewrite the editor script");
    let out = k.run_with(&["edit", "cronjob", "cj"], None, &[("EDITOR", &editor)]);
    assert!(!out.ok);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"error: cronjobs.batch \"cj\" is invalid"),
        "{}",
        out.stderr
    );
    assert_eq!(
        lines.last(),
        Some(&"error: Edit cancelled, no valid changes were saved."),
        "{}",
        out.stderr
    );
    let copy_path = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("A copy of your changes has been stored to \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("kubectl names the copy of the edit");
    let copy = std::fs::read_to_string(copy_path).expect("read kubectl's copy of the edit");
    let _ = std::fs::remove_file(copy_path);
    assert!(
        copy.contains("# cronjobs.batch \"cj\" was not valid:")
            && copy.contains("spec.schedule: Invalid value: \"bogus\""),
        "{copy}"
    );
    assert_eq!(
        k.ok(&["get", "cj", "cj", "-o", "jsonpath={.spec.schedule}"]),
        "30 4 * * *"
    );
}

/// A Job of three pods that stay Pending (no executor), with its pods' names.
fn pending_job(k: &Kubectl, name: &str) -> Vec<String> {
    let yaml = job_yaml(name, 3, "").replace("parallelism: 1", "parallelism: 3");
    k.ok_stdin(&["apply", "-f", "-"], &yaml);
    k.until(30, "three pods", || {
        let out = k.ok(&[
            "get",
            "pods",
            "-l",
            &format!("job-name={name}"),
            "-o",
            "name",
        ]);
        let pods: Vec<String> = out.lines().map(str::to_string).collect();
        (pods.len() == 3).then_some(pods)
    })
}

/// delete: background (the default) removes the pods, orphan leaves them without the
/// ownerReference, foreground removes the Job only after its pods; wait --for=delete.
#[tokio::test]
async fn delete_cascades() {
    let server = Server::start_with(&["--controllers", "job,serviceaccount"]).await;
    let k = Kubectl::new(&server);

    pending_job(&k, "bg");
    assert_eq!(k.ok(&["delete", "job", "bg"]), "job.batch \"bg\" deleted\n");
    k.until(30, "bg's pods gone", || {
        let out = k.run(&["get", "pods", "-l", "job-name=bg"]);
        (out.stderr.trim() == "No resources found in default namespace.").then_some(())
    });

    let orphans = pending_job(&k, "orphan");
    assert_eq!(
        k.ok(&["delete", "job", "orphan", "--cascade=orphan"]),
        "job.batch \"orphan\" deleted\n"
    );
    k.fails(&["get", "job", "orphan"]);
    for pod in &orphans {
        let p = k.json(&["get", pod]);
        assert!(
            p["metadata"].get("ownerReferences").is_none(),
            "{pod} keeps its ownerReferences: {}",
            p["metadata"]
        );
    }

    // Foreground: one pod is held by a finalizer of ours, so the Job must wait for it.
    let pods = pending_job(&k, "fg");
    k.ok(&[
        "patch",
        &pods[0],
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    assert_eq!(
        k.ok(&[
            "delete",
            "job",
            "fg",
            "--cascade=foreground",
            "--wait=false"
        ]),
        "job.batch \"fg\" deleted\n"
    );
    let job = k.until(30, "fg marked for foreground deletion", || {
        let job = k.json(&["get", "job", "fg"]);
        let left = k.ok(&["get", "pods", "-l", "job-name=fg", "-o", "name"]);
        (left.lines().count() == 1).then_some(job)
    });
    assert!(job["metadata"]["deletionTimestamp"].is_string(), "{job}");
    assert_eq!(
        job["metadata"]["finalizers"],
        serde_json::json!(["foregroundDeletion"])
    );
    // Still there while its pod is.
    std::thread::sleep(Duration::from_millis(500));
    k.ok(&["get", "job", "fg"]);
    k.ok(&[
        "patch",
        &pods[0],
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    k.ok(&["wait", "--for=delete", "job/fg", "--timeout=30s"]);
    let out = k.run(&["get", "pods", "-l", "job-name=fg"]);
    assert_eq!(
        out.stderr.trim(),
        "No resources found in default namespace."
    );
    // The orphans are still there, untouched by the other deletions.
    for pod in &orphans {
        k.ok(&["get", pod]);
    }
}

/// wait --for=condition=complete, create job/cronjob commands, explain.
#[tokio::test]
async fn wait_create_and_explain() {
    let server = cluster().await;
    let k = Kubectl::new(&server);
    assert_eq!(
        k.ok(&[
            "create",
            "job",
            "once",
            "--image=busybox",
            "--",
            "echo",
            "hi"
        ]),
        "job.batch/once created\n"
    );
    assert_eq!(
        k.ok(&[
            "wait",
            "--for=condition=complete",
            "job/once",
            "--timeout=30s"
        ]),
        "job.batch/once condition met\n"
    );
    assert_eq!(
        k.ok(&[
            "create",
            "cronjob",
            "every",
            "--image=busybox",
            "--schedule=*/1 * * * *",
            "--",
            "echo",
            "hi"
        ]),
        "cronjob.batch/every created\n"
    );
    assert_eq!(
        k.ok(&["create", "job", "now", "--from=cronjob/every"]),
        "job.batch/now created\n"
    );
    let job = k.json(&["get", "job", "now"]);
    assert_eq!(
        job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"],
        "manual"
    );
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/now",
        "--timeout=30s",
    ]);
    // A condition that is never met times out with kubectl's message.
    let err = k.fails(&["wait", "--for=condition=failed", "job/once", "--timeout=1s"]);
    assert_eq!(
        err.trim(),
        "error: timed out waiting for the condition on jobs/once"
    );

    let out = k.ok(&["explain", "job.spec.backoffLimit"]);
    assert_contains_all(
        &out,
        &[
            "GROUP:      batch",
            "KIND:       Job",
            "VERSION:    v1",
            "FIELD: backoffLimit <integer>",
            "Specifies the number of retries before marking this job failed.",
        ],
    );
    let out = k.ok(&["explain", "cronjobs.spec"]);
    assert_contains_all(
        &out,
        &[
            "KIND:       CronJob",
            "FIELD: spec <CronJobSpec>",
            "  schedule\t<string> -required-",
            "  timeZone\t<string>",
        ],
    );
    let out = k.ok(&["explain", "pod.spec.containers.image"]);
    assert!(out.contains("FIELD: image <string>"), "{out}");
}

/// api-resources, api-versions and version describe the served API.
#[tokio::test]
async fn api_resources_versions_and_version() {
    let server = Server::start().await;
    let k = Kubectl::new(&server);
    let out = k.ok(&["api-resources"]);
    assert_table(
        &out,
        &["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"],
        &[
            &["configmaps", "cm", "v1", "true", "ConfigMap"],
            &["events", "ev", "v1", "true", "Event"],
            &["namespaces", "ns", "v1", "false", "Namespace"],
            &["nodes", "no", "v1", "false", "Node"],
            &["pods", "po", "v1", "true", "Pod"],
            // No short name: a row with one cell fewer.
            &["secrets", "v1", "true", "Secret"],
            &["serviceaccounts", "sa", "v1", "true", "ServiceAccount"],
            &[
                "selfsubjectreviews",
                "authentication.k8s.io/v1",
                "false",
                "SelfSubjectReview",
            ],
            &[
                "tokenreviews",
                "authentication.k8s.io/v1",
                "false",
                "TokenReview",
            ],
            &[
                "localsubjectaccessreviews",
                "authorization.k8s.io/v1",
                "true",
                "LocalSubjectAccessReview",
            ],
            &[
                "selfsubjectaccessreviews",
                "authorization.k8s.io/v1",
                "false",
                "SelfSubjectAccessReview",
            ],
            &[
                "selfsubjectrulesreviews",
                "authorization.k8s.io/v1",
                "false",
                "SelfSubjectRulesReview",
            ],
            &[
                "subjectaccessreviews",
                "authorization.k8s.io/v1",
                "false",
                "SubjectAccessReview",
            ],
            &["cronjobs", "cj", "batch/v1", "true", "CronJob"],
            // No short name: a row with one cell fewer.
            &["jobs", "batch/v1", "true", "Job"],
            &["leases", "coordination.k8s.io/v1", "true", "Lease"],
            &["events", "ev", "events.k8s.io/v1", "true", "Event"],
            // What metrics-server serves, as `kbatch up` serves it for `kubectl top`.
            &["nodes", "metrics.k8s.io/v1beta1", "false", "NodeMetrics"],
            &["pods", "metrics.k8s.io/v1beta1", "true", "PodMetrics"],
            &[
                "poddisruptionbudgets",
                "pdb",
                "policy/v1",
                "true",
                "PodDisruptionBudget",
            ],
            &[
                "priorityclasses",
                "pc",
                "scheduling.k8s.io/v1",
                "false",
                "PriorityClass",
            ],
        ],
    );
    let out = k.ok(&["api-resources", "--namespaced=false", "-o", "name"]);
    assert_eq!(
        out,
        "namespaces\nnodes\nselfsubjectreviews.authentication.k8s.io\ntokenreviews.authentication.k8s.io\nselfsubjectaccessreviews.authorization.k8s.io\nselfsubjectrulesreviews.authorization.k8s.io\nsubjectaccessreviews.authorization.k8s.io\nnodes.metrics.k8s.io\npriorityclasses.scheduling.k8s.io\n"
    );
    let out = k.ok(&[
        "api-resources",
        "--api-group=batch",
        "--verbs=create",
        "-o",
        "name",
    ]);
    assert_eq!(out, "cronjobs.batch\njobs.batch\n");
    assert_eq!(
        k.ok(&["api-versions"]),
        "authentication.k8s.io/v1\nauthorization.k8s.io/v1\nbatch/v1\ncoordination.k8s.io/v1\nevents.k8s.io/v1\nmetrics.k8s.io/v1beta1\npolicy/v1\nscheduling.k8s.io/v1\nv1\n"
    );
    // `get all` covers the `all` category: pods, jobs and cronjobs.
    let out = k.run(&["get", "all"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "No resources found in default namespace."
    );

    let v = k.json(&["version"]);
    let server_version = &v["serverVersion"];
    assert_eq!(server_version["major"], "1");
    let minor = server_version["minor"].as_str().unwrap_or_default();
    assert!(minor.parse::<u32>().is_ok_and(|m| m >= 27), "{v}");
    assert_eq!(server_version["gitVersion"], format!("v1.{minor}.0"), "{v}");
    assert_eq!(server_version["platform"], "linux/amd64");
}

/// `kubectl auth can-i`: kbatch has no RBAC, so, as against a cluster whose authorizer
/// allows everything, every question is answered yes (exit 0) and the rules list `*` on
/// everything; a review created from a file comes back with its status.
#[tokio::test]
async fn auth_can_i() {
    let server = Server::start().await;
    let k = Kubectl::new(&server);
    assert_eq!(k.ok(&["auth", "can-i", "create", "pods"]), "yes\n");
    assert_eq!(
        k.ok(&["auth", "can-i", "delete", "jobs.batch", "-n", "kube-system"]),
        "yes\n"
    );
    assert_eq!(k.ok(&["auth", "can-i", "get", "/healthz"]), "yes\n");
    // The question is put even about a kind the server lacks, with kubectl's warning.
    let out = k.run(&["auth", "can-i", "create", "widgets"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout, "yes\n");
    assert_eq!(
        out.stderr.trim(),
        "Warning: the server doesn't have a resource type 'widgets'"
    );
    let rules = k.ok(&["auth", "can-i", "--list"]);
    assert_table(
        &rules,
        &["Resources", "Non-Resource URLs", "Resource Names", "Verbs"],
        &[&["*.*", "[]", "[]", "[*]"], &["[*]", "[]", "[*]"]],
    );
    // (A leading `*` in an expected cell is a pattern: the rule's cell, literally.)
    assert!(
        rules.lines().nth(1).is_some_and(|l| l.starts_with("*.* ")),
        "{rules}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let review = write(
        dir.path(),
        "review.yaml",
        "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec:\n  resourceAttributes:\n    verb: list\n    group: batch\n    resource: jobs\n",
    );
    // kubectl validates a kind without a PATCH operation in OpenAPI v3 on its side, with the
    // `/openapi/v2` schemas, which have none for the access reviews: the server's validation
    // is what counts.
    let path = review.to_string_lossy().into_owned();
    let v = k.json(&[
        "create",
        "--validate=false",
        "--show-managed-fields",
        "-f",
        &path,
    ]);
    assert_eq!(v["status"], serde_json::json!({"allowed": true}));
    assert_eq!(v["spec"]["resourceAttributes"]["resource"], "jobs");
    assert_eq!(
        v["metadata"]["managedFields"][0]["manager"],
        "kubectl-create"
    );
    let empty = write(
        dir.path(),
        "empty.yaml",
        "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec: {}\n",
    );
    let err = k.fails(&["create", "--validate=false", "-f", &empty.to_string_lossy()]);
    assert!(
        err.contains("spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"),
        "{err}"
    );
}

/// `kubectl auth whoami`: over plain HTTP everyone is the user kube-apiserver's insecure port
/// gave every request, in kubectl's ATTRIBUTE/VALUE table (no UID row: there is none) and as
/// the SelfSubjectReview itself.
#[tokio::test]
async fn auth_whoami() {
    let server = Server::start().await;
    let k = Kubectl::new(&server);
    assert_table(
        &k.ok(&["auth", "whoami"]),
        &["ATTRIBUTE", "VALUE"],
        &[
            &["Username", "system:unsecured"],
            &["Groups", "[system:masters system:authenticated]"],
        ],
    );
    let v = k.json(&["auth", "whoami"]);
    assert_eq!(v["kind"], "SelfSubjectReview");
    assert_eq!(v["apiVersion"], "authentication.k8s.io/v1");
    assert!(v["metadata"]["creationTimestamp"].is_string(), "{v}");
    assert_eq!(
        v["status"],
        serde_json::json!({"userInfo": {"username": "system:unsecured",
            "groups": ["system:masters", "system:authenticated"]}})
    );
}

/// A ConfigMap manifest with `app: <name>` and the given data lines.
fn configmap_yaml(name: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\n{data}"
    )
}

/// ConfigMaps and Secrets: kubectl's create commands (protobuf bodies), the server-side
/// tables, apply twice (client-side apply's strategic merge patch), stringData merged into
/// data and never stored, 422s with upstream's field paths and messages, selectors, watch and
/// delete.
#[tokio::test]
async fn configmaps_and_secrets() {
    let server = Server::start().await;
    let k = Kubectl::new(&server);

    assert_eq!(
        k.ok(&[
            "create",
            "configmap",
            "c",
            "--from-literal=a=1",
            "--from-literal=b=2"
        ]),
        "configmap/c created\n"
    );
    assert_eq!(
        k.ok(&["create", "secret", "generic", "s", "--from-literal=k=v"]),
        "secret/s created\n"
    );
    assert_table(
        &k.ok(&["get", "cm"]),
        &["NAME", "DATA", "AGE"],
        &[&["c", "2", "<age>"]],
    );
    assert_table(
        &k.ok(&["get", "secrets"]),
        &["NAME", "TYPE", "DATA", "AGE"],
        &[&["s", "Opaque", "1", "<age>"]],
    );
    let yaml = k.ok(&["get", "cm", "c", "-o", "yaml"]);
    let cm: Value = serde_saphyr::from_str(&yaml).expect("kubectl -o yaml parses");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["data"], serde_json::json!({"a": "1", "b": "2"}));
    let s = k.json(&["get", "secret", "s"]);
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["data"], serde_json::json!({"k": "dg=="}));

    // apply: created, configured, unchanged; binaryData and a second label selector.
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(
        dir.path(),
        "cm.yaml",
        &configmap_yaml("app-config", "data:\n  mode: fast\n"),
    );
    let fs = f.to_str().expect("utf-8 path");
    assert_eq!(k.ok(&["apply", "-f", fs]), "configmap/app-config created\n");
    write(
        dir.path(),
        "cm.yaml",
        &configmap_yaml(
            "app-config",
            "data:\n  mode: slow\n  extra: \"1\"\nbinaryData:\n  blob: AP8=\n",
        ),
    );
    assert_eq!(
        k.ok(&["apply", "-f", fs]),
        "configmap/app-config configured\n"
    );
    assert_eq!(
        k.ok(&["apply", "-f", fs]),
        "configmap/app-config unchanged\n"
    );
    let cm = k.json(&["get", "cm", "app-config"]);
    assert_eq!(
        cm["data"],
        serde_json::json!({"mode": "slow", "extra": "1"})
    );
    assert_eq!(cm["binaryData"], serde_json::json!({"blob": "AP8="}));
    assert_table(
        &k.ok(&["get", "configmaps"]),
        &["NAME", "DATA", "AGE"],
        &[&["app-config", "3", "<age>"], &["c", "2", "<age>"]],
    );
    assert_eq!(
        k.ok(&["get", "cm", "-l", "app=app-config", "-o", "name"]),
        "configmap/app-config\n"
    );
    assert_eq!(
        k.ok(&["get", "cm", "-l", "app!=app-config", "-o", "name"]),
        "configmap/c\n"
    );

    // A Secret with stringData, applied twice: merged into data, never stored or returned.
    let secret = |v: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ntype: kubernetes.io/basic-auth\ndata:\n  username: YWRtaW4=\nstringData:\n  password: {v}\n"
        )
    };
    let f = write(dir.path(), "secret.yaml", &secret("first"));
    let fs = f.to_str().expect("utf-8 path");
    assert_eq!(k.ok(&["apply", "-f", fs]), "secret/creds created\n");
    let s = k.json(&["get", "secret", "creds"]);
    assert_eq!(
        s["data"],
        serde_json::json!({"username": "YWRtaW4=", "password": "Zmlyc3Q="})
    );
    assert!(s.get("stringData").is_none(), "{s}");
    assert!(
        !s["metadata"]["managedFields"]
            .to_string()
            .contains("stringData"),
        "{s}"
    );
    write(dir.path(), "secret.yaml", &secret("second"));
    assert_eq!(k.ok(&["apply", "-f", fs]), "secret/creds configured\n");
    let s = k.json(&["get", "secret", "creds"]);
    assert_eq!(
        s["data"],
        serde_json::json!({"username": "YWRtaW4=", "password": "c2Vjb25k"})
    );
    assert!(s.get("stringData").is_none(), "{s}");
    assert_table(
        &k.ok(&["get", "secret", "creds"]),
        &["NAME", "TYPE", "DATA", "AGE"],
        &[&["creds", "kubernetes.io/basic-auth", "2", "<age>"]],
    );
    assert_eq!(
        k.ok(&[
            "get",
            "secrets",
            "--field-selector",
            "type=Opaque",
            "-o",
            "name"
        ]),
        "secret/s\n"
    );

    // 422s as kubectl prints them.
    let bad = configmap_yaml("bad", "data:\n  bad key: \"1\"\n");
    let out = k.run_with(&["create", "-f", "-"], Some(&bad), &[]);
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        "The ConfigMap \"bad\" is invalid: data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    );
    let tls = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cert\ntype: kubernetes.io/tls\n";
    let out = k.run_with(&["create", "-f", "-"], Some(tls), &[]);
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        // kubectl lists the causes of a 422 with more than one.
        "The Secret \"cert\" is invalid: \n* data[tls.crt]: Required value\n* data[tls.key]: Required value"
    );
    let imm = format!(
        "{}immutable: true\n",
        configmap_yaml("frozen", "data:\n  a: \"1\"\n")
    );
    assert_eq!(
        k.ok_stdin(&["create", "-f", "-"], &imm),
        "configmap/frozen created\n"
    );
    let err = k.fails(&["patch", "cm", "frozen", "-p", r#"{"data":{"a":"2"}}"#]);
    assert_eq!(
        err.trim(),
        "The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    // Metadata of an immutable ConfigMap may still change.
    assert_eq!(
        k.ok(&["label", "cm", "frozen", "tier=x"]),
        "configmap/frozen labeled\n"
    );
    let err = k.fails(&[
        "patch",
        "secret",
        "s",
        "-p",
        r#"{"type":"kubernetes.io/tls","data":{"tls.crt":"","tls.key":""}}"#,
    ]);
    assert_eq!(
        err.trim(),
        "The Secret \"s\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable"
    );

    // watch: the current rows, then one per change.
    let watch = k.watch(&["get", "secrets", "-w"]);
    assert_eq!(cells(&watch.next()), ["NAME", "TYPE", "DATA", "AGE"]);
    let mut first = vec![
        cells(&watch.next())[0].clone(),
        cells(&watch.next())[0].clone(),
    ];
    first.sort();
    assert_eq!(first, ["creds", "s"]);
    assert_eq!(
        k.ok(&[
            "create",
            "secret",
            "generic",
            "later",
            "--from-literal=x=y",
            "--from-literal=z=w"
        ]),
        "secret/later created\n"
    );
    let line = watch.next();
    let c = cells(&line);
    assert_eq!(&c[..3], ["later", "Opaque", "2"], "{line}");

    // delete.
    assert_eq!(k.ok(&["delete", "cm", "c"]), "configmap \"c\" deleted\n");
    assert_eq!(k.ok(&["delete", "secret", "s"]), "secret \"s\" deleted\n");
    let err = k.fails(&["get", "cm", "c"]);
    assert_eq!(
        err.trim(),
        "Error from server (NotFound): configmaps \"c\" not found"
    );
    assert_eq!(
        k.ok(&["get", "secrets", "-o", "name"]),
        "secret/creds\nsecret/later\n"
    );
}
