//! client-go's event correlator, which every legacy event recorder runs before writing:
//!
//! - **aggregation**: once 10 events that differ only by message are seen for one object,
//!   source, type and reason within 10 minutes, further ones become one event whose message is
//!   prefixed `(combined from similar events): `;
//! - **counting**: a repeat of an event already written is a patch of its `count` and
//!   `lastTimestamp`;
//! - **spam filtering**: a source may write 25 events about one object, then one every 5
//!   minutes (a token bucket per source and object); the rest are dropped.
//!
//! Pure: the caller passes the time and writes what `correlate` returns.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

/// Entries each cache keeps (client-go's `maxLruCacheEntries`).
const CACHE_ENTRIES: usize = 4096;
/// Similar events seen within the interval before they are combined.
const AGGREGATE_MAX_EVENTS: usize = 10;
const AGGREGATE_INTERVAL: SignedDuration = SignedDuration::from_secs(600);
/// Events a source may write about one object at once, and the refill rate after.
const SPAM_BURST: f64 = 25.0;
const SPAM_QPS: f64 = 1.0 / 300.0;

pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// What to do with an event.
#[derive(Clone, Debug, PartialEq)]
pub enum Correlated {
    /// Drop it (spam).
    Skip,
    /// Create this event.
    Create(Event),
    /// Patch the existing event of that name with `patch` (strategic merge); create `event`
    /// if it is gone.
    Patch { event: Event, patch: Value },
}

#[derive(Default)]
pub struct Correlator {
    aggregates: Lru<Aggregate>,
    observed: Lru<Observation>,
    spam: Lru<TokenBucket>,
}

struct Aggregate {
    messages: HashSet<String>,
    last: Timestamp,
}

#[derive(Clone)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

impl Correlator {
    /// Aggregates, counts and filters `event` (first and last timestamps `now`).
    pub fn correlate(&mut self, event: Event, now: Timestamp) -> Correlated {
        let (event, key) = self.aggregate(event, now);
        let (event, patch) = self.observe(event, key);
        if self.is_spam(&event, now) {
            return Correlated::Skip;
        }
        match patch {
            Some(patch) => Correlated::Patch { event, patch },
            None => Correlated::Create(event),
        }
    }

    /// Records what the server returned for a written event (its name and resourceVersion).
    pub fn update_state(&mut self, written: &Event) {
        self.observed
            .put(event_key(written), Observation::of(written));
    }

