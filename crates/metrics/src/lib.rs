//! Prometheus metrics of kbatch's components (the controllers, the API server's requests),
//! under upstream's names, in one process-wide registry rendered in the text exposition format
//! (`/metrics`).
//!
//! Counters, gauges and histograms; a metric is declared once as a constant ([`CounterVec`],
//! [`GaugeVec`], [`HistogramVec`]) and registered on first use, so that declaring it costs
//! nothing until it is observed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A counter with labels.
pub struct CounterVec {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

/// A gauge with labels: a value that is set, or moved up and down by what is under way.
pub struct GaugeVec {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

/// A histogram with labels and fixed upper bounds.
pub struct HistogramVec {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
    pub buckets: fn() -> Vec<f64>,
}

/// client-go's `ExponentialBuckets(start, factor, count)`.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut v = start;
    for _ in 0..count {
        out.push(v);
        v *= factor;
    }
    out
}

enum Values {
    Counter(BTreeMap<String, f64>),
    Gauge(BTreeMap<String, f64>),
    Histogram {
        bounds: Vec<f64>,
        series: BTreeMap<String, Histogram>,
    },
}

#[derive(Clone, Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

struct Family {
    help: &'static str,
    labels: &'static [&'static str],
    values: Values,
}

/// The registry: metric name → family.
#[derive(Default)]
pub struct Registry {
    families: Mutex<BTreeMap<&'static str, Family>>,
}

/// The process-wide registry.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// Separates label values in a series key: the ASCII unit separator, which label values
/// (names, verbs, codes) do not hold.
const SEP: char = '\u{1f}';

/// A series key: the values, one per label (a mismatch is a programming error in a
/// declaration; missing values are empty, extra ones ignored, rather than a panic), joined
/// into `key`, which is cleared first (a reused buffer: an existing series costs no allocation).
fn series_key(key: &mut String, labels: &[&str], values: &[&str]) {
    key.clear();
    for i in 0..labels.len() {
        if i > 0 {
            key.push(SEP);
        }
        key.push_str(values.get(i).copied().unwrap_or_default());
    }
}

