//! kbatch-api: the Kubernetes types kbatch serves, the upstream well-known keys, and the API
//! server's defaulting and validation rules for them. Pure functions only: no I/O, no clock
//! reads except where a caller passes the time in.

pub mod field;
pub mod keys;

/// Re-exported so every crate uses the one k8s-openapi version enabled here.
pub use k8s_openapi;
