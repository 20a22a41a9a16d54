//! kubelet's local storage eviction (its eviction manager's `localStorageEviction`, every
//! 10 s): a pod is evicted when one of its emptyDir volumes holds more than its `sizeLimit`,
//! when its ephemeral storage as a whole outgrows the sum of its containers'
//! `ephemeral-storage` limits, or when one container outgrows its own. Evicted means stopped
//! with a 1 s grace period and reported Failed, reason `Evicted`, with kubelet's message.
//!
//! Usage is counted as kubelet's `fs.DiskUsage` counts it: the allocated blocks of everything
//! under a directory, a hard-linked file once, nothing on another file system. A container
//! here has no writable layer of its own, so what it uses is its logs; the pod's ephemeral
//! storage is its logs, its emptyDir volumes not backed by memory and its configMap volumes
//! (kubelet's "ephemeral" volumes). Every emptyDir is a directory on disk here, so one with
//! `medium: Memory` is measured the same way, for its own `sizeLimit` only.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kbatch_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kbatch_api::quantity_text::Format;

/// How often kubelet's eviction manager looks (its `evictionMonitoringPeriod`).
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// The grace period of such an eviction (`immediateEvictionGracePeriodSeconds`).
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);
/// The pod's status reason, and the reason of the event about it.
pub const REASON_EVICTED: &str = "Evicted";
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Pods of this priority or more are critical: kubelet never evicts them.
const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// A limit in bytes, and the format it was written in: Go writes the quantity back in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limit {
    bytes: i64,
    format: Format,
}

impl Limit {
    fn parse(q: &Quantity) -> Option<Limit> {
        let exact = kbatch_api::quantity::parse_exact(&q.0)?;
        Some(Limit {
            bytes: exact.scaled_ceil(0),
            format: Format::of(&q.0),
        })
    }

    fn text(self) -> String {
        kbatch_api::quantity_text::bytes(self.bytes, self.format)
    }

    /// Whether `used` bytes go past it.
    fn exceeded_by(self, used: u64) -> bool {
        i64::try_from(used).unwrap_or(i64::MAX) > self.bytes
    }
}

/// What a pod's storage holds, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Each emptyDir volume, by name.
    pub volumes: HashMap<String, u64>,
    /// Each container's logs, by container name.
    pub containers: HashMap<String, u64>,
    /// The pod's ephemeral storage as a whole.
    pub pod: u64,
}

/// Why a pod is evicted: the message of its status and of the `Evicted` event, and the
/// eviction signal kubelet counts it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub message: String,
    pub signal: &'static str,
}

/// kubelet's eviction signals for the three local storage limits.
pub const SIGNAL_EMPTY_DIR_LIMIT: &str = "emptydirfs.limit";
pub const SIGNAL_POD_LIMIT: &str = "ephemeralpodfs.limit";
pub const SIGNAL_CONTAINER_LIMIT: &str = "ephemeralcontainerfs.limit";

/// kubelet's count of the pods it evicted, by eviction signal.
pub const KUBELET_EVICTIONS: kbatch_metrics::CounterVec = kbatch_metrics::CounterVec {
    name: "kubelet_evictions",
    help: "[ALPHA] Cumulative number of pod evictions by eviction signal",
    labels: &["eviction_signal"],
};

fn container_limit(c: &Container) -> Option<Limit> {
    c.resources
        .as_ref()?
        .limits
        .as_ref()?
        .get(EPHEMERAL_STORAGE)
        .and_then(Limit::parse)
}

fn size_limits(spec: &PodSpec) -> impl Iterator<Item = (&str, Limit)> {
    spec.volumes.iter().flatten().filter_map(|v| {
        let limit = v.empty_dir.as_ref()?.size_limit.as_ref()?;
        Some((v.name.as_str(), Limit::parse(limit)?))
    })
}

/// Whether anything of the pod's is limited: only then is its usage measured.
pub fn has_limits(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    size_limits(spec).any(|(_, l)| l.bytes > 0)
        || spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| container_limit(c).is_some())
}

