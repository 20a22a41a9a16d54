//! Cached objects without spare capacity, and without the parts no controller reads.
//!
//! JSON gives serde no length for a list, so a decoded `Vec` grows by doubling from four
//! elements: a pod's one container status (752 bytes typed) sits in room for four, its five
//! conditions in room for eight. A cache keeps every object for its lifetime, so the lists of
//! the kinds kept by the thousands (Pods, Jobs) are shrunk to fit on the way in.
//!
//! Like client-go's informer transforms, the caches also drop what the controllers of this
//! crate never read, the bulk of a typed object (a `Container` is 2.3 KB before its strings):
//! - a Pod's regular containers (`spec.containers` is cached empty; the informers do not even
//!   decode them, `Lean<Pod, true>`: 10 µs to decode a pod of two containers with ten env
//!   vars each, 4.3 µs without them), and of its init containers only the name and
//!   restartPolicy (sidecars matter to the Job controller's back-off);
//! - a finished Job's pod template metadata, containers and volumes (a Job that is Complete
//!   or Failed never creates a pod again).
//!
//! Nothing writes a cached object back whole except through the status subresource, whose
//! update takes no spec. Code that comes to read more of these kinds must widen this.

use std::any::Any;

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Trims `obj` if it is a kind kept in large numbers; others are left alone.
pub(crate) fn compact<K: Any>(obj: &mut K) {
    let obj: &mut dyn Any = obj;
    if let Some(pod) = obj.downcast_mut::<Pod>() {
        pod_compact(pod);
    } else if let Some(job) = obj.downcast_mut::<Job>() {
        job_compact(job);
    }
}

fn fit<T>(v: &mut Option<Vec<T>>) {
    if let Some(v) = v {
        v.shrink_to_fit();
    }
}

fn meta_compact(m: &mut ObjectMeta) {
    fit(&mut m.finalizers);
    fit(&mut m.owner_references);
}

fn container_compact(c: &mut Container) {
    fit(&mut c.command);
    fit(&mut c.args);
    fit(&mut c.env);
    fit(&mut c.ports);
    fit(&mut c.volume_mounts);
}

fn pod_spec_compact(s: &mut PodSpec) {
    s.containers.shrink_to_fit();
    s.containers.iter_mut().for_each(container_compact);
    if let Some(init) = s.init_containers.as_mut() {
        init.shrink_to_fit();
        init.iter_mut().for_each(container_compact);
    }
    fit(&mut s.volumes);
    fit(&mut s.tolerations);
}

fn pod_status_compact(s: &mut PodStatus) {
    fit(&mut s.conditions);
    fit(&mut s.container_statuses);
    fit(&mut s.init_container_statuses);
    fit(&mut s.host_ips);
    fit(&mut s.pod_ips);
}

/// What the controllers read of an init container: whether it is a sidecar, and its name.
fn init_container_trimmed(c: &mut Container) {
    *c = Container {
        name: std::mem::take(&mut c.name),
        restart_policy: c.restart_policy.take(),
        ..Container::default()
    };
}

fn pod_compact(p: &mut Pod) {
    meta_compact(&mut p.metadata);
    if let Some(s) = p.spec.as_mut() {
        s.containers = Vec::new();
        if let Some(init) = s.init_containers.as_mut() {
            init.iter_mut().for_each(init_container_trimmed);
        }
        pod_spec_compact(s);
    }
    if let Some(s) = p.status.as_mut() {
        pod_status_compact(s);
    }
}

fn job_compact(j: &mut Job) {
    meta_compact(&mut j.metadata);
    let finished = crate::job::is_finished(j);
    if let Some(spec) = j.spec.as_mut() {
        if finished {
            spec.template.metadata = None;
            if let Some(s) = spec.template.spec.as_mut() {
                s.containers = Vec::new();
                s.init_containers = None;
                s.volumes = None;
            }
        }
        if let Some(m) = spec.template.metadata.as_mut() {
            meta_compact(m);
        }
        if let Some(s) = spec.template.spec.as_mut() {
            pod_spec_compact(s);
        }
    }
    if let Some(s) = j.status.as_mut() {
        fit(&mut s.conditions);
    }
}

#[cfg(test)]
mod tests {
    use kbatch_api::k8s_openapi::api::batch::v1::JobCondition;
    use kbatch_api::k8s_openapi::api::core::v1::{ContainerStatus, PodCondition};
    use serde_json::json;

    use super::*;

