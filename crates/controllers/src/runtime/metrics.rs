//! Prometheus metrics of the controllers, under upstream's names, in one process-wide registry
//! rendered in the text exposition format (`/metrics`).
//!
//! Only counters and histograms are needed; a metric is declared once as a constant
//! ([`CounterVec`], [`HistogramVec`]) and registered on first use, so that declaring it costs
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
    Counter(BTreeMap<Vec<String>, f64>),
    Histogram {
        bounds: Vec<f64>,
        series: BTreeMap<Vec<String>, Histogram>,
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

fn label_values(labels: &[&str], values: &[&str]) -> Vec<String> {
    // A mismatch is a programming error in a declaration; pad or cut rather than panic.
    (0..labels.len())
        .map(|i| values.get(i).copied().unwrap_or_default().to_string())
        .collect()
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
            *series.entry(label_values(m.labels, values)).or_default() += by;
        }
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
            let h = series
                .entry(label_values(m.labels, values))
                .or_insert_with(|| Histogram {
                    counts: vec![0; bounds.len()],
                    ..Histogram::default()
                });
            for (i, b) in bounds.iter().enumerate() {
                if v <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += v;
            h.count += 1;
        }
    }

    /// The value of one counter series (for tests).
    pub fn counter_value(&self, name: &str, values: &[&str]) -> f64 {
        let families = self.lock();
        match families.get(name).map(|f| &f.values) {
            Some(Values::Counter(series)) => {
                let key: Vec<String> = values.iter().map(|s| s.to_string()).collect();
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
                Values::Histogram { .. } => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            match &f.values {
                Values::Counter(series) => {
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

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(names: &[&str], values: &[String], le: Option<&str>) -> String {
    let mut parts: Vec<String> = names
        .iter()
        .zip(values)
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

    #[test]
    fn exponential_buckets_match_client_go() {
        assert_eq!(
            exponential_buckets(0.004, 2.0, 4),
            vec![0.004, 0.008, 0.016, 0.032]
        );
    }
}
