//! Events about the objects a controller manages, written as client-go's legacy event recorder
//! writes them: core/v1 Events named `<object>.<unix nanos in hex>`, with `source.component`
//! and `reportingComponent` set to the controller's name, through client-go's event correlator
//! (`event_correlator`: repeats counted, similar events combined, spam dropped).
//!
//! Recording never blocks a sync: events go through a channel to one task that writes them.
//! A failed write is logged and dropped, as upstream drops events it cannot send.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::event_correlator::{Correlated, Correlator};

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
            correlator: Correlator::default(),
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

struct Writer {
    client: Client,
    component: String,
    correlator: Correlator,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<EventRecord>) {
        while let Some(rec) = rx.recv().await {
            self.write(rec).await;
        }
    }

    async fn write(&mut self, rec: EventRecord) {
        let now = Timestamp::now();
        let event = self.new_event(&rec, now);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let mut event = match self.correlator.correlate(event, now) {
            Correlated::Skip => {
                debug!(reason = %rec.reason, object = ?rec.object.name, "event dropped as spam");
                return;
            }
            Correlated::Patch { event, patch } => {
                let name = event.metadata.name.clone().unwrap_or_default();
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    Ok(written) => {
                        self.correlator.update_state(&written);
                        return;
                    }
                    // The earlier event is gone (expired or deleted): created again below.
                    Err(kube::Error::Api(s)) if s.code == 404 => event,
                    Err(e) => {
                        warn!(event = %name, error = %e, "could not update an event; dropping it");
                        return;
                    }
                }
            }
            Correlated::Create(event) => event,
        };
        event.metadata.resource_version = None;
        match api.create(&PostParams::default(), &event).await {
            Ok(written) => self.correlator.update_state(&written),
            Err(e) => warn!(
                reason = %rec.reason,
                object = ?rec.object.name,
                error = %e,
                "could not write an event; dropping it"
            ),
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
                name: Some(format!("{object_name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace),
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
            // As client-go: the source's component and host (empty for controllers).
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(String::new()),
            ..Event::default()
        }
    }
}