fn add(sum: &mut Option<Limit>, l: Option<Limit>) {
    match (sum.as_mut(), l) {
        (Some(s), Some(l)) => s.bytes = s.bytes.saturating_add(l.bytes),
        (None, Some(l)) => *sum = Some(l),
        _ => {}
    }
}

fn max(current: &mut Option<Limit>, l: Option<Limit>) {
    if let Some(l) = l
        && current.is_none_or(|c| l.bytes > c.bytes)
    {
        *current = Some(l);
    }
}

/// The pod's `ephemeral-storage` limit as upstream's `PodLimits` sums it: the regular
/// containers and sidecars together, or the largest an init container needs beside the
/// sidecars started before it if that is more, plus the pod's overhead. None: no container
/// sets one. The sum keeps the format of the quantity it started from.
fn pod_limit(spec: &PodSpec) -> Option<Limit> {
    let mut sum = None;
    for c in &spec.containers {
        add(&mut sum, container_limit(c));
    }
    let mut sidecars = None;
    let mut init_max = None;
    for c in spec.init_containers.iter().flatten() {
        let l = container_limit(c);
        let needs = if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sum, l);
            add(&mut sidecars, l);
            sidecars
        } else {
            let mut needs = l;
            add(&mut needs, sidecars);
            needs
        };
        max(&mut init_max, needs);
    }
    max(&mut sum, init_max);
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get(EPHEMERAL_STORAGE))
        .and_then(Limit::parse);
    if let (Some(s), Some(o)) = (sum.as_mut(), overhead) {
        s.bytes = s.bytes.saturating_add(o.bytes);
    }
    sum
}

/// Whether kubelet would evict the pod for what its storage holds, checked as kubelet does:
/// its emptyDir volumes first, in order, then the pod as a whole, then each container.
pub fn exceeded(pod: &Pod, usage: &Usage) -> Option<Eviction> {
    let spec = pod.spec.as_ref()?;
    for (name, limit) in size_limits(spec) {
        if let Some(&used) = usage.volumes.get(name)
            && limit.bytes > 0
            && limit.exceeded_by(used)
        {
            return Some(Eviction {
                message: format!(
                    "Usage of EmptyDir volume \"{name}\" exceeds the limit \"{}\". ",
                    limit.text()
                ),
                signal: SIGNAL_EMPTY_DIR_LIMIT,
            });
        }
    }
    if let Some(limit) = pod_limit(spec)
        && limit.exceeded_by(usage.pod)
    {
        return Some(Eviction {
            message: format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                limit.text()
            ),
            signal: SIGNAL_POD_LIMIT,
        });
    }
    for c in &spec.containers {
        if let (Some(limit), Some(&used)) = (container_limit(c), usage.containers.get(&c.name))
            && limit.bytes != 0
            && limit.exceeded_by(used)
        {
            return Some(Eviction {
                message: format!(
                    "Container {} exceeded its local ephemeral storage limit \"{}\". ",
                    c.name,
                    limit.text()
                ),
                signal: SIGNAL_CONTAINER_LIMIT,
            });
        }
    }
    None
}

/// Whether kubelet refuses to evict the pod: a critical one (`IsCriticalPod`: of
/// system-cluster-critical priority or above).
pub fn is_critical(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority)
        .is_some_and(|p| p >= CRITICAL_PRIORITY)
}

/// A volume whose usage is measured.
#[derive(Debug, Clone)]
pub struct Measured {
    pub name: String,
    pub dir: PathBuf,
    /// An emptyDir: held to its `sizeLimit`.
    pub empty_dir: bool,
    /// Counted in the pod's ephemeral storage (kubelet's `isVolumeEphemeral`: an emptyDir
    /// on the node's disk, not `medium: Memory`, or a configMap volume).
    pub ephemeral: bool,
}

/// Where the pod's storage lives: its volumes' directories and its log directory.
#[derive(Debug, Clone)]
pub struct Places {
    /// Each volume measured: its emptyDirs and configMap volumes.
    pub volumes: Vec<Measured>,
    pub logs: PathBuf,
}

