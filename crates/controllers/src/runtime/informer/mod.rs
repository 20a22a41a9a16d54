//! Informers: typed caches of one kind fed by list+watch (kube-runtime's watcher), which call a
//! handler with every change, old object included, as client-go's informer event handlers do.
//!
//! The watcher re-lists after a watch fails with 410 Expired (an ERROR event with code 410), and
//! the cache turns the new list into updates, additions and deletions, so a handler sees every
//! change it missed. Errors are retried with kube's default back-off.

mod cache;
mod compact;
mod factory;

use std::fmt::Debug;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use kbatch_api::lean::Lean;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

pub use cache::{CacheWriter, Lister, SyncProgress, cache};
pub use factory::InformerFactory;

/// One change of the cache, with the objects as the cache holds them.
#[derive(Debug)]
pub enum Change<K> {
    Added(Arc<K>),
    /// `old` is the object the cache held before. After a re-list both may be the same version.
    Updated {
        old: Arc<K>,
        new: Arc<K>,
    },
    /// The last state seen: from the delete event, or, when the deletion was missed while the
    /// watch was down, the last cached state.
    Deleted(Arc<K>),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Added(o) => Change::Added(Arc::clone(o)),
            Change::Updated { old, new } => Change::Updated {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Change::Deleted(o) => Change::Deleted(Arc::clone(o)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    #[error("the informer stopped before its cache synced")]
    Stopped,
}

type Handler<K> = Box<dyn FnMut(Change<K>) + Send>;

/// A cache and the handlers of its changes. The lock is held while a change is applied to
/// the cache and dispatched, and while a new handler is replayed the cache, so that every
/// handler sees each change exactly once, in order, whenever it was added.
struct Fanout<K> {
    writer: CacheWriter<K>,
    lister: Lister<K>,
    handlers: Vec<Handler<K>>,
}

impl<K: Resource + 'static> Fanout<K> {
    fn new() -> Self {
        let (writer, lister) = cache::<K>();
        Fanout {
            writer,
            lister,
            handlers: Vec::new(),
        }
    }

    /// Applies a watcher event to the cache and hands its changes to every handler.
    fn apply(&mut self, event: watcher::Event<K>) {
        for change in self.writer.apply(event) {
            if let Some((last, rest)) = self.handlers.split_last_mut() {
                for h in rest {
                    h(change.clone());
                }
                last(change);
            }
        }
    }

    /// Registers `handler` after handing it the cached objects as additions.
    fn add(&mut self, mut handler: Handler<K>) {
        for obj in self.lister.list() {
            handler(Change::Added(obj));
        }
        self.handlers.push(handler);
    }
}

fn lock<K>(fanout: &Mutex<Fanout<K>>) -> MutexGuard<'_, Fanout<K>> {
    // Changes are applied in full before the guard drops; a poisoned lock still holds a
    // consistent cache and handler list.
    fanout.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running informer, shareable between controllers as client-go's shared informers are:
/// one watch and one cache per kind, each change handed to every registered handler.
/// Dropping it stops the watch; listers keep the last state.
pub struct Informer<K> {
    lister: Lister<K>,
    fanout: Arc<Mutex<Fanout<K>>>,
    task: JoinHandle<()>,
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    /// Starts listing and watching `api` (a namespace or all of them, narrowed by `config`'s
    /// selectors), with no handler yet. Call within a tokio runtime.
    ///
    /// Objects are decoded without their managedFields, which the cache never keeps.
    pub fn new(api: Api<K>, config: watcher::Config) -> Self {
        let fanout = Fanout::new();
        let lister = fanout.lister.clone();
        let fanout = Arc::new(Mutex::new(fanout));
        let feed = Arc::clone(&fanout);
        let kind = std::any::type_name::<K>();
        let task = tokio::spawn(async move {
            // Decoded as the cache keeps them: a Pod's regular containers are never cached.
            let mut events = pin!(watcher_of::<K, true>(api, config));
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        if matches!(event, watcher::Event::Init) {
                            debug!(kind, "listing");
                        }
                        lock(&feed).apply(event);
                    }
                    // The watcher recovers by itself (a 410 leads to a re-list); report it.
                    Err(e) => warn!(kind, error = %e, "list/watch failed; retrying"),
                }
            }
        });
        Informer {
            lister,
            fanout,
            task,
        }
    }

    /// Starts an informer whose every change goes to the returned channel, for a consumer
    /// that handles them asynchronously; see [`Informer::subscribe`].
    pub fn spawn_channel(
        api: Api<K>,
        config: watcher::Config,
    ) -> (Self, mpsc::UnboundedReceiver<Change<K>>) {
        let informer = Informer::new(api, config);
        let rx = informer.subscribe();
        (informer, rx)
    }

    /// Registers `handler`, which runs on the informer's task after each change is in the
    /// cache, so it should only do quick work such as enqueueing keys. Objects already in the
    /// cache are handed to it first as additions, as client-go's AddEventHandler does.
    pub fn add_handler<H>(&self, handler: H)
    where
        H: FnMut(Change<K>) + Send + 'static,
    {
        lock(&self.fanout).add(Box::new(handler));
    }

    /// A channel of every change from now on, the cached objects first as additions.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Change<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.add_handler(move |change| {
            // A dropped receiver only means nobody listens any more; the cache stays current.
            let _ = tx.send(change);
        });
        rx
    }

    /// A handle to read the cache.
    pub fn lister(&self) -> Lister<K> {
        self.lister.clone()
    }

    /// Waits until the first list is in the cache.
    pub async fn wait_until_synced(&self) -> Result<(), InformerError> {
        self.lister.wait_until_synced().await
    }

    pub fn has_synced(&self) -> bool {
        self.lister.has_synced()
    }
}

