//! How fast the machine is right now, measured before each run: a fixed piece of CPU work on
//! one thread, a walk through memory that misses the caches at every step (what other
//! tenants of the host slow down first), and a 4 KiB write synced to the file system the
//! server's data dir is on. On a shared virtual machine these drift by tens of percent within
//! an hour, which moves every figure of a run; printed beside them, they tell a slow stretch
//! from a slower build.

use std::fs::File;
use std::hint::black_box;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Iterations of the CPU work: about 20 ms on a current core.
const CPU_STEPS: u64 = 20_000_000;
const CPU_TRIES: usize = 7;
const SYNC_TRIES: usize = 31;
/// The memory walked: 64 MiB of indices, larger than any cache.
const WALK_SLOTS: usize = 16 << 20;
const WALK_STEPS: usize = 1 << 20;
const WALK_TRIES: usize = 5;

#[derive(Debug, Clone, Copy)]
pub struct Speed {
    /// Median time of the CPU work, in milliseconds.
    pub cpu_ms: f64,
    /// Median time of the memory walk, in milliseconds.
    pub memory_ms: f64,
    /// Median time of a synced 4 KiB overwrite, in milliseconds.
    pub sync_ms: f64,
}

impl std::fmt::Display for Speed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CPU work {:.1} ms, memory walk {:.1} ms, 4 KiB synced write {:.2} ms (medians; lower is faster)",
            self.cpu_ms, self.memory_ms, self.sync_ms
        )
    }
}

/// Measure the machine, with the synced writes to a scratch file in `dir` (removed after).
pub fn measure(dir: &Path) -> io::Result<Speed> {
    let mut cpu: Vec<f64> = (0..CPU_TRIES).map(|_| ms(cpu_work())).collect();
    let ring = ring(WALK_SLOTS);
    let mut memory: Vec<f64> = (0..WALK_TRIES).map(|_| ms(walk(&ring))).collect();
    drop(ring);
    let path = dir.join("speed-probe");
    let file = File::create(&path)?;
    let block = [0x5au8; 4096];
    let mut sync = Vec::with_capacity(SYNC_TRIES);
    for _ in 0..SYNC_TRIES {
        let started = Instant::now();
        file.write_all_at(&block, 0)?;
        file.sync_data()?;
        sync.push(ms(started.elapsed()));
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(Speed {
        cpu_ms: crate::median(&mut cpu),
        memory_ms: crate::median(&mut memory),
        sync_ms: crate::median(&mut sync),
    })
}

/// A fixed amount of integer work (xorshift steps) that the compiler cannot shorten.
fn cpu_work() -> Duration {
    let started = Instant::now();
    let mut x: u64 = black_box(0x9E37_79B9_7F4A_7C15);
    for _ in 0..CPU_STEPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x);
    started.elapsed()
}

/// One cycle through all `slots` in a pseudo-random order (Sattolo's shuffle): `ring[i]` is
/// the slot after `i`, so each step of a walk depends on the memory read before it.
fn ring(slots: usize) -> Vec<u32> {
    let mut ring: Vec<u32> = (0..slots).map(|i| i as u32).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..slots).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        ring.swap(i, j);
    }
    ring
}

fn walk(ring: &[u32]) -> Duration {
    let started = Instant::now();
    let mut at = 0usize;
    for _ in 0..WALK_STEPS {
        at = ring[at] as usize;
    }
    black_box(at);
    started.elapsed()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_visits_every_slot_once() {
        let ring = ring(1000);
        let (mut at, mut seen) = (0usize, vec![false; 1000]);
        for _ in 0..1000 {
            assert!(!seen[at], "slot {at} visited twice");
            seen[at] = true;
            at = ring[at] as usize;
        }
        assert_eq!(at, 0, "back at the start after every slot");
    }

    #[test]
    fn the_machine_is_measured_and_the_scratch_file_removed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let speed = measure(dir.path()).expect("measure");
        // 20 million dependent steps take milliseconds on any machine.
        assert!(speed.cpu_ms > 1.0, "{speed}");
        // A million cache misses take milliseconds too.
        assert!(speed.memory_ms > 1.0, "{speed}");
        assert!(speed.sync_ms > 0.0 && speed.sync_ms.is_finite(), "{speed}");
        assert_eq!(std::fs::read_dir(dir.path()).expect("read").count(), 0);
    }
}
