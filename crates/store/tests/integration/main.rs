//! The store crate's integration tests, one binary: each module is one area.

mod crash;
mod store;
