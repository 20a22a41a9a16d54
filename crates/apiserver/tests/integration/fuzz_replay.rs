//! Replays the committed fuzz corpus and crash regressions through the fuzz targets' pipelines,
//! so CI (stable, no libFuzzer) keeps every input that once mattered from panicking again.
//!
//! The pipelines are compiled in from the fuzz crate's source rather than duplicated, so this
//! test runs exactly what the fuzzer ran. The `cron` target also walks schedules with
//! kbatch-cron directly, which this crate does not depend on; here its inputs go through the
//! CronJob API (which parses the schedule and zone with the same parser).

#[path = "../../../../fuzz/src/pipelines.rs"]
mod pipelines;

use std::path::{Path, PathBuf};

use kbatch_apiserver::resources::RESOURCES;
use kbatch_apiserver::strategy::Part;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every committed input of a target, corpus then regressions (inputs that once crashed).
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        paths.sort();
        for path in paths {
            if !path.is_file() {
                continue;
            }
            let data = std::fs::read(&path).expect("reading a fuzz input");
            out.push((path, data));
        }
    }
    out
}

/// Runs `f` on every input, naming the input whose replay panicked.
fn replay(target: &str, f: fn(&[u8])) {
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "no inputs found for {target}");
    for (path, data) in inputs {
        if std::panic::catch_unwind(|| f(&data)).is_err() {
            panic!("{} panicked", path.display());
        }
    }
}

/// Without valid seeds the update pipelines would only ever see decoding errors.
#[test]
fn seeds_pass_create_and_noop_update() {
    for (res, stored) in RESOURCES.iter().zip(pipelines::stored_seeds()) {
        let again = pipelines::update(res, stored, stored.clone(), Part::Main);
        assert!(
            again.is_ok(),
            "{}: no-op update of the seed fails: {again:?}",
            res.plural
        );
        if res.has_subresource("status") {
            let again = pipelines::update(res, stored, stored.clone(), Part::Status);
            assert!(
                again.is_ok(),
                "{}: no-op status update of the seed fails: {again:?}",
                res.plural
            );
        }
    }
}

#[test]
fn replay_api_objects() {
    replay("api_objects", pipelines::api_objects);
}

#[test]
fn replay_selectors_and_paths() {
    replay("selectors_and_paths", pipelines::selectors_and_paths);
}

#[test]
fn replay_cron() {
    replay("cron", pipelines::cron);
}
