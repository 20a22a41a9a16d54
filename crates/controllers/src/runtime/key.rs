//! Object keys as client-go writes them (`MetaNamespaceKeyFunc`): `namespace/name`, or `name`
//! for cluster-scoped objects. Work queues carry these keys.

use kube::Resource;
use kube::api::ObjectMeta;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unexpected key format: {0:?}")]
pub struct KeyError(pub String);

/// The key of `obj`.
pub fn object_key<K: Resource>(obj: &K) -> String {
    meta_key(obj.meta())
}

/// The key of the object `meta` describes.
pub fn meta_key(meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Splits a key into namespace (empty for cluster-scoped) and name.
pub fn split_key(key: &str) -> Result<(&str, &str), KeyError> {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => Ok(("", name)),
        (Some(ns), Some(name), None) => Ok((ns, name)),
        _ => Err(KeyError(key.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::api::ObjectMeta;

    #[test]
    fn keys_round_trip() {
        let pod = Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(object_key(&pod), "ns/p");
        assert_eq!(split_key("ns/p"), Ok(("ns", "p")));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(object_key(&ns), "ns");
        assert_eq!(split_key("ns"), Ok(("", "ns")));
        assert_eq!(split_key("a/b/c"), Err(KeyError("a/b/c".into())));
    }
}
