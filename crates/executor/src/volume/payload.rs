//! The files an API-backed volume holds, as kubelet's volume plugins compute them before the
//! atomic writer puts them on disk: `configMap` and `secret` (`MakePayload`), `downwardAPI`
//! (`CollectData`) and `projected` (`collectData`). Pure functions of the pod, the objects read
//! for it and the node's allocatable.
//!
//! Errors are kubelet's texts as they follow `MountVolume.SetUp failed for volume "NAME" : ` in
//! its FailedMount event; a downwardAPI or projected volume reports all its failures at once,
//! as an aggregate (`[first, second]`).

use std::collections::BTreeMap;

use kbatch_api::field::quote;
use kbatch_api::k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, ResourceFieldSelector, Secret,
    Volume, VolumeProjection,
};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kbatch_api::names::qualified_name;

use super::atomic::clean_path;
use crate::env::{self, Fetched, Objects};

/// One file of a volume: its bytes and its mode bits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A volume's files by path relative to the volume's directory.
pub type Payload = BTreeMap<String, FileProjection>;

/// The mode of files whose volume sets no `defaultMode` (API defaulting sets 420 = 0644).
const DEFAULT_MODE: i32 = 0o644;

/// The names of the ConfigMaps and of the Secrets the pod's volumes read, each once, in order
/// of first use (kubelet sets up every volume in `spec.volumes`, mounted or not).
pub fn references(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let mut config_maps: Vec<String> = Vec::new();
    let mut secrets: Vec<String> = Vec::new();
    let add = |list: &mut Vec<String>, name: &str| {
        if !list.iter().any(|n| n == name) {
            list.push(name.to_string());
        }
    };
    let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
    for volume in volumes {
        if let Some(source) = &volume.config_map {
            add(&mut config_maps, &source.name);
        }
        if let Some(name) = volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
        {
            add(&mut secrets, name);
        }
        let sources = volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten());
        for source in sources {
            if let Some(c) = &source.config_map {
                add(&mut config_maps, &c.name);
            }
            if let Some(s) = &source.secret {
                add(&mut secrets, &s.name);
            }
        }
    }
    (config_maps, secrets)
}

/// The files kubelet would write for `volume`, `None` for a volume that is not a configMap,
/// secret, downwardAPI or projected one. `objects` holds the ConfigMaps and Secrets read for
/// the pod (see `references`); `allocatable` is the node's, for `resourceFieldRef` limits.
pub fn payload(
    pod: &Pod,
    volume: &Volume,
    objects: &Objects,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<Option<Payload>, String> {
    let files = if let Some(source) = &volume.config_map {
        let optional = source.optional == Some(true);
        let items = source.items.as_deref();
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        config_map_files(objects, &source.name, items, mode, optional)
    } else if let Some(source) = &volume.secret {
        let optional = source.optional == Some(true);
        let name = source.secret_name.as_deref().unwrap_or("");
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        secret_files(objects, name, source.items.as_deref(), mode, optional)
    } else if let Some(source) = &volume.downward_api {
        let items = source.items.as_deref().unwrap_or(&[]);
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        downward_api_files(pod, items, mode, allocatable).map_err(|e| aggregate(&e))
    } else if let Some(source) = &volume.projected {
        let sources = source.sources.as_deref().unwrap_or(&[]);
        let mode = source.default_mode.unwrap_or(DEFAULT_MODE);
        projected_files(pod, sources, mode, objects, allocatable).map_err(|e| aggregate(&e))
    } else {
        return Ok(None);
    };
    files.map(Some)
}

// ---- configMap and secret -----------------------------------------------------------------

/// A configMap volume or projection: the object (an optional one that does not exist counts
/// as empty), then `configmap.MakePayload`.
fn config_map_files(
    objects: &Objects,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let empty = ConfigMap::default();
    let config_map = match objects.config_map(name) {
        Fetched::Found(c) => c,
        Fetched::NotFound if optional => &empty,
        Fetched::NotFound => return Err(env::not_found_message("configmap", name)),
        Fetched::Failed(message) => return Err(message),
    };
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        return Ok(all_config_map_keys(config_map, default_mode));
    };
    let value = |key: &str| {
        let text = config_map.data.as_ref().and_then(|d| d.get(key));
        let binary = config_map.binary_data.as_ref().and_then(|d| d.get(key));
        text.map(|t| t.as_bytes().to_vec())
            .or_else(|| binary.map(|b| b.0.clone()))
    };
    mapped_keys(items, default_mode, optional, value)
        .map_err(|key| format!("configmap references non-existent config key: {key}"))
}

