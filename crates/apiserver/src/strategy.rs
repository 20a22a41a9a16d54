//! Per-kind API rules: typed decoding, defaulting, create/update preparation and validation.
//! The rules themselves live in kbatch-api; this module adapts them to JSON documents.

use kbatch_api::field::ErrorList;
use kbatch_api::k8s_openapi::Metadata;
use kbatch_api::k8s_openapi::api::batch::v1::{CronJob, Job};
use kbatch_api::k8s_openapi::api::coordination::v1::Lease;
use kbatch_api::k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, Pod, Secret, ServiceAccount,
};
use kbatch_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kbatch_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use kbatch_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::protobuf::go_types::Msg as GoMsg;
use crate::resources::{Kind, Resource};

/// Which part of an object an update may change: the subresource it goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
    /// `pods/ephemeralcontainers`: only `spec.ephemeralContainers`.
    EphemeralContainers,
}

impl Part {
    /// The part an update of `sub` (none: the main resource) writes, when `res` serves it.
    pub fn of(res: &Resource, sub: Option<&str>) -> Option<Part> {
        let part = match sub {
            None => return Some(Part::Main),
            Some("status") => Part::Status,
            Some("ephemeralcontainers") => Part::EphemeralContainers,
            Some(_) => return None,
        };
        res.has_subresource(part.subresource()).then_some(part)
    }

    /// The subresource's name, empty for the main resource (as managedFields record it).
    pub fn subresource(self) -> &'static str {
        match self {
            Part::Main => "",
            Part::Status => "status",
            Part::EphemeralContainers => "ephemeralcontainers",
        }
    }
}

/// Typed rules for one kind. Each hook is a plain function so the table is static.
struct Rules<K> {
    default: fn(&mut K),
    prepare_create: fn(&mut K),
    validate_create: fn(&K) -> ErrorList,
    prepare_update: fn(&mut K, &K),
    validate_update: fn(&K, &K) -> ErrorList,
    prepare_status: fn(&mut K, &K),
    validate_status: fn(&K, &K) -> ErrorList,
    /// Preparation and validation of `pods/ephemeralcontainers` (pods only).
    ephemeral: Option<SubresourceRules<K>>,
}

/// An update part's preparation and validation.
type SubresourceRules<K> = (fn(&mut K, &K), fn(&K, &K) -> ErrorList);

fn none<K>(_: &mut K) {}
fn no_errors<K>(_: &K) -> ErrorList {
    Vec::new()
}
fn no_update_errors<K>(_: &K, _: &K) -> ErrorList {
    Vec::new()
}
fn keep_new<K>(_: &mut K, _: &K) {}

impl<K> Rules<K> {
    const PERMISSIVE: Rules<K> = Rules {
        default: none,
        prepare_create: none,
        validate_create: no_errors,
        prepare_update: keep_new,
        validate_update: no_update_errors,
        prepare_status: keep_new,
        validate_status: no_update_errors,
        ephemeral: None,
    };
}

/// Decode a JSON document into its typed form; the error names the field path.
pub fn decode<K: DeserializeOwned>(res: &Resource, v: &Value) -> Result<K, ApiError> {
    // Path tracking costs as much as the decoding: only a failure pays for it.
    match K::deserialize(v) {
        Ok(k) => Ok(k),
        Err(_) => decode_tracking_unknown(res, v, &mut Vec::new()),
    }
}

/// Decode, also collecting the paths of fields the type does not have (upstream's strict
/// decoding errors name them as `spec.template.spec.containers[0].foo`).
fn decode_tracking_unknown<K: DeserializeOwned>(
    res: &Resource,
    v: &Value,
    unknown: &mut Vec<String>,
) -> Result<K, ApiError> {
    decode_kind(res.kind_name, res.version, v, unknown)
}

/// `decode_tracking_unknown` by kind and version, for kinds that are not stored resources
/// (the authorization reviews).
pub fn decode_kind<K: DeserializeOwned>(
    kind: &str,
    version: &str,
    v: &Value,
    unknown: &mut Vec<String>,
) -> Result<K, ApiError> {
    // First without path tracking; a document that fails is decoded again to name the path.
    let mut found = Vec::new();
    if let Ok(k) = serde_ignored::deserialize(v, |path| found.push(field_path(&path))) {
        unknown.extend(found);
        return Ok(k);
    }
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(v, &mut track);
    let result = serde_ignored::deserialize(de, |path| unknown.push(field_path(&path)));
    result.map_err(|inner| {
        let path = track.path().to_string();
        let at = if path.is_empty() || path == "." {
            String::new()
        } else {
            format!(" at {path}")
        };
        cannot_handle_kind(kind, version, &format!("{inner}{at}"))
    })
}

