//! kubelet's `AtomicWriter` (pkg/volume/util/atomic_writer.go) on Linux: the files of an
//! API-backed volume live in a hidden timestamped directory, `..data` points at it, and the
//! names a container sees are symlinks through `..data`; an update writes a new timestamped
//! directory and swaps `..data` with one rename, so a reader never sees half an update.
//!
//! ```text
//! <target>/podName              -> ..data/podName
//! <target>/user                 -> ..data/user
//! <target>/..data               -> ..2016_02_01_15_04_05.12345678
//! <target>/..2016_02_01_15_04_05.12345678/{podName,user/labels}
//! ```
//!
//! Paths starting with `..` are the writer's own. OS errors are worded as Go's `PathError` and
//! `LinkError` (`open PATH: permission denied`), as kubelet reports them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::hash::{BuildHasher, RandomState};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use kbatch_api::field::quote;

use super::payload::{FileProjection, Payload};

const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;
const DATA_DIR_NAME: &str = "..data";
const NEW_DATA_DIR_NAME: &str = "..data_tmp";
/// How many names `os.MkdirTemp` tries before giving up on collisions.
const TEMP_DIR_ATTEMPTS: u32 = 10_000;

/// A validated payload, keyed by the cleaned paths.
type CleanPayload<'a> = BTreeMap<String, &'a FileProjection>;

/// `AtomicWriter.Write`: project `payload` into `target_dir` (which must exist). Returns whether
/// anything on disk changed. Unchanged contents keep the current data directory; missing
/// user-visible links are recreated all the same (kubernetes#121472).
pub fn write(target_dir: &Path, payload: &Payload) -> io::Result<bool> {
    let clean = validate_payload(payload)?;
    let old_ts_dir = read_data_dir_link(target_dir)?;
    let (should_write, to_remove) = match &old_ts_dir {
        None => (true, BTreeSet::new()),
        Some(old) => {
            let old_path = join_link(target_dir, old);
            let to_remove = paths_to_remove(&clean, &old_path);
            let differs = payload_differs(&clean, &old_path)?;
            (differs || !to_remove.is_empty(), to_remove)
        }
    };
    if should_write {
        publish(target_dir, &clean)?;
    }
    let linked = create_user_visible_files(target_dir, &clean)?;
    let removed = remove_user_visible_paths(target_dir, &to_remove)?;
    // The old data directory goes only when a new one replaced it.
    if let (true, Some(old)) = (should_write, &old_ts_dir) {
        remove_all(&join_link(target_dir, old))?;
    }
    Ok(should_write || linked || removed)
}

/// The payload `..data` currently points at (regular files, with their permission bits), or
/// `None` when nothing was written yet.
pub fn read_current(target_dir: &Path) -> io::Result<Option<Payload>> {
    let Some(link) = read_data_dir_link(target_dir)? else {
        return Ok(None);
    };
    let mut payload = Payload::new();
    read_tree(&join_link(target_dir, &link), "", &mut payload)?;
    Ok(Some(payload))
}

fn read_tree(dir: &Path, prefix: &str, out: &mut Payload) -> io::Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| path_error("open", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| path_error("readdirent", dir, e))?;
        let path = entry.path();
        let relative = child(prefix, &entry.file_name().to_string_lossy());
        let kind = entry
            .file_type()
            .map_err(|e| path_error("lstat", &path, e))?;
        if kind.is_dir() {
            read_tree(&path, &relative, out)?;
        } else if kind.is_file() {
            let mode = fs::metadata(&path)
                .map_err(|e| path_error("stat", &path, e))?
                .permissions()
                .mode();
            let data = read_file(&path)?;
            out.insert(
                relative,
                FileProjection {
                    data,
                    mode: mode & 0o7777,
                },
            );
        }
    }
    Ok(())
}

// ---- validation ---------------------------------------------------------------------------

/// `validatePayload`: every path valid, keyed by its cleaned form.
fn validate_payload(payload: &Payload) -> io::Result<CleanPayload<'_>> {
    let mut clean = CleanPayload::new();
    for (path, projection) in payload {
        validate_path(path)?;
        clean.insert(clean_path(path), projection);
    }
    Ok(clean)
}

