//! Pod volumes on the local node, as kubelet's volume manager sets them up: each volume a
//! directory under the pod's directory (`payload`, `atomic` for the API-backed ones), then
//! bind-mounted at each container's `volumeMounts` in a mount namespace of the container's own
//! (`mount`).

pub mod atomic;
pub mod mount;
pub mod payload;

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use kbatch_api::k8s_openapi::api::core::v1::{Pod, Volume};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::env::Objects;
use mount::Kind;

/// A volume that could not be set up, with kubelet's message for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetUpError {
    pub volume: String,
    pub message: String,
}

impl SetUpError {
    /// kubelet's `FailedMount` event message.
    pub fn event_message(&self) -> String {
        format!(
            "MountVolume.SetUp failed for volume {:?} : {}",
            self.volume, self.message
        )
    }
}

/// Whether the pod has volumes the node must set up before its containers start.
pub fn has_volumes(pod: &Pod) -> bool {
    !mount::volumes(pod).is_empty()
}

/// Read the ConfigMaps and Secrets the pod's volumes refer to, through the API.
pub async fn fetch(client: &kube::Client, pod: &Pod) -> Objects {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let (config_maps, secrets) = payload::references(pod);
    crate::env::fetch_named(client, namespace, config_maps, secrets).await
}

/// Which volumes a pass over a pod's volumes sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Every volume, before the pod's containers start.
    All,
    /// Only the API-backed ones, brought up to date while the pod runs (kubelet's periodic
    /// re-sync of configMap, secret, downwardAPI and projected volumes); a subPath mount keeps
    /// the file it bound.
    Refresh,
}

/// Set up the volumes of `pod` that `pass` covers under `pods_dir`, in order, as kubelet's
/// `SetUp` of each plugin does: an emptyDir's directory (mode 0777), a hostPath's type check
/// (creating what `DirectoryOrCreate` and `FileOrCreate` ask for), the files of an
/// API-backed volume written atomically from `objects`. Stops at the first that fails (its
/// files stay as they were).
pub fn set_up(
    pod: &Pod,
    pods_dir: &Path,
    objects: &Objects,
    allocatable: &BTreeMap<String, Quantity>,
    pass: Pass,
) -> Result<(), SetUpError> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let covered = |v: &&Volume| pass == Pass::All || mount::kind(v).is_api();
    for v in mount::volumes(pod).iter().filter(covered) {
        set_up_one(pod, v, pods_dir, uid, objects, allocatable).map_err(|message| SetUpError {
            volume: v.name.clone(),
            message,
        })?;
    }
    Ok(())
}

/// Whether the pod has volumes whose files come from the API (and are kept up to date).
pub fn has_api_volumes(pod: &Pod) -> bool {
    mount::volumes(pod).iter().any(|v| mount::kind(v).is_api())
}

fn set_up_one(
    pod: &Pod,
    v: &Volume,
    pods_dir: &Path,
    uid: &str,
    objects: &Objects,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<(), String> {
    let dir = mount::volume_dir(pods_dir, uid, v);
    match (mount::kind(v), dir) {
        (Kind::Unsupported(_), _) | (_, None) => Err(mount::unsupported_message(v)),
        (Kind::EmptyDir, Some(dir)) => {
            std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| format!("chmod {}: {e}", dir.display()))
        }
        (Kind::HostPath { path, type_ }, _) => check_host_path(&path, &type_),
        (Kind::Api { .. }, Some(dir)) => {
            let Some(files) = payload::payload(pod, v, objects, allocatable)? else {
                return Err(mount::unsupported_message(v));
            };
            std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            atomic::write(&dir, &files).map(|_| ()).map_err(|e| {
                format!(
                    "error writing payload to {:?}: {e}",
                    dir.display().to_string()
                )
            })
        }
    }
}

/// kubelet's hostPath type check (`checkTypeInternal`), creating what the `OrCreate` types
/// ask for.
fn check_host_path(path: &Path, type_: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).ok();
    let shown = path.display();
    let fails = |what: &str| Err(format!("hostPath type check failed: {shown} is not {what}"));
    let ft = meta.as_ref().map(|m| m.file_type());
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_none() => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(|e| format!("mkdir {shown}: {e}")),
        "FileOrCreate" if meta.is_none() => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(path)
            .map(|_| ())
            .map_err(|e| format!("open {shown}: {e}")),
        "Directory" | "DirectoryOrCreate" if !ft.is_some_and(|t| t.is_dir()) => {
            fails("a directory")
        }
        "File" | "FileOrCreate" if !ft.is_some_and(|t| t.is_file()) => fails("a file"),
        "Socket" if !ft.is_some_and(|t| t.is_socket()) => fails("a socket file"),
        "CharDevice" if !ft.is_some_and(|t| t.is_char_device()) => fails("a character device"),
        "BlockDevice" if !ft.is_some_and(|t| t.is_block_device()) => fails("a block device"),
        _ => Ok(()),
    }
}
