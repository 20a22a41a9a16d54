//! Cached objects without spare capacity.
//!
//! JSON gives serde no length for a list, so a decoded `Vec` grows by doubling from four
//! elements: a pod's one container status (752 bytes typed) sits in room for four, its five
//! conditions in room for eight. A cache keeps every object for its lifetime, so the lists of
//! the kinds kept by the thousands (Pods, Jobs) are shrunk to fit on the way in.

use std::any::Any;

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Shrinks the lists of `obj` if it is a kind kept in large numbers; others are left alone.
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

fn pod_compact(p: &mut Pod) {
    meta_compact(&mut p.metadata);
    if let Some(s) = p.spec.as_mut() {
        pod_spec_compact(s);
    }
    if let Some(s) = p.status.as_mut() {
        pod_status_compact(s);
    }
}

fn job_compact(j: &mut Job) {
    meta_compact(&mut j.metadata);
    if let Some(spec) = j.spec.as_mut() {
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

    #[test]
    fn decoded_lists_are_shrunk_and_unchanged() {
        let pod: Pod = decode(json!({
            "metadata": {"name": "p", "finalizers": ["a"], "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}]},
            "spec": {"containers": [{"name": "c", "command": ["/bin/true"]}]},
            "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"},
                {"type": "C", "status": "True"}, {"type": "D", "status": "True"},
                {"type": "E", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "", "imageID": "", "ready": false,
                    "restartCount": 0}]}
        }));
        let status = pod.status.as_ref().expect("status");
        let cap = |v: &Option<Vec<ContainerStatus>>| v.as_ref().map_or(0, Vec::capacity);
        // What the cache would otherwise hold.
        assert!(cap(&status.container_statuses) > 1);
        let before = pod.clone();
        let mut pod = pod;
        compact(&mut pod);
        assert_eq!(pod, before);
        let status = pod.status.as_ref().expect("status");
        assert_eq!(cap(&status.container_statuses), 1);
        let conditions: &Vec<PodCondition> = status.conditions.as_ref().expect("conditions");
        assert_eq!(conditions.capacity(), 5);
        let meta = &pod.metadata;
        assert_eq!(meta.owner_references.as_ref().map(Vec::capacity), Some(1));
        let command = &pod.spec.as_ref().expect("spec").containers[0].command;
        assert_eq!(command.as_ref().map(Vec::capacity), Some(1));

        let mut job: Job = decode(json!({
            "metadata": {"name": "j", "finalizers": ["f"]},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["x"]}]}}},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}
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
}
