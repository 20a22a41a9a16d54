//! The kbatch crate's integration tests, one binary: each module is one area.

mod common;

mod bad_input;
mod connect;
mod controllers_command;
mod crash;
mod cronjob_controller;
mod disruption_budget;
mod eviction;
mod examples;
mod executor;
mod job_controller;
mod kube_client;
mod kubectl;
mod openapi_v2;
mod port_forward;
mod priority;
mod protobuf;
mod run_command;
mod server_side_apply;
mod serviceaccount;
mod tls;
mod top;
mod watch_list;
