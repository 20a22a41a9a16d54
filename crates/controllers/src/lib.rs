//! The Job, CronJob and TTL-after-finished controllers of kbatch, as clients of a Kubernetes
//! API server.
//!
//! [`runtime`] holds what every controller shares: informer caches, the work queue with
//! client-go's semantics, and the expectations that stop a controller from acting on a stale
//! cache.

pub mod cronjob;
pub mod disruption;
pub mod job;
pub mod manager;
pub mod podgc;
pub mod runtime;
pub mod serviceaccount;
pub mod tainteviction;
pub mod ttl;
