//! The executor crate's integration tests, one binary: each module is one area.

mod common;

mod attach;
mod env_objects;
mod ephemeral;
mod exec;
mod hooks;
mod logs;
mod probes;
mod process;
mod resource_metrics;
mod restart;
mod scheduling;
mod simulate;
mod storage_limits;
mod volumes;
