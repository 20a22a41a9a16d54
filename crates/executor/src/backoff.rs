//! kubelet's crash-loop back-off for restarting a container: the first restart is immediate,
//! then each restart waits (from the exit) 10 s, 20 s, 40 s, ... up to 5 minutes; the back-off
//! starts over once a run outlasted twice the maximum since the last restart.

use std::time::{Duration, Instant};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Default)]
pub struct CrashBackoff {
    /// The current back-off and when the container was last restarted.
    entry: Option<(Duration, Instant)>,
}

impl CrashBackoff {
    fn live_entry(&self, exited_at: Instant) -> Option<Duration> {
        self.entry.and_then(|(backoff, last_restart)| {
            (exited_at.saturating_duration_since(last_restart) <= MAX * 2).then_some(backoff)
        })
    }

    /// How long after an exit at `exited_at` the container may start again.
    pub fn delay_after_exit(&self, exited_at: Instant) -> Duration {
        self.live_entry(exited_at).unwrap_or(Duration::ZERO)
    }

    /// Record a restart at `now` of a container that exited at `exited_at`.
    pub fn restarted(&mut self, exited_at: Instant, now: Instant) {
        let next = match self.live_entry(exited_at) {
            Some(b) => (b * 2).min(MAX),
            None => INITIAL,
        };
        self.entry = Some((next, now));
    }
}

/// A duration as Go prints it (`10s`, `1m20s`, `5m0s`): kubelet's back-off messages.
pub fn go_string(d: Duration) -> String {
    kbatch_cron::format_go_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container that crashes at once every time it starts.
    #[test]
    fn crash_loop_sequence() {
        let mut b = CrashBackoff::default();
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..9 {
            let exited = now;
            let wait = b.delay_after_exit(exited);
            waits.push(wait.as_secs());
            now = exited + wait;
            b.restarted(exited, now);
        }
        assert_eq!(waits, vec![0, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn long_run_resets_the_backoff() {
        let mut b = CrashBackoff::default();
        let t0 = Instant::now();
        b.restarted(t0, t0);
        let quick = t0 + Duration::from_secs(5);
        assert_eq!(b.delay_after_exit(quick), INITIAL);
        b.restarted(quick, quick + INITIAL);
        // Ran for more than 10 minutes since the last restart: back to an immediate restart.
        let late = quick + INITIAL + Duration::from_secs(601);
        assert_eq!(b.delay_after_exit(late), Duration::ZERO);
        b.restarted(late, late);
        assert_eq!(b.delay_after_exit(late), INITIAL);
    }

    #[test]
    fn go_duration_strings() {
        assert_eq!(go_string(Duration::from_secs(10)), "10s");
        assert_eq!(go_string(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_string(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_string(Duration::from_secs(3600)), "1h0m0s");
    }
}