    /// Decoded from text, as the watcher decodes (a JSON tree would give exact lengths).
    fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_str(&v.to_string()).expect("decodes")
    }

    fn pod_json() -> serde_json::Value {
        json!({
            "metadata": {"name": "p", "finalizers": ["a"], "labels": {"job-name": "j"},
                "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}]},
            "spec": {"nodeName": "n", "restartPolicy": "Never",
                "initContainers": [
                    {"name": "setup", "image": "busybox", "command": ["sh", "-c", "true"]},
                    {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "args": ["-x"]}],
                "containers": [{"name": "c", "image": "busybox", "command": ["/bin/true"]}]},
            "status": {"phase": "Running", "conditions": [{"type": "A", "status": "True"},
                {"type": "B", "status": "True"}, {"type": "C", "status": "True"},
                {"type": "D", "status": "True"}, {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}]}
        })
    }

    #[test]
    fn decoded_lists_are_shrunk() {
        let mut pod: Pod = decode(pod_json());
        let status = pod.status.as_ref().expect("status");
        let cap = |v: &Option<Vec<ContainerStatus>>| v.as_ref().map_or(0, Vec::capacity);
        // What the cache would otherwise hold.
        assert!(cap(&status.container_statuses) > 1);
        compact(&mut pod);
        let status = pod.status.as_ref().expect("status");
        assert_eq!(cap(&status.container_statuses), 1);
        let conditions: &Vec<PodCondition> = status.conditions.as_ref().expect("conditions");
        assert_eq!(conditions.capacity(), 5);
        let meta = &pod.metadata;
        assert_eq!(meta.owner_references.as_ref().map(Vec::capacity), Some(1));

        let mut job: Job = decode(json!({
            "metadata": {"name": "j", "finalizers": ["f"]},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["x"]}]}}},
            "status": {"conditions": [{"type": "Complete", "status": "False"}]}
        }));
        let before = job.clone();
        compact(&mut job);
        assert_eq!(job, before);
        let conditions: &Vec<JobCondition> = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .expect("conditions");
        assert_eq!(conditions.capacity(), 1);
        let template = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        let args = template.and_then(|s| s.containers[0].args.as_ref());
        assert_eq!(args.map(Vec::capacity), Some(1));
    }

    #[test]
    fn pods_keep_all_but_their_containers_and_what_init_containers_are() {
        let mut pod: Pod = decode(pod_json());
        compact(&mut pod);
        let mut want = pod_json();
        want["apiVersion"] = json!("v1");
        want["kind"] = json!("Pod");
        want["spec"]["containers"] = json!([]);
        want["spec"]["initContainers"] = json!([{"name": "setup"},
            {"name": "proxy", "restartPolicy": "Always"}]);
        assert_eq!(serde_json::to_value(&pod).expect("encodes"), want);
    }

    #[test]
    fn only_finished_jobs_lose_their_template_containers() {
        let job = |conditions: serde_json::Value| -> Job {
            decode(json!({
                "metadata": {"name": "j", "labels": {"a": "b"}},
                "spec": {"completions": 2, "ttlSecondsAfterFinished": 5, "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"restartPolicy": "Never",
                        "initContainers": [{"name": "i", "image": "x"}],
                        "containers": [{"name": "c", "image": "busybox", "args": ["x"]}],
                        "volumes": [{"name": "v", "emptyDir": {}}]}}},
                "status": {"succeeded": 2, "conditions": conditions}
            }))
        };
        for unfinished in [
            json!([]),
            json!([{"type": "SuccessCriteriaMet", "status": "True"}]),
            json!([{"type": "Failed", "status": "False"}]),
        ] {
            let mut j = job(unfinished);
            let before = j.clone();
            compact(&mut j);
            assert_eq!(j, before);
        }
        for finished in ["Complete", "Failed"] {
            let conditions = json!([{"type": finished, "status": "True"}]);
            let mut j = job(conditions.clone());
            compact(&mut j);
            let mut want = serde_json::to_value(job(conditions)).expect("encodes");
            if let Some(template) = want["spec"]["template"].as_object_mut() {
                template.remove("metadata");
            }
            let spec = &mut want["spec"]["template"]["spec"];
            spec["containers"] = json!([]);
            let spec = spec.as_object_mut().expect("spec");
            spec.remove("initContainers");
            spec.remove("volumes");
            assert_eq!(
                serde_json::to_value(&j).expect("encodes"),
                want,
                "{finished}"
            );
        }
    }
}
