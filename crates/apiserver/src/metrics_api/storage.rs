//! The last two points of every node and container, and the usage computed from them, as
//! metrics-server's `storage` keeps and computes them: CPU is the rate of the cumulative
//! counter between the two points (nanocores over the window between their times), memory
//! the last working set. A point replaces the last one only when it is newer; a container
//! that restarted (started after the stored point) starts over; a container first seen
//! between 10 s and one resolution after it started gets a point at its start with no CPU
//! used, so it is served after one scrape; a pod is served only when every one of its
//! containers has two points.

use std::collections::{BTreeMap, HashMap};

/// `(namespace, name)` of a pod.
pub type PodRef = (String, String);

/// One measurement of a node or container. Times are nanoseconds since the epoch (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When the container started; its cumulative CPU was 0 then.
    pub start_time: i64,
    /// When the CPU (and memory) values were measured.
    pub timestamp: i64,
    /// CPU used since the start, in nanocore-seconds.
    pub cumulative_cpu: u64,
    /// The working set, in bytes.
    pub memory: u64,
}

/// The points of one scrape of every node.
#[derive(Debug, Default)]
pub struct Batch {
    pub nodes: HashMap<String, Point>,
    pub pods: HashMap<PodRef, BTreeMap<String, Point>>,
}

impl Batch {
    /// Adds another node's batch (a node's points are its own: nothing is shared).
    pub fn merge(&mut self, other: Batch) {
        self.nodes.extend(other.nodes);
        for (pod, containers) in other.pods {
            // A pod reported by two nodes is a duplicate upstream skips; the first stays.
            self.pods.entry(pod).or_insert(containers);
        }
    }
}

/// Usage over a window: CPU in nanocores, memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

/// The end of a usage's window and its length, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeInfo {
    pub timestamp: i64,
    pub window: i64,
}

/// A pod's usage: its containers' (by name), and the earliest of their windows' ends (none
/// when no container's usage could be computed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodUsage {
    pub time: Option<TimeInfo>,
    pub containers: Vec<(String, Usage)>,
}

/// Under this long between its start and its first point a fresh container's rate is too
/// inaccurate to start from its start (upstream's `freshContainerMinMetricsResolution`).
const FRESH_CONTAINER_MIN: i64 = 10_000_000_000;

/// Go's zero `time.Time`, far before any point: a window from it saturates as Go's does.
const ZERO_TIME: i64 = i64::MIN;

#[derive(Debug, Default)]
pub struct Storage {
    /// The scrape period (`--metric-resolution`), in nanoseconds.
    resolution: i64,
    nodes_last: HashMap<String, Point>,
    nodes_prev: HashMap<String, Point>,
    pods_last: HashMap<PodRef, BTreeMap<String, Point>>,
    pods_prev: HashMap<PodRef, BTreeMap<String, Point>>,
}

impl Storage {
    pub fn new(resolution: std::time::Duration) -> Storage {
        Storage {
            resolution: i64::try_from(resolution.as_nanos()).unwrap_or(i64::MAX),
            ..Storage::default()
        }
    }

    /// Whether a node has two points (upstream's readiness).
    pub fn ready(&self) -> bool {
        !self.nodes_prev.is_empty() || !self.pods_prev.is_empty()
    }

    /// Takes one scrape's points: what the batch lacks is forgotten.
    pub fn store(&mut self, batch: Batch) {
        self.store_nodes(batch.nodes);
        self.store_pods(batch.pods);
    }

    fn store_nodes(&mut self, nodes: HashMap<String, Point>) {
        let mut prev = HashMap::new();
        for (name, new) in &nodes {
            let Some(last) = self.nodes_last.get(name) else {
                continue;
            };
            if new.timestamp > last.timestamp {
                prev.insert(name.clone(), *last);
            } else if let Some(p) = self.nodes_prev.get(name)
                && p.timestamp < new.timestamp
            {
                prev.insert(name.clone(), *p);
            }
        }
        self.nodes_last = nodes;
        self.nodes_prev = prev;
    }