/// `<Kind> in version "<v>" cannot be handled as a <Kind>: <why>` (400).
pub fn cannot_handle(res: &Resource, why: &str) -> ApiError {
    cannot_handle_kind(res.kind_name, res.version, why)
}

/// `cannot_handle` by kind and version.
pub fn cannot_handle_kind(kind: &str, version: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {why}"
    ))
}

fn field_path(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        P::Map { parent, key } => {
            let parent = field_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            field_path(parent)
        }
    }
}

/// The typed form as kube-apiserver would encode its Go struct: without the zero values
/// Go's `omitempty` leaves out (`schema`, the kind's Go type, when kbatch has its table).
fn encode<K: Serialize>(k: &K, schema: Option<&'static GoMsg>) -> Result<Value, ApiError> {
    let mut v =
        serde_json::to_value(k).map_err(|e| ApiError::internal(format!("encoding object: {e}")))?;
    if let Some(msg) = schema {
        crate::gojson::drop_omitted(&mut v, msg);
    }
    Ok(v)
}

/// Hands `track` the encoded object and returns the managedFields it computed, cleared from the
/// typed form: they go into the encoded object at the end (`encode_with_managed`), as a round
/// trip through the typed form would copy them twice for nothing. Without `track` (an apply
/// recorded its managers while merging) there is nothing to record.
fn take_managed<K: Serialize + Metadata<Ty = ObjectMeta>>(
    k: &mut K,
    schema: Option<&'static GoMsg>,
    track: Option<&mut dyn FnMut(Value) -> Option<Value>>,
) -> Result<Option<Value>, ApiError> {
    let Some(track) = track else {
        return Ok(None);
    };
    let managed = track(encode(k, schema)?);
    k.metadata_mut().managed_fields = None;
    Ok(managed)
}

/// Takes `new`'s managedFields out when they are `old`'s: they were valid when stored, so
/// decoding them into the typed form and encoding them back would only copy them twice.
/// (Other managedFields go through the typed form, which checks and normalizes them.)
fn take_unchanged_managed_fields(new: &mut Value, old: &Value) -> Option<Value> {
    let old_mf = old.pointer("/metadata/managedFields")?;
    let meta = new.get_mut("metadata")?.as_object_mut()?;
    if meta.get("managedFields") != Some(old_mf) {
        return None;
    }
    meta.remove("managedFields")
}

/// Decodes a stored object (valid when stored) without its managedFields, which the kinds'
/// rules never read.
fn decode_stored<K: DeserializeOwned + 'static>(res: &Resource, v: &Value) -> Result<K, ApiError> {
    match kbatch_api::lean::Lean::<K>::deserialize(v) {
        Ok(k) => Ok(k.0),
        Err(_) => decode(res, v),
    }
}

fn encode_with_managed<K: Serialize>(
    k: &K,
    schema: Option<&'static GoMsg>,
    managed: Option<Value>,
) -> Result<Value, ApiError> {
    let mut out = encode(k, schema)?;
    if let Some(mf) = managed
        && let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.insert("managedFields".into(), mf);
    }
    Ok(out)
}

/// The server's parts of an update pass (see `Strategy::update`).
pub struct UpdateHooks<'a> {
    /// Gets the paths of unknown fields, before anything else (strict decoding comes first).
    pub on_unknown: &'a mut dyn FnMut(Vec<String>) -> Result<(), ApiError>,
    /// Sets the system metadata of the new object from the stored one.
    pub fill: &'a mut dyn FnMut(&mut ObjectMeta, &ObjectMeta) -> Result<(), ApiError>,
    /// Gets the object to store and records its managedFields in it.
    pub track: Option<&'a mut dyn FnMut(&mut Value)>,
}

/// Runs typed hooks on JSON documents for one resource.
pub struct Strategy {
    res: &'static Resource,
    /// The kind's Go struct, for Go's encoding of the typed form.
    schema: Option<&'static GoMsg>,
}