    fn aggregate(&mut self, event: Event, now: Timestamp) -> (Event, String) {
        let (aggregate_key, message) = aggregate_key(&event);
        let record = self
            .aggregates
            .get_or_insert_with(&aggregate_key, || Aggregate {
                messages: HashSet::new(),
                last: now,
            });
        if now.duration_since(record.last) > AGGREGATE_INTERVAL {
            record.messages.clear();
        }
        record.messages.insert(message);
        record.last = now;
        if record.messages.len() < AGGREGATE_MAX_EVENTS {
            let key = event_key(&event);
            return (event, key);
        }
        // The set stays below the threshold; which message leaves does not matter.
        if let Some(any) = record.messages.iter().next().cloned() {
            record.messages.remove(&any);
        }
        let object_name = event.involved_object.name.clone().unwrap_or_default();
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(event_name(&object_name, now)),
                namespace: event.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            message: Some(format!(
                "{COMBINED_PREFIX}{}",
                event.message.as_deref().unwrap_or("")
            )),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            // client-go's combined event leaves the reporting fields empty.
            reporting_component: Some(String::new()),
            reporting_instance: Some(String::new()),
            ..Event::default()
        };
        (combined, aggregate_key)
    }

    /// Counts the event under `key`: a repeat takes the earlier one's name and first timestamp.
    fn observe(&mut self, mut event: Event, key: String) -> (Event, Option<Value>) {
        let mut patch = None;
        if let Some(last) = self.observed.get(&key).filter(|o| o.count > 0).cloned() {
            event.metadata.name = Some(last.name);
            event.metadata.resource_version = last.resource_version;
            event.first_timestamp = last.first_timestamp;
            event.count = Some(last.count.saturating_add(1));
            patch = Some(json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.observed.put(key, Observation::of(&event));
        (event, patch)
    }

    fn is_spam(&mut self, event: &Event, now: Timestamp) -> bool {
        let bucket = self
            .spam
            .get_or_insert_with(&spam_key(event), || TokenBucket::full(now));
        !bucket.try_take(now)
    }
}

/// An event's name as client-go makes it: the object's name and the time in hex nanoseconds.
pub fn event_name(object_name: &str, now: Timestamp) -> String {
    format!("{object_name}.{:x}", now.as_nanosecond())
}

impl Observation {
    fn of(e: &Event) -> Observation {
        Observation {
            count: e.count.unwrap_or(0),
            first_timestamp: e.first_timestamp.clone(),
            name: e.metadata.name.clone().unwrap_or_default(),
            resource_version: e.metadata.resource_version.clone(),
        }
    }
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

fn source(e: &Event) -> (&str, &str) {
    e.source
        .as_ref()
        .map(|s| (s.component.as_deref(), s.host.as_deref()))
        .map(|(c, h)| (c.unwrap_or(""), h.unwrap_or("")))
        .unwrap_or(("", ""))
}

/// The source and object an event is about (the spam filter's unit).
fn spam_key(e: &Event) -> String {
    let (component, host) = source(e);
    let o = &e.involved_object;
    [
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
    ]
    .concat()
}

/// The event's full identity: source, object (with field path), type, reason and message.
/// (client-go joins the same fields; the order inside a key does not matter.)
fn event_key(e: &Event) -> String {
    let o = &e.involved_object;
    let rest = [s(&o.field_path), s(&e.type_), s(&e.reason), s(&e.message)];
    spam_key(e) + &rest.concat()
}

/// Events alike but for their message share the first key; the message is the second.
fn aggregate_key(e: &Event) -> (String, String) {
    let rest = [
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ];
    (spam_key(e) + &rest.concat(), s(&e.message).to_string())
}

/// A token bucket as golang.org/x/time/rate's limiter: starts full, refills at `SPAM_QPS`.
struct TokenBucket {
    tokens: f64,
    last: Timestamp,
}

impl TokenBucket {
    fn full(now: Timestamp) -> TokenBucket {
        TokenBucket {
            tokens: SPAM_BURST,
            last: now,
        }
    }

    /// Takes a token if one has refilled; a refused take changes nothing.
    fn try_take(&mut self, now: Timestamp) -> bool {
        let elapsed = now.duration_since(self.last).as_secs_f64().max(0.0);
        let tokens = (self.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        if tokens < 1.0 {
            return false;
        }
        self.tokens = tokens - 1.0;
        self.last = self.last.max(now);
        true
    }
}

/// A least-recently-used map of `CACHE_ENTRIES` entries (reads count as use).
struct Lru<V> {
    entries: HashMap<String, (V, u64)>,
    by_use: BTreeMap<u64, String>,
    clock: u64,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Lru {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
        }
    }
}

impl<V> Lru<V> {
    fn get(&mut self, key: &str) -> Option<&mut V> {
        self.clock += 1;
        let clock = self.clock;
        let (v, used) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        *used = clock;
        self.by_use.insert(clock, key.to_string());
        Some(v)
    }

    fn get_or_insert_with(&mut self, key: &str, value: impl FnOnce() -> V) -> &mut V {
        self.clock += 1;
        let clock = self.clock;
        match self.entries.get(key) {
            Some((_, used)) => {
                self.by_use.remove(used);
            }
            None => {
                if self.entries.len() >= CACHE_ENTRIES
                    && let Some((_, oldest)) = self.by_use.pop_first()
                {
                    self.entries.remove(&oldest);
                }
            }
        }
        self.by_use.insert(clock, key.to_string());
        let slot = self
            .entries
            .entry(key.to_string())
            .or_insert_with(|| (value(), clock));
        slot.1 = clock;
        &mut slot.0
    }

    fn put(&mut self, key: String, value: V) {
        if let Some(slot) = self.get(&key) {
            *slot = value;
            return;
        }
        self.get_or_insert_with(&key, || value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    fn object(kind: &str, name: &str, namespace: &str) -> ObjectReference {
        ObjectReference {
            kind: Some(kind.into()),
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some("C934D34AFB20242".into()),
            api_version: Some("version".into()),
            field_path: Some("spec.containers{mycontainer}".into()),
            ..ObjectReference::default()
        }
    }

    fn event(reason: &str, message: &str, o: ObjectReference) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.1", s(&o.name))),
                namespace: o.namespace.clone(),
                ..ObjectMeta::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            involved_object: o,
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("kublet.node1".into()),
            }),
            count: Some(1),
            type_: Some("Normal".into()),
            ..Event::default()
        }
    }

    fn at(t0: Timestamp, secs: i64) -> Timestamp {
        t0 + SignedDuration::from_secs(secs)
    }

    /// Plays `previous` one every `interval` seconds (writing what is not skipped), then `new`.
    fn play(previous: &[Event], new: &Event, interval: i64) -> Correlated {
        let t0: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut c = Correlator::default();
        let mut i = 0;
        let mut stamp = |mut e: Event| {
            i += 1;
            let now = at(t0, i * interval);
            e.first_timestamp = Some(Time(now));
            e.last_timestamp = Some(Time(now));
            (e, now)
        };
        for e in previous {
            let (e, now) = stamp(e.clone());
            match c.correlate(e, now) {
                Correlated::Skip => {}
                Correlated::Create(e) | Correlated::Patch { event: e, .. } => c.update_state(&e),
            }
        }
        let (e, now) = stamp(new.clone());
        c.correlate(e, now)
    }

    fn similar(n: usize, template: &Event) -> Vec<Event> {
        (0..n)
            .map(|i| {
                let mut e = template.clone();
                e.message = Some(format!("{}-{i}-{}", s(&e.message), s(&e.message)));
                e
            })
            .collect()
    }

    fn written(r: Correlated) -> (Event, bool) {
        match r {
            Correlated::Create(e) => (e, false),
            Correlated::Patch { event, .. } => (event, true),
            Correlated::Skip => panic!("skipped"),
        }
    }

    #[test]
    fn aggregate_keys_differ_by_reason_not_message() {
        let pod = object("Pod", "pod1", "other");
        let (a1, l1) = aggregate_key(&event("end-of-world", "it was fun", pod.clone()));
        let (a2, l2) = aggregate_key(&event("end-of-world", "it was awful", pod.clone()));
        let (a3, _) = aggregate_key(&event("nevermind", "it was a bug", pod));
        assert_eq!(a1, a2);
        assert_ne!(l1, l2);
        assert_ne!(a1, a3);
    }

    /// Name, previous events, the new event, seconds between events, and what is written:
    /// None = skipped, Some((message, count)).
    type Case<'a> = (&'a str, Vec<Event>, &'a Event, i64, Option<(&'a str, i32)>);

    #[test]
    fn correlator_scenarios() {
        let pod = object("Pod", "my-pod", "my-ns");
        let first = event("first", "i am first", pod.clone());
        let duplicate = event("duplicate", "me again", pod.clone());
        let unique = event("unique", "snowflake", pod.clone());
        let mut similar_event = event("similar", "similar message", pod.clone());
        similar_event.involved_object.field_path = Some("spec.containers{container1}".into());
        let mut other_container = similar_event.clone();
        other_container.involved_object.field_path = Some("spec.containers{container2}".into());
        let combined_message = format!("{COMBINED_PREFIX}similar message");
        let unique_events: Vec<Event> = (0..30)
            .map(|i| {
                event(
                    &format!("reason-{i}"),
                    &format!("message-{i}"),
                    object("Pod", &format!("pod-{i}"), &format!("ns-{i}")),
                )
            })
            .collect();

        let cases: Vec<Case> = vec![
            (
                "create-a-single-event",
                vec![],
                &first,
                5,
                Some(("i am first", 1)),
            ),
            (
                "the-same-event-should-just-count",
                vec![duplicate.clone()],
                &duplicate,
                5,
                Some(("me again", 2)),
            ),
            (
                "the-same-event-should-just-count-even-if-more-than-aggregate",
                vec![duplicate.clone(); AGGREGATE_MAX_EVENTS],
                &duplicate,
                30,
                Some(("me again", 11)),
            ),
            (
                "the-same-event-is-spam-if-happens-too-frequently",
                vec![duplicate.clone(); 26],
                &duplicate,
                1,
                None,
            ),
            (
                "create-many-unique-events",
                unique_events,
                &unique,
                5,
                Some(("snowflake", 1)),
            ),
            (
                "similar-events-should-aggregate-event",
                similar(AGGREGATE_MAX_EVENTS - 1, &similar_event),
                &similar_event,
                5,
                Some((&combined_message, 1)),
            ),
            (
                "similar-events-many-times-should-count-the-aggregate",
                similar(AGGREGATE_MAX_EVENTS, &similar_event),
                &similar_event,
                5,
                Some((&combined_message, 2)),
            ),
            (
                "events-from-different-containers-do-not-aggregate",
                vec![other_container],
                &similar_event,
                5,
                Some(("similar message", 1)),
            ),
            (
                "similar-events-whose-interval-is-greater-than-aggregate-interval-do-not-aggregate",
                similar(AGGREGATE_MAX_EVENTS - 1, &similar_event),
                &similar_event,
                601,
                Some(("similar message", 1)),
            ),
        ];
        for (name, previous, new, interval, expected) in cases {
            let r = play(&previous, new, interval);
            let Some((message, count)) = expected else {
                assert_eq!(r, Correlated::Skip, "{name}");
                continue;
            };
            let (e, patched) = written(r);
            assert_eq!(s(&e.message), message, "{name}");
            assert_eq!(e.count, Some(count), "{name}");
            assert_eq!(patched, count > 1, "{name}: a repeat is a patch");
            assert_eq!(e.reason, new.reason, "{name}");
            let (first_ts, last_ts) = (e.first_timestamp.clone(), e.last_timestamp.clone());
            assert_eq!(first_ts == last_ts, count == 1, "{name}: timestamps");
        }
    }

    #[test]
    fn a_repeat_patches_the_first_event_by_name() {
        let t0: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut c = Correlator::default();
        let e = event(
            "SuccessfulCreate",
            "Created pod: a",
            object("Job", "j", "ns"),
        );
        let Correlated::Create(mut created) = c.correlate(e.clone(), t0) else {
            panic!("first is created");
        };
        created.metadata.resource_version = Some("7".into());
        c.update_state(&created);
        let mut again = e;
        again.metadata.name = Some("j.2".into());
        again.last_timestamp = Some(Time(at(t0, 3)));
        let Correlated::Patch { event, patch } = c.correlate(again, at(t0, 3)) else {
            panic!("repeat is a patch");
        };
        assert_eq!(event.metadata.name, created.metadata.name);
        assert_eq!(event.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["lastTimestamp"], "2024-01-01T00:00:03Z");
        assert_eq!(patch["message"], "Created pod: a");
    }

    #[test]
    fn spam_filter_is_per_source_and_object() {
        let t0: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut c = Correlator::default();
        let job = object("Job", "big", "ns");
        let mut sent = 0;
        for i in 0..40 {
            let e = event(
                "SuccessfulCreate",
                &format!("Created pod: p{i}"),
                job.clone(),
            );
            if c.correlate(e, t0) != Correlated::Skip {
                sent += 1;
            }
        }
        assert_eq!(sent, 25, "a burst of 25 per object");
        // Another object has its own budget.
        let other = event("Completed", "done", object("Job", "small", "ns"));
        assert_ne!(c.correlate(other, t0), Correlated::Skip);
        // One more token after five minutes.
        let later = event("Completed", "done", job);
        assert_eq!(c.correlate(later.clone(), at(t0, 200)), Correlated::Skip);
        assert_ne!(c.correlate(later.clone(), at(t0, 301)), Correlated::Skip);
        assert_eq!(c.correlate(later, at(t0, 302)), Correlated::Skip);
    }

    #[test]
    fn a_job_of_many_pods_writes_nine_events_then_one_combined() {
        let t0: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut c = Correlator::default();
        let job = object("Job", "many", "ns");
        let mut creates = Vec::new();
        let mut patches = 0;
        for i in 0..20 {
            let e = event(
                "SuccessfulCreate",
                &format!("Created pod: p{i}"),
                job.clone(),
            );
            match c.correlate(e, at(t0, i)) {
                Correlated::Create(e) => {
                    c.update_state(&e);
                    creates.push(s(&e.message).to_string());
                }
                Correlated::Patch { event, .. } => {
                    c.update_state(&event);
                    patches += 1;
                }
                Correlated::Skip => {}
            }
        }
        assert_eq!(creates.len(), 10);
        assert_eq!(creates[8], "Created pod: p8");
        assert_eq!(
            creates[9],
            "(combined from similar events): Created pod: p9"
        );
        assert_eq!(patches, 10);
    }

    #[test]
    fn the_lru_forgets_the_least_recently_used() {
        let mut l: Lru<u32> = Lru::default();
        for i in 0..CACHE_ENTRIES {
            l.put(format!("k{i}"), 0);
        }
        assert!(l.get("k0").is_some());
        l.put("new".into(), 1);
        assert!(l.get("k0").is_some(), "k0 was used last");
        assert!(l.get("k1").is_none(), "k1 was the least recently used");
        assert_eq!(l.entries.len(), CACHE_ENTRIES);
    }
}