    fn store_pods(&mut self, pods: HashMap<PodRef, BTreeMap<String, Point>>) {
        let mut prev_pods = HashMap::new();
        for (pod, containers) in &pods {
            let mut prev = BTreeMap::new();
            for (name, new) in containers {
                let since_start = new.timestamp.saturating_sub(new.start_time);
                if new.start_time < new.timestamp
                    && since_start < self.resolution
                    && since_start >= FRESH_CONTAINER_MIN
                {
                    let at_start = Point {
                        timestamp: new.start_time,
                        cumulative_cpu: 0,
                        ..*new
                    };
                    prev.insert(name.clone(), at_start);
                    continue;
                }
                // Kept only while the container has not restarted since the stored point.
                let Some(last) = self
                    .pods_last
                    .get(pod)
                    .and_then(|p| p.get(name))
                    .filter(|last| new.start_time < last.timestamp)
                else {
                    continue;
                };
                if new.timestamp > last.timestamp {
                    prev.insert(name.clone(), *last);
                } else if let Some(prev_pod) = self.pods_prev.get(pod) {
                    // Upstream reads a container the previous pod lacks as a zero point.
                    let p = prev_pod.get(name).copied().unwrap_or(Point {
                        timestamp: ZERO_TIME,
                        ..Point::default()
                    });
                    if p.timestamp < new.timestamp {
                        prev.insert(name.clone(), p);
                    }
                }
            }
            if !prev.is_empty() {
                prev_pods.insert(pod.clone(), prev);
            }
        }
        self.pods_last = pods;
        self.pods_prev = prev_pods;
    }

    /// A node's usage, once it has two points.
    pub fn node(&self, name: &str) -> Option<(TimeInfo, Usage)> {
        let last = self.nodes_last.get(name)?;
        let prev = self.nodes_prev.get(name)?;
        usage(last, prev)
            .map_err(|e| tracing::debug!(node = name, error = e, "skipping node usage"))
            .ok()
    }

    /// A pod's usage, once each of its containers has two points.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodUsage> {
        let key = (namespace.to_string(), name.to_string());
        let last = self.pods_last.get(&key)?;
        let prev = self.pods_prev.get(&key)?;
        let mut out = PodUsage {
            time: None,
            containers: Vec::with_capacity(last.len()),
        };
        for (container, l) in last {
            let p = prev.get(container)?;
            match usage(l, p) {
                Ok((ti, u)) => {
                    out.containers.push((container.clone(), u));
                    if out.time.is_none_or(|t| t.timestamp > ti.timestamp) {
                        out.time = Some(ti);
                    }
                }
                Err(e) => {
                    tracing::debug!(
                        namespace,
                        pod = name,
                        container,
                        error = e,
                        "skipping container usage"
                    );
                }
            }
        }
        Some(out)
    }
}

