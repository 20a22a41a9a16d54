//! The server's mean time per kind of write, read from its `/metrics`
//! (`apiserver_request_duration_seconds`). Shared by the benchmarks (included by path).

use std::time::Duration;

/// The writes of one kind the server answered during a run.
pub struct WriteLatency {
    /// `POST pods/binding`, `PUT jobs/status`, ...
    pub kind: String,
    pub count: f64,
    pub mean: Duration,
}

/// The mean server time of each kind of write in a `/metrics` text: the `_sum` and `_count`
/// of `apiserver_request_duration_seconds` for the writing verbs.
pub fn write_latencies(metrics: &str) -> Vec<WriteLatency> {
    histogram_means(metrics, "apiserver_request_duration_seconds", |label| {
        let (verb, resource, sub) = (label("verb")?, label("resource")?, label("subresource")?);
        if !matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE") {
            return None;
        }
        Some(if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        })
    })
}

/// The mean time each kind of write spent in the store (packed, queued for the writer,
/// committed and synced), from `etcd_request_duration_seconds`: `create pods`, `update jobs`.
/// The rest of a write's server time is the handler's and the wait for the server's threads.
#[allow(dead_code)] // Used by the Job benchmark only.
pub fn store_latencies(metrics: &str) -> Vec<WriteLatency> {
    histogram_means(metrics, "etcd_request_duration_seconds", |label| {
        Some(format!("{} {}", label("operation")?, label("resource")?))
    })
}

/// The mean time the in-process clients (the controllers' and the node's) took for each kind of
/// write, sending to response, from client-go's `rest_client_request_duration_seconds` by
/// verb: a write's server time plus its trips through the two runtimes and the network.
#[allow(dead_code)] // Used by the Job benchmark only.
pub fn client_latencies(metrics: &str) -> Vec<WriteLatency> {
    histogram_means(metrics, "rest_client_request_duration_seconds", |label| {
        let verb = label("verb")?;
        matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE").then_some(verb)
    })
}

/// The mean of histogram `name`'s series, summed per key (`key` reads a series' labels by
/// name; `None` leaves the series out), keys with no observation dropped.
fn histogram_means(
    metrics: &str,
    name: &str,
    key: impl Fn(&dyn Fn(&str) -> Option<String>) -> Option<String>,
) -> Vec<WriteLatency> {
    let mut sums: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    let prefix = format!("{name}_");
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((which, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| -> Option<String> {
            let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
            let len = labels[start..].find('"')?;
            Some(labels[start..start + len].to_string())
        };
        let (Some(kind), Ok(value)) = (key(&label), value.parse::<f64>()) else {
            continue;
        };
        let e = sums.entry(kind).or_default();
        match which {
            "sum" => e.0 += value,
            "count" => e.1 += value,
            _ => {}
        }
    }
    sums.into_iter()
        .filter(|(_, (_, count))| *count > 0.0)
        .map(|(kind, (sum, count))| WriteLatency {
            kind,
            count,
            mean: Duration::from_secs_f64(sum / count),
        })
        .collect()
}

/// How many Job syncs the Job controller made and their mean duration, from upstream's
/// `job_controller_job_sync_duration_seconds` (all label sets together); `None` without any.
#[allow(dead_code)] // Used by the Job benchmark only.
pub fn job_syncs(metrics: &str) -> Option<(f64, Duration)> {
    let (mut sum, mut count) = (0.0, 0.0);
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("job_controller_job_sync_duration_seconds_") else {
            continue;
        };
        let Some((which, value)) = rest
            .split_once(['{', ' '])
            .and_then(|(which, rest)| Some((which, rest.rsplit_once(' ')?.1)))
        else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        match which {
            "sum" => sum += value,
            "count" => count += value,
            _ => {}
        }
    }
    (count > 0.0).then(|| (count, Duration::from_secs_f64(sum / count)))
}

/// Prints the kinds written at least `min_count` times (one-off writes say little).
pub fn print(latencies: &[WriteLatency], min_count: f64) {
    print_as("server time", latencies, min_count);
}

/// `print` under another heading (`store time`).
pub fn print_as(heading: &str, latencies: &[WriteLatency], min_count: f64) {
    for l in latencies.iter().filter(|l| l.count >= min_count) {
        println!(
            "{heading:<15} {:<22} {:6.2} ms mean over {:.0}",
            l.kind,
            l.mean.as_secs_f64() * 1000.0,
            l.count
        );
    }
}

