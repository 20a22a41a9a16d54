//! Prints, as one JSON object keyed by upstream definition name
//! (`io.k8s.api.batch.v1.Job`), the OpenAPI v3 schemas of the kinds kbatch serves and of
//! every type they reference (k8s-openapi has no schemas for the List kinds), generated from the k8s-openapi types.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Binding, ConfigMap, Event, Namespace, Node, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Status};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

fn main() {
    let mut generator = SchemaSettings::openapi3().into_generator();
    // Each call registers the type and everything it references as a definition.
    generator.subschema_for::<Job>();
    generator.subschema_for::<CronJob>();
    generator.subschema_for::<Pod>();
    generator.subschema_for::<Binding>();
    generator.subschema_for::<Namespace>();
    generator.subschema_for::<Node>();
    generator.subschema_for::<Event>();
    generator.subschema_for::<events::Event>();
    generator.subschema_for::<Lease>();
    generator.subschema_for::<ConfigMap>();
    generator.subschema_for::<Secret>();
    generator.subschema_for::<ServiceAccount>();
    generator.subschema_for::<PriorityClass>();
    generator.subschema_for::<PodDisruptionBudget>();
    generator.subschema_for::<DeleteOptions>();
    generator.subschema_for::<Status>();
    let defs: Map<String, Value> = generator
        .take_definitions(true)
        .into_iter()
        .collect();
    match serde_json::to_string(&Value::Object(defs)) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("openapi-gen: {e}");
            std::process::exit(1);
        }
    }
}
