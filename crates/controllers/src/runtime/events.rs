//! Events about the objects a controller manages, written as client-go's legacy event recorder
//! writes them: core/v1 Events named `<object>.<unix nanos in hex>`, with `source.component`
//! and `reportingComponent` set to the controller's name, through client-go's event correlator
//! (`event_correlator`: repeats counted, similar events combined, spam dropped).
//!
//! Recording never blocks a sync: events go through a channel to one task that writes them.
//! As client-go's broadcaster, the task retries a write that failed in transport (up to 12
//! tries, 10 s apart) and drops, with a log line, one the server rejected.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::event_correlator::{Correlated, Correlator, event_name};
use super::token_bucket::TokenBucket;

/// client-go's `maxTriesPerEvent`, and its broadcaster's sleep between tries.
const MAX_TRIES: u32 = 12;
const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to record.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    pub object: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

/// A handle to record events; cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::UnboundedSender<EventRecord>,
    /// Events waiting to be written, and how many may wait (client-go's broadcaster drops
    /// what comes beyond its queue); no bound when `None`.
    queued: Option<(Arc<AtomicUsize>, usize)>,
}

/// How a recorder writes: as which component on which host, and how fast.
#[derive(Clone, Debug, Default)]
pub struct RecorderOptions {
    /// `source.host` and `reportingInstance` (kubelet's node name); empty for controllers.
    pub host: Option<String>,
    /// Writes per second and burst (kubelet's `eventRecordQPS` 50 and `eventBurst` 100).
    pub rate: Option<(f64, u32)>,
    /// Events that may wait to be written before new ones are dropped (client-go: 1000).
    pub queue: Option<usize>,
}

/// The reference to `obj` that an event's `involvedObject` carries.
pub fn object_reference<K>(obj: &K) -> ObjectReference
where
    K: Resource<DynamicType = ()>,
{
    ObjectReference {
        api_version: Some(K::api_version(&()).to_string()),
        kind: Some(K::kind(&()).to_string()),
        namespace: obj.meta().namespace.clone(),
        name: obj.meta().name.clone(),
        uid: obj.meta().uid.clone(),
        resource_version: obj.meta().resource_version.clone(),
        field_path: None,
    }
}

impl EventRecorder {
    /// Starts the writer task for events of `component` (e.g. `job-controller`).
    pub fn start(client: Client, component: &str) -> (EventRecorder, JoinHandle<()>) {
        EventRecorder::start_with(client, component, RecorderOptions::default())
    }

    /// Starts the writer task for events of `component` written as `options` say.
    pub fn start_with(
        client: Client,
        component: &str,
        options: RecorderOptions,
    ) -> (EventRecorder, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = options
            .queue
            .map(|max| (Arc::new(AtomicUsize::new(0)), max));
        let writer = Writer {
            client,
            component: component.to_string(),
            host: options.host,
            correlator: Correlator::default(),
            limiter: options
                .rate
                .map(|(qps, burst)| TokenBucket::new(qps, burst)),
            queued: queued.as_ref().map(|(n, _)| Arc::clone(n)),
        };
        let task = tokio::spawn(writer.run(rx));
        (EventRecorder { tx, queued }, task)
    }

    /// A recorder whose events are handed to `tx` (for tests of the controllers' decisions).
    pub fn to_channel(tx: mpsc::UnboundedSender<EventRecord>) -> EventRecorder {
        EventRecorder { tx, queued: None }
    }

    pub fn record(&self, object: ObjectReference, type_: EventType, reason: &str, message: &str) {
        if let Some((queued, max)) = &self.queued {
            if queued.load(Ordering::Relaxed) >= *max {
                debug!(%reason, object = ?object.name, "event queue full; dropping the event");
                return;
            }
            queued.fetch_add(1, Ordering::Relaxed);
        }
        // A closed channel means the controller is shutting down: nothing to report to.
        let _ = self.tx.send(EventRecord {
            object,
            type_,
            reason: reason.to_string(),
            message: message.to_string(),
        });
    }

    pub fn normal(&self, object: ObjectReference, reason: &str, message: &str) {
        self.record(object, EventType::Normal, reason, message);
    }

    pub fn warning(&self, object: ObjectReference, reason: &str, message: &str) {
        self.record(object, EventType::Warning, reason, message);
    }
}