/// Looks `values` up in `series`, adding the series when new, with `f` applied to its value.
fn with_series<T>(
    series: &mut BTreeMap<String, T>,
    labels: &[&str],
    values: &[&str],
    new: impl FnOnce() -> T,
    f: impl FnOnce(&mut T),
) {
    thread_local! {
        static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    KEY.with_borrow_mut(|key| {
        series_key(key, labels, values);
        match series.get_mut(key.as_str()) {
            Some(v) => f(v),
            None => f(series.entry(key.clone()).or_insert_with(new)),
        }
    });
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<&'static str, Family>> {
        // Every update is a single insert or addition: a poisoned lock still guards sane data.
        self.families.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, m: &CounterVec, values: &[&str], by: f64) {
        let mut families = self.lock();
        let family = families.entry(m.name).or_insert_with(|| Family {
            help: m.help,
            labels: m.labels,
            values: Values::Counter(BTreeMap::new()),
        });
        if let Values::Counter(series) = &mut family.values {
            with_series(series, m.labels, values, || 0.0, |v| *v += by);
        }
    }

    fn gauge(&self, m: &GaugeVec, values: &[&str], f: impl FnOnce(&mut f64)) {
        let mut families = self.lock();
        let family = families.entry(m.name).or_insert_with(|| Family {
            help: m.help,
            labels: m.labels,
            values: Values::Gauge(BTreeMap::new()),
        });
        if let Values::Gauge(series) = &mut family.values {
            with_series(series, m.labels, values, || 0.0, f);
        }
    }

    pub fn set(&self, m: &GaugeVec, values: &[&str], v: f64) {
        self.gauge(m, values, |g| *g = v);
    }

    /// Adds `by` to a gauge series (a negative `by` lowers it): for gauges that count what is
    /// under way.
    pub fn add_gauge(&self, m: &GaugeVec, values: &[&str], by: f64) {
        self.gauge(m, values, |g| *g += by);
    }

    pub fn observe(&self, m: &HistogramVec, values: &[&str], v: f64) {
        let mut families = self.lock();
        let family = families.entry(m.name).or_insert_with(|| Family {
            help: m.help,
            labels: m.labels,
            values: Values::Histogram {
                bounds: (m.buckets)(),
                series: BTreeMap::new(),
            },
        });
        if let Values::Histogram { bounds, series } = &mut family.values {
            let buckets = bounds.len();
            with_series(
                series,
                m.labels,
                values,
                || Histogram {
                    counts: vec![0; buckets],
                    ..Histogram::default()
                },
                |h| {
                    for (i, b) in bounds.iter().enumerate() {
                        if v <= *b {
                            h.counts[i] += 1;
                        }
                    }
                    h.sum += v;
                    h.count += 1;
                },
            );
        }
    }

    /// The value of one counter or gauge series (for tests).
    pub fn counter_value(&self, name: &str, values: &[&str]) -> f64 {
        let families = self.lock();
        match families.get(name).map(|f| &f.values) {
            Some(Values::Counter(series) | Values::Gauge(series)) => {
                let mut key = String::new();
                series_key(&mut key, values, values);
                series.get(&key).copied().unwrap_or(0.0)
            }
            _ => 0.0,
        }
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let families = self.lock();
        let mut out = String::new();
        for (name, f) in families.iter() {
            let kind = match f.values {
                Values::Counter(_) => "counter",
                Values::Gauge(_) => "gauge",
                Values::Histogram { .. } => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            match &f.values {
                Values::Counter(series) | Values::Gauge(series) => {
                    for (values, v) in series {
                        let _ = writeln!(out, "{name}{} {v}", labels(f.labels, values, None));
                    }
                }
                Values::Histogram { bounds, series } => {
                    for (values, h) in series {
                        for (b, c) in bounds.iter().zip(&h.counts) {
                            let le = format!("{b}");
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {c}",
                                labels(f.labels, values, Some(&le))
                            );
                        }
                        let _ = writeln!(
                            out,
                            "{name}_bucket{} {}",
                            labels(f.labels, values, Some("+Inf")),
                            h.count
                        );
                        let l = labels(f.labels, values, None);
                        let _ = writeln!(out, "{name}_sum{l} {}", h.sum);
                        let _ = writeln!(out, "{name}_count{l} {}", h.count);
                    }
                }
            }
        }
        out
    }
}

