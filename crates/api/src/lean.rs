//! Objects decoded as if they had no `metadata.managedFields`, for API clients that never read
//! them.
//!
//! The server sends managedFields with every object of every list and watch event. The
//! controllers' informers and the executor's pod watch drop them anyway, and decoding them is
//! the most expensive part of the metadata: each entry's `fieldsV1` is a JSON tree built into
//! the typed value only to be freed. [`Lean<K>`] decodes a `K` from any self-describing format
//! (kube decodes lists and watch events straight from the response text), skipping the value of
//! that one member without building it. Everything else decodes exactly as `K` does, nested
//! `metadata` (a Job's pod template) included. The API server decodes stored objects (a
//! `&serde_json::Value`) through it too: the kinds' rules never read managedFields.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::{DynamicResourceScope, Resource};
use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// A `K` decoded without its `metadata.managedFields` (left empty). As a kube `Resource` it is
/// `K`'s kind, at `K`'s URLs, so `Api<Lean<K>>` lists and watches what `Api<K>` would.
///
/// With `NO_CONTAINERS`, a Pod is also decoded without its regular containers
/// (`spec.containers` is left empty): for caches that drop them anyway. Other kinds decode
/// as without it.
#[derive(Clone, Debug, PartialEq)]
pub struct Lean<K, const NO_CONTAINERS: bool = false>(pub K);

impl<K, const NO_CONTAINERS: bool> Lean<K, NO_CONTAINERS> {
    pub fn into_inner(self) -> K {
        self.0
    }
}

impl<'de, K: Deserialize<'de> + 'static, const NO_CONTAINERS: bool> Deserialize<'de>
    for Lean<K, NO_CONTAINERS>
{
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let pod = std::any::TypeId::of::<K>() == std::any::TypeId::of::<Pod>();
        let depth = Depth::Top {
            skip_containers: NO_CONTAINERS && pod,
        };
        K::deserialize(Level { de, depth }).map(Lean)
    }
}

impl<K: Resource, const NO_CONTAINERS: bool> Resource for Lean<K, NO_CONTAINERS> {
    type DynamicType = K::DynamicType;
    // Dynamic, so generic code can build the namespaced or all-namespaces Api of any `K`.
    type Scope = DynamicResourceScope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// Where a [`Level`] is: the object, or one of the members whose own members are trimmed.
#[derive(Clone, Copy)]
enum Depth {
    Top {
        skip_containers: bool,
    },
    /// `metadata`: `managedFields` is skipped.
    Metadata,
    /// A Pod's `spec`: `containers` is skipped.
    Spec,
}

/// The deserializer of the object or of a member it trims (`depth`): maps there are read
/// through [`LevelMap`]; every other request goes to `de` unchanged.
struct Level<D> {
    de: D,
    depth: Depth,
}

macro_rules! forward {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
            self.de.$method(v)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Level<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        let depth = self.depth;
        self.de.deserialize_any(LevelVisitor { inner: v, depth })
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        let depth = self.depth;
        self.de.deserialize_map(LevelVisitor { inner: v, depth })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        let depth = self.depth;
        self.de
            .deserialize_struct(name, fields, LevelVisitor { inner: v, depth })
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        let depth = self.depth;
        self.de.deserialize_option(LevelVisitor { inner: v, depth })
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_unit_struct(name, v)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_newtype_struct(name, v)
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Self::Error> {
        self.de.deserialize_tuple(len, v)
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_tuple_struct(name, len, v)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_enum(name, variants, v)
    }
    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }

    forward! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_seq deserialize_identifier deserialize_ignored_any
    }
}

/// Hands the caller's visitor a [`LevelMap`] instead of the map, and a [`Level`] for the
/// content of a present option.
struct LevelVisitor<V> {
    inner: V,
    depth: Depth,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for LevelVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(LevelMap {
            map,
            depth: self.depth,
            next: None,
        })
    }
    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Level {
            de,
            depth: self.depth,
        })
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }
}

