//! The apiserver crate's integration tests, one binary: each module is one area.

mod common;

mod alpha_fields;
mod authentication;
mod authorization;
mod ephemeral_containers;
mod fuzz_replay;
mod go_encoding;
mod metrics_api;
mod namespace_lifecycle;