macro_rules! dispatch {
    ($self:ident, $f:ident ( $($arg:expr),* )) => {
        match $self.res.kind {
            Kind::Job => $self.$f(&JOB $(, $arg)*),
            Kind::CronJob => $self.$f(&CRONJOB $(, $arg)*),
            Kind::Pod => $self.$f(&POD $(, $arg)*),
            Kind::Namespace => $self.$f(&NAMESPACE $(, $arg)*),
            Kind::Node => $self.$f(&NODE $(, $arg)*),
            Kind::Event | Kind::EventV1 => $self.$f(&EVENT $(, $arg)*),
            Kind::Lease => $self.$f(&LEASE $(, $arg)*),
            Kind::ConfigMap => $self.$f(&CONFIGMAP $(, $arg)*),
            Kind::Secret => $self.$f(&SECRET $(, $arg)*),
            Kind::ServiceAccount => $self.$f(&SERVICE_ACCOUNT $(, $arg)*),
            Kind::PriorityClass => $self.$f(&PRIORITY_CLASS $(, $arg)*),
            Kind::PodDisruptionBudget => $self.$f(&POD_DISRUPTION_BUDGET $(, $arg)*),
        }
    };
}

impl Strategy {
    pub fn new(res: &'static Resource) -> Self {
        Strategy {
            res,
            schema: crate::gojson::schema_of(&res.api_version(), res.kind_name),
        }
    }

    /// Decode-time defaulting: type-checks the document and fills defaults. Returns the
    /// defaulted document and the paths of unknown fields (dropped, as upstream drops them).
    pub fn decode_and_default(&self, v: Value) -> Result<(Value, Vec<String>), ApiError> {
        dispatch!(self, t_default(v))
    }

    /// The whole create pipeline in one typed pass: decode (handing unknown fields to
    /// `on_unknown` first, as upstream's strict decoding comes before validation), default,
    /// `fill` the system metadata, `track` the defaulted object (it returns the
    /// managedFields to record, as upstream's field manager sees the object before the
    /// kind's preparation), prepare, validate (422), encode.
    pub fn create(
        &self,
        v: &Value,
        on_unknown: &mut dyn FnMut(Vec<String>) -> Result<(), ApiError>,
        fill: &mut dyn FnMut(&mut ObjectMeta) -> Result<(), ApiError>,
        track: Option<&mut dyn FnMut(Value) -> Option<Value>>,
    ) -> Result<Value, ApiError> {
        dispatch!(self, t_create_pass(v, on_unknown, fill, track))
    }

    /// Create preparation then validation of an already defaulted document with its system
    /// metadata filled; returns the object to store, or 422.
    pub fn prepare_and_validate_create(&self, v: Value) -> Result<Value, ApiError> {
        self.create(&v, &mut |_| Ok(()), &mut |_| Ok(()), None)
    }

    /// The whole update pipeline in one typed pass, as `create` is for creates: decode `new`
    /// (handing unknown fields to `on_unknown`), default, `fill` its system metadata from
    /// `old`'s, prepare per `part`, validate (422), encode, and `track` the encoded object (it
    /// records the managedFields in it).
    ///
    /// Upstream's field manager sees the object before the preparation, and then drops the
    /// fields the strategy resets (`GetResetFields`: the spec of a status update, the status
    /// of a main update). An update's preparation changes nothing but those fields and system
    /// metadata the field manager strips, so tracking the prepared object records the same
    /// fields with one encoding instead of two.
    pub fn update(
        &self,
        new: Value,
        old: &Value,
        part: Part,
        hooks: UpdateHooks<'_>,
    ) -> Result<Value, ApiError> {
        dispatch!(self, t_update_pass(new, old, part, hooks))
    }

    fn t_default<K: DeserializeOwned + Serialize>(
        &self,
        rules: &Rules<K>,
        v: Value,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let mut unknown = Vec::new();
        let mut k: K = decode_tracking_unknown(self.res, &v, &mut unknown)?;
        (rules.default)(&mut k);
        Ok((encode(&k, self.schema)?, unknown))
    }

