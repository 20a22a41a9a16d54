//! job-sync-bench: how long one Job controller sync decision takes, and how much it allocates,
//! for Jobs with 10, 1,000 and 10,000 pods (NonIndexed and Indexed; a mix of running,
//! succeeded and failed pods carrying the tracking finalizer, the expensive case: every
//! finished pod is accounted in the same sync).
//!
//! This measures [`kbatch_controllers::job::sync`], the pure decision the loop runs per sync;
//! the loop adds the API calls, which the end-to-end benchmarks measure.
//!
//! Run: `cargo run --release -p job-sync-bench` (`-- 10,1000,10000` to pick sizes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kbatch_api::k8s_openapi::api::batch::v1::Job;
use kbatch_api::k8s_openapi::api::core::v1::Pod;
use kbatch_api::k8s_openapi::jiff::Timestamp;
use kbatch_controllers::job::{SyncContext, sync};
use serde_json::json;

/// Counts allocations and allocated bytes.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const JOB_UID: &str = "0c9f2e38-0000-4000-8000-000000000001";

fn job(n: usize, indexed: bool) -> Result<Job, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "bench", "namespace": "default", "uid": JOB_UID, "resourceVersion": "7"},
        "spec": {
            "parallelism": n, "completions": n, "backoffLimit": 1_000_000,
            "completionMode": if indexed { "Indexed" } else { "NonIndexed" },
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": JOB_UID}},
            "template": {
                "metadata": {"labels": {"batch.kubernetes.io/controller-uid": JOB_UID, "batch.kubernetes.io/job-name": "bench"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}
            }
        },
        "status": {"active": n, "startTime": "2026-01-01T00:00:00Z", "uncountedTerminatedPods": {}}
    }))
}

/// Pod `i` of `n`: 60% running (half of them ready), 30% succeeded, 10% failed.
fn pod(i: usize, indexed: bool) -> Result<Pod, serde_json::Error> {
    let phase = match i % 10 {
        0..=5 => "Running",
        6..=8 => "Succeeded",
        _ => "Failed",
    };
    let mut annotations = json!({});
    let mut labels = json!({"batch.kubernetes.io/controller-uid": JOB_UID, "batch.kubernetes.io/job-name": "bench"});
    if indexed {
        annotations["batch.kubernetes.io/job-completion-index"] = json!(i.to_string());
        labels["batch.kubernetes.io/job-completion-index"] = json!(i.to_string());
    }
    let ready = if phase == "Running" && i.is_multiple_of(2) {
        "True"
    } else {
        "False"
    };
    let exit = if phase == "Failed" { 1 } else { 0 };
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("bench-{i}"), "namespace": "default", "uid": format!("pod-uid-{i}"),
            "resourceVersion": (100 + i).to_string(),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels, "annotations": annotations,
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "bench", "uid": JOB_UID, "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {"nodeName": "kbatch-node", "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-01-01T00:00:01Z"}],
            "containerStatuses": [{
                "name": "main", "image": "busybox", "imageID": "", "ready": ready == "True", "restartCount": 0,
                "state": if phase == "Running" {
                    json!({"running": {"startedAt": "2026-01-01T00:00:01Z"}})
                } else {
                    json!({"terminated": {"exitCode": exit, "startedAt": "2026-01-01T00:00:01Z", "finishedAt": "2026-01-01T00:00:02Z"}})
                }
            }]
        }
    }))
}

struct Figures {
    per_sync: Duration,
    allocs: u64,
    bytes: u64,
    creates: usize,
    finalizers: usize,
}

fn measure(n: usize, indexed: bool) -> Result<Figures, serde_json::Error> {
    let job = job(n, indexed)?;
    let pods: Vec<Pod> = (0..n).map(|i| pod(i, indexed)).collect::<Result<_, _>>()?;
    let now = Timestamp::from_second(1_767_225_700).unwrap_or(Timestamp::UNIX_EPOCH);
    let ctx = SyncContext::default();
    // Warm up, and size the run to take about a second.
    let t = Instant::now();
    let plan = sync(&job, &pods, now, &ctx);
    let once = t.elapsed().max(Duration::from_micros(1));
    let rounds = (Duration::from_secs(1).as_nanos() / once.as_nanos()).clamp(3, 10_000) as u32;
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(sync(&job, &pods, now, &ctx));
    }
    let per_sync = t.elapsed() / rounds;
    let allocs = (ALLOCS.load(Ordering::Relaxed) - a0) / u64::from(rounds);
    let bytes = (BYTES.load(Ordering::Relaxed) - b0) / u64::from(rounds);
    Ok(Figures {
        per_sync,
        allocs,
        bytes,
        creates: plan.pods_to_create.len(),
        finalizers: plan.finalizers_to_remove.len(),
    })
}

fn main() -> std::process::ExitCode {
    let sizes: Vec<usize> = match std::env::args().nth(1) {
        Some(list) => match list.split(',').map(str::parse).collect() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sizes: a comma-separated list of pod counts: {e}");
                return std::process::ExitCode::from(2);
            }
        },
        None => vec![10, 1_000, 10_000],
    };
    println!(
        "{:>8} {:>11} {:>12} {:>10} {:>12} {:>8} {:>10}",
        "pods", "mode", "per sync", "allocs", "alloc bytes", "creates", "finalizers"
    );
    for &n in &sizes {
        for indexed in [false, true] {
            match measure(n, indexed) {
                Ok(f) => println!(
                    "{:>8} {:>11} {:>12} {:>10} {:>12} {:>8} {:>10}",
                    n,
                    if indexed { "Indexed" } else { "NonIndexed" },
                    format!("{:.3} ms", f.per_sync.as_secs_f64() * 1e3),
                    f.allocs,
                    f.bytes,
                    f.creates,
                    f.finalizers
                ),
                Err(e) => {
                    eprintln!("building the fixture: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
