//! A container's environment and its expanded command line, as kubelet builds them: `env`
//! entries in order, each value expanded against the variables defined before it, values from
//! the downward API (`valueFrom.fieldRef`), then `$(VAR)` expansion of command and args against
//! the whole environment.

use kbatch_api::k8s_openapi::api::core::v1::{Container, Pod};

use crate::expand::expand;
use crate::node::HOST_IP;

/// PATH for processes when the executor itself has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a container process is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The program (`command[0]`) and its arguments, expanded.
    pub argv: Vec<String>,
    /// The complete environment, in definition order.
    pub env: Vec<(String, String)>,
}

/// Why a container cannot be started (kubelet's `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

/// The host variables every process gets before the container's own `env`.
pub fn base_env(pod: &Pod) -> Vec<(String, String)> {
    let mut env = vec![(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string()),
    )];
    if let Ok(home) = std::env::var("HOME") {
        env.push(("HOME".to_string(), home));
    }
    env.push((
        "HOSTNAME".to_string(),
        pod.metadata.name.clone().unwrap_or_default(),
    ));
    env
}

/// The value of a downward-API `fieldPath` for env, or why it can't be given.
pub fn field_ref(pod: &Pod, path: &str) -> Result<String, ConfigError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" | "status.podIP" | "status.podIPs" => {
            HOST_IP.to_string()
        }
        _ => {
            let subscript = |prefix: &str| {
                path.strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix("['"))
                    .and_then(|r| r.strip_suffix("']"))
            };
            if let Some(key) = subscript("metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(key).cloned())
                    .unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|a| a.get(key).cloned())
                    .unwrap_or_default()
            } else {
                return Err(ConfigError(format!("unsupported fieldPath: {path}")));
            }
        }
    };
    Ok(value)
}

fn set(env: &mut Vec<(String, String)>, name: &str, value: String) {
    match env.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name.to_string(), value)),
    }
}

fn lookup<'a>(env: &'a [(String, String)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// The environment and argv of `container`, or the configuration error that stops it.
pub fn launch(pod: &Pod, container: &Container) -> Result<Launch, ConfigError> {
    let command = container.command.clone().unwrap_or_default();
    if command.is_empty() {
        return Err(ConfigError(format!(
            "container {:?} has no command: the process executor does not pull images, so it \
             cannot use an image's entrypoint; set command (and args) to a program on this host",
            container.name
        )));
    }
    for source in container.env_from.iter().flatten() {
        let optional = source
            .config_map_ref
            .as_ref()
            .and_then(|r| r.optional)
            .or_else(|| source.secret_ref.as_ref().and_then(|r| r.optional))
            .unwrap_or(false);
        if !optional {
            return Err(ConfigError(format!(
                "container {:?}: envFrom (ConfigMaps and Secrets) is not available under the \
                 process executor",
                container.name
            )));
        }
    }
    let mut env = base_env(pod);
    // Variables a value may refer to: the container's own, defined so far (not the host's).
    let mut defined: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => expand(var.value.as_deref().unwrap_or(""), lookup(&defined)),
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    field_ref(pod, &f.field_path)?
                } else {
                    let what = if from.config_map_key_ref.is_some() {
                        "configMapKeyRef"
                    } else if from.secret_key_ref.is_some() {
                        "secretKeyRef"
                    } else if from.resource_field_ref.is_some() {
                        "resourceFieldRef"
                    } else {
                        "this valueFrom source"
                    };
                    return Err(ConfigError(format!(
                        "container {:?}: env {}: {what} is not available under the process \
                         executor",
                        container.name, var.name
                    )));
                }
            }
        };
        set(&mut defined, &var.name, value.clone());
        set(&mut env, &var.name, value);
    }
    let argv = command
        .iter()
        .chain(container.args.iter().flatten())
        .map(|a| expand(a, lookup(&defined)))
        .collect();
    Ok(Launch { argv, env })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                "labels": {"app": "x", "batch.kubernetes.io/job-completion-index": "3"},
                "annotations": {"note": "hi"}},
            "spec": {"nodeName": "kbatch-node", "serviceAccountName": "default",
                "containers": containers}
        }))
        .unwrap()
    }

    fn container(p: &Pod) -> Container {
        p.spec.as_ref().unwrap().containers[0].clone()
    }

    fn get<'a>(l: &'a Launch, name: &str) -> Option<&'a str> {
        l.env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn env_values_refs_and_expansion() {
        let p = pod(json!([{
            "name": "main", "image": "busybox",
            "command": ["sh", "-c", "echo $(GREETING) $(NAME) $$(NAME) $(MISSING)"],
            "args": ["$(IDX)"],
            "env": [
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "GREETING", "value": "hello-$(NAME)-$(LATER)"},
                {"name": "IDX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
                {"name": "NOPE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['absent']"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "LATER", "value": "late"},
                {"name": "EMPTY"},
            ]
        }]));
        let l = launch(&p, &container(&p)).unwrap();
        assert_eq!(get(&l, "NAME"), Some("p"));
        // A value sees only the variables defined before it.
        assert_eq!(get(&l, "GREETING"), Some("hello-p-$(LATER)"));
        assert_eq!(get(&l, "IDX"), Some("3"));
        assert_eq!(get(&l, "NS"), Some("ns"));
        assert_eq!(get(&l, "UID"), Some("u-1"));
        assert_eq!(get(&l, "NOTE"), Some("hi"));
        assert_eq!(get(&l, "NOPE"), Some(""));
        assert_eq!(get(&l, "NODE"), Some("kbatch-node"));
        assert_eq!(get(&l, "POD_IP"), Some("127.0.0.1"));
        assert_eq!(get(&l, "EMPTY"), Some(""));
        assert_eq!(get(&l, "HOSTNAME"), Some("p"));
        assert!(get(&l, "PATH").is_some());
        assert_eq!(
            l.argv,
            vec![
                "sh",
                "-c",
                "echo hello-p-$(LATER) p $(NAME) $(MISSING)",
                "3"
            ]
        );
    }

    #[test]
    fn later_definitions_override_and_host_vars_are_not_referable() {
        let p = pod(json!([{
            "name": "main", "image": "x", "command": ["$(PATH)", "$(A)"],
            "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2-$(A)"},
                    {"name": "PATH", "value": "/opt/bin"}]
        }]));
        let l = launch(&p, &container(&p)).unwrap();
        assert_eq!(get(&l, "A"), Some("2-1"));
        assert_eq!(get(&l, "PATH"), Some("/opt/bin"));
        assert_eq!(l.argv, vec!["/opt/bin", "2-1"]);
        assert_eq!(l.env.iter().filter(|(n, _)| n == "A").count(), 1);
    }

    #[test]
    fn config_errors_are_clear() {
        let p = pod(json!([{"name": "main", "image": "busybox", "args": ["x"]}]));
        let e = launch(&p, &container(&p)).unwrap_err();
        assert!(e.0.contains("\"main\" has no command"), "{}", e.0);
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]));
        let e = launch(&p, &container(&p)).unwrap_err();
        assert!(e.0.contains("secretKeyRef"), "{}", e.0);
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "env": [{"name": "S", "valueFrom": {"fieldRef": {"fieldPath": "metadata.generation"}}}]}]));
        let e = launch(&p, &container(&p)).unwrap_err();
        assert_eq!(e.0, "unsupported fieldPath: metadata.generation");
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "envFrom": [{"configMapRef": {"name": "c", "optional": true}}]}]));
        assert!(launch(&p, &container(&p)).is_ok());
    }
}
