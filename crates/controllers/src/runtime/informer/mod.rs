//! Informers: typed caches of one kind fed by list+watch (kube-runtime's watcher), which call a
//! handler with every change, old object included, as client-go's informer event handlers do.
//!
//! The watcher re-lists after a watch fails with 410 Expired (an ERROR event with code 410), and
//! the cache turns the new list into updates, additions and deletions, so a handler sees every
//! change it missed. Errors are retried with kube's default back-off.

mod cache;

use std::fmt::Debug;
use std::pin::pin;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

pub use cache::{CacheWriter, Lister, cache};

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

/// A running informer. Dropping it stops the watch; listers keep the last state.
pub struct Informer<K> {
    lister: Lister<K>,
    task: JoinHandle<()>,
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts listing and watching `api` (a namespace or all of them, narrowed by `config`'s
    /// selectors). `handler` runs on the informer's task after each change is in the cache, so
    /// it should only do quick work such as enqueueing keys. Call within a tokio runtime.
    pub fn spawn<H>(api: Api<K>, config: watcher::Config, mut handler: H) -> Self
    where
        H: FnMut(Change<K>) + Send + 'static,
    {
        let (mut writer, lister) = cache::<K>();
        let kind = std::any::type_name::<K>();
        let task = tokio::spawn(async move {
            let mut events = pin!(watcher(api, config).default_backoff());
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        if matches!(event, watcher::Event::Init) {
                            debug!(kind, "listing");
                        }
                        for change in writer.apply(event) {
                            handler(change);
                        }
                    }
                    // The watcher recovers by itself (a 410 leads to a re-list); report it.
                    Err(e) => warn!(kind, error = %e, "list/watch failed; retrying"),
                }
            }
        });
        Informer { lister, task }
    }

    /// Like [`spawn`](Informer::spawn), with the changes sent to a channel instead, for
    /// consumers that handle them asynchronously.
    pub fn spawn_channel(
        api: Api<K>,
        config: watcher::Config,
    ) -> (Self, mpsc::UnboundedReceiver<Change<K>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let informer = Informer::spawn(api, config, move |change| {
            // A dropped receiver only means nobody listens any more; the cache stays current.
            let _ = tx.send(change);
        });
        (informer, rx)
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

impl<K> Drop for Informer<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
