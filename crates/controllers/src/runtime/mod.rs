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
pub mod metrics;
pub mod queue;
pub mod writes;
