//! A container's environment and its expanded command line, as kubelet builds them: `envFrom`
//! (ConfigMaps and Secrets) in order, then `env` entries in order, each value expanded against
//! the variables defined before it, values from the downward API (`fieldRef`,
//! `resourceFieldRef`) and from ConfigMap and Secret keys, then `$(VAR)` expansion of command
//! and args against the whole environment.
//!
//! Resolution is a pure function of the pod, the node's allocatable and the objects read for
//! the start (`launch`); only a container that refers to ConfigMaps or Secrets needs them read
//! through the API first (`needs_objects`, `fetch`).

use std::collections::{BTreeMap, HashMap};

use kbatch_api::k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, ResourceFieldSelector, Secret,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kbatch_api::quantity::{self, Exact};
use kube::api::Api;

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

/// An object a container's env refers to, as the API answered for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched<T> {
    Found(T),
    /// 404: an optional reference is then skipped.
    NotFound,
    /// Any other failure, as its message.
    Failed(String),
}

/// The ConfigMaps and Secrets read for one container start, by name (the pod's namespace).
/// A name that is absent counts as not found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objects {
    pub config_maps: HashMap<String, Fetched<ConfigMap>>,
    pub secrets: HashMap<String, Fetched<Secret>>,
}

impl Objects {
    pub(crate) fn config_map(&self, name: &str) -> Fetched<&ConfigMap> {
        fetched(self.config_maps.get(name))
    }

    pub(crate) fn secret(&self, name: &str) -> Fetched<&Secret> {
        fetched(self.secrets.get(name))
    }
}

fn fetched<T>(entry: Option<&Fetched<T>>) -> Fetched<&T> {
    match entry {
        Some(Fetched::Found(o)) => Fetched::Found(o),
        Some(Fetched::Failed(m)) => Fetched::Failed(m.clone()),
        Some(Fetched::NotFound) | None => Fetched::NotFound,
    }
}

/// The names of the ConfigMaps and of the Secrets `container`'s env reads, each once, in order
/// of first use. Only sources kubelet consults count: a `valueFrom` is read only when `value`
/// is empty.
pub fn references(container: &Container) -> (Vec<String>, Vec<String>) {
    let mut config_maps: Vec<String> = Vec::new();
    let mut secrets: Vec<String> = Vec::new();
    let add = |list: &mut Vec<String>, name: &str| {
        if !list.iter().any(|n| n == name) {
            list.push(name.to_string());
        }
    };
    for source in container.env_from.iter().flatten() {
        if let Some(r) = &source.config_map_ref {
            add(&mut config_maps, &r.name);
        } else if let Some(r) = &source.secret_ref {
            add(&mut secrets, &r.name);
        }
    }
    for var in container.env.iter().flatten() {
        if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
            continue;
        }
        let Some(from) = &var.value_from else {
            continue;
        };
        if from.field_ref.is_some() || from.resource_field_ref.is_some() {
            continue;
        }
        if let Some(r) = &from.config_map_key_ref {
            add(&mut config_maps, &r.name);
        } else if let Some(r) = &from.secret_key_ref {
            add(&mut secrets, &r.name);
        }
    }
    (config_maps, secrets)
}

/// Whether starting `container` needs ConfigMaps or Secrets from the API. Checked without
/// allocating: a pod with literal values and fieldRefs only never waits on the API.
pub fn needs_objects(container: &Container) -> bool {
    container.env_from.as_ref().is_some_and(|f| !f.is_empty())
        || container.env.iter().flatten().any(|var| {
            var.value.as_deref().is_none_or(str::is_empty)
                && var.value_from.as_ref().is_some_and(|from| {
                    from.field_ref.is_none()
                        && from.resource_field_ref.is_none()
                        && (from.config_map_key_ref.is_some() || from.secret_key_ref.is_some())
                })
        })
}

/// Read the objects `container`'s env refers to, through the API, in `namespace`.
pub async fn fetch(client: &kube::Client, namespace: &str, container: &Container) -> Objects {
    let (config_maps, secrets) = references(container);
    fetch_named(client, namespace, config_maps, secrets).await
}

/// Read the named ConfigMaps and Secrets through the API, in `namespace`.
pub async fn fetch_named(
    client: &kube::Client,
    namespace: &str,
    config_maps: Vec<String>,
    secrets: Vec<String>,
) -> Objects {
    let mut objects = Objects::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for name in config_maps {
        let got = answer(cm_api.get(&name).await);
        objects.config_maps.insert(name, got);
    }
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for name in secrets {
        let got = answer(secret_api.get(&name).await);
        objects.secrets.insert(name, got);
    }
    objects
}

