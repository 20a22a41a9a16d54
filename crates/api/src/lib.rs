//! kbatch-api: the Kubernetes types kbatch serves, the upstream well-known keys, and the API
//! server's defaulting and validation rules for them. Pure functions only: no I/O, no clock
//! reads except where a caller passes the time in.
//!
//! Order of use, as in upstream's API server. Create: decode, `defaults::*`, fill system
//! metadata (uid, creationTimestamp, generated name, namespace), `strategy::*_prepare_for_create`,
//! `validation::*_create`. Update: decode, `defaults::*`, copy system fields from the old
//! object, `strategy::*_prepare_for_update` (or `*_status_prepare_for_update`), then
//! `validation::*_update` (or `*_status_update`).

pub mod conditions;
pub mod defaults;
pub mod field;
pub mod keys;
pub mod labels;
pub mod lean;
pub mod names;
pub mod pdb;
pub mod podlog;
pub mod priority;
pub mod quantity;
pub mod quantity_text;
pub mod serviceaccount;
pub mod strategy;
pub mod strconv;
pub mod taints;
pub mod validation;

/// Re-exported so every crate uses the one k8s-openapi version enabled here.
pub use k8s_openapi;
