//! The api crate's integration tests, one binary: each module is one area.

mod common;

mod config_secret;
mod defaults_strategy;
mod ephemeral_containers;
mod invalid_table;
mod lifecycle_validation;
mod probe_validation;
mod robustness;
mod updates;