fn answer<T>(result: Result<T, kube::Error>) -> Fetched<T> {
    match result {
        Ok(o) => Fetched::Found(o),
        Err(kube::Error::Api(s)) if s.code == 404 => Fetched::NotFound,
        Err(kube::Error::Api(s)) => Fetched::Failed(s.message),
        Err(e) => Fetched::Failed(e.to_string()),
    }
}

/// The error for a container that can't start because it has no command.
pub fn command_error(container: &Container) -> Option<ConfigError> {
    container
        .command
        .as_ref()
        .is_none_or(Vec::is_empty)
        .then(|| {
            ConfigError(format!(
                "container {:?} has no command: the process executor does not pull images, so \
                 it cannot use an image's entrypoint; set command (and args) to a program on \
                 this host",
                container.name
            ))
        })
}

/// kubelet's errors for a missing object: its object managers report NotFound for the
/// singular resource (`configmap "NAME" not found`, `secret "NAME" not found`).
fn not_found(resource: &str, name: &str) -> ConfigError {
    ConfigError(not_found_message(resource, name))
}

/// The API's NotFound for the singular resource, which kubelet's object managers pass on
/// (for env and volumes alike).
pub(crate) fn not_found_message(resource: &str, name: &str) -> String {
    format!("{resource} {} not found", kbatch_api::field::quote(name))
}

