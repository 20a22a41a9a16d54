//! Container probes as kubelet's prober workers run them (`pkg/kubelet/prober/worker.go`):
//! per container and probe kind, a result that starts at the kind's initial value (readiness
//! Failure, liveness Success, startup Unknown) for each run of the container, changes only
//! after `successThreshold` or `failureThreshold` equal results in a row, and is not probed
//! before `initialDelaySeconds`. Liveness and readiness wait for the startup probe; the startup
//! probe stops once it passed. A failed liveness or startup probe kills the container (the
//! worker restarts it per restartPolicy) and holds the prober until the next run.
//!
//! This module decides; `run` carries out one attempt; the pod worker schedules and reports.

pub mod grpc;
pub mod http;
pub mod run;

use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{Container, Probe};
use tokio::time::Instant;

/// The three probes of a container, in the order kubelet checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    /// As kubelet's `probeType` prints in event messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    fn initial(self) -> Verdict {
        match self {
            Kind::Readiness => Verdict::Failure,
            Kind::Liveness => Verdict::Success,
            Kind::Startup => Verdict::Unknown,
        }
    }
}

/// kubelet's `results.Result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Unknown,
    Success,
    Failure,
}

/// A probe's timing, with the API's defaults for unset (or, defensively, non-positive) values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// The probe's own `terminationGracePeriodSeconds`, used when it kills the container.
    pub termination_grace: Option<Duration>,
}

fn seconds(v: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(v.and_then(|s| u64::try_from(s).ok()).unwrap_or(default))
}

fn count(v: Option<i32>, default: u32) -> u32 {
    v.and_then(|c| u32::try_from(c).ok())
        .filter(|c| *c > 0)
        .unwrap_or(default)
}

impl Timing {
    /// `SetDefaults_Probe`: timeout 1 s, period 10 s, success 1, failure 3.
    pub fn of(p: &Probe) -> Timing {
        let positive = |v: Option<i32>| v.filter(|s| *s > 0);
        Timing {
            initial_delay: seconds(p.initial_delay_seconds, 0),
            period: seconds(positive(p.period_seconds), 10),
            timeout: seconds(positive(p.timeout_seconds), 1),
            success_threshold: count(p.success_threshold, 1),
            failure_threshold: count(p.failure_threshold, 3),
            termination_grace: p
                .termination_grace_period_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
        }
    }
}

/// What a finished attempt changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    None,
    /// The published result changed.
    Verdict(Verdict),
    /// A liveness or startup probe failed past its threshold: kill the container, with this
    /// message for the Killing event.
    Kill(String),
}

/// One probe of one container.
#[derive(Debug, Clone)]
pub struct Prober {
    pub kind: Kind,
    pub timing: Timing,
    pub spec: Probe,
    /// The published result for the current run.
    pub verdict: Verdict,
    last: Option<Verdict>,
    run: u32,
    /// After a kill, no probing until the next run.
    on_hold: bool,
    next_at: Option<Instant>,
    /// The run of the container an attempt is out for.
    pub in_flight: Option<u32>,
}

impl Prober {
    pub fn new(kind: Kind, spec: &Probe) -> Prober {
        Prober {
            kind,
            timing: Timing::of(spec),
            spec: spec.clone(),
            verdict: kind.initial(),
            last: None,
            run: 0,
            on_hold: false,
            next_at: None,
            in_flight: None,
        }
    }

    /// The probers of a container, startup first.
    pub fn for_container(c: &Container) -> Vec<Prober> {
        [
            (Kind::Startup, &c.startup_probe),
            (Kind::Liveness, &c.liveness_probe),
            (Kind::Readiness, &c.readiness_probe),
        ]
        .into_iter()
        .filter_map(|(kind, p)| p.as_ref().map(|p| Prober::new(kind, p)))
        .collect()
    }

    /// A new run of the container started at `at`: a new container to kubelet's worker.
    pub fn container_started(&mut self, at: Instant) {
        self.verdict = self.kind.initial();
        self.on_hold = false;
        self.in_flight = None;
        self.next_at = Some(at + self.timing.initial_delay);
    }

    /// The run ended: a non-running container fails every probe, and nothing is probed.
    pub fn container_stopped(&mut self) {
        self.verdict = Verdict::Failure;
        self.next_at = None;
        self.in_flight = None;
    }

    /// Whether an attempt should start now. `started`: the container passed its startup
    /// probe (or has none), which the other kinds wait for and after which startup stops.
    pub fn due(&self, now: Instant, started: bool) -> bool {
        self.next_at.is_some_and(|t| t <= now) && self.gate_open(started)
    }

    fn gate_open(&self, started: bool) -> bool {
        let gate = match self.kind {
            Kind::Startup => !started,
            _ => started,
        };
        gate && !self.on_hold && self.in_flight.is_none()
    }

    /// When this prober next wants to run (for the worker's timer).
    pub fn wake(&self, started: bool) -> Option<Instant> {
        self.next_at.filter(|_| self.gate_open(started))
    }

    /// An attempt for run `run` starts at `now`; the next one is a period later.
    pub fn begin(&mut self, run: u32, now: Instant) {
        self.in_flight = Some(run);
        self.next_at = Some(now + self.timing.period);
    }

    /// The attempt errored: kubelet throws the result away.
    pub fn discard(&mut self) {
        self.in_flight = None;
    }