/// Without items every key is a file named after it, `data` then `binaryData`.
fn all_config_map_keys(config_map: &ConfigMap, default_mode: i32) -> Payload {
    let text = config_map.data.iter().flatten();
    let text = text.map(|(k, v)| (k.clone(), file(v.as_bytes().to_vec(), default_mode)));
    let binary = config_map.binary_data.iter().flatten();
    let binary = binary.map(|(k, v)| (k.clone(), file(v.0.clone(), default_mode)));
    text.chain(binary).collect()
}

/// A secret volume or projection: the object, then `secret.MakePayload` (only `data`:
/// `stringData` is never stored).
fn secret_files(
    objects: &Objects,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let empty = Secret::default();
    let secret = match objects.secret(name) {
        Fetched::Found(s) => s,
        Fetched::NotFound if optional => &empty,
        Fetched::NotFound => return Err(env::not_found_message("secret", name)),
        Fetched::Failed(message) => return Err(message),
    };
    let data = secret.data.iter().flatten();
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        let all = data.map(|(k, v)| (k.clone(), file(v.0.clone(), default_mode)));
        return Ok(all.collect());
    };
    let value = |key: &str| secret.data.as_ref()?.get(key).map(|v| v.0.clone());
    mapped_keys(items, default_mode, optional, value)
        .map_err(|key| format!("references non-existent secret key: {key}"))
}

/// The `items` of a configMap or secret: each key at its path, with its own mode or the
/// default; a missing key is skipped when the source is optional, else it is the error.
fn mapped_keys(
    items: &[KeyToPath],
    default_mode: i32,
    optional: bool,
    value: impl Fn(&str) -> Option<Vec<u8>>,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    for item in items {
        let Some(data) = value(&item.key) else {
            if optional {
                continue;
            }
            return Err(item.key.clone());
        };
        let mode = item.mode.unwrap_or(default_mode);
        payload.insert(item.path.clone(), file(data, mode));
    }
    Ok(payload)
}

fn file(data: Vec<u8>, mode: i32) -> FileProjection {
    // Go converts the API's int32 to a FileMode (uint32) bit for bit.
    FileProjection {
        data,
        mode: mode as u32,
    }
}

// ---- downwardAPI --------------------------------------------------------------------------

/// `downwardapi.CollectData`: every item at its cleaned path, failures collected (an item that
/// fails is still listed, empty, but the volume is not set up).
fn downward_api_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<Payload, Vec<String>> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = item_value(pod, item, allocatable).unwrap_or_else(|e| {
            errors.push(e);
            String::new()
        });
        let mode = item.mode.unwrap_or(default_mode);
        payload.insert(clean_path(&item.path), file(value.into_bytes(), mode));
    }
    if errors.is_empty() {
        Ok(payload)
    } else {
        Err(errors)
    }
}

fn item_value(
    pod: &Pod,
    item: &DownwardAPIVolumeFile,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<String, String> {
    if let Some(field) = &item.field_ref {
        field_value(pod, &field.field_path)
    } else if let Some(selector) = &item.resource_field_ref {
        resource_value(pod, selector, allocatable)
    } else {
        Ok(String::new())
    }
}

/// `fieldpath.ExtractFieldPathAsString`: in volumes only the pod's metadata (`spec.*` and
/// `status.*` are env-only); labels and annotations without a subscript are the whole map.
fn field_value(pod: &Pod, path: &str) -> Result<String, String> {
    if let Some((base, key)) = split_subscript(path) {
        return subscripted_value(pod, path, base, key);
    }
    let meta = &pod.metadata;
    match path {
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" | "metadata.namespace" | "metadata.uid" => {
            env::field_ref(pod, path).map_err(|e| e.0)
        }
        _ => Err(format!("unsupported fieldPath: {path}")),
    }
}