/// The environment and argv of `container`, or the configuration error that stops it, as
/// kubelet's `makeEnvironmentVariables` builds them: `envFrom` in order (later keys replace
/// earlier ones; keys are taken as they are, as kubelet does since relaxed env var names),
/// then `env` in order, each value expanded against everything defined before it.
/// `allocatable` is the node's (resourceFieldRef limits default to it); `objects` holds the
/// ConfigMaps and Secrets read for this start (see `fetch`).
pub fn launch(
    pod: &Pod,
    container: &Container,
    allocatable: &BTreeMap<String, Quantity>,
    objects: &Objects,
) -> Result<Launch, ConfigError> {
    if let Some(e) = command_error(container) {
        return Err(e);
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    // Variables a value may refer to: the container's own, defined so far (not the host's).
    let mut defined: Vec<(String, String)> = Vec::new();
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or("");
        if let Some(r) = &source.config_map_ref {
            match objects.config_map(&r.name) {
                Fetched::Found(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        set(&mut defined, &format!("{prefix}{k}"), v.clone());
                    }
                }
                Fetched::NotFound if r.optional == Some(true) => {}
                Fetched::NotFound => return Err(not_found("configmap", &r.name)),
                Fetched::Failed(m) => return Err(ConfigError(m)),
            }
        } else if let Some(r) = &source.secret_ref {
            match objects.secret(&r.name) {
                Fetched::Found(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        set(&mut defined, &format!("{prefix}{k}"), bytes_to_string(&v.0));
                    }
                }
                Fetched::NotFound if r.optional == Some(true) => {}
                Fetched::NotFound => return Err(not_found("secret", &r.name)),
                Fetched::Failed(m) => return Err(ConfigError(m)),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let literal = var.value.as_deref().unwrap_or("");
        let value = if !literal.is_empty() {
            expand(literal, lookup(&defined))
        } else if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                field_ref(pod, &f.field_path)?
            } else if let Some(r) = &from.resource_field_ref {
                resource_field_ref(pod, container, r, allocatable)?
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional == Some(true);
                match objects.config_map(&r.name) {
                    Fetched::Found(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => v.clone(),
                        // An optional key that is missing leaves the variable undefined.
                        None if optional => continue,
                        None => {
                            return Err(ConfigError(format!(
                                "couldn't find key {} in ConfigMap {namespace}/{}",
                                r.key, r.name
                            )));
                        }
                    },
                    Fetched::NotFound if optional => continue,
                    Fetched::NotFound => return Err(not_found("configmap", &r.name)),
                    Fetched::Failed(m) => return Err(ConfigError(m)),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let optional = r.optional == Some(true);
                match objects.secret(&r.name) {
                    Fetched::Found(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => bytes_to_string(&v.0),
                        None if optional => continue,
                        None => {
                            return Err(ConfigError(format!(
                                "couldn't find key {} in Secret {namespace}/{}",
                                r.key, r.name
                            )));
                        }
                    },
                    Fetched::NotFound if optional => continue,
                    Fetched::NotFound => return Err(not_found("secret", &r.name)),
                    Fetched::Failed(m) => return Err(ConfigError(m)),
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut defined, &var.name, value);
    }
    let command = container.command.iter().flatten();
    let argv = command
        .chain(container.args.iter().flatten())
        .map(|a| expand(a, lookup(&defined)))
        .collect();
    let mut env = base_env(pod);
    for (name, value) in defined {
        set(&mut env, &name, value);
    }
    Ok(Launch { argv, env })
}

/// Secret values are bytes; a process environment here is text, so bytes that are not UTF-8
/// are replaced (kubelet passes them through).
fn bytes_to_string(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---- resourceFieldRef ---------------------------------------------------------------------

/// kubelet's `defaultPodLimitsForDownwardAPI` and `containerResourceRuntimeValue`: the value of
/// a container's request or limit, a limit that is unset (or zero) being the pod-level limit
/// if there is one, else the node's allocatable; divided by `divisor` and rounded up.
pub fn resource_field_ref(
    pod: &Pod,
    container: &Container,
    selector: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<String, ConfigError> {
    let spec = pod.spec.as_ref();
    // The limits the container falls back to: node allocatable, with pod-level limits in
    // place of cpu and memory (the pod-level resources the downward API supports).
    let pod_limits = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.limits.as_ref());
    let fallback = |resource: &str| -> Option<&Quantity> {
        let node = allocatable.get(resource)?;
        let pod_level = matches!(resource, "cpu" | "memory")
            .then(|| pod_limits.and_then(|l| l.get(resource)))
            .flatten()
            .filter(|q| !is_zero(q));
        Some(pod_level.unwrap_or(node))
    };
    let (target, defaulted) = match selector.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => (container, true),
        Some(name) => {
            // Only regular containers get defaulted limits when named (kubelet defaults the
            // pod's containers, not its init containers).
            let regular = spec.and_then(|s| s.containers.iter().find(|c| c.name == name));
            let init = spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == name));
            match (regular, init) {
                (Some(c), _) => (c, true),
                (None, Some(c)) => (c, false),
                (None, None) => {
                    return Err(ConfigError(format!("container {name} not found")));
                }
            }
        }
    };
    let resources = target.resources.as_ref();
    let request = |name: &str| {
        resources
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get(name))
    };
    let limit = |name: &str| {
        let own = resources
            .and_then(|r| r.limits.as_ref())
            .and_then(|m| m.get(name));
        let merged = matches!(name, "cpu" | "memory" | "ephemeral-storage") && defaulted;
        match own {
            Some(q) if !(merged && is_zero(q)) => Some(q),
            _ if merged => fallback(name).or(own),
            _ => own,
        }
    };
    let divisor = match selector
        .divisor
        .as_ref()
        .map(|d| quantity::parse_exact(&d.0))
    {
        None => Exact::ONE,
        Some(Some(d)) if d.is_zero() => Exact::ONE,
        Some(Some(d)) => d,
        Some(None) => return Err(bad_quantity(selector.divisor.as_ref())),
    };
    let resource = selector.resource.as_str();
    let (quantity, cpu) = match resource {
        "limits.cpu" => (limit("cpu"), true),
        "requests.cpu" => (request("cpu"), true),
        "limits.memory" => (limit("memory"), false),
        "requests.memory" => (request("memory"), false),
        "limits.ephemeral-storage" => (limit("ephemeral-storage"), false),
        "requests.ephemeral-storage" => (request("ephemeral-storage"), false),
        _ => match resource
            .strip_prefix("requests.")
            .map(|n| (n, true))
            .or_else(|| resource.strip_prefix("limits.").map(|n| (n, false)))
        {
            Some((name, true)) if name.starts_with("hugepages-") => (request(name), false),
            Some((name, false)) if name.starts_with("hugepages-") => (limit(name), false),
            _ => {
                return Err(ConfigError(format!(
                    "unsupported container resource : {resource}"
                )));
            }
        },
    };
    let amount = match quantity {
        None => Exact::ZERO,
        Some(q) => quantity::parse_exact(&q.0).ok_or_else(|| bad_quantity(Some(q)))?,
    };
    // CPU in millicores, the rest in units; the quotient as a float rounded up, as upstream.
    let scale = if cpu { -3 } else { 0 };
    let (value, per) = (amount.scaled_ceil(scale), divisor.scaled_ceil(scale));
    if per == 0 {
        return Err(bad_quantity(selector.divisor.as_ref()));
    }
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let result = (value as f64 / per as f64).ceil() as i64;
    Ok(result.to_string())
}