/// `validatePath`: a payload path must be non-empty and relative, at most 4096 bytes, with no
/// `..` element and no element over 255 bytes, and must not start with `..` (the writer's own
/// names).
pub fn validate_path(path: &str) -> io::Result<()> {
    let invalid = |message: String| Err(io::Error::new(io::ErrorKind::InvalidInput, message));
    if path.is_empty() {
        return invalid(format!("invalid path: must not be empty: {}", quote(path)));
    }
    if path.starts_with('/') {
        return invalid(format!("invalid path: must be relative path: {path}"));
    }
    if path.len() > MAX_PATH_LENGTH {
        return invalid(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    for item in path.split('/') {
        if item == ".." {
            return invalid(format!("invalid path: must not contain '..': {path}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return invalid(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} \
                 characters"
            ));
        }
    }
    let first = path.split('/').next().unwrap_or(path);
    if first.starts_with("..") && first.len() > 2 {
        return invalid(format!("invalid path: must not start with '..': {path}"));
    }
    Ok(())
}

/// Go's `path.Clean`: no empty or `.` elements, `..` folded into its parent where there is one,
/// `.` for nothing.
pub fn clean_path(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for element in path.split('/') {
        match element {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if rooted => {}
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    if rooted {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_string()
    } else {
        joined
    }
}

// ---- what changed -------------------------------------------------------------------------

/// Where `..data` points, or `None` when it does not exist.
fn read_data_dir_link(target_dir: &Path) -> io::Result<Option<PathBuf>> {
    let link = target_dir.join(DATA_DIR_NAME);
    match fs::read_link(&link) {
        Ok(to) => Ok(Some(to)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(path_error("readlink", &link, e)),
    }
}

/// Go's `filepath.Join(target, link)`: the link is appended even when absolute.
fn join_link(target_dir: &Path, link: &Path) -> PathBuf {
    target_dir.join(link.strip_prefix("/").unwrap_or(link))
}

/// `pathsToRemove`: what the old data directory holds (files and directories) that neither a
/// payload path nor one of its parent directories names.
fn paths_to_remove(payload: &CleanPayload, old_ts_path: &Path) -> BTreeSet<String> {
    let mut current = BTreeSet::new();
    walk(old_ts_path, "", &mut current);
    let wanted = with_parents(payload.keys());
    current.difference(&wanted).cloned().collect()
}

/// Every path under `dir`, relative, symlinks not followed; unreadable directories are
/// skipped, as upstream's walk visitor ignores errors.
fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let relative = child(prefix, &entry.file_name().to_string_lossy());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&entry.path(), &relative, out);
        }
        out.insert(relative);
    }
}

fn with_parents<'a>(paths: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for path in paths {
        let mut sub = path.as_str();
        loop {
            all.insert(sub.to_string());
            match sub.rfind('/') {
                Some(slash) => sub = &sub[..slash],
                None => break,
            }
        }
    }
    all
}

fn child(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// `shouldWritePayload`: whether some payload file is missing from the old data directory or
/// holds other bytes. Modes are not compared, as upstream.
fn payload_differs(payload: &CleanPayload, old_ts_path: &Path) -> io::Result<bool> {
    for (path, projection) in payload {
        if file_differs(&old_ts_path.join(path), &projection.data)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `shouldWriteFile`. Only "does not exist" means "write": another failure (a file where a
/// directory now is, or the reverse) is the error upstream reports.
fn file_differs(path: &Path, content: &[u8]) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        _ => Ok(read_file(path)? != content),
    }
}

/// Go's `os.ReadFile`: open and read fail with errors of their own.
fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = fs::File::open(path).map_err(|e| path_error("open", path, e))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| path_error("read", path, e))?;
    Ok(data)
}

// ---- writing ------------------------------------------------------------------------------

/// Write the payload into a new timestamped directory and point `..data` at it atomically
/// (a `..data_tmp` symlink renamed over `..data`).
fn publish(target_dir: &Path, payload: &CleanPayload) -> io::Result<()> {
    let (ts_name, ts_dir) = new_timestamp_dir(target_dir)?;
    write_payload_to_dir(payload, &ts_dir)?;
    let new_link = target_dir.join(NEW_DATA_DIR_NAME);
    let ts_name = Path::new(&ts_name);
    if let Err(e) = symlink(ts_name, &new_link) {
        // Best effort, as upstream (which only logs a failed cleanup).
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(link_error("symlink", ts_name, &new_link, e));
    }
    let data_link = target_dir.join(DATA_DIR_NAME);
    if let Err(e) = fs::rename(&new_link, &data_link) {
        let _ = fs::remove_file(&new_link);
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(link_error("rename", &new_link, &data_link, e));
    }
    Ok(())
}

/// `newTimestampDir`: `os.MkdirTemp(target, "..2006_01_02_15_04_05.")` at the current UTC time
/// (the prefix and a random 32-bit number), mode 0755 whatever the umask, so that group and
/// others can traverse it.
fn new_timestamp_dir(target_dir: &Path) -> io::Result<(String, PathBuf)> {
    let prefix = jiff::Timestamp::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.")
        .to_string();
    for attempt in 0..TEMP_DIR_ATTEMPTS {
        let name = format!("{prefix}{}", random_u32(attempt));
        let path = target_dir.join(&name);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                set_mode(&path, 0o755)?;
                return Ok((name, path));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(path_error("mkdir", &path, e)),
        }
    }
    let pattern = target_dir.join(format!("{prefix}*"));
    let exhausted = io::Error::new(io::ErrorKind::AlreadyExists, "file already exists");
    Err(path_error("mkdirtemp", &pattern, exhausted))
}

/// A random number for a directory name: each `RandomState` is freshly keyed.
fn random_u32(attempt: u32) -> u32 {
    let wide = RandomState::new().hash_one(attempt);
    (wide >> 32) as u32
}

/// `writePayloadToDir`: parent directories as `os.MkdirAll(dir, 0777)` makes them (the umask
/// applies, as upstream), each file with its mode set explicitly after creation.
fn write_payload_to_dir(payload: &CleanPayload, dir: &Path) -> io::Result<()> {
    for (path, projection) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            make_dirs(parent)?;
        }
        write_file(&full, &projection.data, permission_bits(projection.mode))?;
    }
    Ok(())
}

/// The bits `os.Chmod(os.FileMode(mode))` sets for an API mode: Go keeps only the permission
/// bits of a plain number (its setuid, setgid and sticky flags are other bits), and the API
/// allows 0..=0777.
fn permission_bits(mode: u32) -> u32 {
    mode & 0o777
}