    fn t_create_pass<K: DeserializeOwned + Serialize + Metadata<Ty = ObjectMeta>>(
        &self,
        rules: &Rules<K>,
        v: &Value,
        on_unknown: &mut dyn FnMut(Vec<String>) -> Result<(), ApiError>,
        fill: &mut dyn FnMut(&mut ObjectMeta) -> Result<(), ApiError>,
        track: Option<&mut dyn FnMut(Value) -> Option<Value>>,
    ) -> Result<Value, ApiError> {
        let mut unknown = Vec::new();
        let mut k: K = decode_tracking_unknown(self.res, v, &mut unknown)?;
        on_unknown(unknown)?;
        (rules.default)(&mut k);
        fill(k.metadata_mut())?;
        let managed = take_managed(&mut k, self.schema, track)?;
        (rules.prepare_create)(&mut k);
        let errs = (rules.validate_create)(&k);
        if !errs.is_empty() {
            let name = k.metadata().name.clone().unwrap_or_default();
            return Err(ApiError::invalid(
                self.res.kind_name,
                self.res.group,
                &name,
                &errs,
            ));
        }
        encode_with_managed(&k, self.schema, managed)
    }

    fn t_update_pass<K: DeserializeOwned + Serialize + Metadata<Ty = ObjectMeta> + 'static>(
        &self,
        rules: &Rules<K>,
        mut new: Value,
        old: &Value,
        part: Part,
        hooks: UpdateHooks<'_>,
    ) -> Result<Value, ApiError> {
        let kept = take_unchanged_managed_fields(&mut new, old);
        let mut unknown = Vec::new();
        let mut k: K = decode_tracking_unknown(self.res, &new, &mut unknown)?;
        (hooks.on_unknown)(unknown)?;
        (rules.default)(&mut k);
        if part == Part::EphemeralContainers {
            // Upstream compares the existing ephemeral containers as Go values, where a field
            // sent as its zero value (`stdin: false`, `command: []`) is the field left out:
            // Go's encoding and a decode make the typed form say the same.
            k = decode(self.res, &encode(&k, self.schema)?)?;
        }
        let o: K = decode_stored(self.res, old)?;
        (hooks.fill)(k.metadata_mut(), o.metadata())?;
        self.prepare_validate_update(rules, &mut k, &o, part, &new)?;
        let mut out = encode_with_managed(&k, self.schema, kept)?;
        if let Some(track) = hooks.track {
            // `managedFields: []` asks for a reset, which the field manager sees before Go's
            // encoding would drop the empty list.
            if k.metadata()
                .managed_fields
                .as_ref()
                .is_some_and(Vec::is_empty)
                && let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut)
            {
                m.insert("managedFields".into(), Value::Array(Vec::new()));
            }
            track(&mut out);
        }
        Ok(out)
    }

    /// The kind's update preparation, upstream's BeforeUpdate metadata rules, validation.
    fn prepare_validate_update<K: Metadata<Ty = ObjectMeta>>(
        &self,
        rules: &Rules<K>,
        k: &mut K,
        o: &K,
        part: Part,
        new: &Value,
    ) -> Result<(), ApiError> {
        let (prepare, validate): SubresourceRules<K> = match part {
            Part::Main => (rules.prepare_update, rules.validate_update),
            Part::Status => (rules.prepare_status, rules.validate_status),
            Part::EphemeralContainers => rules.ephemeral.ok_or_else(|| {
                ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                )
            })?,
        };
        prepare(k, o);
        // As upstream's BeforeUpdate, after the kind's preparation (the pod status strategy
        // clears it): an update never removes or changes a deletion timestamp or grace period.
        let (old_meta, meta) = (o.metadata(), k.metadata_mut());
        if old_meta.deletion_timestamp.is_some() {
            meta.deletion_timestamp = old_meta.deletion_timestamp.clone();
        }
        if old_meta.deletion_grace_period_seconds.is_some()
            && meta.deletion_grace_period_seconds.is_none()
        {
            meta.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
        }
        let errs = validate(k, o);
        if !errs.is_empty() {
            return Err(self.invalid(new, &errs));
        }
        Ok(())
    }

    fn invalid(&self, v: &Value, errs: &ErrorList) -> ApiError {
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        ApiError::invalid(self.res.kind_name, self.res.group, name, errs)
    }
}

use kbatch_api::{defaults, strategy as prep, validation as v};

