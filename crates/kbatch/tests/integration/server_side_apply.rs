//! Server-side apply against a real `kbatch up`: `kubectl apply --server-side` (create,
//! change, conflict with a `kubectl patch`, `--force-conflicts`, managed fields shown by
//! `kubectl get --show-managed-fields`) and kube-rs `Patch::Apply`.

use crate::common;

use std::process::{Command, Output};

use common::{Server, pod_json};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn run_kubectl(server: &Server, args: &[&str]) -> Output {
    Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", server.data_dir().join("kubeconfig"))
        .output()
        .unwrap_or_else(|e| panic!("kubectl is needed on PATH for this test: {e}"))
}

/// Run kubectl, which must succeed; its stdout.
fn kubectl(server: &Server, args: &[&str]) -> String {
    let out = run_kubectl(server, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {}: {stdout}\n{}\nserver logs:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
    stdout
}

fn job_yaml(deadline: u32, label: Option<&str>) -> String {
    let labels = label
        .map(|l| format!("  labels:\n    tier: {l}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: ssa
{labels}spec:
  activeDeadlineSeconds: {deadline}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [\"true\"]
        env:
        - name: A
          value: \"1\"
"
    )
}

fn get_job(server: &Server) -> Value {
    let out = kubectl(
        server,
        &["get", "job", "ssa", "-o", "json", "--show-managed-fields"],
    );
    serde_json::from_str(&out).expect("kubectl get -o json")
}

/// `(manager, operation)` of each managedFields entry.
fn managers(job: &Value) -> Vec<(String, String)> {
    job["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_string(),
                        e["operation"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// kubectl apply --server-side creates, changes, conflicts with a field another manager
/// set, and takes it over with --force-conflicts. Needs kubectl on PATH.
#[tokio::test]
async fn kubectl_apply_server_side() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("job.yaml");
    let file_arg = file.to_str().expect("utf-8 path").to_string();
    let apply = ["apply", "--server-side", "-f", file_arg.as_str()];

    std::fs::write(&file, job_yaml(100, Some("a"))).expect("write job.yaml");
    let out = kubectl(&server, &apply);
    assert_eq!(out.trim(), "job.batch/ssa serverside-applied");
    let job = get_job(&server);
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 100);
    assert_eq!(managers(&job), [("kubectl".into(), "Apply".into())]);
    let fields = &job["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]["f:env"]
            ["k:{\"name\":\"A\"}"],
        json!({".": {}, "f:name": {}, "f:value": {}}),
        "{fields}"
    );
    // Without --show-managed-fields kubectl hides them: they are in the object it got.
    let plain = kubectl(&server, &["get", "job", "ssa", "-o", "yaml"]);
    assert!(!plain.contains("managedFields"), "{plain}");

    // Changed field, dropped label: applied; the label is gone.
    std::fs::write(&file, job_yaml(200, None)).expect("write job.yaml");
    let out = kubectl(&server, &apply);
    assert_eq!(out.trim(), "job.batch/ssa serverside-applied");
    let job = get_job(&server);
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 200);
    assert!(job["metadata"]["labels"].get("tier").is_none(), "{job}");

    // Another manager changes the field; applying a different value is a conflict.
    kubectl(
        &server,
        &[
            "patch",
            "job",
            "ssa",
            "-p",
            r#"{"spec":{"activeDeadlineSeconds":300}}"#,
        ],
    );
    let job = get_job(&server);
    assert!(
        managers(&job).contains(&("kubectl-patch".into(), "Update".into())),
        "{:?}",
        managers(&job)
    );
    let out = run_kubectl(&server, &apply);
    assert!(!out.status.success(), "a conflicting apply must fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl-patch\" using batch/v1: .spec.activeDeadlineSeconds"
        ),
        "{stderr}"
    );
    assert_eq!(get_job(&server)["spec"]["activeDeadlineSeconds"], 300);

    // A server-side dry run changes nothing.
    let mut dry = apply.to_vec();
    dry.extend(["--force-conflicts", "--dry-run=server"]);
    kubectl(&server, &dry);
    assert_eq!(get_job(&server)["spec"]["activeDeadlineSeconds"], 300);

    // Forced: the applier takes the field and kubectl-patch owns nothing any more.
    let mut forced = apply.to_vec();
    forced.push("--force-conflicts");
    let out = kubectl(&server, &forced);
    assert_eq!(out.trim(), "job.batch/ssa serverside-applied");
    let job = get_job(&server);
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 200);
    assert_eq!(managers(&job), [("kubectl".into(), "Apply".into())]);

    // The managers as kubectl shows them.
    let yaml = kubectl(
        &server,
        &["get", "job", "ssa", "-o", "yaml", "--show-managed-fields"],
    );
    assert!(yaml.contains("manager: kubectl\n"), "{yaml}");
    assert!(yaml.contains("operation: Apply"), "{yaml}");
    assert!(yaml.contains("fieldsType: FieldsV1"), "{yaml}");
}

/// kube-rs `Patch::Apply`: create, conflict between two field managers, force, and an apply
/// through the status subresource.
#[tokio::test]
async fn kube_rs_patch_apply() {
    let server = Server::start().await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let config = |deadline: i64| {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "kr"},
            "spec": {"activeDeadlineSeconds": deadline, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}}
        })
    };
    let created = jobs
        .patch(
            "kr",
            &PatchParams::apply("deployer"),
            &Patch::Apply(config(10)),
        )
        .await
        .expect("apply creates");
    assert_eq!(
        created
            .spec
            .as_ref()
            .and_then(|s| s.active_deadline_seconds),
        Some(10)
    );
    let entries = created.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("deployer"));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));

    let err = jobs
        .patch(
            "kr",
            &PatchParams::apply("other"),
            &Patch::Apply(config(20)),
        )
        .await
        .expect_err("conflicting apply");
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}");
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"deployer\": .spec.activeDeadlineSeconds"
    );

    let forced = jobs
        .patch(
            "kr",
            &PatchParams::apply("other").force(),
            &Patch::Apply(config(20)),
        )
        .await
        .expect("forced apply");
    assert_eq!(
        forced.spec.as_ref().and_then(|s| s.active_deadline_seconds),
        Some(20)
    );

    // Status through the subresource, recorded as such.
    let pods: Api<Pod> = Api::default_namespaced(client);
    let pod: Pod = serde_json::from_value(pod_json("kp")).expect("pod fixture");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let status = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kp"},
        "status": {"conditions": [{"type": "Example", "status": "True"}]}});
    let patched = pods
        .patch_status("kp", &PatchParams::apply("prober"), &Patch::Apply(status))
        .await
        .expect("status apply");
    let entry = patched
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("prober"))
        .expect("prober entry");
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    assert_eq!(entry.operation.as_deref(), Some("Apply"));
}

