//! Events about the objects a controller manages, written as client-go's legacy event recorder
//! writes them: core/v1 Events named `<object>.<unix nanos in hex>`, with `source.component`
//! and `reportingComponent` set to the controller's name, and repeats of the same event folded
//! into one object whose `count` and `lastTimestamp` grow (client-go's event correlator).
//!
//! Recording never blocks a sync: events go through a channel to one task that writes them.
//! A failed write is logged and dropped, as upstream drops events it cannot send.

use std::collections::{HashMap, VecDeque};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// How many distinct events the correlator remembers (client-go's `maxLruCacheEntries`).
const CORRELATOR_ENTRIES: usize = 4096;

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
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Writer {
            client,
            component: component.to_string(),
            host: hostname(),
            seen: HashMap::new(),
            order: VecDeque::new(),
        };
        let task = tokio::spawn(writer.run(rx));
        (EventRecorder { tx }, task)
    }

    /// A recorder whose events are handed to `tx` (for tests of the controllers' decisions).
    pub fn to_channel(tx: mpsc::UnboundedSender<EventRecord>) -> EventRecorder {
        EventRecorder { tx }
    }

    pub fn record(&self, object: ObjectReference, type_: EventType, reason: &str, message: &str) {
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

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What identifies "the same event" for aggregation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CorrelationKey {
    namespace: String,
    uid: String,
    name: String,
    type_: EventType,
    reason: String,
    message: String,
}

struct Seen {
    event_name: String,
    count: i32,
}

struct Writer {
    client: Client,
    component: String,
    host: String,
    seen: HashMap<CorrelationKey, Seen>,
    order: VecDeque<CorrelationKey>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<EventRecord>) {
        while let Some(rec) = rx.recv().await {
            self.write(rec).await;
        }
    }

    async fn write(&mut self, rec: EventRecord) {
        let namespace = rec
            .object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let key = CorrelationKey {
            namespace: namespace.clone(),
            uid: rec.object.uid.clone().unwrap_or_default(),
            name: rec.object.name.clone().unwrap_or_default(),
            type_: rec.type_,
            reason: rec.reason.clone(),
            message: rec.message.clone(),
        };
        let now = Timestamp::now();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        if let Some(seen) = self.seen.get_mut(&key) {
            let count = seen.count + 1;
            let patch = json!({"count": count, "lastTimestamp": Time(now)});
            match api
                .patch(
                    &seen.event_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    seen.count = count;
                    return;
                }
                // The earlier event is gone (expired or deleted): write a new one below.
                Err(e) => {
                    debug!(event = %seen.event_name, error = %e, "aggregating an event failed")
                }
            }
        }
        let event = self.new_event(&rec, &namespace, now);
        let name = event.name_any();
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self.remember(
                key,
                Seen {
                    event_name: name,
                    count: 1,
                },
            ),
            Err(e) => warn!(
                reason = %rec.reason,
                object = ?rec.object.name,
                error = %e,
                "could not write an event; dropping it"
            ),
        }
    }

    fn new_event(&self, rec: &EventRecord, namespace: &str, now: Timestamp) -> Event {
        let object_name = rec.object.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{object_name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            involved_object: rec.object.clone(),
            reason: Some(rec.reason.clone()),
            message: Some(rec.message.clone()),
            type_: Some(rec.type_.as_str().to_string()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.host.clone()),
            ..Event::default()
        }
    }

    fn remember(&mut self, key: CorrelationKey, seen: Seen) {
        if self.seen.insert(key.clone(), seen).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > CORRELATOR_ENTRIES {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }
}
