//! The client-side machinery shared by the controllers, modelled on client-go and
//! `pkg/controller` upstream.

pub mod clock;
pub mod consistency;
pub mod event_correlator;
pub mod events;
pub mod expectations;
pub mod informer;
pub mod key;
pub mod leader;
/// The registry lives in its own crate, shared with the API server's request metrics.
pub use kbatch_metrics as metrics;
pub mod queue;
pub mod token_bucket;
pub mod writes;