/// A status update of a kind with no status rules still may not change metadata illegally.
fn namespace_status(new: &Namespace, old: &Namespace) -> ErrorList {
    v::namespace_update(new, old)
}
fn node_status(new: &Node, old: &Node) -> ErrorList {
    v::node_update(new, old)
}
/// Status writes keep the spec (and for namespaces, nodes, the main update keeps the status).
fn keep_old_status_namespace(new: &mut Namespace, old: &Namespace) {
    new.status = old.status.clone();
}
fn keep_old_spec_namespace(new: &mut Namespace, old: &Namespace) {
    new.spec = old.spec.clone();
}
fn keep_old_status_node(new: &mut Node, old: &Node) {
    new.status = old.status.clone();
}
fn keep_old_spec_node(new: &mut Node, old: &Node) {
    new.spec = old.spec.clone();
}

static JOB: Rules<Job> = Rules {
    default: defaults::job,
    prepare_create: prep::job_prepare_for_create,
    validate_create: v::job_create,
    prepare_update: prep::job_prepare_for_update,
    validate_update: v::job_update,
    prepare_status: prep::job_status_prepare_for_update,
    validate_status: v::job_status_update,
    ephemeral: None,
};
static CRONJOB: Rules<CronJob> = Rules {
    default: defaults::cronjob,
    prepare_create: prep::cronjob_prepare_for_create,
    validate_create: v::cronjob_create,
    prepare_update: prep::cronjob_prepare_for_update,
    validate_update: v::cronjob_update,
    prepare_status: prep::cronjob_status_prepare_for_update,
    validate_status: v::cronjob_status_update,
    ephemeral: None,
};
static POD: Rules<Pod> = Rules {
    default: defaults::pod,
    prepare_create: prep::pod_prepare_for_create,
    validate_create: v::pod_create,
    prepare_update: prep::pod_prepare_for_update,
    validate_update: v::pod_update,
    prepare_status: prep::pod_status_prepare_for_update,
    validate_status: v::pod_status_update,
    ephemeral: Some((
        prep::pod_ephemeral_containers_prepare_for_update,
        v::pod_ephemeral_containers_update,
    )),
};
static NAMESPACE: Rules<Namespace> = Rules {
    default: defaults::namespace,
    prepare_create: prep::namespace_prepare_for_create,
    validate_create: v::namespace_create,
    prepare_update: keep_old_status_namespace,
    validate_update: v::namespace_update,
    prepare_status: keep_old_spec_namespace,
    validate_status: namespace_status,
    ephemeral: None,
};
static NODE: Rules<Node> = Rules {
    default: none,
    prepare_create: none,
    validate_create: v::node_create,
    prepare_update: keep_old_status_node,
    validate_update: v::node_update,
    prepare_status: keep_old_spec_node,
    validate_status: node_status,
    ephemeral: None,
};
static EVENT: Rules<Event> = Rules {
    validate_create: v::event_create,
    validate_update: v::event_update,
    ..Rules::PERMISSIVE
};
static LEASE: Rules<Lease> = Rules {
    validate_create: v::lease_create,
    validate_update: v::lease_update,
    ..Rules::PERMISSIVE
};
static CONFIGMAP: Rules<ConfigMap> = Rules {
    validate_create: v::configmap_create,
    validate_update: v::configmap_update,
    ..Rules::PERMISSIVE
};
static POD_DISRUPTION_BUDGET: Rules<PodDisruptionBudget> = Rules {
    default: none,
    prepare_create: prep::pdb_prepare_for_create,
    validate_create: v::pdb_create,
    prepare_update: prep::pdb_prepare_for_update,
    validate_update: v::pdb_update,
    prepare_status: prep::pdb_status_prepare_for_update,
    validate_status: v::pdb_status_update,
    ephemeral: None,
};
static PRIORITY_CLASS: Rules<PriorityClass> = Rules {
    default: defaults::priority_class,
    prepare_create: prep::priority_class_prepare_for_create,
    validate_create: v::priority_class_create,
    validate_update: v::priority_class_update,
    ..Rules::PERMISSIVE
};
static SERVICE_ACCOUNT: Rules<ServiceAccount> = Rules {
    prepare_create: prep::service_account_clean_secret_references,
    prepare_update: prep::service_account_prepare_for_update,
    validate_create: v::service_account_create,
    validate_update: v::service_account_update,
    ..Rules::PERMISSIVE
};
/// The `stringData` merge runs with the defaulting, on every decoded request body: what is
/// validated and stored has only `data`, as upstream.
static SECRET: Rules<Secret> = Rules {
    default: defaults::secret,
    prepare_update: prep::secret_prepare_for_update,
    validate_create: v::secret_create,
    validate_update: v::secret_update,
    ..Rules::PERMISSIVE
};
