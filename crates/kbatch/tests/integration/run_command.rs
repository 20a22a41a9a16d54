//! `kbatch run`: the real binary runs manifests on an ephemeral instance with the process
//! executor and exits with the outcome.

use std::process::{Command, Output};

fn examples(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kbatch"))
        .arg("run")
        .args(["--pod-failure-backoff", "100ms"])
        .args(args)
        .output()
        .expect("run kbatch run")
}

/// Runs `kbatch run` with `args`, checks that it exits with `code`, and returns its stdout and
/// stderr.
fn run_expecting(args: &[&str], code: i32) -> (String, String) {
    let out = run(args);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// The output line of the Warning event with `reason` (`[object] Reason: message`).
fn warning_line<'a>(stdout: &'a str, reason: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.contains(&format!("] {reason}: ")))
        .unwrap_or_else(|| panic!("no {reason} line:\n{stdout}"))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The `N active` figures of the progress lines of `job`.
fn active_counts(stdout: &str, job: &str) -> Vec<u32> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("job/{job}: ")))
        .filter_map(|l| l.split(", ").nth(1)?.strip_suffix(" active")?.parse().ok())
        .collect()
}

#[test]
fn pi_completes_four_times_two_at_a_time() {
    let (stdout, _) = run_expecting(&[&examples("pi.yaml")], 0);
    assert!(
        stdout.contains("job/pi: Complete, 0 active, 4/4 succeeded, 0 failed"),
        "{stdout}"
    );
    let actives = active_counts(&stdout, "pi");
    assert!(!actives.is_empty(), "{stdout}");
    assert!(
        actives.iter().all(|&a| a <= 2),
        "more than 2 pods at once: {actives:?}"
    );
    // Every pod's output is shown, prefixed with its name.
    let digits = stdout
        .lines()
        .filter(|l| l.starts_with("[pi-") && l.contains("] 3.14159265358979323846"))
        .count();
    assert_eq!(digits, 4, "{stdout}");
}

#[test]
fn a_failing_job_exits_1_with_its_reason_after_backoff_limit_plus_one_pods() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("fail.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: flaky}
spec:
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "echo attempt; exit 1"]
"#,
    )
    .expect("write manifest");
    let (stdout, stderr) = run_expecting(&[manifest.to_str().expect("utf-8 path")], 1);
    assert!(
        stderr.contains(
            "job/flaky failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
        ),
        "{stderr}"
    );
    assert!(
        stdout.contains(
            "job/flaky: Failed (BackoffLimitExceeded), 0 active, 0/1 succeeded, 3 failed"
        ),
        "{stdout}"
    );
    let attempts = stdout.lines().filter(|l| l.ends_with("] attempt")).count();
    assert_eq!(attempts, 3, "backoffLimit 2 means 3 pods: {stdout}");
}

