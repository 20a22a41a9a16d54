//! A container's `volumeMounts` as bind mounts: where each volume lives on the host, which
//! mounts a container gets (`container_mounts`), and entering a mount namespace of the
//! container's own with them in place (`Prepared::enter`, run in the forked child before exec).
//!
//! Containers here have no root filesystem of their own: a mount point that does not exist on
//! the host is created for the run and removed again when no run uses it (`MountPoints`).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use kbatch_api::k8s_openapi::api::core::v1::{Container, Pod, Volume};
use nix::mount::MsFlags;

/// kubelet's directory names for the volume plugins (`pods/<uid>/volumes/<plugin>/<name>`).
const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
const CONFIG_MAP: &str = "kubernetes.io~configmap";
const SECRET: &str = "kubernetes.io~secret";
const DOWNWARD_API: &str = "kubernetes.io~downward-api";
const PROJECTED: &str = "kubernetes.io~projected";

/// What kind of volume a pod volume is, for the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory of the pod's, empty at first, shared by its containers.
    EmptyDir,
    /// A path of the host, with its `type` check.
    HostPath { path: PathBuf, type_: String },
    /// Files written from the API (configMap, secret, downwardAPI, projected), under the
    /// plugin's directory: kubelet mounts them read-only.
    Api { plugin: &'static str },
    /// A volume source this node cannot provide (its field name).
    Unsupported(&'static str),
}

impl Kind {
    pub fn is_api(&self) -> bool {
        matches!(self, Kind::Api { .. })
    }
}

/// The kind of `v`.
pub fn kind(v: &Volume) -> Kind {
    if v.empty_dir.is_some() {
        Kind::EmptyDir
    } else if let Some(h) = &v.host_path {
        Kind::HostPath {
            path: PathBuf::from(&h.path),
            type_: h.type_.clone().unwrap_or_default(),
        }
    } else if v.config_map.is_some() {
        Kind::Api { plugin: CONFIG_MAP }
    } else if v.secret.is_some() {
        Kind::Api { plugin: SECRET }
    } else if v.downward_api.is_some() {
        Kind::Api {
            plugin: DOWNWARD_API,
        }
    } else if v.projected.is_some() {
        Kind::Api { plugin: PROJECTED }
    } else {
        Kind::Unsupported(unsupported_source(v))
    }
}

/// The field name of a volume source the node does not provide.
fn unsupported_source(v: &Volume) -> &'static str {
    let sources: [(&'static str, bool); 12] = [
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("image", v.image.is_some()),
        ("csi", v.csi.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("fc", v.fc.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("rbd", v.rbd.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
    ];
    sources
        .iter()
        .find(|(_, set)| *set)
        .map_or("unknown", |(name, _)| name)
}

/// The pod's volumes.
pub fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// Where volume `v` of pod `uid` lives on the host (`None`: it cannot be provided).
pub fn volume_dir(pods_dir: &Path, uid: &str, v: &Volume) -> Option<PathBuf> {
    let plugin = match kind(v) {
        Kind::EmptyDir => EMPTY_DIR,
        Kind::HostPath { path, .. } => return Some(path),
        Kind::Api { plugin } => plugin,
        Kind::Unsupported(_) => return None,
    };
    Some(
        pods_dir
            .join(uid)
            .join("volumes")
            .join(plugin)
            .join(&v.name),
    )
}

/// One bind mount of a container: `source` on the host appears at `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub volume: String,
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
    /// The volume's directory when `source` is a subPath of it.
    pub sub_path_of: Option<PathBuf>,
}

/// The bind mounts of `container` in `pod`, as kubelet's `makeMounts` derives them: each
/// `volumeMount` from its volume's directory (plus `subPath`, or `subPathExpr` expanded
/// against the container's `env`), read-only when asked or when the volume is API data;
/// ordered parents first, as containerd orders a container's mounts.
pub fn container_mounts(
    pod: &Pod,
    container: &Container,
    pods_dir: &Path,
    env: &[(String, String)],
) -> Result<Vec<Mount>, String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let volumes = volumes(pod);
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let Some(volume) = volumes.iter().find(|v| v.name == vm.name) else {
            return Err(format!(
                "cannot find volume {:?} to mount into container {:?}",
                vm.name, container.name
            ));
        };
        let Some(dir) = volume_dir(pods_dir, uid, volume) else {
            return Err(unsupported_message(volume));
        };
        let sub_path = match (&vm.sub_path, &vm.sub_path_expr) {
            (Some(p), _) if !p.is_empty() => Some(p.clone()),
            (_, Some(expr)) if !expr.is_empty() => {
                let lookup = |name: &str| {
                    env.iter()
                        .rev()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                };
                Some(crate::expand::expand(expr, lookup))
            }
            _ => None,
        };
        let (source, sub_path_of) = match sub_path {
            Some(p) => {
                check_sub_path(&p)?;
                (dir.join(p), Some(dir))
            }
            None => (dir, None),
        };
        mounts.push(Mount {
            volume: vm.name.clone(),
            source,
            target: absolute(&vm.mount_path),
            read_only: vm.read_only.unwrap_or(false) || kind(volume).is_api(),
            sub_path_of,
        });
    }
    // Parents before what is mounted inside them.
    mounts.sort_by_key(|m| m.target.components().count());
    Ok(mounts)
}

/// The message for a volume this node cannot mount.
pub fn unsupported_message(v: &Volume) -> String {
    format!(
        "volume type {} is not supported by the process executor (it provides emptyDir, \
         hostPath, configMap, secret, downwardAPI and projected volumes)",
        unsupported_source(v)
    )
}

/// A subPath stays inside its volume: relative, without `..` (kubelet's check of an
/// expanded subPathExpr; the API checks a literal subPath the same way).
fn check_sub_path(p: &str) -> Result<(), String> {
    let path = Path::new(p);
    if path.is_absolute() {
        return Err(format!("subpath {p:?} must not be an absolute path"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("subpath {p:?} must not contain '..'"));
    }
    Ok(())
}

/// A mount path as the container sees it: relative ones are from its root.
fn absolute(mount_path: &str) -> PathBuf {
    Path::new("/").join(mount_path)
}

/// The paths created on the host as mount points for runs, with how many runs' mount points
/// need each: removed when the last one ends (while still an empty directory or file).
#[derive(Debug, Default, Clone)]
pub struct MountPoints {
    created: Arc<Mutex<HashMap<PathBuf, usize>>>,
}

/// A run's use of the mount points it needed; dropping it releases them.
#[derive(Debug)]
pub struct MountPointUse {
    points: MountPoints,
    /// For each mount point, the created paths it needs, outermost first.
    chains: Vec<Vec<PathBuf>>,
}

impl Drop for MountPointUse {
    fn drop(&mut self) {
        let Ok(mut created) = self.points.created.lock() else {
            return;
        };
        for chain in self.chains.iter().rev() {
            for p in chain.iter().rev() {
                let Some(users) = created.get_mut(p) else {
                    continue;
                };
                *users -= 1;
                if *users == 0 {
                    created.remove(p);
                    remove_if_empty(p);
                }
            }
        }
    }
}

/// Removes a created mount point, only while it is still an empty directory or empty file.
fn remove_if_empty(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir(p);
        }
        Ok(m) if m.is_file() && m.len() == 0 => {
            let _ = std::fs::remove_file(p);
        }
        _ => {}
    }
}