/// A label value escaped for the Prometheus text format (backslash, quote, newline).
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(names: &[&str], key: &str, le: Option<&str>) -> String {
    let mut parts: Vec<String> = names
        .iter()
        .zip(key.split(SEP))
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

impl CounterVec {
    pub fn inc(&self, values: &[&str]) {
        registry().add(self, values, 1.0);
    }

    pub fn add(&self, values: &[&str], by: f64) {
        registry().add(self, values, by);
    }
}

impl GaugeVec {
    pub fn set(&self, values: &[&str], v: f64) {
        registry().set(self, values, v);
    }

    pub fn add(&self, values: &[&str], by: f64) {
        registry().add_gauge(self, values, by);
    }
}

impl HistogramVec {
    pub fn observe(&self, values: &[&str], v: f64) {
        registry().observe(self, values, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: CounterVec = CounterVec {
        name: "test_things_total",
        help: "Things.",
        labels: &["kind"],
    };
    const H: HistogramVec = HistogramVec {
        name: "test_seconds",
        help: "Seconds.",
        labels: &["kind"],
        buckets: || exponential_buckets(1.0, 2.0, 3),
    };

    const G: GaugeVec = GaugeVec {
        name: "test_objects",
        help: "Objects.",
        labels: &["group", "resource"],
    };

    #[test]
    fn gauges_keep_the_last_value_set() {
        let r = Registry::default();
        r.set(&G, &["batch", "jobs"], 3.0);
        r.set(&G, &["batch", "jobs"], 2.0);
        r.set(&G, &["", "pods"], -1.0);
        assert_eq!(r.counter_value("test_objects", &["batch", "jobs"]), 2.0);
        let text = r.render();
        assert!(text.contains("# HELP test_objects Objects."), "{text}");
        assert!(text.contains("# TYPE test_objects gauge"), "{text}");
        assert!(
            text.contains("test_objects{group=\"batch\",resource=\"jobs\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("test_objects{group=\"\",resource=\"pods\"} -1\n"),
            "{text}"
        );
    }

    #[test]
    fn gauges_go_up_and_down_by_what_is_added() {
        let r = Registry::default();
        r.add_gauge(&G, &["", "pods"], 1.0);
        r.add_gauge(&G, &["", "pods"], 1.0);
        r.add_gauge(&G, &["batch", "jobs"], 1.0);
        r.add_gauge(&G, &["", "pods"], -1.0);
        assert_eq!(r.counter_value("test_objects", &["", "pods"]), 1.0);
        r.add_gauge(&G, &["", "pods"], -1.0);
        let text = r.render();
        // A series that went back to zero stays, at zero, as a Prometheus gauge does.
        assert!(
            text.contains("test_objects{group=\"\",resource=\"pods\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("test_objects{group=\"batch\",resource=\"jobs\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn renders_counters_and_cumulative_histograms() {
        let r = Registry::default();
        r.add(&C, &["a\"b"], 1.0);
        r.add(&C, &["a\"b"], 2.0);
        r.observe(&H, &["x"], 1.5);
        r.observe(&H, &["x"], 10.0);
        let text = r.render();
        assert!(text.contains("# TYPE test_things_total counter"), "{text}");
        assert!(
            text.contains("test_things_total{kind=\"a\\\"b\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("test_seconds_bucket{kind=\"x\",le=\"1\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("test_seconds_bucket{kind=\"x\",le=\"2\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("test_seconds_bucket{kind=\"x\",le=\"4\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("test_seconds_bucket{kind=\"x\",le=\"+Inf\"} 2"),
            "{text}"
        );
        assert!(text.contains("test_seconds_sum{kind=\"x\"} 11.5"), "{text}");
        assert!(text.contains("test_seconds_count{kind=\"x\"} 2"), "{text}");
        assert_eq!(r.counter_value("test_things_total", &["a\"b"]), 3.0);
    }

    const PAIR: CounterVec = CounterVec {
        name: "test_pairs_total",
        help: "Pairs.",
        labels: &["verb", "code"],
    };

    #[test]
    fn series_keep_each_label_apart_in_tuple_order() {
        let r = Registry::default();
        // Values that would run together if they were simply concatenated.
        r.inc_for_test(&["ab", "c"]);
        r.inc_for_test(&["a", "bc"]);
        r.inc_for_test(&["a", "bc"]);
        r.inc_for_test(&["", ""]);
        // Missing values are empty and extra ones are ignored.
        r.inc_for_test(&[]);
        r.inc_for_test(&["a", "bc", "extra"]);
        assert_eq!(r.counter_value("test_pairs_total", &["ab", "c"]), 1.0);
        assert_eq!(r.counter_value("test_pairs_total", &["a", "bc"]), 3.0);
        assert_eq!(r.counter_value("test_pairs_total", &["", ""]), 2.0);
        let text = r.render();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "test_pairs_total{verb=\"\",code=\"\"} 2",
                "test_pairs_total{verb=\"a\",code=\"bc\"} 3",
                "test_pairs_total{verb=\"ab\",code=\"c\"} 1",
            ]
        );
    }

    impl Registry {
        fn inc_for_test(&self, values: &[&str]) {
            self.add(&PAIR, values, 1.0);
        }
    }

    #[test]
    fn exponential_buckets_match_client_go() {
        assert_eq!(
            exponential_buckets(0.004, 2.0, 4),
            vec![0.004, 0.008, 0.016, 0.032]
        );
    }
}