impl Places {
    pub fn of(pod: &Pod, pods_dir: &Path, logs: PathBuf) -> Places {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter(|v| v.empty_dir.is_some() || v.config_map.is_some())
            .filter_map(|v| {
                let dir = crate::volume::mount::volume_dir(pods_dir, uid, v)?;
                let in_memory = v
                    .empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref() == Some("Memory"));
                Some(Measured {
                    name: v.name.clone(),
                    dir,
                    empty_dir: v.empty_dir.is_some(),
                    ephemeral: !in_memory,
                })
            })
            .collect();
        Places { volumes, logs }
    }

    /// What the pod's storage holds now (reads the file system: run it off the async
    /// threads).
    pub fn measure(&self, pod: &Pod) -> Usage {
        let mut usage = Usage::default();
        for v in &self.volumes {
            let used = disk_usage(&v.dir);
            if v.empty_dir {
                usage.volumes.insert(v.name.clone(), used);
            }
            if v.ephemeral {
                usage.pod = usage.pod.saturating_add(used);
            }
        }
        // One walk of the log directory gives the pod's logs and each container's.
        let (logs, by_container) = disk_usage_by_entry(&self.logs);
        usage.pod = usage.pod.saturating_add(logs);
        for c in pod.spec.iter().flat_map(|s| &s.containers) {
            let used = by_container.get(&c.name).copied().unwrap_or(0);
            usage.containers.insert(c.name.clone(), used);
        }
        usage
    }
}

/// `disk_usage(path)` of a directory, and the part of it under each of its entries, by name
/// (a file hard-linked from two entries counts in both).
fn disk_usage_by_entry(path: &Path) -> (u64, HashMap<String, u64>) {
    let mut by_entry = HashMap::new();
    let Ok(top) = std::fs::symlink_metadata(path) else {
        return (0, by_entry);
    };
    let mut total = top.blocks().saturating_mul(512);
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            let used = disk_usage(&entry.path());
            total = total.saturating_add(used);
            by_entry.insert(entry.file_name().to_string_lossy().into_owned(), used);
        }
    }
    (total, by_entry)
}