impl MountPoints {
    /// The node's registry: mount points are host paths, shared by every pod.
    pub fn global() -> &'static MountPoints {
        static POINTS: std::sync::LazyLock<MountPoints> =
            std::sync::LazyLock::new(MountPoints::default);
        &POINTS
    }

    /// Make sure every mount's target exists (a file for a file source, else a directory),
    /// creating what is missing; the returned use keeps what was created until dropped.
    fn acquire(&self, mounts: &[Mount]) -> Result<MountPointUse, String> {
        let mut created = self
            .created
            .lock()
            .map_err(|_| "mount point registry poisoned".to_string())?;
        let mut held = MountPointUse {
            points: self.clone(),
            chains: Vec::new(),
        };
        for m in mounts {
            // The target and its ancestors that are missing or were created for other runs.
            let mut chain: Vec<PathBuf> = m
                .target
                .ancestors()
                .take_while(|p| created.contains_key(*p) || std::fs::symlink_metadata(p).is_err())
                .map(Path::to_path_buf)
                .collect();
            chain.reverse();
            let is_file = std::fs::metadata(&m.source).is_ok_and(|md| !md.is_dir());
            // Counted before they are made: if making one fails, dropping `held` removes
            // what was made.
            for p in &chain {
                *created.entry(p.clone()).or_insert(0) += 1;
            }
            held.chains.push(chain.clone());
            if let Err(e) = make_mount_point(&chain, m, is_file) {
                // Releasing takes the lock.
                drop(created);
                drop(held);
                return Err(e);
            }
        }
        Ok(held)
    }
}