/// kube-runtime's watcher of `api` (with its default back-off), its objects decoded without
/// their managedFields: for clients that never read them.
pub fn lean_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    watcher_of::<K, false>(api, config)
}

/// `lean_watcher`, and with `NO_CONTAINERS` Pods decoded without their regular containers.
fn watcher_of<K, const NO_CONTAINERS: bool>(
    api: Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    let namespace = api.namespace().map(str::to_owned);
    let client = api.into_client();
    let api: Api<Lean<K, NO_CONTAINERS>> = match namespace {
        Some(ns) => Api::namespaced_with(client, &ns, &dt),
        None => Api::all_with(client, &dt),
    };
    watcher(api, config).default_backoff().map(|event| {
        event.map(|e| match e {
            watcher::Event::Apply(o) => watcher::Event::Apply(o.0),
            watcher::Event::Delete(o) => watcher::Event::Delete(o.0),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(o) => watcher::Event::InitApply(o.0),
            watcher::Event::InitDone => watcher::Event::InitDone,
        })
    })
}

impl<K> Drop for Informer<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(name: &str, rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    type Seen = Arc<Mutex<Vec<String>>>;

    /// A handler that records each change as "kind name rv".
    fn recorder() -> (Seen, Handler<Pod>) {
        let seen: Seen = Arc::default();
        let into = Arc::clone(&seen);
        let handler = Box::new(move |c: Change<Pod>| {
            let (kind, p) = match &c {
                Change::Added(p) => ("add", p),
                Change::Updated { new, .. } => ("update", new),
                Change::Deleted(p) => ("delete", p),
            };
            let line = format!(
                "{kind} {} {}",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.metadata.resource_version.as_deref().unwrap_or_default()
            );
            into.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        });
        (seen, handler)
    }

    fn lines(seen: &Seen) -> Vec<String> {
        seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    #[test]
    fn every_handler_sees_every_change_and_late_ones_get_the_cache_first() {
        let mut fanout = Fanout::<Pod>::new();
        let (early, h) = recorder();
        fanout.add(h);
        fanout.apply(watcher::Event::Init);
        fanout.apply(watcher::Event::InitApply(pod("a", "1")));
        fanout.apply(watcher::Event::InitApply(pod("b", "2")));
        fanout.apply(watcher::Event::InitDone);
        fanout.apply(watcher::Event::Apply(pod("a", "3")));

        // A handler added later is handed the cache as it is now, then the changes.
        let (late, h) = recorder();
        fanout.add(h);
        fanout.apply(watcher::Event::Delete(pod("b", "4")));
        fanout.apply(watcher::Event::Apply(pod("c", "5")));

        assert_eq!(
            lines(&early),
            ["add a 1", "add b 2", "update a 3", "delete b 4", "add c 5"]
        );
        assert_eq!(
            lines(&late),
            ["add a 3", "add b 2", "delete b 4", "add c 5"]
        );
    }

    #[test]
    fn a_handler_added_before_the_first_list_gets_nothing_replayed() {
        let mut fanout = Fanout::<Pod>::new();
        let (seen, h) = recorder();
        fanout.add(h);
        assert!(lines(&seen).is_empty());
        fanout.apply(watcher::Event::Apply(pod("a", "1")));
        assert_eq!(lines(&seen), ["add a 1"]);
    }
}
