//! The pods' default working directories (`executor/pods/<uid>`), reused rather than made and
//! removed for each pod.
//!
//! A pod whose containers name no `workingDir` runs in a directory of its own. Making one is a
//! new inode, and removing it frees one; on ext4 without a journal every new inode is found by
//! stepping over the inodes freed in the last minutes, so on a node that runs many short pods
//! a `mkdir` grew to 0.3-0.6 ms, a fifth of the node's CPU per `/bin/true` pod. So a finished
//! pod's directory, if it is still empty, is moved aside into a pool of spares
//! (`executor/spare`), and the next pod's directory is a spare renamed into place: no inode is
//! made or freed. A directory with something in it stays where it is until its pod is deleted,
//! so that what a pod left can still be looked at; one whose mode or owner a pod changed is
//! not reused either.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

/// At most this many spares are kept; more empty directories are removed.
pub const MAX_SPARES: usize = 256;

#[derive(Debug)]
pub struct WorkDirs {
    pods_dir: PathBuf,
    spare_dir: PathBuf,
    /// What a new directory looks like (the pods directory's mode and owner): a directory that
    /// no longer does is not handed to another pod.
    fresh: Look,
    state: Mutex<Spares>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Look {
    mode: u32,
    uid: u32,
    gid: u32,
}

impl Look {
    fn of(dir: &Path) -> Option<Look> {
        let m = std::fs::symlink_metadata(dir).ok()?;
        m.is_dir().then(|| Look {
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        })
    }
}

#[derive(Debug, Default)]
struct Spares {
    /// Empty directories in `spare_dir`, by name.
    names: Vec<u64>,
    /// The name the next spare gets.
    next: u64,
}

impl WorkDirs {
    /// The working directories under `pods_dir`, with spares kept in `spare_dir`. The spares a
    /// previous run left are taken back if they are still empty, and removed otherwise.
    pub fn open(pods_dir: PathBuf, spare_dir: PathBuf) -> io::Result<WorkDirs> {
        std::fs::create_dir_all(&pods_dir)?;
        std::fs::create_dir_all(&spare_dir)?;
        let fresh = Look::of(&pods_dir).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotADirectory,
                "the pods directory is not a directory",
            )
        })?;
        let mut spares = Spares::default();
        for entry in std::fs::read_dir(&spare_dir)? {
            let entry = entry?;
            let path = entry.path();
            let name = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok());
            match name {
                Some(n)
                    if spares.names.len() < MAX_SPARES
                        && Look::of(&path) == Some(fresh)
                        && is_empty_dir(&path) =>
                {
                    spares.names.push(n);
                    spares.next = spares.next.max(n.saturating_add(1));
                }
                _ => remove(&path),
            }
        }
        Ok(WorkDirs {
            pods_dir,
            spare_dir,
            fresh,
            state: Mutex::new(spares),
        })
    }

    /// The default working directory of pod `uid`.
    pub fn path(&self, uid: &str) -> PathBuf {
        self.pods_dir.join(uid)
    }

    /// Make sure pod `uid`'s directory exists: a spare moved into place when there is one
    /// (never over a directory that exists already), a new directory otherwise.
    pub fn provide(&self, uid: &str) -> io::Result<PathBuf> {
        let target = self.path(uid);
        while let Some(n) = self.pop() {
            let spare = self.spare_dir.join(n.to_string());
            match renameat2(
                AT_FDCWD,
                &spare,
                AT_FDCWD,
                &target,
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => return Ok(target),
                // The pod has its directory already: the spare stays one.
                Err(Errno::EEXIST) => {
                    self.push(n);
                    return Ok(target);
                }
                // That spare is gone (or unusable): try the next.
                Err(e) => {
                    tracing::debug!(spare = %spare.display(), error = %e, "taking a spare working directory");
                }
            }
        }
        std::fs::create_dir_all(&target)?;
        Ok(target)
    }

    /// Pod `uid` runs nothing any more: its directory, if it is as new, becomes a spare.
    pub fn finished(&self, uid: &str) {
        let dir = self.path(uid);
        if self.as_new(&dir) {
            self.keep_as_spare(&dir);
        }
    }

    /// Pod `uid` is gone: its directory goes too (kept as a spare if it is as new).
    pub fn removed(&self, uid: &str) {
        let dir = self.path(uid);
        if !self.as_new(&dir) || !self.keep_as_spare(&dir) {
            remove(&dir);
        }
    }

    /// Whether `dir` is empty, with the mode and owner of a new directory.
    fn as_new(&self, dir: &Path) -> bool {
        Look::of(dir) == Some(self.fresh) && is_empty_dir(dir)
    }

    /// Move the empty directory `dir` into the pool; false when the pool is full or the move
    /// failed.
    fn keep_as_spare(&self, dir: &Path) -> bool {
        let Some(n) = self.reserve() else {
            return false;
        };
        let spare = self.spare_dir.join(n.to_string());
        match std::fs::rename(dir, &spare) {
            Ok(()) => {
                self.push(n);
                true
            }
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "keeping a spare working directory");
                false
            }
        }
    }

    fn pop(&self) -> Option<u64> {
        self.state.lock().ok()?.names.pop()
    }

    fn push(&self, n: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.names.push(n);
        }
    }

    /// A free spare name, if the pool has room.
    fn reserve(&self) -> Option<u64> {
        let mut s = self.state.lock().ok()?;
        if s.names.len() >= MAX_SPARES {
            return None;
        }
        let n = s.next;
        s.next = s.next.saturating_add(1);
        Some(n)
    }

    #[cfg(test)]
    fn spares(&self) -> usize {
        self.state.lock().map(|s| s.names.len()).unwrap_or(0)
    }
}