#[test]
fn a_pod_failure_policy_fails_the_job_at_once() {
    let (_, stderr) = run_expecting(&[&examples("pod-failure-policy.yaml")], 1);
    assert!(
        stderr.contains(
            "job/fail-fast failed: PodFailurePolicy: Container main for pod default/fail-fast-"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("failed with exit code 42 matching FailJob rule at index 0"),
        "{stderr}"
    );
}

#[test]
fn an_indexed_job_gives_each_pod_its_index() {
    let (stdout, _) = run_expecting(&[&examples("indexed.yaml")], 0);
    for i in 0..5 {
        assert!(
            stdout.contains(&format!("{i} squared is {}", i * i)),
            "index {i} missing:\n{stdout}"
        );
    }
}

#[test]
fn a_job_reads_its_configmap_and_secret() {
    let (stdout, _) = run_expecting(&[&examples("config.yaml")], 0);
    // Created before the Job, so its pod never waits for them.
    let created: Vec<&str> = stdout.lines().filter(|l| l.ends_with(" created")).collect();
    assert_eq!(
        created,
        [
            "configmap/greeting created",
            "secret/credentials created",
            "job/configured created"
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("hello, world from demo"),
        "the env from the ConfigMap (prefixed) and the Secret is missing:\n{stdout}"
    );
}

#[test]
fn volumes_example_runs_its_script_from_a_config_map_volume() {
    let (stdout, _) = run_expecting(&[&examples("volumes.yaml")], 0);
    // Each pod ran the ConfigMap's script, read what its init container left in the
    // emptyDir and its Job's name from the downwardAPI volume.
    for (index, words) in [(0, 100), (1, 200), (2, 300)] {
        let line = format!("shard {index} of shards: {words} words");
        assert!(stdout.contains(&line), "{line:?} is missing:\n{stdout}");
    }
}

#[test]
fn why_a_pod_does_not_start_is_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("greedy.yaml");
    // More CPU than any machine has: the pod is never scheduled, and the deadline ends the Job.
    std::fs::write(
        &manifest,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: greedy}\nspec:\n  \
         activeDeadlineSeconds: 3\n  template:\n    spec:\n      restartPolicy: Never\n      \
         containers: [{name: c, image: x, command: [\"true\"], resources: {requests: {cpu: \"100000\"}}}]\n",
    )
    .expect("write");
    let (stdout, stderr) = run_expecting(&[&manifest.to_string_lossy()], 1);
    let line = warning_line(&stdout, "FailedScheduling");
    assert!(
        line.starts_with("[greedy-")
            && line.contains("] FailedScheduling: 0/1 nodes are available: 1 Insufficient cpu."),
        "{line}"
    );
    assert!(stderr.contains("DeadlineExceeded"), "{stderr}");
}

#[test]
fn invalid_input_exits_2_with_the_field_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("bad.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: x, command: [\"true\"]}]\n",
    )
    .expect("write manifest");
    let (_, stderr) = run_expecting(&[manifest.to_str().expect("utf-8 path")], 2);
    assert!(
        stderr.contains(r#"spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never""#),
        "{stderr}"
    );

    let out = run(&[dir
        .path()
        .join("missing.yaml")
        .to_str()
        .expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let garbage = dir.path().join("garbage.yaml");
    std::fs::write(&garbage, "kind: [unclosed\n").expect("write");
    let out = run(&[garbage.to_str().expect("utf-8 path")]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not valid YAML"), "{stderr}");
}

#[test]
fn keep_leaves_the_data_dir_to_inspect() {
    let (stdout, _) = run_expecting(
        &["--executor", "simulate", "--keep", &examples("pi.yaml")],
        0,
    );
    let kept = stdout
        .lines()
        .find_map(|l| l.strip_prefix("kept the data dir "))
        .and_then(|l| l.split(';').next())
        .expect("the kept dir is named");
    let kubeconfig = std::path::Path::new(kept).join("kubeconfig");
    assert!(kubeconfig.is_file(), "{stdout}");
    std::fs::remove_dir_all(kept).expect("clean up");
}

#[test]
fn a_job_with_a_sidecar_completes_once_its_main_containers_succeed() {
    let (stdout, _) = run_expecting(&[&examples("sidecar.yaml")], 0);
    assert_eq!(
        stdout.matches("sidecar alive at").count(),
        2,
        "both pods' main containers saw their sidecar:\n{stdout}"
    );
}

#[test]
fn a_pod_that_outgrows_its_empty_dir_is_evicted_and_its_job_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("hoard.yaml");
    let cache = dir.path().join("cache");
    // 2 MiB into a 1 MiB emptyDir: kubelet's eviction manager (every 10 s) fails the pod.
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: hoard}}\nspec:\n  \
             backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      \
             volumes: [{{name: cache, emptyDir: {{sizeLimit: 1Mi}}}}]\n      \
             containers: [{{name: c, image: x, volumeMounts: [{{name: cache, mountPath: {cache}}}], \
             command: [sh, -c, \"head -c 2097152 /dev/zero > {cache}/blob; sleep 60\"]}}]\n",
            cache = cache.display()
        ),
    )
    .expect("write");
    let (stdout, stderr) = run_expecting(&[&manifest.to_string_lossy()], 1);
    let line = warning_line(&stdout, "Evicted");
    assert!(
        line.starts_with("[hoard-")
            && line.ends_with("Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". "),
        "{line:?}"
    );
    assert!(
        stderr.contains("job/hoard failed: BackoffLimitExceeded"),
        "{stderr}"
    );
}