fn bad_quantity(q: Option<&Quantity>) -> ConfigError {
    ConfigError(format!(
        "invalid quantity {:?}",
        q.map(|q| q.0.as_str()).unwrap_or("")
    ))
}

fn is_zero(q: &Quantity) -> bool {
    quantity::parse_exact(&q.0).is_some_and(|a| a.is_zero())
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

    fn run(p: &Pod) -> Result<Launch, ConfigError> {
        launch(p, &container(p), &BTreeMap::new(), &Objects::default())
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
        let l = run(&p).unwrap();
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
        let l = run(&p).unwrap();
        assert_eq!(get(&l, "A"), Some("2-1"));
        assert_eq!(get(&l, "PATH"), Some("/opt/bin"));
        assert_eq!(l.argv, vec!["/opt/bin", "2-1"]);
        assert_eq!(l.env.iter().filter(|(n, _)| n == "A").count(), 1);
    }

    #[test]
    fn config_errors_are_clear() {
        let p = pod(json!([{"name": "main", "image": "busybox", "args": ["x"]}]));
        let e = run(&p).unwrap_err();
        assert!(e.0.contains("\"main\" has no command"), "{}", e.0);
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]));
        let e = run(&p).unwrap_err();
        assert_eq!(e.0, "secret \"s\" not found");
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "env": [{"name": "S", "valueFrom": {"fieldRef": {"fieldPath": "metadata.generation"}}}]}]));
        let e = run(&p).unwrap_err();
        assert_eq!(e.0, "unsupported fieldPath: metadata.generation");
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "envFrom": [{"configMapRef": {"name": "c", "optional": true}}]}]));
        assert!(run(&p).is_ok());
    }

    // ---- kubelet's TestMakeEnvironmentVariables, the cases that apply ----------------------
    //
    // Skipped: every case about service links and service env vars (the executor injects
    // none: "if services aren't synced ...", "api server = Y, kubelet = Y",
    // "api server = N; kubelet = Y" and its "service env vars" twin, "master service in pod
    // ns" and its twin, "pod in master service ns" and its twin, "env expansion, service env
    // vars", "configmap, service env vars", "secret, service env vars",
    // "nil_enableServiceLinks"), and the pod IP cases ("downward api pod ips ..."): the
    // executor's pods share the host's single address. Where a case had service links off,
    // its expected KUBERNETES_* variables are dropped.

    fn cm(data: serde_json::Value) -> Fetched<ConfigMap> {
        Fetched::Found(serde_json::from_value(json!({"data": data})).unwrap())
    }

    /// `data` values are the plain bytes (encoded to base64 as the API carries them).
    fn secret(data: &[(&str, &[u8])]) -> Fetched<Secret> {
        use kbatch_api::k8s_openapi::ByteString;
        let data = data
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect();
        Fetched::Found(Secret {
            data: Some(data),
            ..Secret::default()
        })
    }

    struct Case {
        name: &'static str,
        ns: &'static str,
        container: serde_json::Value,
        config_map: Option<(&'static str, Fetched<ConfigMap>)>,
        secret: Option<(&'static str, Fetched<Secret>)>,
        want: Result<Vec<(&'static str, &'static str)>, &'static str>,
    }

    fn case(name: &'static str, ns: &'static str, container: serde_json::Value) -> Case {
        Case {
            name,
            ns,
            container,
            config_map: None,
            secret: None,
            want: Ok(vec![]),
        }
    }

    impl Case {
        fn config_map(mut self, name: &'static str, got: Fetched<ConfigMap>) -> Case {
            self.config_map = Some((name, got));
            self
        }
        fn secret(mut self, name: &'static str, got: Fetched<Secret>) -> Case {
            self.secret = Some((name, got));
            self
        }
        fn want(mut self, vars: &[(&'static str, &'static str)]) -> Case {
            self.want = Ok(vars.to_vec());
            self
        }
        fn fails(mut self, message: &'static str) -> Case {
            self.want = Err(message);
            self
        }
    }

    /// The container's own variables (the host's PATH, HOME and HOSTNAME left out), sorted as
    /// upstream's test sorts them.
    fn own_vars(l: &Launch) -> Vec<(String, String)> {
        let mut vars: Vec<(String, String)> = l
            .env
            .iter()
            .filter(|(n, _)| !matches!(n.as_str(), "PATH" | "HOME" | "HOSTNAME"))
            .cloned()
            .collect();
        vars.sort();
        vars
    }

    fn check(cases: Vec<Case>) {
        for c in cases {
            let mut container = c.container;
            container["name"] = json!("main");
            container["command"] = json!(["true"]);
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": "dapi-test-pod-name", "namespace": c.ns},
                "spec": {"serviceAccountName": "special", "nodeName": "node-name",
                    "containers": [container]}
            }))
            .unwrap();
            let mut objects = Objects::default();
            if let Some((name, got)) = c.config_map {
                objects.config_maps.insert(name.to_string(), got);
            }
            if let Some((name, got)) = c.secret {
                objects.secrets.insert(name.to_string(), got);
            }
            let got = launch(&p, &container_of(&p), &BTreeMap::new(), &objects);
            match (got, c.want) {
                (Ok(l), Ok(want)) => {
                    let mut want: Vec<(String, String)> = want
                        .iter()
                        .map(|(n, v)| (n.to_string(), v.to_string()))
                        .collect();
                    want.sort();
                    assert_eq!(own_vars(&l), want, "{}", c.name);
                }
                (Err(e), Err(want)) => assert_eq!(e.0, want, "{}", c.name),
                (got, want) => panic!("{}: got {got:?}, want {want:?}", c.name),
            }
        }
    }

    fn container_of(p: &Pod) -> Container {
        container(p)
    }

    fn env_from_both(kind: &str, prefix: &str) -> serde_json::Value {
        json!({
            "envFrom": [
                {kind: {"name": "test-obj"}},
                {"prefix": prefix, kind: {"name": "test-obj"}},
            ],
            "env": [
                {"name": "TEST_LITERAL", "value": "test-test-test"},
                {"name": "EXPANSION_TEST", "value": "$(REPLACE_ME)"},
                {"name": "DUPE_TEST", "value": "ENV_VAR"},
            ]
        })
    }

    #[test]
    fn upstream_make_environment_variables_cases() {
        check(vec![
            case(
                "api server = Y, kubelet = N",
                "test1",
                json!({"env": [
                    {"name": "FOO", "value": "BAR"},
                    {"name": "TEST_SERVICE_HOST", "value": "1.2.3.3"},
                    {"name": "TEST_PORT", "value": "tcp://1.2.3.3:8083"},
                ]}),
            )
            .want(&[
                ("FOO", "BAR"),
                ("TEST_SERVICE_HOST", "1.2.3.3"),
                ("TEST_PORT", "tcp://1.2.3.3:8083"),
            ]),
            case(
                "downward api pod (names)",
                "downward-api",
                json!({"env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                    {"name": "POD_NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
                    {"name": "POD_SERVICE_ACCOUNT_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.serviceAccountName"}}},
                ]}),
            )
            .want(&[
                ("POD_NAME", "dapi-test-pod-name"),
                ("POD_NAMESPACE", "downward-api"),
                ("POD_NODE_NAME", "node-name"),
                ("POD_SERVICE_ACCOUNT_NAME", "special"),
            ]),
            case(
                "env expansion",
                "test1",
                json!({"env": [
                    {"name": "TEST_LITERAL", "value": "test-test-test"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "OUT_OF_ORDER_TEST", "value": "$(OUT_OF_ORDER_TARGET)"},
                    {"name": "OUT_OF_ORDER_TARGET", "value": "FOO"},
                    {"name": "EMPTY_VAR"},
                    {"name": "EMPTY_TEST", "value": "foo-$(EMPTY_VAR)"},
                    {"name": "POD_NAME_TEST2", "value": "test2-$(POD_NAME)"},
                    {"name": "POD_NAME_TEST3", "value": "$(POD_NAME_TEST2)-3"},
                    {"name": "LITERAL_TEST", "value": "literal-$(TEST_LITERAL)"},
                    {"name": "TEST_UNDEFINED", "value": "$(UNDEFINED_VAR)"},
                ]}),
            )
            .want(&[
                ("TEST_LITERAL", "test-test-test"),
                ("POD_NAME", "dapi-test-pod-name"),
                ("POD_NAME_TEST2", "test2-dapi-test-pod-name"),
                ("POD_NAME_TEST3", "test2-dapi-test-pod-name-3"),
                ("LITERAL_TEST", "literal-test-test-test"),
                ("OUT_OF_ORDER_TEST", "$(OUT_OF_ORDER_TARGET)"),
                ("OUT_OF_ORDER_TARGET", "FOO"),
                ("TEST_UNDEFINED", "$(UNDEFINED_VAR)"),
                ("EMPTY_VAR", ""),
                ("EMPTY_TEST", "foo-"),
            ]),
            case(
                "configmapkeyref_missing_optional",
                "test",
                json!({"env": [{"name": "POD_NAME", "valueFrom": {"configMapKeyRef":
                    {"name": "missing-config-map", "key": "key", "optional": true}}}]}),
            ),
            case(
                "configmapkeyref_missing_key_optional",
                "test",
                json!({"env": [{"name": "POD_NAME", "valueFrom": {"configMapKeyRef":
                    {"name": "test-config-map", "key": "key", "optional": true}}}]}),
            )
            .config_map("test-config-map", cm(json!({"a": "b"}))),
            case(
                "secretkeyref_missing_optional",
                "test",
                json!({"env": [{"name": "POD_NAME", "valueFrom": {"secretKeyRef":
                    {"name": "missing-secret", "key": "key", "optional": true}}}]}),
            ),
            case(
                "secretkeyref_missing_key_optional",
                "test",
                json!({"env": [{"name": "POD_NAME", "valueFrom": {"secretKeyRef":
                    {"name": "test-secret", "key": "key", "optional": true}}}]}),
            )
            .secret("test-secret", secret(&[("a", b"b")])),
            case("configmap", "test1", env_from_both("configMapRef", "p_"))
                .config_map(
                    "test-obj",
                    cm(json!({"REPLACE_ME": "FROM_CONFIG_MAP", "DUPE_TEST": "CONFIG_MAP"})),
                )
                .want(&[
                    ("TEST_LITERAL", "test-test-test"),
                    ("REPLACE_ME", "FROM_CONFIG_MAP"),
                    ("EXPANSION_TEST", "FROM_CONFIG_MAP"),
                    ("DUPE_TEST", "ENV_VAR"),
                    ("p_REPLACE_ME", "FROM_CONFIG_MAP"),
                    ("p_DUPE_TEST", "CONFIG_MAP"),
                ]),
            case(
                "configmap allow prefix to start with a digital",
                "test1",
                env_from_both("configMapRef", "1_"),
            )
            .config_map(
                "test-obj",
                cm(json!({"REPLACE_ME": "FROM_CONFIG_MAP", "DUPE_TEST": "CONFIG_MAP"})),
            )
            .want(&[
                ("TEST_LITERAL", "test-test-test"),
                ("REPLACE_ME", "FROM_CONFIG_MAP"),
                ("EXPANSION_TEST", "FROM_CONFIG_MAP"),
                ("DUPE_TEST", "ENV_VAR"),
                ("1_REPLACE_ME", "FROM_CONFIG_MAP"),
                ("1_DUPE_TEST", "CONFIG_MAP"),
            ]),
            case(
                "configmap_missing",
                "test1",
                json!({"envFrom": [{"configMapRef": {"name": "test-config-map"}}]}),
            )
            .fails("configmap \"test-config-map\" not found"),
            case(
                "configmap_missing_optional",
                "test",
                json!({"envFrom": [{"configMapRef": {"name": "missing-config-map", "optional": true}}]}),
            ),
            case(
                "configmap_invalid_keys_valid",
                "test",
                json!({"envFrom": [{"prefix": "p_", "configMapRef": {"name": "test-config-map"}}]}),
            )
            .config_map("test-config-map", cm(json!({"1234": "abc"})))
            .want(&[("p_1234", "abc")]),
            case("secret", "test1", env_from_both("secretRef", "p_"))
                .secret(
                    "test-obj",
                    secret(&[("REPLACE_ME", b"FROM_SECRET"), ("DUPE_TEST", b"SECRET")]),
                )
                .want(&[
                    ("TEST_LITERAL", "test-test-test"),
                    ("REPLACE_ME", "FROM_SECRET"),
                    ("EXPANSION_TEST", "FROM_SECRET"),
                    ("DUPE_TEST", "ENV_VAR"),
                    ("p_REPLACE_ME", "FROM_SECRET"),
                    ("p_DUPE_TEST", "SECRET"),
                ]),
            case(
                "secret_missing",
                "test1",
                json!({"envFrom": [{"secretRef": {"name": "test-secret"}}]}),
            )
            .fails("secret \"test-secret\" not found"),
            case(
                "secret_missing_optional",
                "test",
                json!({"envFrom": [{"secretRef": {"name": "missing-secret", "optional": true}}]}),
            ),
            case(
                "secret_invalid_keys_valid",
                "test",
                json!({"envFrom": [{"prefix": "p_", "secretRef": {"name": "test-secret"}}]}),
            )
            .secret("test-secret", secret(&[("1234.name", b"abc")]))
            .want(&[("p_1234.name", "abc")]),
        ]);
    }

    #[test]
    fn key_refs_errors_and_order() {
        check(vec![
            case(
                "configMapKeyRef and secretKeyRef values, expanded by later values",
                "ns1",
                json!({"env": [
                    {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "DSN", "value": "db?level=$(LEVEL)&pw=$(PASSWORD)"},
                ]}),
            )
            .config_map("cfg", cm(json!({"level": "debug"})))
            .secret("creds", secret(&[("password", b"s3cr\xc3\xa9t")]))
            .want(&[
                ("LEVEL", "debug"),
                ("PASSWORD", "s3cr\u{e9}t"),
                ("DSN", "db?level=debug&pw=s3cr\u{e9}t"),
            ]),
            case(
                "a missing ConfigMap key",
                "ns1",
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope"}}}]}),
            )
            .config_map("cfg", cm(json!({"level": "debug"})))
            .fails("couldn't find key nope in ConfigMap ns1/cfg"),
            case(
                "a missing Secret key",
                "ns1",
                json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}]}),
            )
            .secret("creds", secret(&[("password", b"x")]))
            .fails("couldn't find key nope in Secret ns1/creds"),
            case(
                "a ConfigMap with no data has no keys",
                "ns1",
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
            )
            .config_map(
                "cfg",
                Fetched::Found(ConfigMap::default()),
            )
            .fails("couldn't find key k in ConfigMap ns1/cfg"),
            case(
                "a missing ConfigMap named by configMapKeyRef",
                "ns1",
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
            )
            .fails("configmap \"cfg\" not found"),
            case(
                "an API failure is not skipped, even for an optional object",
                "ns1",
                json!({"envFrom": [{"configMapRef": {"name": "cfg", "optional": true}}]}),
            )
            .config_map("cfg", Fetched::Failed("the server is on fire".into()))
            .fails("the server is on fire"),
            case(
                "the first failing source in order is the error",
                "ns1",
                json!({
                    "envFrom": [{"secretRef": {"name": "first"}}],
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "second", "key": "k"}}}]
                }),
            )
            .fails("secret \"first\" not found"),
            case(
                "env replaces envFrom; a later envFrom replaces an earlier one; optional keys \
                 that are missing leave earlier values",
                "ns1",
                json!({
                    "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "creds"}}],
                    "env": [
                        {"name": "B", "value": "env-$(A)-$(B)"},
                        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": true}}},
                    ]
                }),
            )
            .config_map("cfg", cm(json!({"A": "cm-a", "B": "cm-b", "C": "cm-c"})))
            .secret("creds", secret(&[("A", b"secret-a")]))
            .want(&[("A", "secret-a"), ("B", "env-secret-a-cm-b"), ("C", "cm-c")]),
        ]);
    }

    #[test]
    fn argv_expands_against_env_from_too() {
        let p = pod(json!([{"name": "main", "image": "x",
            "command": ["echo", "$(GREETING)", "$(p_GREETING)"],
            "envFrom": [{"configMapRef": {"name": "c"}}, {"prefix": "p_", "configMapRef": {"name": "c"}}]}]));
        let mut objects = Objects::default();
        objects
            .config_maps
            .insert("c".into(), cm(json!({"GREETING": "hi"})));
        let l = launch(&p, &container(&p), &BTreeMap::new(), &objects).unwrap();
        assert_eq!(l.argv, vec!["echo", "hi", "hi"]);
    }

    #[test]
    fn references_and_needs_objects() {
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
        "envFrom": [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "s"}},
                    {"configMapRef": {"name": "a"}}],
        "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "b", "key": "k"}}},
            {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "Z", "value": "lit", "valueFrom": {"secretKeyRef": {"name": "unused", "key": "k"}}},
        ]}]));
        let c = container(&p);
        assert!(needs_objects(&c));
        assert_eq!(
            references(&c),
            (
                vec!["a".to_string(), "b".to_string()],
                vec!["s".to_string()]
            )
        );
        let p = pod(json!([{"name": "main", "image": "x", "command": ["true"],
            "env": [{"name": "A", "value": "1"},
                    {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "L", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}]));
        assert!(!needs_objects(&container(&p)));
        assert_eq!(references(&container(&p)), (vec![], vec![]));
    }

    // ---- resourceFieldRef ----------------------------------------------------------------

    fn resources_pod(pod_limits: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "resources": pod_limits,
                "initContainers": [{"name": "init", "image": "x"}],
                "containers": [
                    {"name": "main", "image": "x", "resources": {
                        "requests": {"cpu": "250m", "memory": "64Mi", "hugepages-2Mi": "4Mi",
                                     "ephemeral-storage": "1G"},
                        "limits": {"cpu": "500m", "memory": "0"}}},
                    {"name": "side", "image": "x", "resources": {"limits": {"memory": "1Gi"}}},
                ]
            }
        }))
        .unwrap()
    }

    #[test]
    fn resource_field_refs_as_kubelet_computes_them() {
        let node: BTreeMap<String, Quantity> = [("cpu", "2"), ("memory", "16Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect();
        // Pod-level resources, resource, divisor, container name, value or error.
        type Case<'a> = (
            serde_json::Value,
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Result<&'a str, &'a str>,
        );
        let cases: &[Case] = &[
            (json!(null), "limits.cpu", None, None, Ok("1")),
            (json!(null), "limits.cpu", Some("1m"), None, Ok("500")),
            (json!(null), "requests.cpu", Some("1m"), None, Ok("250")),
            (json!(null), "requests.cpu", None, None, Ok("1")),
            (json!(null), "requests.memory", None, None, Ok("67108864")),
            (json!(null), "requests.memory", Some("1Mi"), None, Ok("64")),
            (json!(null), "requests.memory", Some("1M"), None, Ok("68")),
            // A zero limit is defaulted like an unset one: to the node's allocatable.
            (json!(null), "limits.memory", Some("1Gi"), None, Ok("16")),
            (
                json!(null),
                "requests.ephemeral-storage",
                Some("1Mi"),
                None,
                Ok("954"),
            ),
            // Not in the node's allocatable: nothing to default to.
            (json!(null), "limits.ephemeral-storage", None, None, Ok("0")),
            (
                json!(null),
                "requests.hugepages-2Mi",
                None,
                None,
                Ok("4194304"),
            ),
            (json!(null), "limits.hugepages-2Mi", None, None, Ok("0")),
            // A divisor of zero means one.
            (json!(null), "limits.cpu", Some("0"), None, Ok("1")),
            // Another container, by name: its limits, defaulted the same way.
            (
                json!(null),
                "limits.memory",
                Some("1Mi"),
                Some("side"),
                Ok("1024"),
            ),
            (
                json!(null),
                "limits.cpu",
                Some("1m"),
                Some("side"),
                Ok("2000"),
            ),
            // Init containers named are not defaulted.
            (json!(null), "limits.cpu", Some("1m"), Some("init"), Ok("0")),
            // Pod-level limits come before the node's allocatable.
            (
                json!({"limits": {"cpu": "1500m", "memory": "2Gi"}}),
                "limits.cpu",
                Some("1m"),
                Some("side"),
                Ok("1500"),
            ),
            (
                json!({"limits": {"cpu": "1500m", "memory": "2Gi"}}),
                "limits.cpu",
                None,
                Some("side"),
                Ok("2"),
            ),
            (
                json!({"limits": {"cpu": "1500m", "memory": "2Gi"}}),
                "limits.memory",
                Some("1Mi"),
                None,
                Ok("2048"),
            ),
            (
                json!({"limits": {"cpu": "1500m"}}),
                "limits.cpu",
                Some("1m"),
                None,
                Ok("500"),
            ),
            (
                json!(null),
                "limits.gpu",
                None,
                None,
                Err("unsupported container resource : limits.gpu"),
            ),
            (
                json!(null),
                "limits.cpu",
                None,
                Some("nope"),
                Err("container nope not found"),
            ),
        ];
        for (pod_limits, resource, divisor, name, want) in cases {
            let p = resources_pod(pod_limits.clone());
            let c = container(&p);
            let selector = ResourceFieldSelector {
                resource: resource.to_string(),
                divisor: divisor.map(|d| Quantity(d.to_string())),
                container_name: name.map(str::to_string),
            };
            let got = resource_field_ref(&p, &c, &selector, &node);
            let got = got.as_ref().map(String::as_str).map_err(|e| e.0.as_str());
            let what = format!("{resource} / {divisor:?} / {name:?} / {pod_limits}");
            assert_eq!(got, *want, "{what}");
        }
        // Through env, as a container sees it.
        let p = resources_pod(json!(null));
        let mut c = container(&p);
        c.command = Some(vec!["true".into()]);
        c.env = Some(vec![
            serde_json::from_value(json!({"name": "MEM_MI",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}))
            .unwrap(),
        ]);
        let l = launch(&p, &c, &node, &Objects::default()).unwrap();
        assert_eq!(get(&l, "MEM_MI"), Some("16384"));
    }
}