/// Whether `dir` is a directory with nothing in it (false when it cannot be read).
fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

fn remove(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "removing a working directory")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dirs() -> (tempfile::TempDir, WorkDirs) {
        let tmp = tempfile::tempdir().expect("temp dir");
        let w = WorkDirs::open(tmp.path().join("pods"), tmp.path().join("spare"))
            .expect("open work dirs");
        (tmp, w)
    }

    fn inode(p: &Path) -> u64 {
        std::fs::metadata(p).expect("metadata").ino()
    }

    #[test]
    fn a_pod_gets_a_new_directory_when_there_is_no_spare() {
        let (_tmp, w) = dirs();
        let dir = w.provide("uid-1").expect("provide");
        assert_eq!(dir, w.path("uid-1"));
        assert!(dir.is_dir());
        assert_eq!(w.spares(), 0);
    }

    #[test]
    fn an_empty_finished_directory_becomes_the_next_pods() {
        let (_tmp, w) = dirs();
        let first = w.provide("uid-1").expect("provide");
        let ino = inode(&first);
        w.finished("uid-1");
        assert!(!first.exists(), "moved aside");
        assert_eq!(w.spares(), 1);
        let second = w.provide("uid-2").expect("provide");
        assert_eq!(inode(&second), ino, "the same directory, renamed");
        assert_eq!(w.spares(), 0);
    }

    #[test]
    fn a_directory_with_files_stays_until_its_pod_is_removed() {
        let (_tmp, w) = dirs();
        let dir = w.provide("uid-1").expect("provide");
        std::fs::write(dir.join("result.txt"), "42").expect("write");
        w.finished("uid-1");
        assert!(dir.join("result.txt").exists(), "left for the user to read");
        assert_eq!(w.spares(), 0);
        w.removed("uid-1");
        assert!(!dir.exists());
        assert_eq!(w.spares(), 0, "a used directory is not reused");
    }

    #[test]
    fn a_directory_whose_mode_a_pod_changed_is_not_reused() {
        let (_tmp, w) = dirs();
        let dir = w.provide("uid-1").expect("provide");
        let mode = std::fs::metadata(&dir)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o7777;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode ^ 0o070))
            .expect("chmod");
        w.finished("uid-1");
        assert!(dir.exists(), "left with its pod");
        w.removed("uid-1");
        assert!(!dir.exists());
        assert_eq!(w.spares(), 0);
    }

    #[test]
    fn a_removed_pods_empty_directory_is_kept_as_a_spare() {
        let (_tmp, w) = dirs();
        let dir = w.provide("uid-1").expect("provide");
        w.removed("uid-1");
        assert!(!dir.exists());
        assert_eq!(w.spares(), 1);
        // Removing a pod whose directory is already a spare (or never existed) is harmless.
        w.removed("uid-1");
        w.removed("never-ran");
        assert_eq!(w.spares(), 1);
    }

    #[test]
    fn a_spare_never_replaces_an_existing_directory() {
        let (_tmp, w) = dirs();
        w.provide("uid-1").expect("provide");
        w.finished("uid-1");
        let existing = w.path("uid-2");
        std::fs::create_dir_all(&existing).expect("mkdir");
        let ino = inode(&existing);
        w.provide("uid-2").expect("provide");
        assert_eq!(inode(&existing), ino, "the pod's own directory is kept");
        assert_eq!(w.spares(), 1, "the spare stays in the pool");
    }

    #[test]
    fn the_pool_is_bounded() {
        let (_tmp, w) = dirs();
        for i in 0..MAX_SPARES + 3 {
            let uid = format!("uid-{i}");
            w.provide(&uid).expect("provide");
        }
        for i in 0..MAX_SPARES + 3 {
            w.removed(&format!("uid-{i}"));
        }
        assert_eq!(w.spares(), MAX_SPARES);
        let left = std::fs::read_dir(w.pods_dir.clone()).expect("read").count();
        assert_eq!(left, 0, "the directories beyond the pool are removed");
    }

    #[test]
    fn spares_left_by_a_previous_run_are_reused_when_empty_and_removed_otherwise() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (pods, spare) = (tmp.path().join("pods"), tmp.path().join("spare"));
        std::fs::create_dir_all(spare.join("7")).expect("mkdir");
        std::fs::create_dir_all(spare.join("8")).expect("mkdir");
        std::fs::write(spare.join("8").join("stray"), "x").expect("write");
        std::fs::create_dir_all(spare.join("not-a-spare")).expect("mkdir");
        let w = WorkDirs::open(pods, spare.clone()).expect("open");
        assert_eq!(w.spares(), 1);
        assert!(!spare.join("8").exists() && !spare.join("not-a-spare").exists());
        let dir = w.provide("uid-1").expect("provide");
        assert!(dir.is_dir() && !spare.join("7").exists());
        // New spares are named after the ones found.
        w.finished("uid-1");
        assert!(spare.join("8").is_dir());
    }

    #[test]
    fn a_missing_spare_is_skipped() {
        let (_tmp, w) = dirs();
        w.provide("uid-1").expect("provide");
        w.finished("uid-1");
        std::fs::remove_dir(w.spare_dir.join("0")).expect("rmdir");
        let dir = w.provide("uid-2").expect("provide");
        assert!(dir.is_dir());
        assert_eq!(w.spares(), 0);
    }
}