/// Make the missing paths of `chain` (outermost first): directories, and the target a file
/// when the source is one.
fn make_mount_point(chain: &[PathBuf], m: &Mount, is_file: bool) -> Result<(), String> {
    for p in chain {
        if std::fs::symlink_metadata(p).is_ok() {
            continue;
        }
        let made = if is_file && *p == m.target {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .map(|_| ())
        } else {
            std::fs::create_dir(p)
        };
        made.map_err(|e| {
            format!(
                "error mounting {:?} to rootfs at {:?}: creating the mount point {p:?}: {e}",
                m.source, m.target
            )
        })?;
    }
    Ok(())
}

/// Mounts ready to be entered in a forked child: every path a C string, every flag known,
/// so that `enter` only makes system calls.
#[derive(Debug)]
pub struct Prepared {
    binds: Vec<Bind>,
    workdir: CString,
    /// Not root: the mount namespace comes with a user namespace mapping only our ids.
    rootless: Option<Rootless>,
    _points: MountPointUse,
}

#[derive(Debug)]
struct Bind {
    source: CString,
    target: CString,
    /// Remount flags for a read-only mount (the source's locked flags kept).
    read_only: Option<MsFlags>,
}

#[derive(Debug)]
struct Rootless {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("path {p:?} contains a NUL byte"))
}

/// Make the working directory as runc makes a missing one in the container: in the volume it
/// is under (the deepest mount holding it), else on the host. A failure shows as the child's
/// chdir error.
fn create_workdir(mounts: &[Mount], workdir: &Path) {
    let holder = mounts.iter().rev().find(|m| workdir.starts_with(&m.target));
    let dir = match holder {
        Some(m) => match workdir.strip_prefix(&m.target) {
            Ok(rel) if m.source.is_dir() => m.source.join(rel),
            _ => return,
        },
        None => workdir.to_path_buf(),
    };
    let _ = std::fs::create_dir_all(dir);
}

/// kubelet's subPath preparation: a missing subPath is made a directory with its volume's
/// mode, and what it resolves to must stay inside the volume (a symlink may not lead out).
fn prepare_sub_path(source: &Path, root: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if std::fs::symlink_metadata(source).is_err() {
        let mode = std::fs::metadata(root).map_or(0o755, |m| m.permissions().mode() & 0o7777);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(source)
            .map_err(|e| format!("failed to create subPath directory {source:?}: {e}"))?;
    }
    let resolved = std::fs::canonicalize(source)
        .map_err(|e| format!("failed to resolve subPath {source:?}: {e}"))?;
    let volume = std::fs::canonicalize(root)
        .map_err(|e| format!("failed to resolve volume path {root:?}: {e}"))?;
    if !resolved.starts_with(&volume) {
        return Err(format!(
            "subpath {:?} not within volume path {:?}",
            resolved.display().to_string(),
            volume.display().to_string()
        ));
    }
    Ok(())
}

