//! Typed decoding of a document as if it had no `metadata.managedFields`.
//!
//! Every update decodes the stored object into its typed form for the kind's rules, which never
//! read managedFields (the field manager works on JSON). Decoding them costs more than the rest
//! of the metadata (each entry's `fieldsV1` is a JSON tree copied into the typed value), so the
//! stored object is read through this view, which skips that one key.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::{Map, Value};

/// Decode `v` into `K`, skipping `metadata.managedFields`.
pub fn decode_without_managed_fields<K: DeserializeOwned>(v: &Value) -> serde_json::Result<K> {
    K::deserialize(Doc { v, top: true })
}

/// A JSON value seen through the view: at the top the `metadata` member is a `Doc` one level
/// down, and there (`top == false`) the `managedFields` member is absent.
struct Doc<'a> {
    v: &'a Value,
    top: bool,
}

struct Members<'a> {
    iter: serde_json::map::Iter<'a>,
    top: bool,
    value: Option<&'a Value>,
}

impl<'a> Members<'a> {
    fn new(m: &'a Map<String, Value>, top: bool) -> Self {
        Members {
            iter: m.iter(),
            top,
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for Members<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Self::Error> {
        for (k, v) in self.iter.by_ref() {
            if !self.top && k == "managedFields" {
                continue;
            }
            self.value = Some(v);
            return seed.deserialize(k.as_str().into_deserializer()).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        let v = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("value requested before its key"))?;
        match v {
            Value::Object(_) if self.top => {
                // Only the `metadata` member is viewed one level down; the key was just read.
                seed.deserialize(Nested { v })
            }
            _ => seed.deserialize(v),
        }
    }
}

/// The member of the top-level object whose key the map access last handed out: `metadata`
/// gets the skipping view, every other member is plain JSON.
struct Nested<'a> {
    v: &'a Value,
}

impl<'de> de::Deserializer<'de> for Nested<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.v.deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.v {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if name == "ObjectMeta"
            && let Value::Object(m) = self.v
        {
            return visitor.visit_map(Members::new(m, false));
        }
        self.v.deserialize_struct(name, fields, visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

impl<'de> de::Deserializer<'de> for Doc<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.v {
            Value::Object(m) => visitor.visit_map(Members::new(m, self.top)),
            other => other.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use kbatch_api::k8s_openapi::api::batch::v1::Job;
    use kbatch_api::k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"managedFields": "x"},
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "finalizers": ["f"]},
            "spec": {"containers": [{"name": "c", "image": "i",
                "env": [{"name": "managedFields", "value": "v"}]}]},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn decodes_as_the_document_without_managed_fields() {
        let doc = pod();
        let mut without = doc.clone();
        without["metadata"]
            .as_object_mut()
            .map(|m| m.remove("managedFields"));
        let lean: Pod = decode_without_managed_fields(&doc).expect("decodes");
        let plain: Pod = serde_json::from_value(without).expect("decodes");
        assert_eq!(lean, plain);
        assert!(lean.metadata.managed_fields.is_none());
        // Only metadata's own member is skipped.
        assert_eq!(lean.metadata.labels.expect("labels")["managedFields"], "x");
        assert_eq!(
            lean.spec.expect("spec").containers[0]
                .env
                .as_ref()
                .expect("env")[0]
                .name,
            "managedFields"
        );
    }

    #[test]
    fn nested_object_meta_keeps_its_managed_fields() {
        let mut job = json!({"metadata": {"name": "j", "managedFields": [{"manager": "a"}]},
            "spec": {"template": {"metadata": {"managedFields": [{"manager": "t"}]},
                "spec": {"containers": []}}}});
        let lean: Job = decode_without_managed_fields(&job).expect("decodes");
        assert!(lean.metadata.managed_fields.is_none());
        let template_mf = lean.spec.expect("spec").template.metadata.expect("meta");
        assert_eq!(
            template_mf.managed_fields.expect("kept")[0]
                .manager
                .as_deref(),
            Some("t")
        );
        job["metadata"]["name"] = json!(1);
        assert!(decode_without_managed_fields::<Job>(&job).is_err());
    }
}