fn make_dirs(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o777)
        .create(dir)
        .map_err(|e| path_error("mkdir", dir, e))
}

/// `os.WriteFile` then `os.Chmod`: the mode must not depend on the umask.
fn write_file(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| path_error("open", path, e))?;
    file.write_all(data)
        .map_err(|e| path_error("write", path, e))?;
    set_mode(path, mode)
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| path_error("chmod", path, e))
}

/// `createUserVisibleFiles`: `name -> ..data/name` for each top-level element of the payload
/// that has no link yet. Returns whether it made one.
fn create_user_visible_files(target_dir: &Path, payload: &CleanPayload) -> io::Result<bool> {
    let mut created = false;
    for path in payload.keys() {
        let top = path.split_once('/').map_or(path.as_str(), |(top, _)| top);
        let visible = target_dir.join(top);
        if let Err(e) = fs::read_link(&visible)
            && e.kind() == io::ErrorKind::NotFound
        {
            let into_data = Path::new(DATA_DIR_NAME).join(top);
            symlink(&into_data, &visible)
                .map_err(|e| link_error("symlink", &into_data, &visible, e))?;
            created = true;
        }
    }
    Ok(created)
}

/// `removeUserVisiblePaths`: remove the top-level names (paths without `/`) no longer in the
/// payload, trying them all; the last failure is the error. Returns whether it removed one.
fn remove_user_visible_paths(target_dir: &Path, paths: &BTreeSet<String>) -> io::Result<bool> {
    let mut removed = false;
    let mut last_error = None;
    for path in paths.iter().filter(|p| !p.contains('/')) {
        match remove(&target_dir.join(path)) {
            Ok(()) => removed = true,
            Err(e) => last_error = Some(e),
        }
    }
    match last_error {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

/// Go's `os.Remove`: unlink, else rmdir; the unlink error stands when it is no directory.
fn remove(path: &Path) -> io::Result<()> {
    let Err(unlink) = fs::remove_file(path) else {
        return Ok(());
    };
    match fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(rmdir) if rmdir.kind() == io::ErrorKind::NotADirectory => {
            Err(path_error("remove", path, unlink))
        }
        Err(rmdir) => Err(path_error("remove", path, rmdir)),
    }
}

/// Go's `os.RemoveAll`: a path that does not exist is no error.
fn remove_all(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other.map_err(|e| path_error("unlinkat", path, e)),
    }
}

// ---- Go's error wording -------------------------------------------------------------------

/// Go's `*PathError`: "op path: text".
fn path_error(op: &str, path: &Path, err: io::Error) -> io::Error {
    let message = format!("{op} {}: {}", path.display(), go_text(&err));
    io::Error::new(err.kind(), message)
}

/// Go's `*LinkError`: "op old new: text".
fn link_error(op: &str, old: &Path, new: &Path, err: io::Error) -> io::Error {
    let message = format!(
        "{op} {} {}: {}",
        old.display(),
        new.display(),
        go_text(&err)
    );
    io::Error::new(err.kind(), message)
}