/// Upstream's `resourceUsage`: the CPU rate between `prev` and `last`, `last`'s memory.
fn usage(last: &Point, prev: &Point) -> Result<(TimeInfo, Usage), &'static str> {
    if last.start_time < prev.start_time {
        return Err("unexpected decrease in startTime of node/container");
    }
    if last.cumulative_cpu < prev.cumulative_cpu {
        return Err("unexpected decrease in cumulative CPU usage value");
    }
    let window = last.timestamp.saturating_sub(prev.timestamp);
    // Go's `Duration.Seconds()`, whole seconds and the rest summed as floats.
    let seconds = (window / 1_000_000_000) as f64 + (window % 1_000_000_000) as f64 / 1e9;
    let rate = (last.cumulative_cpu - prev.cumulative_cpu) as f64 / seconds;
    Ok((
        TimeInfo {
            timestamp: last.timestamp,
            window,
        },
        Usage {
            cpu_nanocores: rate as u64,
            memory_bytes: last.memory,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn point(start: i64, ts: i64, cpu: u64, mem: u64) -> Point {
        Point {
            start_time: start,
            timestamp: ts,
            cumulative_cpu: cpu,
            memory: mem,
        }
    }

    fn batch(node: Option<Point>, containers: &[(&str, Point)]) -> Batch {
        let mut b = Batch::default();
        if let Some(n) = node {
            b.nodes.insert("n1".into(), n);
        }
        if !containers.is_empty() {
            b.pods.insert(
                ("ns".into(), "p".into()),
                containers
                    .iter()
                    .map(|(n, p)| (n.to_string(), *p))
                    .collect(),
            );
        }
        b
    }

    fn storage() -> Storage {
        Storage::new(std::time::Duration::from_secs(15))
    }

    #[test]
    fn cumulative_cpu_becomes_a_rate_over_the_window() {
        let mut s = storage();
        s.store(batch(Some(point(0, 100 * S, 50 * S as u64, 1 << 30)), &[]));
        assert_eq!(s.node("n1"), None, "one point is no rate");
        assert!(!s.ready());
        // 1.5 core-seconds over 15.123 s.
        s.store(batch(
            Some(point(0, 115_123_000_000, 51_500_000_000, 2 << 30)),
            &[],
        ));
        assert!(s.ready());
        let (ti, u) = s.node("n1").unwrap();
        assert_eq!(ti.window, 15_123_000_000);
        assert_eq!(ti.timestamp, 115_123_000_000);
        assert_eq!(u.cpu_nanocores, 99_186_669);
        assert_eq!(u.memory_bytes, 2 << 30);
        // The same point again keeps the previous one; an older one drops it.
        s.store(batch(
            Some(point(0, 115_123_000_000, 51_500_000_000, 2 << 30)),
            &[],
        ));
        assert_eq!(s.node("n1").unwrap().0.window, 15_123_000_000);
        s.store(batch(Some(point(0, 90 * S, 1, 1)), &[]));
        assert_eq!(s.node("n1"), None);
        // A node missing from a scrape is forgotten.
        s.store(batch(None, &[]));
        assert_eq!(s.node("n1"), None);
    }

    #[test]
    fn a_counter_that_goes_down_is_skipped() {
        let mut s = storage();
        s.store(batch(Some(point(0, 100 * S, 50 * S as u64, 1)), &[]));
        s.store(batch(Some(point(0, 101 * S, 40 * S as u64, 1)), &[]));
        assert_eq!(s.node("n1"), None);
    }

    #[test]
    fn containers_need_two_points_and_restarts_start_over() {
        let mut s = storage();
        let c1 = point(10 * S, 100 * S, 2 * S as u64, 4096);
        s.store(batch(None, &[("a", c1)]));
        assert_eq!(s.pod("ns", "p"), None, "first sighting");
        let c2 = point(10 * S, 102 * S, 3 * S as u64, 8192);
        s.store(batch(None, &[("a", c2)]));
        let u = s.pod("ns", "p").unwrap();
        assert_eq!(
            u,
            PodUsage {
                time: Some(TimeInfo {
                    timestamp: 102 * S,
                    window: 2 * S
                }),
                containers: vec![(
                    "a".into(),
                    Usage {
                        cpu_nanocores: 500_000_000,
                        memory_bytes: 8192
                    }
                )],
            }
        );
        // Restarted after the stored point: its counter starts over, no usage until the next.
        let restarted = point(103 * S, 104 * S, S as u64 / 10, 4096);
        s.store(batch(None, &[("a", restarted)]));
        assert_eq!(s.pod("ns", "p"), None);
        s.store(batch(
            None,
            &[("a", point(103 * S, 106 * S, S as u64 / 2, 4096))],
        ));
        assert_eq!(
            s.pod("ns", "p").unwrap().containers[0].1.cpu_nanocores,
            200_000_000
        );
    }

    #[test]
    fn a_pod_is_served_only_with_every_container() {
        let mut s = storage();
        s.store(batch(None, &[("a", point(0, 100 * S, S as u64, 1))]));
        // A second container appears: it has one point, so the pod has no usage.
        s.store(batch(
            None,
            &[
                ("a", point(0, 101 * S, 2 * S as u64, 1)),
                ("b", point(0, 101 * S, S as u64, 1)),
            ],
        ));
        assert_eq!(s.pod("ns", "p"), None);
        s.store(batch(
            None,
            &[
                ("a", point(0, 103 * S, 3 * S as u64, 1)),
                ("b", point(0, 102 * S, 2 * S as u64, 1)),
            ],
        ));
        let u = s.pod("ns", "p").unwrap();
        // The earliest of the containers' windows' ends, and that container's window.
        assert_eq!(
            u.time,
            Some(TimeInfo {
                timestamp: 102 * S,
                window: S
            })
        );
        let names: Vec<&str> = u.containers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_fresh_container_starts_from_its_start() {
        let mut s = storage();
        // Seen 12 s after its start (at least 10 s, under one 15 s resolution): served at once.
        s.store(batch(
            None,
            &[("a", point(100 * S, 112 * S, 6 * S as u64, 1))],
        ));
        let u = s.pod("ns", "p").unwrap();
        assert_eq!(u.containers[0].1.cpu_nanocores, 500_000_000);
        assert_eq!(u.time.unwrap().window, 12 * S);
        // Seen 5 s after its start: too early to be accurate, it waits for a second point.
        let mut s = storage();
        s.store(batch(None, &[("a", point(100 * S, 105 * S, S as u64, 1))]));
        assert_eq!(s.pod("ns", "p"), None);
    }
}
