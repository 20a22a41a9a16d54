//! One informer per kind for all the controllers of a process, as client-go's
//! SharedInformerFactory gives kube-controller-manager: the Job, CronJob and TTL controllers
//! share one watch and one cache of Jobs, the Job controller and the pod collector one of
//! Pods. Separate informers would each decode every change and keep their own copy.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::Informer;

type Started = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// Hands out the process's informer of each kind (all namespaces, no selector), starting
/// it on first use. Clones share the informers; they stop when the last handle is dropped.
#[derive(Clone)]
pub struct InformerFactory {
    client: Client,
    started: Arc<Mutex<Started>>,
}

impl InformerFactory {
    pub fn new(client: Client) -> Self {
        InformerFactory {
            client,
            started: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The informer of `K`, started now if no one asked for it before. Call within a tokio
    /// runtime.
    pub fn informer<K>(&self) -> Arc<Informer<K>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        // Entries are inserted whole; a poisoned lock still holds a consistent map.
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        let key = TypeId::of::<K>();
        // The map is keyed by type, so the downcast holds.
        if let Some(informer) = started
            .get(&key)
            .and_then(|any| Arc::clone(any).downcast::<Informer<K>>().ok())
        {
            return informer;
        }
        let api = Api::<K>::all(self.client.clone());
        let informer = Arc::new(Informer::new(api, watcher::Config::default()));
        started.insert(key, informer.clone());
        informer
    }
}