/// Go's text for an errno is the C library's with a lower-case first letter ("permission
/// denied"), without Rust's "(os error N)".
fn go_text(err: &io::Error) -> String {
    let Some(code) = err.raw_os_error() else {
        return err.to_string();
    };
    let text = io::Error::from_raw_os_error(code).to_string();
    let text = text
        .strip_suffix(&format!(" (os error {code})"))
        .unwrap_or(&text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &[u8], mode: u32) -> FileProjection {
        FileProjection {
            data: data.to_vec(),
            mode,
        }
    }

    fn payload(files: &[(&str, &[u8], u32)]) -> Payload {
        files
            .iter()
            .map(|(path, data, mode)| (path.to_string(), file(data, *mode)))
            .collect()
    }

    /// Files all with mode 0644.
    fn plain(files: &[(&str, &str)]) -> Payload {
        files
            .iter()
            .map(|(path, data)| (path.to_string(), file(data.as_bytes(), 0o644)))
            .collect()
    }

    fn data_link(target: &Path) -> PathBuf {
        fs::read_link(target.join(DATA_DIR_NAME)).expect("..data is a symlink")
    }

    /// The payload a container sees: each top-level user-visible name (a symlink that must
    /// point into `..data`) followed and walked, as upstream's `checkVolumeContents` does.
    fn observed(target: &Path) -> Payload {
        let mut out = Payload::new();
        for entry in fs::read_dir(target).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("..") {
                continue;
            }
            assert!(
                entry.file_type().unwrap().is_symlink(),
                "{name} is no symlink"
            );
            let to = fs::read_link(entry.path()).unwrap();
            assert_eq!(to, Path::new(DATA_DIR_NAME).join(&name), "{name}");
            let followed = target.join(&name);
            if fs::metadata(&followed).unwrap().is_dir() {
                read_tree(&followed, &name, &mut out).unwrap();
            } else {
                let mode = fs::metadata(&followed).unwrap().permissions().mode() & 0o7777;
                out.insert(name, file(&fs::read(&followed).unwrap(), mode));
            }
        }
        out
    }

    fn cleaned(p: &Payload) -> Payload {
        p.iter().map(|(k, v)| (clean_path(k), v.clone())).collect()
    }

    /// The target holds exactly `expected` (cleaned), through its links and through
    /// `read_current`, with one timestamped directory and no leftover `..data_tmp`.
    fn check_contents(target: &Path, case: &str, expected: &Payload) {
        let expected = cleaned(expected);
        assert_eq!(observed(target), expected, "{case}: visible files");
        assert_eq!(
            read_current(target).unwrap(),
            Some(expected),
            "{case}: data dir"
        );
        let hidden: Vec<String> = fs::read_dir(target)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".."))
            .collect();
        let link = data_link(target).to_string_lossy().into_owned();
        let mut want = vec![DATA_DIR_NAME.to_string(), link];
        want.sort();
        let mut hidden = hidden;
        hidden.sort();
        assert_eq!(hidden, want, "{case}: hidden entries");
    }

    fn assert_invalid(result: io::Result<()>, message: &str) {
        let err = result.expect_err(message);
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), message);
    }

    #[test]
    fn validate_path_as_upstream() {
        let long_path = "a".repeat(MAX_PATH_LENGTH + 1);
        let long_name = "a".repeat(MAX_FILE_NAME_LENGTH + 1);
        let at_limit = format!("{}/{}", "a".repeat(255), "b".repeat(255));
        // (path, None when valid, else the error).
        let cases: Vec<(&str, Option<String>)> = vec![
            ("i/am/well/behaved.txt", None),
            ("keepyourheaddownandfollowtherules.txt", None),
            (".dotfile", None),
            ("..", Some("invalid path: must not contain '..': ..".into())),
            ("a..b/..c", None),
            (&at_limit, None),
            (
                &long_path,
                Some("invalid path: must be less than or equal to 4096 characters".into()),
            ),
            (
                &long_name,
                Some("invalid path: filenames must be less than or equal to 255 characters".into()),
            ),
            (
                "/dev/null",
                Some("invalid path: must be relative path: /dev/null".into()),
            ),
            (
                "..sneaky.txt",
                Some("invalid path: must not start with '..': ..sneaky.txt".into()),
            ),
            (
                "..data/x",
                Some("invalid path: must not start with '..': ..data/x".into()),
            ),
            (
                "hello/there/../../../../../../etc/passwd",
                Some(
                    "invalid path: must not contain '..': hello/there/../../../../../../etc/passwd"
                        .into(),
                ),
            ),
            (
                "hello/../etc/somethingbad",
                Some("invalid path: must not contain '..': hello/../etc/somethingbad".into()),
            ),
            ("", Some("invalid path: must not be empty: \"\"".into())),
        ];
        for (path, want) in cases {
            match want {
                None => assert!(validate_path(path).is_ok(), "{path}"),
                Some(message) => assert_invalid(validate_path(path), &message),
            }
        }
    }

    #[test]
    fn clean_path_as_go() {
        let cases = [
            ("foo////bar", "foo/bar"),
            ("./bar", "bar"),
            ("foo///bar/", "foo/bar"),
            ("a/./b/.", "a/b"),
            ("a/b/../c", "a/c"),
            ("a/../..", ".."),
            ("../a/..", ".."),
            ("", "."),
            (".", "."),
            ("/a/../../b", "/b"),
            ("//", "/"),
        ];
        for (path, want) in cases {
            assert_eq!(clean_path(path), want, "{path:?}");
        }
    }

    #[test]
    fn validate_payload_cleans_paths() {
        let long_path = "a".repeat(MAX_PATH_LENGTH + 1);
        // (payload paths, cleaned paths or None when invalid).
        let cases: Vec<(Vec<&str>, Option<Vec<&str>>)> = vec![
            (vec!["foo", "bar"], Some(vec!["bar", "foo"])),
            (vec![&long_path], None),
            (vec!["/dev/null"], None),
            (vec!["..sneaky.txt"], None),
            (vec!["foo/../etc/password"], None),
            (vec![""], None),
            (vec!["foo////bar"], Some(vec!["foo/bar"])),
        ];
        for (paths, want) in cases {
            let p = paths
                .iter()
                .map(|path| (path.to_string(), file(b"", 0)))
                .collect();
            let got = validate_payload(&p)
                .ok()
                .map(|c| c.keys().cloned().collect::<Vec<_>>());
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{paths:?}");
        }
    }

    #[test]
    fn paths_to_remove_as_upstream() {
        let cases: Vec<(&str, Payload, Payload, Vec<&str>)> = vec![
            (
                "simple",
                plain(&[("foo.txt", "foo"), ("bar.txt", "bar")]),
                plain(&[("foo.txt", "foo")]),
                vec!["bar.txt"],
            ),
            (
                "simple 2",
                plain(&[("foo.txt", "foo"), ("zip/bar.txt", "zip/b}ar")]),
                plain(&[("foo.txt", "foo")]),
                vec!["zip/bar.txt", "zip"],
            ),
            (
                "subdirs 1",
                plain(&[("foo.txt", "foo"), ("zip/zap/bar.txt", "zip/bar")]),
                plain(&[("foo.txt", "foo")]),
                vec!["zip/zap/bar.txt", "zip", "zip/zap"],
            ),
            (
                "subdirs 2",
                plain(&[("foo.txt", "foo"), ("zip/1/2/3/4/bar.txt", "zip/b}ar")]),
                plain(&[("foo.txt", "foo")]),
                vec![
                    "zip/1/2/3/4/bar.txt",
                    "zip",
                    "zip/1",
                    "zip/1/2",
                    "zip/1/2/3",
                    "zip/1/2/3/4",
                ],
            ),
            (
                "subdirs 3",
                plain(&[
                    ("foo.txt", "foo"),
                    ("zip/1/2/3/4/bar.txt", "zip/b}ar"),
                    ("zap/a/b/c/bar.txt", "zap/bar"),
                ]),
                plain(&[("foo.txt", "foo")]),
                vec![
                    "zip/1/2/3/4/bar.txt",
                    "zip",
                    "zip/1",
                    "zip/1/2",
                    "zip/1/2/3",
                    "zip/1/2/3/4",
                    "zap",
                    "zap/a",
                    "zap/a/b",
                    "zap/a/b/c",
                    "zap/a/b/c/bar.txt",
                ],
            ),
            (
                "subdirs 4",
                plain(&[
                    ("foo.txt", "foo"),
                    ("zap/1/2/3/4/bar.txt", "zip/bar"),
                    ("zap/1/2/c/bar.txt", "zap/bar"),
                    ("zap/1/2/magic.txt", "indigo"),
                ]),
                plain(&[("foo.txt", "foo"), ("zap/1/2/magic.txt", "indigo")]),
                vec![
                    "zap/1/2/3/4/bar.txt",
                    "zap/1/2/3",
                    "zap/1/2/3/4",
                    "zap/1/2/c",
                    "zap/1/2/c/bar.txt",
                ],
            ),
            (
                "subdirs 5",
                plain(&[
                    ("foo.txt", "foo"),
                    ("zap/1/2/3/4/bar.txt", "zip/bar"),
                    ("zap/1/2/c/bar.txt", "zap/bar"),
                ]),
                plain(&[("foo.txt", "foo"), ("zap/1/2/magic.txt", "indigo")]),
                vec![
                    "zap/1/2/3/4/bar.txt",
                    "zap/1/2/3",
                    "zap/1/2/3/4",
                    "zap/1/2/c",
                    "zap/1/2/c/bar.txt",
                ],
            ),
        ];
        for (name, first, next, want) in cases {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), &first).unwrap();
            let old = join_link(dir.path(), &data_link(dir.path()));
            let next = validate_payload(&next).unwrap();
            let got = paths_to_remove(&next, &old);
            let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    /// A 125-byte ELF binary (upstream's "mystery binary").
    fn binary() -> Vec<u8> {
        use base64::Engine;
        let encoded = "f0VMRgIBAQAAAAAAAAAAAAIAPgABAAAAeABAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAEAAOAAB\
                       AAAAAAAAAAEAAAAFAAAAAAAAAAAAAAAAAEAAAAAAAAAAQAAAAAAAfQAAAAAAAAB9AAAAAAAAAAAA\
                       IAAAAAAAsDyZDwU=";
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(bytes.len(), 125);
        bytes
    }

    #[test]
    fn write_once_as_upstream() {
        let bin = binary();
        let cases: Vec<(&str, Payload, Option<&str>)> = vec![
            (
                "invalid payload 1",
                payload(&[
                    ("foo", b"foo", 0o644),
                    ("..bar", b"bar", 0o644),
                    ("binary.bin", &bin, 0o644),
                ]),
                Some("invalid path: must not start with '..': ..bar"),
            ),
            (
                "invalid payload 2",
                payload(&[("foo/../bar", b"foo", 0o644)]),
                Some("invalid path: must not contain '..': foo/../bar"),
            ),
            ("basic 1", plain(&[("foo", "foo"), ("bar", "bar")]), None),
            (
                "basic 2",
                payload(&[("binary.bin", &bin, 0o644), (".binary.bin", &bin, 0o644)]),
                None,
            ),
            (
                "basic mode 1",
                payload(&[("foo", b"foo", 0o777), ("bar", b"bar", 0o400)]),
                None,
            ),
            (
                "dotfiles",
                plain(&[
                    ("foo", "foo"),
                    ("bar", "bar"),
                    (".dotfile", "dotfile"),
                    (".dotfile.file", "dotfile.file"),
                ]),
                None,
            ),
            (
                "dotfiles mode",
                payload(&[
                    ("foo", b"foo", 0o407),
                    ("bar", b"bar", 0o440),
                    (".dotfile", b"dotfile", 0o777),
                    (".dotfile.file", b"dotfile.file", 0o666),
                ]),
                None,
            ),
            (
                "subdirectories 1",
                plain(&[("foo/bar.txt", "foo/bar"), ("bar/zab.txt", "bar/zab.txt")]),
                None,
            ),
            (
                "subdirectories mode 1",
                payload(&[
                    ("foo/bar.txt", b"foo/bar", 0o400),
                    ("bar/zab.txt", b"bar/zab.txt", 0o644),
                ]),
                None,
            ),
            (
                "subdirectories 2",
                plain(&[
                    ("foo//bar.txt", "foo//bar"),
                    ("bar///bar/zab.txt", "bar/../bar/zab.txt"),
                ]),
                None,
            ),
            (
                "subdirectories 3",
                plain(&[
                    ("foo/bar.txt", "foo/bar"),
                    ("bar/zab.txt", "bar/zab.txt"),
                    ("foo/blaz/bar.txt", "foo/blaz/bar"),
                    ("bar/zib/zab.txt", "bar/zib/zab.txt"),
                ]),
                None,
            ),
            (
                "kitchen sink",
                payload(&[
                    ("foo.log", b"foo", 0o644),
                    ("bar.zap", b"bar", 0o644),
                    (".dotfile", b"dotfile", 0o644),
                    ("foo/bar.txt", b"foo/bar", 0o644),
                    ("bar/zab.txt", b"bar/zab.txt", 0o644),
                    ("foo/blaz/bar.txt", b"foo/blaz/bar", 0o644),
                    ("bar/zib/zab.txt", b"bar/zib/zab.txt", 0o400),
                    ("1/2/3/4/5/6/7/8/9/10/.dotfile.lib", b"1-2-3-dotfile", 0o777),
                ]),
                None,
            ),
        ];
        for (name, p, error) in cases {
            let dir = tempfile::tempdir().unwrap();
            let got = write(dir.path(), &p);
            match error {
                Some(message) => {
                    let err = got.expect_err(name);
                    assert_eq!(err.to_string(), message, "{name}");
                    // Nothing at all was written.
                    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "{name}");
                }
                None => {
                    assert!(got.unwrap(), "{name}: a first write changes the target");
                    check_contents(dir.path(), name, &p);
                }
            }
        }
    }

    #[test]
    fn update_as_upstream() {
        // (case, first, next, whether the second write makes a new data directory).
        let cases: Vec<(&str, Payload, Payload, bool)> = vec![
            (
                "update",
                plain(&[("foo", "foo"), ("bar", "bar")]),
                payload(&[("foo", b"foo2", 0o644), ("bar", b"bar2", 0o640)]),
                true,
            ),
            (
                "no update",
                plain(&[("foo", "foo"), ("bar", "bar")]),
                plain(&[("foo", "foo"), ("bar", "bar")]),
                false,
            ),
            (
                "no update 2",
                plain(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]),
                plain(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]),
                false,
            ),
            (
                "add 1",
                plain(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]),
                plain(&[
                    ("foo/bar.txt", "foo"),
                    ("bar/zab.txt", "bar"),
                    ("blu/zip.txt", "zip"),
                ]),
                true,
            ),
            (
                "add 2",
                plain(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]),
                plain(&[
                    ("foo/bar.txt", "foo"),
                    ("bar/zab.txt", "bar"),
                    ("blu/two/2/3/4/5/zip.txt", "zip"),
                ]),
                true,
            ),
            (
                "add 3",
                plain(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]),
                plain(&[
                    ("foo/bar.txt", "foo"),
                    ("bar/zab.txt", "bar"),
                    ("bar/2/3/4/5/zip.txt", "zip"),
                ]),
                true,
            ),
            (
                "delete 1",
                plain(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]),
                plain(&[("foo/bar.txt", "foo")]),
                true,
            ),
            (
                "delete 2",
                plain(&[("foo/bar.txt", "foo"), ("bar/1/2/3/zab.txt", "bar")]),
                plain(&[("foo/bar.txt", "foo")]),
                true,
            ),
            (
                "delete 3",
                plain(&[
                    ("foo/bar.txt", "foo"),
                    ("bar/1/2/sip.txt", "sip"),
                    ("bar/1/2/3/zab.txt", "bar"),
                ]),
                plain(&[("foo/bar.txt", "foo"), ("bar/1/2/sip.txt", "sip")]),
                true,
            ),
            (
                "delete 4",
                plain(&[
                    ("foo/bar.txt", "foo"),
                    ("bar/1/2/sip.txt", "sip"),
                    ("bar/1/2/3/4/5/6zab.txt", "bar"),
                ]),
                plain(&[("foo/bar.txt", "foo"), ("bar/1/2/sip.txt", "sip")]),
                true,
            ),
            (
                "delete all",
                plain(&[
                    ("foo/bar.txt", "foo"),
                    ("bar/1/2/sip.txt", "sip"),
                    ("bar/1/2/3/4/5/6zab.txt", "bar"),
                ]),
                Payload::new(),
                true,
            ),
            (
                "add and delete 1",
                plain(&[("foo/bar.txt", "foo")]),
                plain(&[("bar/baz.txt", "baz")]),
                true,
            ),
            // Upstream compares contents only: a mode change alone is not written.
            (
                "mode only",
                plain(&[("foo", "foo")]),
                payload(&[("foo", b"foo", 0o600)]),
                false,
            ),
        ];
        for (name, first, next, should_write) in cases {
            let dir = tempfile::tempdir().unwrap();
            assert!(write(dir.path(), &first).unwrap(), "{name}");
            check_contents(dir.path(), name, &first);
            let before = data_link(dir.path());
            let changed = write(dir.path(), &next).unwrap();
            assert_eq!(changed, should_write, "{name}");
            let after = data_link(dir.path());
            assert_eq!(after != before, should_write, "{name}: ..data moved");
            let expected = if should_write { &next } else { &first };
            check_contents(dir.path(), name, expected);
            assert_eq!(
                dir.path().join(&before).exists(),
                !should_write,
                "{name}: the old data directory is removed only when replaced"
            );
        }
    }

    #[test]
    fn multiple_updates_as_upstream() {
        let cases: Vec<(&str, Vec<Payload>)> = vec![
            (
                "update 1",
                vec![
                    plain(&[("foo", "foo"), ("bar", "bar")]),
                    payload(&[("foo", b"foo2", 0o400), ("bar", b"bar2", 0o400)]),
                    payload(&[("foo", b"foo3", 0o600), ("bar", b"bar3", 0o600)]),
                ],
            ),
            (
                "update 2",
                vec![
                    plain(&[("foo/bar.txt", "foo/bar"), ("bar/zab.txt", "bar/zab.txt")]),
                    payload(&[
                        ("foo/bar.txt", b"foo/bar2", 0o644),
                        ("bar/zab.txt", b"bar/zab.txt2", 0o400),
                    ]),
                ],
            ),
            (
                "clear sentinel",
                vec![
                    plain(&[("foo", "foo"), ("bar", "bar")]),
                    plain(&[("foo", "foo2"), ("bar", "bar2")]),
                    plain(&[("foo", "foo3"), ("bar", "bar3")]),
                    plain(&[("foo", "foo4"), ("bar", "bar4")]),
                ],
            ),
            (
                "subdirectories 2",
                vec![
                    plain(&[
                        ("foo/bar.txt", "foo/bar"),
                        ("bar/zab.txt", "bar/zab.txt"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar"),
                        ("bar/zib/zab.txt", "bar/zib/zab.txt"),
                    ]),
                    plain(&[
                        ("foo/bar.txt", "foo/bar2"),
                        ("bar/zab.txt", "bar/zab.txt2"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar2"),
                        ("bar/zib/zab.txt", "bar/zib/zab.txt2"),
                    ]),
                ],
            ),
            (
                "add 1",
                vec![
                    plain(&[
                        ("foo/bar.txt", "foo/bar"),
                        ("bar//zab.txt", "bar/zab.txt"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar"),
                        ("bar/zib////zib/zab.txt", "bar/zib/zab.txt"),
                    ]),
                    plain(&[
                        ("foo/bar.txt", "foo/bar2"),
                        ("bar/zab.txt", "bar/zab.txt2"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar2"),
                        ("bar/zib/zab.txt", "bar/zib/zab.txt2"),
                        ("add/new/keys.txt", "addNewKeys"),
                    ]),
                ],
            ),
            (
                "add 2",
                vec![
                    plain(&[
                        ("foo/bar.txt", "foo/bar2"),
                        ("bar/zab.txt", "bar/zab.txt2"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar2"),
                        ("bar/zib/zab.txt", "bar/zib/zab.txt2"),
                        ("add/new/keys.txt", "addNewKeys"),
                    ]),
                    plain(&[
                        ("foo/bar.txt", "foo/bar2"),
                        ("bar/zab.txt", "bar/zab.txt2"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar2"),
                        ("bar/zib/zab.txt", "bar/zib/zab.txt2"),
                        ("add/new/keys.txt", "addNewKeys"),
                        ("add/new/keys2.txt", "addNewKeys2"),
                        ("add/new/keys3.txt", "addNewKeys3"),
                    ]),
                ],
            ),
            (
                "remove 1",
                vec![
                    plain(&[
                        ("foo/bar.txt", "foo/bar"),
                        ("bar//zab.txt", "bar/zab.txt"),
                        ("foo/blaz/bar.txt", "foo/blaz/bar"),
                        ("zip/zap/zup/fop.txt", "zip/zap/zup/fop.txt"),
                    ]),
                    plain(&[("foo/bar.txt", "foo/bar2"), ("bar/zab.txt", "bar/zab.txt2")]),
                    plain(&[("foo/bar.txt", "foo/bar")]),
                ],
            ),
        ];
        for (name, payloads) in cases {
            let dir = tempfile::tempdir().unwrap();
            for (i, p) in payloads.iter().enumerate() {
                assert!(write(dir.path(), p).unwrap(), "{name} #{i}");
                check_contents(dir.path(), &format!("{name} #{i}"), p);
            }
        }
    }

    #[test]
    fn an_unchanged_payload_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = plain(&[("a", "1"), ("sub/b", "2")]);
        assert!(write(dir.path(), &p).unwrap());
        let link = data_link(dir.path());
        let modified = fs::symlink_metadata(dir.path().join(DATA_DIR_NAME))
            .unwrap()
            .modified()
            .unwrap();
        assert!(!write(dir.path(), &p).unwrap());
        assert_eq!(data_link(dir.path()), link);
        let again = fs::symlink_metadata(dir.path().join(DATA_DIR_NAME))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(again, modified, "..data was not replaced");
        check_contents(dir.path(), "unchanged", &p);
    }

    #[test]
    fn missing_visible_links_are_recreated_without_a_new_data_dir() {
        // kubernetes#121472: the data is current but a user-visible link is gone.
        let dir = tempfile::tempdir().unwrap();
        let p = plain(&[("a", "1"), ("sub/b", "2")]);
        write(dir.path(), &p).unwrap();
        let link = data_link(dir.path());
        fs::remove_file(dir.path().join("sub")).unwrap();
        assert!(
            write(dir.path(), &p).unwrap(),
            "recreating a link is a change"
        );
        assert_eq!(data_link(dir.path()), link);
        check_contents(dir.path(), "relinked", &p);
    }

    #[test]
    fn file_modes_do_not_depend_on_the_umask() {
        // 0777 and 0666 would lose bits to any usual umask if only open(2) set them.
        let dir = tempfile::tempdir().unwrap();
        let p = payload(&[
            ("all", b"x", 0o777),
            ("rw", b"x", 0o666),
            ("none", b"x", 0o000),
            ("deep/er/f", b"x", 0o606),
        ]);
        write(dir.path(), &p).unwrap();
        for (path, want) in [
            ("all", 0o777),
            ("rw", 0o666),
            ("none", 0),
            ("deep/er/f", 0o606),
        ] {
            let mode = fs::metadata(dir.path().join(path))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, want, "{path}");
        }
    }

    #[test]
    fn only_permission_bits_of_a_mode_are_set() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &payload(&[("f", b"x", 0o4755)])).unwrap();
        let mode = fs::metadata(dir.path().join("f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }

    fn umask() -> u32 {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
    }

    #[test]
    fn directories_get_upstreams_modes() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &plain(&[("sub/dir/f", "x")])).unwrap();
        let ts = dir.path().join(data_link(dir.path()));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        // The timestamped directory is chmod'ed; subdirectories are MkdirAll(0777) & ~umask.
        assert_eq!(mode(&ts), 0o755);
        assert_eq!(mode(&ts.join("sub")), 0o777 & !umask());
        assert_eq!(mode(&ts.join("sub/dir")), 0o777 & !umask());
    }

    #[test]
    fn the_data_dir_is_named_like_upstreams() {
        let dir = tempfile::tempdir().unwrap();
        let before = jiff::Timestamp::now()
            .strftime("..%Y_%m_%d_%H_%M_%S.")
            .to_string();
        write(dir.path(), &plain(&[("a", "1")])).unwrap();
        let after = jiff::Timestamp::now()
            .strftime("..%Y_%m_%d_%H_%M_%S.")
            .to_string();
        let name = data_link(dir.path()).to_string_lossy().into_owned();
        let prefix = &name[..before.len()];
        assert!(
            prefix == before || prefix == after,
            "{name} has the UTC time"
        );
        let number = &name[before.len()..];
        assert!(number.parse::<u32>().is_ok(), "{name} ends in a u32");
    }

    #[test]
    fn an_empty_payload_is_an_empty_data_dir() {
        // What an optional object that does not exist gives.
        let dir = tempfile::tempdir().unwrap();
        assert!(write(dir.path(), &Payload::new()).unwrap());
        assert_eq!(read_current(dir.path()).unwrap(), Some(Payload::new()));
        check_contents(dir.path(), "empty", &Payload::new());
        assert!(!write(dir.path(), &Payload::new()).unwrap());
    }

    #[test]
    fn read_current_without_data() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_current(dir.path()).unwrap(), None);
    }

    #[test]
    fn a_file_becoming_a_directory_fails_as_upstream() {
        // Only "does not exist" means "write": upstream then fails reading the old file.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &plain(&[("foo", "x")])).unwrap();
        let old = dir.path().join(data_link(dir.path()));
        let err = write(dir.path(), &plain(&[("foo/bar", "y")])).unwrap_err();
        let path = old.join("foo/bar");
        assert_eq!(err.kind(), io::ErrorKind::NotADirectory);
        assert_eq!(
            err.to_string(),
            format!("open {}: not a directory", path.display())
        );
    }

    #[test]
    fn a_directory_becoming_a_file_fails_as_upstream() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &plain(&[("foo/bar", "x")])).unwrap();
        let old = dir.path().join(data_link(dir.path()));
        let err = write(dir.path(), &plain(&[("foo", "y")])).unwrap_err();
        let path = old.join("foo");
        assert_eq!(err.kind(), io::ErrorKind::IsADirectory);
        assert_eq!(
            err.to_string(),
            format!("read {}: is a directory", path.display())
        );
    }

    #[test]
    fn a_leftover_data_tmp_link_fails_the_write_and_cleans_up() {
        // Upstream does not clear a stale ..data_tmp: the symlink fails, the new directory goes.
        let dir = tempfile::tempdir().unwrap();
        symlink("elsewhere", dir.path().join(NEW_DATA_DIR_NAME)).unwrap();
        let err = write(dir.path(), &plain(&[("a", "1")])).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().starts_with("symlink .."), "{err}");
        assert!(err.to_string().ends_with(": file exists"), "{err}");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![NEW_DATA_DIR_NAME.to_string()]);
    }

    #[test]
    fn a_user_visible_name_that_is_no_link_is_left_alone() {
        // Readlink fails with EINVAL, not ENOENT: upstream makes no link and reports nothing.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), "mine").unwrap();
        write(dir.path(), &plain(&[("a", "1")])).unwrap();
        assert_eq!(fs::read_to_string(dir.path().join("a")).unwrap(), "mine");
        assert_eq!(
            read_current(dir.path()).unwrap(),
            Some(plain(&[("a", "1")]))
        );
    }

    #[test]
    fn go_error_texts() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(
            path_error("open", Path::new("/x"), e).to_string(),
            "open /x: no such file or directory"
        );
        let e = io::Error::from_raw_os_error(13);
        assert_eq!(
            link_error("rename", Path::new("a"), Path::new("b"), e).to_string(),
            "rename a b: permission denied"
        );
    }
}