/// The flags a read-only bind remount must keep: those of the mount the source is on.
fn locked_flags(source: &Path) -> MsFlags {
    use nix::sys::statvfs::{FsFlags, statvfs};
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    if let Ok(st) = statvfs(source) {
        let f = st.flags();
        for (fs, ms) in [
            (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
            (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
            (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
            (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
            (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
            (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
        ] {
            if f.contains(fs) {
                flags |= ms;
            }
        }
    }
    flags
}

impl Prepared {
    /// Everything `enter` needs for `mounts`, with their mount points made; `workdir` is
    /// entered again once they are in place (it may be inside one).
    pub fn new(mounts: &[Mount], workdir: &Path, points: &MountPoints) -> Result<Prepared, String> {
        let mut binds = Vec::with_capacity(mounts.len());
        for m in mounts {
            if let Some(root) = &m.sub_path_of {
                prepare_sub_path(&m.source, root)?;
            }
            if std::fs::symlink_metadata(&m.source).is_err() {
                return Err(format!(
                    "error mounting {:?} to rootfs at {:?}: no such file or directory",
                    m.source, m.target
                ));
            }
            binds.push(Bind {
                source: c_path(&m.source)?,
                target: c_path(&m.target)?,
                read_only: m.read_only.then(|| locked_flags(&m.source)),
            });
        }
        create_workdir(mounts, workdir);
        let rootless = rootless();
        let points = points.acquire(mounts)?;
        Ok(Prepared {
            binds,
            workdir: c_path(workdir)?,
            rootless,
            _points: points,
        })
    }

    /// In the forked child: a mount namespace of its own, mounts private to it, the binds,
    /// then the working directory again. Only system calls: nothing here allocates.
    pub fn enter(&self) -> std::io::Result<()> {
        use nix::mount::mount;
        use nix::sched::{CloneFlags, unshare};
        let none: Option<&OsStr> = None;
        match &self.rootless {
            None => unshare(CloneFlags::CLONE_NEWNS)?,
            Some(r) => {
                unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)?;
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", &r.uid_map)?;
                write_proc(c"/proc/self/gid_map", &r.gid_map)?;
            }
        }
        // Nothing mounted here reaches the host, nor other containers.
        mount(
            none,
            c"/",
            none,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            none,
        )?;
        for b in &self.binds {
            mount(
                Some(b.source.as_c_str()),
                b.target.as_c_str(),
                none,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none,
            )?;
            if let Some(flags) = b.read_only {
                mount(none, b.target.as_c_str(), none, flags, none)?;
            }
        }
        nix::unistd::chdir(self.workdir.as_c_str())?;
        Ok(())
    }
}

/// Whether this process can give a child a mount namespace (as root, or with unprivileged
/// user namespaces), found once by forking a child that only tries; `Err` says why not.
pub fn namespaces_available() -> Result<(), String> {
    static AVAILABLE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    AVAILABLE.get_or_init(try_namespaces).clone()
}

fn try_namespaces() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let probe = Prepared {
        binds: Vec::new(),
        workdir: c"/".to_owned(),
        rootless: rootless(),
        _points: MountPointUse {
            points: MountPoints::default(),
            chains: Vec::new(),
        },
    };
    let mut cmd = std::process::Command::new("/");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the hook only makes system calls, then ends the child without returning to
    // the parent's code.
    unsafe {
        cmd.pre_exec(move || {
            probe.enter()?;
            nix::libc::_exit(0);
        });
    }
    let outcome = cmd.spawn().and_then(|mut child| child.wait());
    match outcome {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("the mount namespace probe ended with {status}")),
        Err(e) => Err(format!(
            "volumes need a mount namespace of the container's own, which this host refuses \
             ({e}): run kbatch as root, or allow unprivileged user namespaces"
        )),
    }
}

/// The id maps of a user namespace when not root (`None` as root: none is needed).
fn rootless() -> Option<Rootless> {
    let uid = nix::unistd::geteuid();
    (!uid.is_root()).then(|| Rootless {
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n", gid = nix::unistd::getegid()).into_bytes(),
    })
}

/// Write `data` to a /proc file with raw system calls (no allocation).
fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    let fd = open(path, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())?;
    nix::unistd::write(&fd, data)?;
    Ok(())
}

/// Joining the mount namespace (and, rootless, the user namespace) of a running container,
/// for a command run inside it (exec, exec probes, hooks).
#[derive(Debug)]
pub struct Join {
    user: Option<std::fs::File>,
    mnt: std::fs::File,
    workdir: CString,
}

impl Join {
    /// The namespaces of process `pid`, when they are not ours (`None`: nothing to join).
    pub fn of(pid: u32, workdir: &Path) -> Result<Option<Join>, String> {
        let ns = |kind: &str| format!("/proc/{pid}/ns/{kind}");
        let same = |kind: &str| {
            let theirs = std::fs::metadata(ns(kind)).ok();
            let ours = std::fs::metadata(format!("/proc/self/ns/{kind}")).ok();
            use std::os::unix::fs::MetadataExt;
            match (theirs, ours) {
                (Some(t), Some(o)) => t.ino() == o.ino() && t.dev() == o.dev(),
                _ => true,
            }
        };
        if same("mnt") {
            return Ok(None);
        }
        let open = |kind: &str| {
            std::fs::File::open(ns(kind))
                .map_err(|e| format!("opening the container's {kind} namespace: {e}"))
        };
        let user = if same("user") {
            None
        } else {
            Some(open("user")?)
        };
        Ok(Some(Join {
            user,
            mnt: open("mnt")?,
            workdir: c_path(workdir)?,
        }))
    }

    /// In the forked child: into the container's namespaces, then its working directory.
    pub fn enter(&self) -> std::io::Result<()> {
        use nix::sched::{CloneFlags, setns};
        if let Some(user) = &self.user {
            setns(user, CloneFlags::CLONE_NEWUSER)?;
        }
        setns(&self.mnt, CloneFlags::CLONE_NEWNS)?;
        nix::unistd::chdir(self.workdir.as_c_str())?;
        Ok(())
    }
}

/// Make `cmd` run where a container's processes run: in the mount namespace of its main
/// process `pid` when it has one of its own (its volumes), in `workdir` as the container sees
/// it; otherwise simply in `workdir`. True when it joins a namespace.
pub fn in_container(
    cmd: &mut tokio::process::Command,
    pid: Option<u32>,
    workdir: &Path,
) -> Result<bool, String> {
    let join = match pid {
        Some(pid) => Join::of(pid, workdir)?,
        None => None,
    };
    match join {
        None => {
            cmd.current_dir(workdir);
            Ok(false)
        }
        Some(join) => {
            // SAFETY: `enter` runs in the child between fork and exec and only makes system
            // calls (setns, chdir) on what was opened and converted before the fork.
            unsafe {
                cmd.pre_exec(move || join.enter());
            }
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::process::CommandExt;

    fn pod(volumes: serde_json::Value, mounts: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {"volumes": volumes, "containers": [
                {"name": "c", "image": "x", "volumeMounts": mounts}
            ]}
        }))
        .expect("pod");
        let c = pod.spec.as_ref().expect("spec").containers[0].clone();
        (pod, c)
    }

    #[test]
    fn mounts_come_from_volume_dirs_parents_first_api_data_read_only() {
        let (p, c) = pod(
            json!([
                {"name": "data", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "x"}},
                {"name": "host", "hostPath": {"path": "/srv/in"}},
                {"name": "proj", "projected": {"sources": []}}
            ]),
            json!([
                {"name": "cfg", "mountPath": "/app/etc/conf"},
                {"name": "data", "mountPath": "/app", "readOnly": true},
                {"name": "host", "mountPath": "rel/in", "subPathExpr": "$(WHO)/x"},
                {"name": "proj", "mountPath": "/proj"}
            ]),
        );
        let env = vec![("WHO".to_string(), "me".to_string())];
        let got = container_mounts(&p, &c, Path::new("/d/pods"), &env).expect("mounts");
        let view: Vec<(&str, &str, &str, bool)> = got
            .iter()
            .map(|m| {
                (
                    m.volume.as_str(),
                    m.source.to_str().unwrap_or(""),
                    m.target.to_str().unwrap_or(""),
                    m.read_only,
                )
            })
            .collect();
        assert_eq!(
            view,
            vec![
                (
                    "data",
                    "/d/pods/u1/volumes/kubernetes.io~empty-dir/data",
                    "/app",
                    true
                ),
                (
                    "proj",
                    "/d/pods/u1/volumes/kubernetes.io~projected/proj",
                    "/proj",
                    true
                ),
                ("host", "/srv/in/me/x", "/rel/in", false),
                (
                    "cfg",
                    "/d/pods/u1/volumes/kubernetes.io~configmap/cfg",
                    "/app/etc/conf",
                    true
                ),
            ]
        );
        assert_eq!(got[2].sub_path_of.as_deref(), Some(Path::new("/srv/in")));
        assert_eq!(got[0].sub_path_of, None);
    }

    #[test]
    fn sub_paths_may_not_leave_their_volume_and_unknown_volumes_are_errors() {
        let (p, c) = pod(
            json!([{"name": "data", "emptyDir": {}}]),
            json!([{"name": "data", "mountPath": "/x", "subPathExpr": "$(UP)/etc"}]),
        );
        let env = vec![("UP".to_string(), "..".to_string())];
        assert_eq!(
            container_mounts(&p, &c, Path::new("/d"), &env),
            Err("subpath \"../etc\" must not contain '..'".to_string())
        );
        let (p, c) = pod(
            json!([{"name": "claim", "persistentVolumeClaim": {"claimName": "c"}}]),
            json!([{"name": "claim", "mountPath": "/x"}]),
        );
        let err = container_mounts(&p, &c, Path::new("/d"), &[]).expect_err("unsupported");
        assert!(
            err.starts_with("volume type persistentVolumeClaim is not supported"),
            "{err}"
        );
    }

    #[test]
    fn mount_points_are_made_and_removed_with_their_last_user_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src_dir = dir.path().join("src");
        std::fs::create_dir(&src_dir).expect("src");
        let src_file = src_dir.join("f");
        std::fs::write(&src_file, "x").expect("file");
        let existing = dir.path().join("existing");
        std::fs::create_dir(&existing).expect("existing");
        let m = |source: &Path, target: PathBuf| Mount {
            volume: "v".into(),
            source: source.to_path_buf(),
            target,
            read_only: false,
            sub_path_of: None,
        };
        let points = MountPoints::default();
        let a = points
            .acquire(&[
                m(&src_dir, dir.path().join("new/a")),
                m(&src_file, dir.path().join("new/b/file")),
                m(&src_dir, existing.clone()),
            ])
            .expect("first run");
        assert!(dir.path().join("new/a").is_dir());
        assert!(dir.path().join("new/b/file").is_file(), "a file for a file");
        let b = points
            .acquire(&[m(&src_dir, dir.path().join("new/c"))])
            .expect("second run");
        drop(a);
        assert!(!dir.path().join("new/a").exists());
        assert!(!dir.path().join("new/b").exists());
        assert!(
            dir.path().join("new/c").is_dir(),
            "still used by the second run"
        );
        assert!(existing.is_dir(), "what existed before stays");
        drop(b);
        assert!(!dir.path().join("new").exists(), "gone with its last user");
    }

    #[test]
    fn a_sub_path_is_made_inside_its_volume_and_may_not_lead_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let volume = dir.path().join("vol");
        std::fs::create_dir(&volume).expect("volume");
        prepare_sub_path(&volume.join("a/b"), &volume).expect("made");
        assert!(volume.join("a/b").is_dir());
        std::os::unix::fs::symlink("/etc", volume.join("out")).expect("symlink");
        let err = prepare_sub_path(&volume.join("out"), &volume).expect_err("escapes");
        assert!(
            err.starts_with("subpath \"/etc\" not within volume path"),
            "{err}"
        );
    }

    /// Runs `sh -c script` after `enter`, returning its stdout.
    fn run_entered(prepared: Prepared, before: Option<u32>, script: &str) -> String {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", script]);
        // SAFETY: test child; setgid/setuid and `enter` only make system calls.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(id) = before {
                    nix::unistd::setgid(nix::unistd::Gid::from_raw(id))?;
                    nix::unistd::setuid(nix::unistd::Uid::from_raw(id))?;
                    // Changing user made the process undumpable, which keeps its own /proc
                    // files from it; a user's own kbatch is dumpable.
                    // PR_SET_DUMPABLE takes integers only (inside the hook's unsafe block).
                    if nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                prepared.enter()
            });
        }
        let out = cmd.output().expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn entering_binds_the_mounts_in_a_namespace_of_its_own() {
        if namespaces_available().is_err() {
            eprintln!("skipped: no mount namespaces here");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let source = dir.path().join("vol");
        std::fs::create_dir(&source).expect("vol");
        std::fs::write(source.join("greeting"), "hi").expect("file");
        let target = dir.path().join("mnt/here");
        let mounts = [Mount {
            volume: "v".into(),
            source: source.clone(),
            target: target.clone(),
            read_only: true,
            sub_path_of: None,
        }];
        let points = MountPoints::default();
        let prepared = Prepared::new(&mounts, &target, &points).expect("prepared");
        let out = run_entered(
            prepared,
            None,
            "pwd; cat greeting; echo; touch new 2>/dev/null && echo writable || echo read-only",
        );
        assert_eq!(
            out,
            format!("{}\nhi\nread-only\n", target.display()),
            "inside: the volume, read-only, and the working directory in it"
        );
        assert!(
            !target.exists(),
            "outside: the mount point went with the run's use of it"
        );
    }

    #[test]
    fn entering_without_root_goes_through_a_user_namespace() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to become another user");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let source = dir.path().join("vol");
        std::fs::create_dir(&source).expect("vol");
        std::fs::write(source.join("greeting"), "hello").expect("file");
        let target = dir.path().join("mnt");
        std::fs::create_dir(&target).expect("target");
        let nobody = 65534;
        let mut prepared = Prepared::new(
            &[Mount {
                volume: "v".into(),
                source,
                target: target.clone(),
                read_only: false,
                sub_path_of: None,
            }],
            &target,
            &MountPoints::default(),
        )
        .expect("prepared");
        prepared.rootless = Some(Rootless {
            uid_map: format!("{nobody} {nobody} 1\n").into_bytes(),
            gid_map: format!("{nobody} {nobody} 1\n").into_bytes(),
        });
        // Some hosts refuse unprivileged user namespaces: then there is nothing to check.
        let mut probe = std::process::Command::new("unshare");
        probe.args(["-Urm", "true"]);
        // SAFETY: test child; only system calls.
        unsafe {
            probe.pre_exec(move || {
                nix::unistd::setgid(nix::unistd::Gid::from_raw(nobody))?;
                nix::unistd::setuid(nix::unistd::Uid::from_raw(nobody))?;
                Ok(())
            });
        }
        if !probe.status().is_ok_and(|s| s.success()) {
            eprintln!("skipped: unprivileged user namespaces are refused here");
            return;
        }
        let out = run_entered(prepared, Some(nobody), "id -u; cat greeting");
        assert_eq!(out, format!("{nobody}\nhello"));
    }
}