/// The bytes allocated to everything under `path` (0 when it does not exist), as kubelet's
/// `fs.DiskUsage` counts them: 512-byte blocks, hard links once, symbolic links not followed,
/// other file systems not entered. Entries that vanish while it reads are skipped.
pub fn disk_usage(path: &Path) -> u64 {
    let Ok(top) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let dev = top.dev();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![(path.to_path_buf(), top)];
    while let Some((p, meta)) = stack.pop() {
        if meta.dev() != dev {
            continue;
        }
        if meta.nlink() > 1 && !seen.insert(meta.ino()) {
            continue;
        }
        total = total.saturating_add(meta.blocks().saturating_mul(512));
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&p)
        {
            for entry in entries.flatten() {
                // A directory entry's metadata does not follow symbolic links.
                if let Ok(m) = entry.metadata() {
                    stack.push((entry.path(), m));
                }
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u1"},
            "spec": spec,
        }))
        .expect("a pod")
    }

    fn container(name: &str, limit: Option<&str>) -> serde_json::Value {
        match limit {
            Some(l) => json!({"name": name, "resources": {"limits": {"ephemeral-storage": l}}}),
            None => json!({"name": name}),
        }
    }

    fn usage(volumes: &[(&str, u64)], containers: &[(&str, u64)], pod: u64) -> Usage {
        Usage {
            volumes: volumes.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            containers: containers
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            pod,
        }
    }

    fn message(p: &Pod, u: &Usage) -> Option<String> {
        exceeded(p, u).map(|e| e.message)
    }

    #[test]
    fn an_empty_dir_past_its_size_limit_evicts_the_pod() {
        let p = pod(json!({
            "containers": [container("main", None)],
            "volumes": [
                {"name": "free", "emptyDir": {}},
                {"name": "cache", "emptyDir": {"sizeLimit": "1024Ki"}},
            ],
        }));
        assert!(has_limits(&p));
        // At the limit is not past it.
        let at = usage(&[("free", 1 << 30), ("cache", 1 << 20)], &[], 1 << 30);
        assert_eq!(message(&p, &at), None);
        let past = usage(&[("cache", (1 << 20) + 4096)], &[], 0);
        assert_eq!(
            message(&p, &past).as_deref(),
            Some("Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". ")
        );
    }

    #[test]
    fn limits_are_quoted_in_the_format_they_were_written_in() {
        for (limit, quoted) in [("1000k", "1M"), ("1e6", "1e6"), ("1000000", "1M")] {
            let p = pod(json!({
                "containers": [container("main", None)],
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": limit}}],
            }));
            assert_eq!(
                message(&p, &usage(&[("scratch", 1_000_001)], &[], 0)),
                Some(format!(
                    "Usage of EmptyDir volume \"scratch\" exceeds the limit \"{quoted}\". "
                )),
                "{limit}"
            );
        }
    }

    #[test]
    fn a_zero_size_limit_limits_nothing() {
        let p = pod(json!({
            "containers": [container("main", None)],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "0"}}],
        }));
        assert!(!has_limits(&p));
        assert_eq!(message(&p, &usage(&[("v", 1 << 30)], &[], 1 << 30)), None);
    }

    #[test]
    fn the_pod_is_held_to_the_sum_of_its_containers_limits() {
        let p = pod(json!({
            "containers": [container("a", Some("1Mi")), container("b", Some("1Mi")), container("c", None)],
        }));
        assert!(has_limits(&p));
        assert_eq!(message(&p, &usage(&[], &[], 2 << 20)), None);
        assert_eq!(
            message(&p, &usage(&[], &[], (2 << 20) + 1)).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ")
        );
    }

    #[test]
    fn init_containers_and_sidecars_count_as_pod_limits_count_them() {
        // Regular 1Mi + sidecar 1Mi = 2Mi; the init container after the sidecar needs
        // 3Mi + 1Mi = 4Mi beside it, which is more.
        let mut sidecar = container("side", Some("1Mi"));
        sidecar["restartPolicy"] = json!("Always");
        let p = pod(json!({
            "initContainers": [sidecar, container("setup", Some("3Mi"))],
            "containers": [container("main", Some("1Mi"))],
        }));
        assert_eq!(
            message(&p, &usage(&[], &[], (4 << 20) + 1)).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ")
        );
        assert_eq!(message(&p, &usage(&[], &[], 4 << 20)), None);
        // The overhead adds to it.
        let mut with_overhead = p.clone();
        if let Some(s) = with_overhead.spec.as_mut() {
            s.overhead = Some([(EPHEMERAL_STORAGE.to_string(), Quantity("1Mi".into()))].into());
        }
        assert_eq!(message(&with_overhead, &usage(&[], &[], 5 << 20)), None);
    }

    #[test]
    fn a_container_past_its_own_limit_evicts_the_pod() {
        let p = pod(json!({
            "containers": [container("a", Some("10Mi")), container("b", Some("1Mi"))],
        }));
        // The pod is within its 11Mi; container b is not within its 1Mi.
        let u = usage(&[], &[("a", 1 << 20), ("b", (1 << 20) + 512)], 3 << 20);
        assert_eq!(
            message(&p, &u).as_deref(),
            Some("Container b exceeded its local ephemeral storage limit \"1Mi\". ")
        );
    }

    #[test]
    fn the_empty_dir_check_comes_before_the_pod_check() {
        let p = pod(json!({
            "containers": [container("a", Some("1Mi"))],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}],
        }));
        let u = usage(&[("v", 2 << 20)], &[("a", 2 << 20)], 4 << 20);
        assert!(message(&p, &u).is_some_and(|m| m.starts_with("Usage of EmptyDir volume")));
    }

    /// Each check counts its evictions under kubelet's signal for it.
    #[test]
    fn each_limit_has_its_eviction_signal() {
        let signal = |p: &Pod, u: &Usage| exceeded(p, u).map(|e| e.signal);
        let empty_dir = pod(json!({
            "containers": [container("a", None)],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}],
        }));
        assert_eq!(
            signal(&empty_dir, &usage(&[("v", 2 << 20)], &[], 2 << 20)),
            Some("emptydirfs.limit")
        );
        let two =
            pod(json!({"containers": [container("a", Some("1Mi")), container("b", Some("3Mi"))]}));
        // Past the pod's total (4Mi) with each container within its own.
        assert_eq!(
            signal(
                &two,
                &usage(&[], &[("a", 1 << 20), ("b", 3 << 20)], 5 << 20)
            ),
            Some("ephemeralpodfs.limit")
        );
        assert_eq!(
            signal(&two, &usage(&[], &[("a", 2 << 20)], 2 << 20)),
            Some("ephemeralcontainerfs.limit")
        );
        assert_eq!(signal(&two, &usage(&[], &[("a", 1 << 20)], 1 << 20)), None);
    }

    #[test]
    fn pods_without_limits_are_not_measured_and_critical_ones_are_known() {
        let p = pod(
            json!({"containers": [container("a", None)], "volumes": [{"name": "v", "emptyDir": {}}]}),
        );
        assert!(!has_limits(&p));
        assert!(!is_critical(&p));
        let critical =
            pod(json!({"containers": [container("a", None)], "priority": 2_000_000_000}));
        assert!(is_critical(&critical));
    }

    #[test]
    fn disk_usage_counts_blocks_once_per_file_and_no_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("v");
        std::fs::create_dir_all(root.join("sub")).expect("dirs");
        let empty = disk_usage(&root);
        std::fs::write(root.join("sub/data"), vec![7u8; 256 * 1024]).expect("write");
        let with_file = disk_usage(&root);
        assert!(
            with_file >= empty + 256 * 1024,
            "{with_file} after {empty}: the file's blocks count"
        );
        // A second name for the same file adds nothing, nor does a link out of the tree.
        std::fs::hard_link(root.join("sub/data"), root.join("again")).expect("link");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, vec![1u8; 512 * 1024]).expect("write");
        std::os::unix::fs::symlink(&outside, root.join("out")).expect("symlink");
        let linked = disk_usage(&root);
        assert!(
            linked < with_file + 64 * 1024,
            "{linked} after {with_file}: links add no data"
        );
        assert_eq!(disk_usage(&dir.path().join("missing")), 0);
    }

    #[test]
    fn a_pods_usage_is_its_volumes_and_its_logs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pods_dir = dir.path().join("pods");
        let logs = dir.path().join("logs").join("d_p_u1");
        let p = pod(json!({
            "containers": [container("main", Some("1Mi"))],
            "volumes": [
                {"name": "cache", "emptyDir": {"sizeLimit": "1Mi"}},
                {"name": "conf", "configMap": {"name": "c"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "host", "hostPath": {"path": "/"}},
            ],
        }));
        let places = Places::of(&p, &pods_dir, logs.clone());
        let names: Vec<_> = places.volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["cache", "conf", "shm"],
            "the host's files are not the pod's"
        );
        let cache = &places.volumes[0].dir;
        let shm = &places.volumes[2].dir;
        std::fs::create_dir_all(shm).expect("shm dir");
        std::fs::write(shm.join("blob"), vec![0u8; 1024 * 1024]).expect("write");
        std::fs::create_dir_all(cache).expect("cache dir");
        std::fs::write(cache.join("blob"), vec![0u8; 300 * 1024]).expect("write");
        std::fs::create_dir_all(logs.join("main")).expect("log dir");
        std::fs::write(logs.join("main/0.log"), vec![b'x'; 100 * 1024]).expect("write");
        let u = places.measure(&p);
        assert!(u.volumes["cache"] >= 300 * 1024, "{u:?}");
        assert!(!u.volumes.contains_key("conf"), "only emptyDirs by name");
        assert!(u.containers["main"] >= 100 * 1024, "{u:?}");
        assert!(u.pod >= u.volumes["cache"] + u.containers["main"], "{u:?}");
        // A memory-backed emptyDir is held to its own limit but is not the node's disk.
        assert!(u.volumes["shm"] >= 1024 * 1024, "{u:?}");
        assert!(u.pod < u.volumes["shm"] + u.volumes["cache"], "{u:?}");
    }
}