struct Writer {
    client: Client,
    component: String,
    host: Option<String>,
    correlator: Correlator,
    limiter: Option<TokenBucket>,
    queued: Option<Arc<AtomicUsize>>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<EventRecord>) {
        while let Some(rec) = rx.recv().await {
            if let Some(limiter) = self.limiter.as_mut() {
                let wait = limiter.reserve(tokio::time::Instant::now());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            self.write(rec).await;
            if let Some(queued) = &self.queued {
                queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    async fn write(&mut self, rec: EventRecord) {
        let now = Timestamp::now();
        let event = self.new_event(&rec, now);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let (event, patch) = match self.correlator.correlate(event, now) {
            Correlated::Skip => {
                debug!(reason = %rec.reason, object = ?rec.object.name, "event dropped as spam");
                return;
            }
            Correlated::Patch { event, patch } => (event, Some(patch)),
            Correlated::Create(event) => (event, None),
        };
        let mut tries = 0;
        loop {
            let error = match send(&api, &event, patch.as_ref()).await {
                Ok(written) => {
                    self.correlator.update_state(&written);
                    return;
                }
                Err(e) => e,
            };
            tries += 1;
            let (reason, object) = (&rec.reason, &rec.object.name);
            if !worth_retrying(&error) {
                warn!(%reason, ?object, %error, "the server rejected an event; dropping it");
                return;
            }
            if tries >= MAX_TRIES {
                warn!(%reason, ?object, %error, "could not write an event (retry limit reached)");
                return;
            }
            warn!(%reason, ?object, %error, "could not write an event; will retry");
            tokio::time::sleep(retry_delay(tries, RETRY_SLEEP, jitter())).await;
        }
    }

    fn new_event(&self, rec: &EventRecord, now: Timestamp) -> Event {
        let namespace = rec
            .object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let object_name = rec.object.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(&object_name, now)),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            involved_object: rec.object.clone(),
            reason: Some(rec.reason.clone()),
            message: Some(rec.message.clone()),
            type_: Some(rec.type_.as_str().to_string()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: self.host.clone(),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            // As client-go: the source's component and host (empty for controllers).
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.host.clone().unwrap_or_default()),
            ..Event::default()
        }
    }
}

/// One try, as client-go's `recordEvent`: a repeat patches the earlier event (created anew if
/// it is gone), anything else is created.
async fn send(
    api: &Api<Event>,
    event: &Event,
    patch: Option<&Value>,
) -> Result<Event, kube::Error> {
    if let Some(patch) = patch {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        match api
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            // The earlier event is gone (expired or deleted).
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            other => return other,
        }
    }
    let mut event = event.clone();
    event.metadata.resource_version = None;
    api.create(&PostParams::default(), &event).await
}

/// Whether a failed write may succeed later. As client-go: the server's answer is final, and
/// so is a request that could not be built; transport errors and unreadable answers are not.
fn worth_retrying(e: &kube::Error) -> bool {
    !matches!(
        e,
        kube::Error::Api(_) | kube::Error::BuildRequest(_) | kube::Error::HttpError(_)
    )
}

/// The sleep before try `tries + 1`: the first is a random part (`fraction` in [0, 1)) of the
/// sleep, so that clients cut off together do not retry together; the later ones are whole.
fn retry_delay(tries: u32, sleep: Duration, fraction: f64) -> Duration {
    if tries == 1 {
        sleep.mul_f64(fraction.clamp(0.0, 1.0))
    } else {
        sleep
    }
}

/// A number in [0, 1) that differs from call to call (no randomness source is worth a
/// dependency here).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1000) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_drops_new_events() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let recorder = EventRecorder {
            tx,
            queued: Some((Arc::clone(&queued), 2)),
        };
        let obj = ObjectReference {
            name: Some("p".into()),
            ..ObjectReference::default()
        };
        for i in 0..5 {
            recorder.normal(obj.clone(), "Started", &format!("n{i}"));
        }
        assert_eq!(queued.load(Ordering::Relaxed), 2);
        let mut got = Vec::new();
        while let Ok(r) = rx.try_recv() {
            got.push(r.message);
        }
        assert_eq!(got, vec!["n0", "n1"]);
    }

    #[test]
    fn only_transport_failures_are_retried() {
        let status = kube::core::Status::failure("events is forbidden", "Forbidden").with_code(403);
        assert!(!worth_retrying(&kube::Error::Api(Box::new(status))));
        assert!(worth_retrying(&kube::Error::Service(
            "connection refused".into()
        )));
    }

    #[test]
    fn the_first_retry_waits_a_random_part_of_the_sleep() {
        let sleep = Duration::from_secs(10);
        assert_eq!(retry_delay(1, sleep, 0.25), Duration::from_millis(2500));
        assert_eq!(retry_delay(1, sleep, 7.0), sleep);
        assert_eq!(retry_delay(2, sleep, 0.25), sleep);
        assert_eq!(retry_delay(11, sleep, 0.0), sleep);
        assert!((0.0..1.0).contains(&jitter()));
    }
}
