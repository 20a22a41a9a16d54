//! The service account controller (kube-controller-manager's `serviceaccount-controller`,
//! upstream `pkg/controller/serviceaccount`): every active namespace has a `default`
//! ServiceAccount, created when the namespace appears and again when it is deleted. Pods need
//! it: the API server's ServiceAccount admission refuses a pod whose account does not exist.
//!
//! On a real cluster its own controller does this, so `kbatch controllers` does not run it by
//! default.

use std::sync::Arc;
use std::time::Duration;

use kbatch_api::k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kbatch_api::serviceaccount::DEFAULT_SERVICE_ACCOUNT_NAME;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::runtime::informer::{Change, InformerFactory, Lister};
use crate::runtime::queue::{ItemExponentialFailureRateLimiter, WorkQueue};

/// The client name kube-controller-manager gives this controller.
pub const COMPONENT: &str = "service-account-controller";

/// The accounts every namespace gets (upstream's `DefaultServiceAccountsControllerOptions`).
pub const ACCOUNTS_TO_ENSURE: &[&str] = &[DEFAULT_SERVICE_ACCOUNT_NAME];

/// What to create in a namespace: the missing accounts of [`ACCOUNTS_TO_ENSURE`], nothing in
/// a namespace that is gone or not `Active` (a terminating one refuses new content).
pub fn missing_accounts(
    namespace: Option<&Namespace>,
    exists: impl Fn(&str) -> bool,
) -> Vec<&'static str> {
    let Some(ns) = namespace else {
        return Vec::new();
    };
    let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
    // An unset phase is Active (the API server defaults it; a cache may hold it unset).
    if phase.is_some_and(|p| p != "Active") || ns.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    ACCOUNTS_TO_ENSURE
        .iter()
        .copied()
        .filter(|name| !exists(name))
        .collect()
}

struct Inner {
    client: Client,
    namespaces: Lister<Namespace>,
    accounts: Lister<ServiceAccount>,
    queue: WorkQueue<String>,
}

/// Runs the controller until `shutdown` turns true.
pub async fn run(client: Client, informers: &InformerFactory, mut shutdown: watch::Receiver<bool>) {
    let queue: WorkQueue<String> = WorkQueue::new(
        "serviceaccount",
        ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000)),
    );
    let namespaces = informers.informer::<Namespace>();
    let accounts = informers.informer::<ServiceAccount>();
    {
        let q = queue.clone();
        namespaces.add_handler(move |change: Change<Namespace>| match &change {
            Change::Added(ns) => q.add(ns.name_any()),
            Change::Updated { new, .. } => q.add(new.name_any()),
            Change::Deleted(_) => {}
        });
    }
    {
        // A deleted account is created again (its namespace is synced).
        let q = queue.clone();
        accounts.add_handler(move |change: Change<ServiceAccount>| {
            if let Change::Deleted(sa) = &change {
                q.add(sa.namespace().unwrap_or_default());
            }
        });
    }
    let inner = Arc::new(Inner {
        client,
        namespaces: namespaces.lister(),
        accounts: accounts.lister(),
        queue,
    });
    let worker = {
        let inner = Arc::clone(&inner);
        tokio::spawn(async move {
            // Acting on a partial cache would create accounts that exist.
            let _ = inner.accounts.wait_until_synced().await;
            let inner = &inner;
            inner
                .queue
                .run_worker("ensuring service accounts failed", |key| async move {
                    inner.sync_namespace(&key).await
                })
                .await;
        })
    };
    info!("service account controller started");
    let _ = shutdown.wait_for(|s| *s).await;
    inner.queue.shut_down();
    let _ = worker.await;
    drop((namespaces, accounts));
}

impl Inner {
    async fn sync_namespace(&self, namespace: &str) -> Result<(), kube::Error> {
        let ns = self.namespaces.get("", namespace);
        let missing = missing_accounts(ns.as_deref(), |name| {
            self.accounts.get(namespace, name).is_some()
        });
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        for name in missing {
            let mut sa = ServiceAccount::default();
            sa.metadata.name = Some(name.to_string());
            match api.create(&PostParams::default(), &sa).await {
                Ok(_) => debug!(namespace, name, "created service account"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                // The namespace went, or is going: nothing to keep there.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => {
                    debug!(namespace, name, error = %e.message, "namespace refuses the account");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbatch_api::k8s_openapi::api::core::v1::NamespaceStatus;
    use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ns(phase: Option<&str>) -> Namespace {
        let mut n = Namespace::default();
        n.metadata.name = Some("n".into());
        n.status = phase.map(|p| NamespaceStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        n
    }

    // Upstream's TestServiceAccountCreation table.
    #[test]
    fn the_default_account_is_made_in_active_namespaces_only() {
        let none = |_: &str| false;
        let all = |_: &str| true;
        assert_eq!(
            missing_accounts(Some(&ns(Some("Active"))), none),
            vec!["default"]
        );
        assert_eq!(missing_accounts(Some(&ns(None)), none), vec!["default"]);
        assert!(missing_accounts(Some(&ns(Some("Active"))), all).is_empty());
        assert!(missing_accounts(Some(&ns(Some("Terminating"))), none).is_empty());
        assert!(missing_accounts(None, none).is_empty());
        let mut deleting = ns(Some("Active"));
        deleting.metadata.deletion_timestamp =
            Some(Time(kbatch_api::k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(missing_accounts(Some(&deleting), none).is_empty());
    }
}