/// The members of the object (its `metadata`, and a Pod's `spec` when trimmed, are read one
/// level down) or of a trimmed member (whose skipped member is passed over unread).
struct LevelMap<A> {
    map: A,
    depth: Depth,
    /// The key just handed out names a member to read one level down, at this depth.
    next: Option<Depth>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for LevelMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Self::Error> {
        loop {
            let Some(key) = self.map.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            let skip = match self.depth {
                Depth::Metadata => key.as_str() == "managedFields",
                Depth::Spec => key.as_str() == "containers",
                Depth::Top { .. } => false,
            };
            if skip {
                self.map.next_value::<IgnoredAny>()?;
                continue;
            }
            self.next = match (self.depth, key.as_str()) {
                (Depth::Top { .. }, "metadata") => Some(Depth::Metadata),
                (
                    Depth::Top {
                        skip_containers: true,
                    },
                    "spec",
                ) => Some(Depth::Spec),
                _ => None,
            };
            return match key {
                Key::Borrowed(s) => seed.deserialize(BorrowedStrDeserializer::new(s)),
                Key::Owned(s) => seed.deserialize(StringDeserializer::new(s)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        match self.next.take() {
            Some(depth) => self.map.next_value_seed(MemberSeed(seed, depth)),
            None => self.map.next_value_seed(seed),
        }
    }
}

/// Decodes a trimmed member through a [`Level`] at its depth.
struct MemberSeed<S>(S, Depth);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MemberSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(Level { de, depth: self.1 })
    }
}

/// A member name, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s))
            }
        }
        de.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    fn pod_doc() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "default",
                "labels": {"app": "x"},
                "managedFields": [{
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "subresource": "status",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:phase": {}}}
                }],
                "finalizers": ["batch.kubernetes.io/job-tracking"]
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"}
        })
    }

    fn without_managed_fields(mut v: Value) -> Value {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        v
    }

    #[test]
    fn decodes_as_the_document_without_managed_fields() {
        let text = pod_doc().to_string();
        let lean: Lean<Pod> = serde_json::from_str(&text).expect("lean decode");
        let plain: Pod =
            serde_json::from_value(without_managed_fields(pod_doc())).expect("plain decode");
        assert_eq!(lean.0, plain);
        assert!(lean.0.metadata.managed_fields.is_none());
        assert_eq!(
            lean.0.metadata.finalizers.as_deref().map(<[_]>::len),
            Some(1)
        );
        // The full decode does carry them: the test would notice a no-op view.
        let full: Pod = serde_json::from_str(&text).expect("full decode");
        assert_eq!(full.metadata.managed_fields.map(|m| m.len()), Some(1));
    }

    #[test]
    fn a_nested_template_keeps_its_metadata() {
        let doc = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"template": {
                "metadata": {"labels": {"a": "b"}, "annotations": {"managedFields": "kept"}},
                "spec": {"containers": [{"name": "c"}], "restartPolicy": "Never"}
            }}
        });
        let lean: Lean<Job> = serde_json::from_str(&doc.to_string()).expect("lean decode");
        let plain: Job = serde_json::from_value(without_managed_fields(doc)).expect("plain");
        assert_eq!(lean.0, plain);
        let template = lean.0.spec.and_then(|s| s.template.metadata);
        assert_eq!(
            template
                .and_then(|m| m.annotations)
                .and_then(|a| a.get("managedFields").cloned()),
            Some("kept".to_string())
        );
    }

    #[test]
    fn escaped_member_names_and_a_null_metadata_decode() {
        // "n\u0061me" is "name" written with an escape: the key cannot be borrowed.
        let text = r#"{"kind":"Pod","metadata":{"n\u0061me":"esc","managedFields":null}}"#;
        let lean: Lean<Pod> = serde_json::from_str(text).expect("escaped key");
        assert_eq!(lean.0.metadata.name.as_deref(), Some("esc"));
        let lean: Lean<Pod> = serde_json::from_str(r#"{"metadata":null}"#).expect("null");
        assert_eq!(lean.0.metadata, ObjectMeta::default());
    }

    #[test]
    fn type_errors_are_still_reported() {
        let err = serde_json::from_str::<Lean<Pod>>(r#"{"metadata":{"name":5}}"#)
            .expect_err("a number is no name");
        assert!(err.to_string().contains("invalid type"), "{err}");
        assert!(serde_json::from_str::<Lean<Pod>>("[1]").is_err());
    }

    /// The server decodes stored documents (`&Value`) through the same view.
    #[test]
    fn a_json_value_decodes_through_the_view_and_only_metadata_loses_its_member() {
        let doc = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"managedFields": "x"},
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "finalizers": ["f"]},
            "spec": {"containers": [{"name": "c", "image": "i",
                "env": [{"name": "managedFields", "value": "v"}]}]},
            "status": {"phase": "Running"}
        });
        let lean = Lean::<Pod>::deserialize(&doc).expect("decodes").0;
        let plain: Pod = serde_json::from_value(without_managed_fields(doc)).expect("decodes");
        assert_eq!(lean, plain);
        assert!(lean.metadata.managed_fields.is_none());
        assert_eq!(lean.metadata.labels.expect("labels")["managedFields"], "x");
        assert_eq!(
            lean.spec.expect("spec").containers[0]
                .env
                .as_ref()
                .expect("env")[0]
                .name,
            "managedFields"
        );

        let mut job = json!({"metadata": {"name": "j", "managedFields": [{"manager": "a"}]},
            "spec": {"template": {"metadata": {"managedFields": [{"manager": "t"}]},
                "spec": {"containers": []}}}});
        let lean = Lean::<Job>::deserialize(&job).expect("decodes").0;
        assert!(lean.metadata.managed_fields.is_none());
        let template_mf = lean.spec.expect("spec").template.metadata.expect("meta");
        assert_eq!(
            template_mf.managed_fields.expect("kept")[0]
                .manager
                .as_deref(),
            Some("t")
        );
        job["metadata"]["name"] = json!(1);
        assert!(Lean::<Job>::deserialize(&job).is_err());
    }

    #[test]
    fn without_containers_a_pod_loses_only_its_regular_containers() {
        let doc = json!({
            "metadata": {"name": "p", "managedFields": [{"manager": "m"}],
                "annotations": {"containers": "kept"}},
            "spec": {"initContainers": [{"name": "i", "restartPolicy": "Always"}],
                "containers": [{"name": "c", "image": "x", "env": [{"name": "E", "value": "1"}]}],
                "nodeName": "n",
                "restartPolicy": "Never"},
            "status": {"phase": "Running",
                "containerStatuses": [{"name": "c", "image": "x", "imageID": "", "ready": true,
                    "restartCount": 0}]}
        });
        let text = doc.to_string();
        let trimmed: Lean<Pod, true> = serde_json::from_str(&text).expect("decodes");
        let mut want: Pod = serde_json::from_value(without_managed_fields(doc)).expect("plain");
        want.spec.as_mut().expect("spec").containers = Vec::new();
        assert_eq!(trimmed.0, want);
        assert_eq!(
            trimmed.0.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("n")
        );
        // Without the flag, and for other kinds, the containers stay.
        let lean: Lean<Pod> = serde_json::from_str(&text).expect("decodes");
        assert_eq!(lean.0.spec.expect("spec").containers.len(), 1);
        let job = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec":
            {"containers": [{"name": "c"}]}}}});
        let job: Lean<Job, true> = serde_json::from_value(job).expect("decodes");
        let template = job.0.spec.expect("spec").template.spec.expect("pod spec");
        assert_eq!(template.containers.len(), 1);
        // A null spec decodes as none.
        let p: Lean<Pod, true> = serde_json::from_str(r#"{"spec":null}"#).expect("null spec");
        assert!(p.0.spec.is_none());
    }

    #[test]
    fn lists_decode_every_item_lean() {
        let items: Vec<Lean<Pod>> =
            serde_json::from_value(json!([pod_doc(), pod_doc()])).expect("list");
        assert!(items.iter().all(|p| p.0.metadata.managed_fields.is_none()));
        assert!(
            items
                .iter()
                .all(|p| p.0.metadata.name.as_deref() == Some("p"))
        );
    }

    #[test]
    fn the_resource_is_the_wrapped_kind() {
        assert_eq!(Lean::<Pod>::kind(&()), "Pod");
        assert_eq!(Lean::<Job>::group(&()), "batch");
        assert_eq!(
            Lean::<Job>::url_path(&(), Some("ns")),
            "/apis/batch/v1/namespaces/ns/jobs"
        );
        assert_eq!(Lean::<Pod>::url_path(&(), None), "/api/v1/pods");
    }
}