    /// An attempt's result (Success or Failure), counted against the thresholds.
    pub fn finish(&mut self, result: Verdict, container: &str) -> Change {
        self.in_flight = None;
        if self.last == Some(result) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(result);
            self.run = 1;
        }
        let below = match result {
            Verdict::Failure => self.run < self.timing.failure_threshold,
            Verdict::Success => self.run < self.timing.success_threshold,
            Verdict::Unknown => false,
        };
        if below {
            return Change::None;
        }
        let changed = self.verdict != result;
        self.verdict = result;
        if result == Verdict::Failure && matches!(self.kind, Kind::Liveness | Kind::Startup) {
            self.on_hold = true;
            self.run = 0;
            let what = match self.kind {
                Kind::Startup => "startup",
                _ => "liveness",
            };
            return Change::Kill(format!("Container {container} failed {what} probe"));
        }
        if changed {
            Change::Verdict(result)
        } else {
            Change::None
        }
    }
}

/// The container's `started` and `ready` as its probes say (true where it has no such probe).
pub fn gates(probers: &[Prober]) -> (bool, bool) {
    let passed = |kind| {
        probers
            .iter()
            .find(|p| p.kind == kind)
            .is_none_or(|p| p.verdict == Verdict::Success)
    };
    (passed(Kind::Startup), passed(Kind::Readiness))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(success: i32, failure: i32) -> Probe {
        Probe {
            success_threshold: Some(success),
            failure_threshold: Some(failure),
            period_seconds: Some(1),
            ..Probe::default()
        }
    }

    #[test]
    fn defaults_are_the_apis() {
        let t = Timing::of(&Probe::default());
        assert_eq!(
            (
                t.initial_delay,
                t.period,
                t.timeout,
                t.success_threshold,
                t.failure_threshold
            ),
            (
                Duration::ZERO,
                Duration::from_secs(10),
                Duration::from_secs(1),
                1,
                3
            )
        );
    }

    #[test]
    fn initial_values_per_kind() {
        let now = Instant::now();
        for (kind, want) in [
            (Kind::Readiness, Verdict::Failure),
            (Kind::Liveness, Verdict::Success),
            (Kind::Startup, Verdict::Unknown),
        ] {
            let mut p = Prober::new(kind, &probe(1, 3));
            p.container_started(now);
            assert_eq!(p.verdict, want, "{kind:?}");
        }
    }

    /// upstream TestSuccessThreshold and TestFailureThreshold, as result sequences.
    #[test]
    fn thresholds_count_equal_results_in_a_row() {
        let mut p = Prober::new(Kind::Readiness, &probe(3, 3));
        p.container_started(Instant::now());
        use Verdict::{Failure as F, Success as S};
        let steps = [
            (S, F),
            (S, F),
            (S, S), // third success in a row
            (F, S),
            (S, S),
            (F, S),
            (F, S),
            (F, F), // third failure in a row
            (F, F),
        ];
        for (i, (result, want)) in steps.into_iter().enumerate() {
            p.begin(0, Instant::now());
            p.finish(result, "c");
            assert_eq!(p.verdict, want, "step {i}");
        }
    }

    #[test]
    fn a_failed_liveness_probe_kills_and_holds_until_the_next_run() {
        let now = Instant::now();
        let mut p = Prober::new(Kind::Liveness, &probe(1, 2));
        p.container_started(now);
        p.begin(0, now);
        assert_eq!(p.finish(Verdict::Failure, "app"), Change::None);
        p.begin(0, now);
        assert_eq!(
            p.finish(Verdict::Failure, "app"),
            Change::Kill("Container app failed liveness probe".into())
        );
        assert!(!p.due(now + Duration::from_secs(5), true), "on hold");
        p.container_started(now);
        assert_eq!(p.verdict, Verdict::Success);
        assert!(p.due(now, true));
        // The run count restarted: one failure is below the threshold again.
        p.begin(1, now);
        assert_eq!(p.finish(Verdict::Failure, "app"), Change::None);
    }

    #[test]
    fn startup_gates_the_others_and_stops_once_passed() {
        let now = Instant::now();
        let c = Container {
            name: "c".into(),
            startup_probe: Some(probe(1, 3)),
            liveness_probe: Some(probe(1, 3)),
            readiness_probe: Some(probe(1, 3)),
            ..Container::default()
        };
        let mut ps = Prober::for_container(&c);
        for p in &mut ps {
            p.container_started(now);
        }
        assert_eq!(gates(&ps), (false, false));
        let started = gates(&ps).0;
        let due: Vec<Kind> = ps
            .iter()
            .filter(|p| p.due(now, started))
            .map(|p| p.kind)
            .collect();
        assert_eq!(due, vec![Kind::Startup]);
        ps[0].begin(0, now);
        assert_eq!(
            ps[0].finish(Verdict::Success, "c"),
            Change::Verdict(Verdict::Success)
        );
        let started = gates(&ps).0;
        assert!(started);
        let due: Vec<Kind> = ps
            .iter()
            .filter(|p| p.due(now, started))
            .map(|p| p.kind)
            .collect();
        assert_eq!(due, vec![Kind::Liveness, Kind::Readiness]);
        assert!(!ps[0].due(now + Duration::from_secs(60), started));
    }

    #[test]
    fn nothing_is_probed_before_the_initial_delay() {
        let now = Instant::now();
        let mut p = Prober::new(
            Kind::Readiness,
            &Probe {
                initial_delay_seconds: Some(5),
                ..Probe::default()
            },
        );
        p.container_started(now);
        assert!(!p.due(now + Duration::from_secs(4), true));
        assert!(p.due(now + Duration::from_secs(5), true));
        p.begin(0, now + Duration::from_secs(5));
        assert!(!p.due(now + Duration::from_secs(6), true), "in flight");
        p.discard();
        assert!(!p.due(now + Duration::from_secs(14), true));
        assert!(p.due(now + Duration::from_secs(15), true), "a period later");
    }
}