/// One label or annotation; the key must be a qualified name (annotations lower-cased first).
fn subscripted_value(pod: &Pod, path: &str, base: &str, key: &str) -> Result<String, String> {
    let problems = match base {
        "metadata.annotations" => qualified_name(&key.to_lowercase()),
        "metadata.labels" => qualified_name(key),
        _ => {
            return Err(format!(
                "fieldPath {} does not support subscript",
                quote(path)
            ));
        }
    };
    if !problems.is_empty() {
        let problems = problems.join(";");
        return Err(format!("invalid key subscript in {path}: {problems}"));
    }
    env::field_ref(pod, path).map_err(|e| e.0)
}

/// `fieldpath.SplitMaybeSubscriptedPath`: `base['key']` into base and key.
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let (base, key) = path.strip_suffix("']")?.split_once("['")?;
    (!base.is_empty()).then_some((base, key))
}

/// `fieldpath.FormatMap`: a `key="value"` line per entry (the value quoted as Go's `%q`), keys
/// sorted, no trailing newline.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    let lines: Vec<String> = map
        .into_iter()
        .flatten()
        .map(|(key, value)| format!("{key}={}", quote(value)))
        .collect();
    lines.join("\n")
}

/// `ExtractResourceValueByContainerNameAndNodeAllocatable`: the named container (regular, else
/// init), its unset limits defaulted to the node's allocatable alone (the volume plugin's host
/// gives no pod-level limits, and init containers are defaulted too).
fn resource_value(
    pod: &Pod,
    selector: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<String, String> {
    let name = selector.container_name.as_deref().unwrap_or("");
    let container =
        find_container(pod, name).ok_or_else(|| format!("container {name} not found"))?;
    let own = ResourceFieldSelector {
        container_name: None,
        ..selector.clone()
    };
    // A pod without a spec: `container` itself, defaulted from `allocatable` only.
    env::resource_field_ref(&Pod::default(), container, &own, allocatable).map_err(|e| e.0)
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    let init = spec.init_containers.iter().flatten();
    spec.containers.iter().chain(init).find(|c| c.name == name)
}

// ---- projected ----------------------------------------------------------------------------

/// `projected.collectData`: the sources in order, each with the volume's default mode; a later
/// source's file replaces an earlier one at the same path; failures collected.
fn projected_files(
    pod: &Pod,
    sources: &[VolumeProjection],
    default_mode: i32,
    objects: &Objects,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<Payload, Vec<String>> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for source in sources {
        match source_files(pod, source, default_mode, objects, allocatable) {
            Ok(files) => payload.extend(files),
            Err(mut failed) => errors.append(&mut failed),
        }
    }
    if errors.is_empty() {
        Ok(payload)
    } else {
        Err(errors)
    }
}

fn source_files(
    pod: &Pod,
    source: &VolumeProjection,
    default_mode: i32,
    objects: &Objects,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<Payload, Vec<String>> {
    if let Some(s) = &source.secret {
        let optional = s.optional == Some(true);
        secret_files(objects, &s.name, s.items.as_deref(), default_mode, optional)
            .map_err(|e| vec![e])
    } else if let Some(c) = &source.config_map {
        let optional = c.optional == Some(true);
        config_map_files(objects, &c.name, c.items.as_deref(), default_mode, optional)
            .map_err(|e| vec![e])
    } else if let Some(d) = &source.downward_api {
        let items = d.items.as_deref().unwrap_or(&[]);
        downward_api_files(pod, items, default_mode, allocatable)
    } else if source.service_account_token.is_some() {
        Err(vec![unsupported("serviceAccountToken")])
    } else if source.cluster_trust_bundle.is_some() {
        Err(vec![unsupported("clusterTrustBundle")])
    } else if source.pod_certificate.is_some() {
        Err(vec![unsupported("podCertificate")])
    } else {
        Ok(Payload::new())
    }
}

/// kbatch's executor issues no tokens or certificates and reads no ClusterTrustBundles.
fn unsupported(kind: &str) -> String {
    format!("projected volume source {kind} is not supported by kbatch's executor")
}

/// `utilerrors.NewAggregate(errors).Error()`: one message as it is; several deduplicated,
/// joined by ", " in brackets.
fn aggregate(errors: &[String]) -> String {
    let mut unique: Vec<&str> = Vec::new();
    for e in errors {
        if !unique.contains(&e.as_str()) {
            unique.push(e);
        }
    }
    match unique.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_api::k8s_openapi::ByteString;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "podName", "namespace": "ns", "uid": "u-1",
                "labels": {"key1": "value1", "key2": "value2"},
                "annotations": {"a1": "value1", "a2": "value2"}},
            "spec": {"nodeName": "kbatch-node",
                "initContainers": [{"name": "init", "image": "x",
                    "resources": {"requests": {"cpu": "100m"}}}],
                "containers": [
                    {"name": "main", "image": "x", "resources": {
                        "requests": {"cpu": "250m", "memory": "64Mi"},
                        "limits": {"cpu": "500m"}}},
                    {"name": "side", "image": "x"}]}
        }))
        .unwrap()
    }

    fn volume(source: serde_json::Value) -> Volume {
        let mut v = json!({"name": "vol"});
        v.as_object_mut()
            .unwrap()
            .extend(source.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    fn node() -> BTreeMap<String, Quantity> {
        [
            ("cpu", "2"),
            ("memory", "16Gi"),
            ("ephemeral-storage", "100Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
    }

    fn config_map(data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> Fetched<ConfigMap> {
        Fetched::Found(ConfigMap {
            data: (!data.is_empty()).then(|| {
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            binary_data: (!binary.is_empty()).then(|| {
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect()
            }),
            ..Default::default()
        })
    }

    fn secret(data: &[(&str, &[u8])]) -> Fetched<Secret> {
        Fetched::Found(Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        })
    }

    fn files(list: &[(&str, &str, u32)]) -> Payload {
        list.iter()
            .map(|(path, data, mode)| {
                let f = FileProjection {
                    data: data.as_bytes().to_vec(),
                    mode: *mode,
                };
                (path.to_string(), f)
            })
            .collect()
    }

    fn run(v: &Volume, objects: &Objects) -> Result<Option<Payload>, String> {
        payload(&pod(), v, objects, &node())
    }

    /// One of upstream's MakePayload cases: items, default mode, optional, and the expected
    /// files or error.
    struct KeyCase {
        name: &'static str,
        items: serde_json::Value,
        mode: i32,
        optional: bool,
        want: Result<Payload, &'static str>,
    }

    fn key_cases(missing: &'static str) -> Vec<KeyCase> {
        let case = |name, items, mode, optional, want| KeyCase {
            name,
            items,
            mode,
            optional,
            want,
        };
        vec![
            case(
                "no overrides",
                json!(null),
                0o644,
                false,
                Ok(files(&[("foo", "foo", 0o644), ("bar", "bar", 0o644)])),
            ),
            case(
                "basic 1",
                json!([{"key": "foo", "path": "path/to/foo.txt"}]),
                0o644,
                false,
                Ok(files(&[("path/to/foo.txt", "foo", 0o644)])),
            ),
            case(
                "subdirs",
                json!([{"key": "foo", "path": "path/to/1/2/3/foo.txt"}]),
                0o644,
                false,
                Ok(files(&[("path/to/1/2/3/foo.txt", "foo", 0o644)])),
            ),
            case(
                "subdirs 3",
                json!([{"key": "foo", "path": "path/to/1/2/3/foo.txt"},
                       {"key": "bar", "path": "another/path/to/the/esteemed/bar.bin"}]),
                0o644,
                false,
                Ok(files(&[
                    ("path/to/1/2/3/foo.txt", "foo", 0o644),
                    ("another/path/to/the/esteemed/bar.bin", "bar", 0o644),
                ])),
            ),
            case(
                "non existent key",
                json!([{"key": "zab", "path": "path/to/foo.txt"}]),
                0o644,
                false,
                Err(missing),
            ),
            case(
                "mapping with Mode",
                json!([{"key": "foo", "path": "foo.txt", "mode": 0o400},
                       {"key": "bar", "path": "bar.bin", "mode": 0o400}]),
                0o644,
                false,
                Ok(files(&[
                    ("foo.txt", "foo", 0o400),
                    ("bar.bin", "bar", 0o400),
                ])),
            ),
            case(
                "mapping with defaultMode",
                json!([{"key": "foo", "path": "foo.txt"}, {"key": "bar", "path": "bar.bin"}]),
                0o600,
                false,
                Ok(files(&[
                    ("foo.txt", "foo", 0o600),
                    ("bar.bin", "bar", 0o600),
                ])),
            ),
            case(
                "optional non existent key",
                json!([{"key": "zab", "path": "path/to/foo.txt"}]),
                0o644,
                true,
                Ok(Payload::new()),
            ),
            case(
                "optional: present keys still projected",
                json!([{"key": "zab", "path": "z"}, {"key": "foo", "path": "f"}]),
                0o644,
                true,
                Ok(files(&[("f", "foo", 0o644)])),
            ),
            case(
                "empty items are no items",
                json!([]),
                0o640,
                false,
                Ok(files(&[("foo", "foo", 0o640), ("bar", "bar", 0o640)])),
            ),
        ]
    }

    /// Each case through the plain volume and through a projected volume with that one
    /// source (upstream's TestMakePayload and TestCollectDataWith{ConfigMap,Secret}).
    fn check_key_cases(kind: &str, name_field: &str, objects: &Objects, cases: Vec<KeyCase>) {
        for c in cases {
            let mut source = json!({name_field: "obj", "optional": c.optional});
            if !c.items.is_null() {
                source["items"] = c.items.clone();
            }
            let mut plain = source.clone();
            plain["defaultMode"] = json!(c.mode);
            let direct = volume(json!({kind: plain}));
            let mut projected_source = source;
            if name_field != "name" {
                let name = projected_source[name_field].take();
                projected_source["name"] = name;
                projected_source.as_object_mut().unwrap().remove(name_field);
            }
            let projected = volume(json!({"projected": {"defaultMode": c.mode,
                "sources": [{kind: projected_source}]}}));
            let want = c.want.clone().map(Some).map_err(str::to_string);
            assert_eq!(run(&direct, objects), want, "{kind} {}", c.name);
            assert_eq!(
                run(&projected, objects),
                want,
                "projected {kind} {}",
                c.name
            );
        }
    }

    #[test]
    fn config_map_make_payload_as_upstream() {
        let mut objects = Objects::default();
        objects.config_maps.insert(
            "obj".into(),
            config_map(&[("foo", "foo"), ("bar", "bar")], &[]),
        );
        let missing = "configmap references non-existent config key: zab";
        check_key_cases("configMap", "name", &objects, key_cases(missing));
    }

    #[test]
    fn secret_make_payload_as_upstream() {
        let mut objects = Objects::default();
        objects
            .secrets
            .insert("obj".into(), secret(&[("foo", b"foo"), ("bar", b"bar")]));
        let missing = "references non-existent secret key: zab";
        check_key_cases("secret", "secretName", &objects, key_cases(missing));
    }

    #[test]
    fn config_map_binary_data() {
        let mut objects = Objects::default();
        let binary: &[(&str, &[u8])] = &[("foo", b"\x00\xff"), ("both", b"binary")];
        objects.config_maps.insert(
            "mixed".into(),
            config_map(&[("bar", "bar"), ("both", "text")], binary),
        );
        let all = run(&volume(json!({"configMap": {"name": "mixed"}})), &objects)
            .unwrap()
            .unwrap();
        let keys: Vec<&str> = all.keys().map(String::as_str).collect();
        assert_eq!(keys, ["bar", "both", "foo"]);
        assert_eq!(all["foo"].data, b"\x00\xff");
        // Without items binaryData is written after data (the API forbids a key in both).
        assert_eq!(all["both"].data, b"binary");
        // With items, data is looked up first.
        let v = volume(json!({"configMap": {"name": "mixed", "items": [
            {"key": "both", "path": "b"}, {"key": "foo", "path": "f", "mode": 0o755}]}}));
        let mapped = run(&v, &objects).unwrap().unwrap();
        assert_eq!(mapped["b"].data, b"text");
        assert_eq!(mapped["f"].data, b"\x00\xff");
        assert_eq!(mapped["f"].mode, 0o755);
        assert_eq!(mapped["b"].mode, 0o644, "no defaultMode: 0644");
    }

    #[test]
    fn missing_objects() {
        let mut objects = Objects::default();
        objects.config_maps.insert("gone".into(), Fetched::NotFound);
        objects.config_maps.insert(
            "broken".into(),
            Fetched::Failed("the server is on fire".into()),
        );
        objects
            .secrets
            .insert("broken".into(), Fetched::Failed("forbidden".into()));
        // (volume source, expected).
        let cases: Vec<(serde_json::Value, Result<Option<Payload>, &str>)> = vec![
            (
                json!({"configMap": {"name": "cfg"}}),
                Err("configmap \"cfg\" not found"),
            ),
            (
                json!({"configMap": {"name": "gone"}}),
                Err("configmap \"gone\" not found"),
            ),
            (
                json!({"configMap": {"name": "gone", "optional": true}}),
                Ok(Some(Payload::new())),
            ),
            (
                json!({"configMap": {"name": "gone", "optional": true,
                    "items": [{"key": "k", "path": "p"}]}}),
                Ok(Some(Payload::new())),
            ),
            (
                json!({"configMap": {"name": "broken", "optional": true}}),
                Err("the server is on fire"),
            ),
            (
                json!({"secret": {"secretName": "s"}}),
                Err("secret \"s\" not found"),
            ),
            (
                json!({"secret": {"secretName": "s", "optional": true}}),
                Ok(Some(Payload::new())),
            ),
            (
                json!({"secret": {"secretName": "broken"}}),
                Err("forbidden"),
            ),
            (json!({"emptyDir": {}}), Ok(None)),
            (json!({"hostPath": {"path": "/tmp"}}), Ok(None)),
        ];
        for (source, want) in cases {
            let got = run(&volume(source.clone()), &objects);
            assert_eq!(got, want.map_err(str::to_string), "{source}");
        }
    }

    #[test]
    fn downward_api_labels_and_annotations_as_upstream() {
        let item =
            |path: &str, field: &str| json!({"path": path, "fieldRef": {"fieldPath": field}});
        let v = volume(json!({"downwardAPI": {"items": [
            item("labels", "metadata.labels"),
            item("annotations", "metadata.annotations"),
            item("name_file_name", "metadata.name"),
            item("namespace_file_name", "metadata.namespace"),
            item("uid", "metadata.uid"),
            item("one", "metadata.labels['key2']"),
            item("none", "metadata.annotations['absent']"),
        ]}}));
        let got = run(&v, &Objects::default()).unwrap().unwrap();
        let want = files(&[
            ("labels", "key1=\"value1\"\nkey2=\"value2\"", 0o644),
            ("annotations", "a1=\"value1\"\na2=\"value2\"", 0o644),
            ("name_file_name", "podName", 0o644),
            ("namespace_file_name", "ns", 0o644),
            ("uid", "u-1", 0o644),
            ("one", "value2", 0o644),
            ("none", "", 0o644),
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn format_map_quotes_as_go() {
        let map: BTreeMap<String, String> = [
            ("b", "multi\nline \"quoted\" \\ tab\t"),
            ("a/x", ""),
            ("B", "bell\x07"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            format_map(Some(&map)),
            "B=\"bell\\x07\"\na/x=\"\"\nb=\"multi\\nline \\\"quoted\\\" \\\\ tab\\t\""
        );
        assert_eq!(format_map(None), "");
    }

    #[test]
    fn downward_api_modes_paths_and_resources() {
        let v = volume(json!({"downwardAPI": {"defaultMode": 0o600, "items": [
            {"path": "a//b/./name", "mode": 0o444, "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "cpu_limit", "resourceFieldRef":
                {"containerName": "main", "resource": "limits.cpu", "divisor": "1m"}},
            {"path": "cpu_request", "resourceFieldRef":
                {"containerName": "main", "resource": "requests.cpu", "divisor": "1m"}},
            // Unset limits are the node's allocatable, for regular and init containers alike.
            {"path": "side_memory", "resourceFieldRef":
                {"containerName": "side", "resource": "limits.memory", "divisor": "1Gi"}},
            {"path": "init_cpu", "resourceFieldRef":
                {"containerName": "init", "resource": "limits.cpu", "divisor": "1m"}},
            {"path": "empty"},
        ]}}));
        let got = run(&v, &Objects::default()).unwrap().unwrap();
        let want = files(&[
            ("a/b/name", "podName", 0o444),
            ("cpu_limit", "500", 0o600),
            ("cpu_request", "250", 0o600),
            ("side_memory", "16", 0o600),
            ("init_cpu", "2000", 0o600),
            ("empty", "", 0o600),
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn downward_api_ignores_pod_level_limits() {
        // The volume plugin's host gives node allocatable only (env uses pod-level limits).
        let mut p = pod();
        let spec = p.spec.as_mut().unwrap();
        spec.resources = Some(
            serde_json::from_value(json!({"limits": {"cpu": "1500m", "memory": "2Gi"}})).unwrap(),
        );
        let v = volume(
            json!({"downwardAPI": {"items": [{"path": "m", "resourceFieldRef":
            {"containerName": "side", "resource": "limits.memory", "divisor": "1Gi"}}]}}),
        );
        let got = payload(&p, &v, &Objects::default(), &node())
            .unwrap()
            .unwrap();
        assert_eq!(got["m"].data, b"16");
    }

    #[test]
    fn downward_api_errors_are_aggregated() {
        let item =
            |path: &str, field: &str| json!({"path": path, "fieldRef": {"fieldPath": field}});
        let resource = |path: &str, name: serde_json::Value| json!({"path": path, "resourceFieldRef": {"containerName": name, "resource": "limits.cpu"}});
        // (items, expected error).
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                json!([item("n", "spec.nodeName")]),
                "unsupported fieldPath: spec.nodeName",
            ),
            (
                json!([item("n", "status.podIP")]),
                "unsupported fieldPath: status.podIP",
            ),
            (
                json!([item("n", "metadata.name['x']")]),
                "fieldPath \"metadata.name['x']\" does not support subscript",
            ),
            (
                json!([item("n", "metadata.labels['bad key']")]),
                "invalid key subscript in metadata.labels['bad key']: name part must consist \
                 of alphanumeric characters, '-', '_' or '.', and must start and end with an \
                 alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex \
                 used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                json!([resource("c", json!("nope"))]),
                "container nope not found",
            ),
            (json!([resource("c", json!(null))]), "container  not found"),
            (
                json!([
                    item("a", "spec.nodeName"),
                    item("ok", "metadata.name"),
                    resource("c", json!("nope"))
                ]),
                "[unsupported fieldPath: spec.nodeName, container nope not found]",
            ),
            // Identical messages count once.
            (
                json!([item("a", "spec.nodeName"), item("b", "spec.nodeName")]),
                "unsupported fieldPath: spec.nodeName",
            ),
        ];
        for (items, want) in cases {
            let v = volume(json!({"downwardAPI": {"items": items.clone()}}));
            assert_eq!(
                run(&v, &Objects::default()),
                Err(want.to_string()),
                "{items}"
            );
        }
    }

    #[test]
    fn annotation_subscripts_are_validated_lower_cased() {
        let mut p = pod();
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("Example.COM/Key".into(), "v".into());
        let v = volume(json!({"downwardAPI": {"items": [{"path": "a",
            "fieldRef": {"fieldPath": "metadata.annotations['Example.COM/Key']"}}]}}));
        let got = payload(&p, &v, &Objects::default(), &node())
            .unwrap()
            .unwrap();
        assert_eq!(got["a"].data, b"v");
        // Labels are validated as they are: an upper-case prefix is no DNS subdomain.
        let v = volume(json!({"downwardAPI": {"items": [{"path": "l",
            "fieldRef": {"fieldPath": "metadata.labels['Example.COM/Key']"}}]}}));
        let err = payload(&p, &v, &Objects::default(), &node()).unwrap_err();
        assert!(
            err.starts_with(
                "invalid key subscript in metadata.labels['Example.COM/Key']: prefix part"
            ),
            "{err}"
        );
    }

    fn projected_objects() -> Objects {
        let mut objects = Objects::default();
        objects.config_maps.insert(
            "cfg".into(),
            config_map(&[("a", "from-cm"), ("shared", "cm")], &[]),
        );
        objects.secrets.insert(
            "creds".into(),
            secret(&[("b", b"from-secret"), ("shared", b"secret")]),
        );
        objects
    }

    #[test]
    fn projected_merges_sources_in_order() {
        let v = volume(json!({"projected": {"defaultMode": 0o440, "sources": [
            {"configMap": {"name": "cfg"}},
            {"secret": {"name": "creds", "items": [
                {"key": "b", "path": "dir/b", "mode": 0o400}, {"key": "shared", "path": "shared"}]}},
            {"downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"configMap": {"name": "missing", "optional": true}},
            {"secret": {"name": "creds", "optional": true,
                "items": [{"key": "absent", "path": "x"}]}},
            {},
        ]}}));
        let got = run(&v, &projected_objects()).unwrap().unwrap();
        let want = files(&[
            ("a", "from-cm", 0o440),
            // The later source's file replaces the earlier one.
            ("shared", "secret", 0o440),
            ("dir/b", "from-secret", 0o400),
            ("labels", "key1=\"value1\"\nkey2=\"value2\"", 0o440),
        ]);
        assert_eq!(got, want);
        // No defaultMode: 0644.
        let v = volume(json!({"projected": {"sources": [{"configMap": {"name": "cfg"}}]}}));
        let got = run(&v, &projected_objects()).unwrap().unwrap();
        assert!(got.values().all(|f| f.mode == 0o644));
        // No sources: an empty volume.
        let v = volume(json!({"projected": {}}));
        assert_eq!(run(&v, &projected_objects()), Ok(Some(Payload::new())));
    }

    #[test]
    fn projected_errors_are_aggregated_over_sources() {
        // (sources, expected error).
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                json!([{"configMap": {"name": "nope"}}, {"secret": {"name": "gone"}}]),
                "[configmap \"nope\" not found, secret \"gone\" not found]",
            ),
            (
                json!([{"configMap": {"name": "cfg", "items": [{"key": "zz", "path": "z"}]}},
                       {"secret": {"name": "creds", "items": [{"key": "zz", "path": "z"}]}}]),
                "[configmap references non-existent config key: zz, \
                 references non-existent secret key: zz]",
            ),
            (
                json!([{"serviceAccountToken": {"path": "token"}}]),
                "projected volume source serviceAccountToken is not supported by kbatch's \
                 executor",
            ),
            (
                json!([{"clusterTrustBundle": {"path": "ca.pem", "name": "b"}}]),
                "projected volume source clusterTrustBundle is not supported by kbatch's \
                 executor",
            ),
            (
                json!([{"podCertificate": {"signerName": "example.com/s",
                    "keyType": "ED25519", "credentialBundlePath": "creds.pem"}}]),
                "projected volume source podCertificate is not supported by kbatch's executor",
            ),
            (
                // A downwardAPI source's own failures join the list, flattened.
                json!([{"downwardAPI": {"items": [
                        {"path": "a", "fieldRef": {"fieldPath": "spec.nodeName"}},
                        {"path": "b", "fieldRef": {"fieldPath": "status.hostIP"}}]}},
                       {"configMap": {"name": "nope"}},
                       {"configMap": {"name": "nope"}}]),
                "[unsupported fieldPath: spec.nodeName, unsupported fieldPath: status.hostIP, \
                 configmap \"nope\" not found]",
            ),
        ];
        for (sources, want) in cases {
            let v = volume(json!({"projected": {"sources": sources.clone()}}));
            assert_eq!(
                run(&v, &projected_objects()),
                Err(want.to_string()),
                "{sources}"
            );
        }
    }

    #[test]
    fn aggregate_as_go() {
        let s = |v: &[&str]| v.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        assert_eq!(aggregate(&s(&["a"])), "a");
        assert_eq!(aggregate(&s(&["a", "a"])), "a");
        assert_eq!(aggregate(&s(&["a", "b", "a"])), "[a, b]");
    }

    #[test]
    fn references_in_order_of_first_use() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}], "volumes": [
                {"name": "v1", "configMap": {"name": "b"}},
                {"name": "v2", "secret": {"secretName": "s2"}},
                {"name": "v3", "projected": {"sources": [
                    {"configMap": {"name": "a"}},
                    {"secret": {"name": "s1"}},
                    {"downwardAPI": {"items": []}},
                    {"configMap": {"name": "b"}},
                    {"secret": {"name": "s2"}}]}},
                {"name": "v4", "emptyDir": {}},
                {"name": "v5", "configMap": {"name": "a"}},
                {"name": "v6", "secret": {}},
            ]}
        }))
        .unwrap();
        assert_eq!(
            references(&p),
            (
                vec!["b".to_string(), "a".to_string()],
                vec!["s2".to_string(), "s1".to_string()]
            )
        );
        assert_eq!(references(&Pod::default()), (vec![], vec![]));
    }
}
