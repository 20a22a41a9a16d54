//! What the host offers: cores, memory and identity, read from /proc and /etc.

use std::path::Path;

/// The host facts a Node reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub cpus: usize,
    /// MemTotal in KiB.
    pub memory_kib: u64,
    /// The size of the filesystem holding the data directory, in KiB: kubelet reports its
    /// root directory's filesystem as the node's `ephemeral-storage`.
    pub storage_kib: u64,
    pub kernel_version: String,
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
    /// GOARCH spelling (`amd64`, `arm64`), as Node labels and nodeInfo use.
    pub architecture: String,
}

impl Machine {
    /// The host's facts; storage is that of the filesystem `data_dir` is on.
    pub fn detect(data_dir: &Path) -> Machine {
        let read = |p: &str| {
            std::fs::read_to_string(Path::new(p))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|s| mem_total_kib(&s))
                .unwrap_or(0),
            storage_kib: filesystem_kib(data_dir).unwrap_or(0),
            kernel_version: read("/proc/sys/kernel/osrelease"),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|s| pretty_name(&s))
                .unwrap_or_else(|| "Linux".to_string()),
            machine_id: read("/etc/machine-id"),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
            architecture: go_arch(std::env::consts::ARCH).to_string(),
        }
    }
}

/// The total size of the filesystem `path` is on (its nearest existing ancestor's), in KiB.
fn filesystem_kib(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let st = nix::sys::statvfs::statvfs(existing).ok()?;
    let bytes = widen(st.blocks())?.checked_mul(widen(st.fragment_size())?)?;
    Some(bytes / 1024)
}

/// A C unsigned integer (as wide as u64 or narrower, by platform) as u64.
fn widen<T: TryInto<u64>>(v: T) -> Option<u64> {
    v.try_into().ok()
}

/// `MemTotal:  16326428 kB` → 16326428.
pub fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// `PRETTY_NAME="Debian GNU/Linux 13 (trixie)"` → the quoted text.
pub fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        let v = l.strip_prefix("PRETTY_NAME=")?;
        Some(v.trim().trim_matches('"').to_string())
    })
}

pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_and_os_release() {
        let meminfo = "MemFree:  10 kB\nMemTotal:       16326428 kB\nBuffers: 1 kB\n";
        assert_eq!(mem_total_kib(meminfo), Some(16326428));
        assert_eq!(mem_total_kib("nothing here"), None);
        let os = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n";
        assert_eq!(
            pretty_name(os).as_deref(),
            Some("Debian GNU/Linux 13 (trixie)")
        );
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
    }

    #[test]
    fn detects_this_machine() {
        let m = Machine::detect(Path::new("/tmp/does-not-exist-kbatch/data"));
        assert!(m.cpus >= 1);
        assert!(m.memory_kib > 0, "MemTotal read from /proc/meminfo");
        assert!(m.storage_kib > 0, "the size of the filesystem /tmp is on");
    }
}
