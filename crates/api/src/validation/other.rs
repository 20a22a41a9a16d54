//! Light validation for the supporting kinds: Namespace, Node, core/v1 Event, Lease and
//! PriorityClass.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::{object_meta, object_meta_update};
use crate::field::{ErrorList, FieldError, Path};
use crate::names;

pub fn namespace_create(ns: &Namespace) -> ErrorList {
    object_meta(&ns.metadata, false, names::name_is_dns_label)
}

pub fn namespace_update(new: &Namespace, old: &Namespace) -> ErrorList {
    object_meta_update(&new.metadata, &old.metadata)
}

pub fn node_create(node: &Node) -> ErrorList {
    object_meta(&node.metadata, false, names::name_is_dns_subdomain)
}

pub fn node_update(new: &Node, old: &Node) -> ErrorList {
    object_meta_update(&new.metadata, &old.metadata)
}

/// Metadata plus the rule that the involved object lives in the event's namespace.
pub fn event_create(ev: &Event) -> ErrorList {
    let mut errs = object_meta(&ev.metadata, true, names::name_is_dns_subdomain);
    event_common(ev, &mut errs);
    errs
}

pub fn event_update(new: &Event, old: &Event) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    event_common(new, &mut errs);
    errs
}

/// `legacyValidateEvent` (core/v1 requests): namespace agreement for old-style events; the
/// reporting fields and length limits once `eventTime` is set.
fn event_common(ev: &Event, errs: &mut ErrorList) {
    let ns = ev.metadata.namespace.as_deref().unwrap_or("");
    let involved_ns = ev.involved_object.namespace.as_deref().unwrap_or("");
    let p = Path::new("involvedObject").child("namespace");
    let mismatch = |errs: &mut ErrorList| {
        errs.push(FieldError::invalid(
            p.clone(),
            involved_ns,
            "does not match event.namespace",
        ))
    };
    if ev.event_time.is_none() {
        if involved_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                mismatch(errs);
            }
        } else if ns != involved_ns {
            mismatch(errs);
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            mismatch(errs);
        }
        let rc = ev.reporting_component.as_deref().unwrap_or("");
        if rc.is_empty() {
            errs.push(FieldError::required("reportingComponent", ""));
        }
        super::qualified_name(rc, &Path::new("reportingComponent"), errs);
        for (field, value, limit) in [
            ("reportingInstance", ev.reporting_instance.as_deref(), 128),
            ("action", ev.action.as_deref(), 128),
            ("reason", ev.reason.as_deref(), 128),
        ] {
            let v = value.unwrap_or("");
            if v.is_empty() {
                errs.push(FieldError::required(field, ""));
            }
            if v.len() > limit {
                errs.push(FieldError::invalid(
                    field,
                    "",
                    format!("can have at most {limit} characters"),
                ));
            }
        }
        if ev.message.as_deref().unwrap_or("").len() > 1024 {
            errs.push(FieldError::invalid(
                "message",
                "",
                "can have at most 1024 characters",
            ));
        }
    }
}

pub fn lease_create(lease: &Lease) -> ErrorList {
    let mut errs = object_meta(&lease.metadata, true, names::name_is_dns_subdomain);
    lease_spec(lease, &mut errs);
    errs
}

pub fn lease_update(new: &Lease, old: &Lease) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    lease_spec(new, &mut errs);
    errs
}

fn lease_spec(lease: &Lease, errs: &mut ErrorList) {
    let Some(spec) = &lease.spec else {
        return;
    };
    let p = Path::new("spec");
    if let Some(d) = spec.lease_duration_seconds
        && d <= 0
    {
        errs.push(FieldError::invalid(
            p.child("leaseDurationSeconds"),
            d,
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec.lease_transitions
        && t < 0
    {
        errs.push(FieldError::invalid(
            p.child("leaseTransitions"),
            t,
            super::NEGATIVE_MSG,
        ));
    }
}

/// `ValidatePriorityClass`: a name with the system prefix must be a system class with its own
/// value and globalDefault; any other class's value is at most the highest user-definable
/// priority.
pub fn priority_class_create(pc: &PriorityClass) -> ErrorList {
    use crate::priority::{
        HIGHEST_USER_DEFINABLE_PRIORITY, SYSTEM_PRIORITY_CLASS_PREFIX,
        is_known_system_priority_class,
    };
    let mut errs = object_meta(&pc.metadata, false, names::name_is_dns_subdomain);
    let name = pc.metadata.name.as_deref().unwrap_or("");
    if name.starts_with(SYSTEM_PRIORITY_CLASS_PREFIX) {
        if let Err(e) = is_known_system_priority_class(
            name,
            pc.value.unwrap_or(0),
            pc.global_default.unwrap_or(false),
        ) {
            errs.push(FieldError::forbidden(
                "metadata.name",
                format!(
                    "priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved for system use only. error: {e}"
                ),
            ));
        }
    } else if pc.value.unwrap_or(0) > HIGHEST_USER_DEFINABLE_PRIORITY {
        errs.push(FieldError::forbidden(
            "value",
            format!(
                "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
            ),
        ));
    }
    if let Some(policy) = &pc.preemption_policy {
        preemption_policy(policy, &Path::new("preemptionPolicy"), &mut errs);
    }
    errs
}

/// `ValidatePriorityClassUpdate`: value and preemptionPolicy are immutable.
pub fn priority_class_update(new: &PriorityClass, old: &PriorityClass) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    if new.value.unwrap_or(0) != old.value.unwrap_or(0) {
        errs.push(FieldError::forbidden(
            "value",
            "may not be changed in an update.",
        ));
    }
    super::immutable(
        &new.preemption_policy,
        &old.preemption_policy,
        &Path::new("preemptionPolicy"),
        &mut errs,
    );
    errs
}

/// `ValidateServiceAccount`: the metadata only, the name a DNS subdomain.
pub fn service_account_create(sa: &ServiceAccount) -> ErrorList {
    object_meta(&sa.metadata, true, names::name_is_dns_subdomain)
}

/// `ValidateServiceAccountUpdate`.
pub fn service_account_update(new: &ServiceAccount, old: &ServiceAccount) -> ErrorList {
    let mut errs = object_meta_update(&new.metadata, &old.metadata);
    errs.extend(service_account_create(new));
    errs
}

/// `ValidatePreemptionPolicy`.
pub(crate) fn preemption_policy(policy: &str, path: &Path, errs: &mut ErrorList) {
    use crate::priority::{PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER};
    match policy {
        PREEMPT_LOWER_PRIORITY | PREEMPT_NEVER => {}
        "" => errs.push(FieldError::required(path.clone(), "")),
        other => errs.push(FieldError::not_supported(
            path.clone(),
            other,
            &[PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER],
        )),
    }
}