/// Moving from `kubectl apply` to `kubectl apply --server-side` with a changed field is no
/// conflict (kubectl's last-applied annotation vouches for it), and cluster-scoped and
/// other kinds apply as well.
#[tokio::test]
async fn kubectl_client_side_to_server_side() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("job.yaml");
    let file_arg = file.to_str().expect("utf-8 path").to_string();

    std::fs::write(&file, job_yaml(100, Some("a"))).expect("write job.yaml");
    let out = kubectl(&server, &["apply", "-f", &file_arg]);
    assert_eq!(out.trim(), "job.batch/ssa created");
    assert_eq!(
        managers(&get_job(&server)),
        [("kubectl-client-side-apply".into(), "Update".into())]
    );
    std::fs::write(&file, job_yaml(200, Some("a"))).expect("write job.yaml");
    let out = kubectl(&server, &["apply", "--server-side", "-f", &file_arg]);
    assert_eq!(out.trim(), "job.batch/ssa serverside-applied");
    let job = get_job(&server);
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 200);
    let last: Value = serde_json::from_str(
        job["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("last-applied annotation kept"),
    )
    .expect("annotation is JSON");
    assert_eq!(last["spec"]["activeDeadlineSeconds"], 200);
    // And back to client-side apply, which diffs against that annotation.
    std::fs::write(&file, job_yaml(300, Some("a"))).expect("write job.yaml");
    let out = kubectl(&server, &["apply", "-f", &file_arg]);
    assert_eq!(out.trim(), "job.batch/ssa configured");
    assert_eq!(get_job(&server)["spec"]["activeDeadlineSeconds"], 300);

    let many = dir.path().join("many.yaml");
    std::fs::write(
        &many,
        "apiVersion: v1
kind: Namespace
metadata:
  name: team
  labels:
    owner: me
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
  namespace: team
spec:
  schedule: \"*/5 * * * *\"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: main
            image: busybox
",
    )
    .expect("write many.yaml");
    let many_arg = many.to_str().expect("utf-8 path");
    let out = kubectl(&server, &["apply", "--server-side", "-f", many_arg]);
    assert_eq!(
        out.trim(),
        "namespace/team serverside-applied\ncronjob.batch/tick serverside-applied"
    );
    let cj: Value = serde_json::from_str(&kubectl(
        &server,
        &[
            "get",
            "cronjob",
            "tick",
            "-n",
            "team",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    ))
    .expect("cronjob json");
    assert_eq!(managers(&cj), [("kubectl".into(), "Apply".into())]);
    assert_eq!(cj["spec"]["suspend"], false, "defaults applied: {cj}");
}

/// (manager, operation, subresource) of each managedFields entry.
fn managers_of(meta: &kube::api::ObjectMeta) -> Vec<(String, String, String)> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
                e.subresource.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn controllers_and_executor_writes_are_managed_as_upstream_names_them() {
    let server = Server::start_with(&[
        "--executor",
        "simulate",
        "--controllers",
        "job,serviceaccount",
    ])
    .await;
    let client = server.client().await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let job: Job = serde_json::from_value(common::job_json("managed")).expect("a Job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create");
    let done =
        common::wait_job_complete(&jobs, "managed", std::time::Duration::from_secs(30)).await;
    let cm = "kube-controller-manager".to_string();
    let (update, status) = ("Update".to_string(), "status".to_string());
    assert!(
        managers_of(&done.metadata).contains(&(cm.clone(), update.clone(), status.clone())),
        "{:?}",
        managers_of(&done.metadata)
    );
    let pod = pods
        .list(&kube::api::ListParams::default().labels("batch.kubernetes.io/job-name=managed"))
        .await
        .expect("list pods")
        .items
        .remove(0);
    let pod_managers = managers_of(&pod.metadata);
    assert!(
        pod_managers.contains(&(cm, update.clone(), String::new())),
        "{pod_managers:?}"
    );
    assert!(
        pod_managers.contains(&("kubelet".to_string(), update, status)),
        "{pod_managers:?}"
    );
}