/// `POST jobs 10000, PUT cronjobs/status 9500, ...`: the writes of each kind between two
/// readings, most first.
#[allow(dead_code)] // Used by the CronJob benchmark only.
pub fn count_since(before: &[WriteLatency], after: &[WriteLatency]) -> String {
    let mut v: Vec<(&str, f64)> = after
        .iter()
        .map(|a| {
            let earlier = before
                .iter()
                .find(|b| b.kind == a.kind)
                .map_or(0.0, |b| b.count);
            (a.kind.as_str(), a.count - earlier)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.iter()
        .map(|(k, n)| format!("{k} {n:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_latencies_are_the_mean_of_each_writing_kind() {
        let text = r#"# HELP apiserver_request_duration_seconds x
apiserver_request_duration_seconds_bucket{verb="POST",dry_run="",group="",version="v1",resource="pods",subresource="",scope="resource",component="apiserver",le="0.005"} 2
apiserver_request_duration_seconds_sum{verb="POST",dry_run="",group="",version="v1",resource="pods",subresource="",scope="resource",component="apiserver"} 0.004
apiserver_request_duration_seconds_count{verb="POST",dry_run="",group="",version="v1",resource="pods",subresource="",scope="resource",component="apiserver"} 2
apiserver_request_duration_seconds_sum{verb="PUT",dry_run="",group="batch",version="v1",resource="jobs",subresource="status",scope="resource",component="apiserver"} 0.003
apiserver_request_duration_seconds_count{verb="PUT",dry_run="",group="batch",version="v1",resource="jobs",subresource="status",scope="resource",component="apiserver"} 1
apiserver_request_duration_seconds_sum{verb="LIST",dry_run="",group="",version="v1",resource="pods",subresource="",scope="cluster",component="apiserver"} 0.5
apiserver_request_duration_seconds_count{verb="LIST",dry_run="",group="",version="v1",resource="pods",subresource="",scope="cluster",component="apiserver"} 1
"#;
        let l = write_latencies(text);
        let got: Vec<(&str, f64, u128)> = l
            .iter()
            .map(|l| (l.kind.as_str(), l.count, l.mean.as_micros()))
            .collect();
        assert_eq!(
            got,
            [("POST pods", 2.0, 2000), ("PUT jobs/status", 1.0, 3000)]
        );
    }

    #[test]
    fn store_latencies_are_the_mean_of_each_operation_and_resource() {
        let text = r#"etcd_request_duration_seconds_sum{operation="create",group="",resource="pods"} 0.003
etcd_request_duration_seconds_count{operation="create",group="",resource="pods"} 3
etcd_request_duration_seconds_sum{operation="update",group="batch",resource="jobs"} 0.002
etcd_request_duration_seconds_count{operation="update",group="batch",resource="jobs"} 4
etcd_request_duration_seconds_count{operation="delete",group="",resource="pods"} 0
apiserver_request_duration_seconds_sum{verb="POST",resource="pods",subresource=""} 9
"#;
        let got: Vec<(String, f64, u128)> = store_latencies(text)
            .into_iter()
            .map(|l| (l.kind, l.count, l.mean.as_micros()))
            .collect();
        assert_eq!(
            got,
            [
                ("create pods".to_string(), 3.0, 1000),
                ("update jobs".to_string(), 4.0, 500)
            ]
        );
    }

    #[test]
    fn client_latencies_are_the_mean_of_each_writing_verb() {
        let text = r#"rest_client_request_duration_seconds_sum{verb="PUT",host="127.0.0.1:1"} 0.006
rest_client_request_duration_seconds_count{verb="PUT",host="127.0.0.1:1"} 3
rest_client_request_duration_seconds_sum{verb="GET",host="127.0.0.1:1"} 1
rest_client_request_duration_seconds_count{verb="GET",host="127.0.0.1:1"} 1
rest_client_request_duration_seconds_sum{verb="POST",host="127.0.0.1:1"} 0.001
rest_client_request_duration_seconds_count{verb="POST",host="127.0.0.1:1"} 1
"#;
        let got: Vec<(String, f64, u128)> = client_latencies(text)
            .into_iter()
            .map(|l| (l.kind, l.count, l.mean.as_micros()))
            .collect();
        assert_eq!(
            got,
            [
                ("POST".to_string(), 1.0, 1000),
                ("PUT".to_string(), 3.0, 2000)
            ]
        );
    }

    #[test]
    fn job_syncs_add_up_every_label_set() {
        let text = r#"# TYPE job_controller_job_sync_duration_seconds histogram
job_controller_job_sync_duration_seconds_bucket{completion_mode="NonIndexed",result="success",action="reconciling",le="0.004"} 3
job_controller_job_sync_duration_seconds_sum{completion_mode="NonIndexed",result="success",action="reconciling"} 0.03
job_controller_job_sync_duration_seconds_count{completion_mode="NonIndexed",result="success",action="reconciling"} 3
job_controller_job_sync_duration_seconds_sum{completion_mode="NonIndexed",result="success",action="pods_created"} 0.05
job_controller_job_sync_duration_seconds_count{completion_mode="NonIndexed",result="success",action="pods_created"} 2
"#;
        let (count, mean) = job_syncs(text).expect("syncs");
        assert_eq!((count, mean.as_millis()), (5.0, 16));
        assert_eq!(job_syncs("apiserver_request_total{} 3\n"), None);
    }

    #[test]
    fn writes_are_counted_between_readings() {
        let w = |kind: &str, count: f64| WriteLatency {
            kind: kind.to_string(),
            count,
            mean: Duration::ZERO,
        };
        let before = [w("POST jobs", 5.0), w("POST events", 1.0)];
        let after = [
            w("POST events", 4.0),
            w("POST jobs", 15.0),
            w("PUT cronjobs/status", 2.0),
        ];
        assert_eq!(
            count_since(&before, &after),
            "POST jobs 10, POST events 3, PUT cronjobs/status 2"
        );
        assert_eq!(count_since(&after, &after), "");
    }
}
