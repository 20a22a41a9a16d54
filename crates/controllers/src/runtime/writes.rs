//! Writes whose response the controller does not need whole.
//!
//! kube's `Api::create` and `Api::patch` decode the whole response (a pod is about 4 KiB of
//! JSON with its managedFields) into the typed form; the Job controller reads pods from its
//! informer and only needs a created pod's name (for its event) and resourceVersion (to wait
//! for its cache to see it). These send the same requests and decode only that much: serde
//! skips the rest of the response without building it. The `_lean` ones return the object
//! without its managedFields, which no controller reads.

use kbatch_api::lean::Lean;
use kube::api::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Named {
    metadata: Written,
}

/// The name and resourceVersion of a written object.
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, rename = "resourceVersion")]
    pub resource_version: Option<String>,
}

/// `Api::create`, returning the created object's name (the server may have generated it)
/// and resourceVersion.
pub async fn create_named<K>(api: &Api<K>, pp: &PostParams, obj: &K) -> Result<Written, kube::Error>
where
    K: Resource + Serialize + Clone,
{
    let created: Named = send_create(api, pp, obj).await?;
    Ok(created.metadata)
}

/// `Api::patch`, decoding no more of the patched object than its name and resourceVersion.
pub async fn patch_named<K, P>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> Result<Written, kube::Error>
where
    K: Resource + Clone,
    P: Serialize + std::fmt::Debug,
{
    let mut req = Request::new(api.resource_url())
        .patch(name, pp, patch)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("patch");
    let patched: Named = api.clone().into_client().request(req).await?;
    Ok(patched.metadata)
}

/// An object's metadata alone.
#[derive(Deserialize)]
struct MetadataOnly {
    metadata: ObjectMeta,
}

/// `Api::create`, returning the created object's metadata without its managedFields.
pub async fn create_metadata<K>(
    api: &Api<K>,
    pp: &PostParams,
    obj: &K,
) -> Result<ObjectMeta, kube::Error>
where
    K: Resource + Serialize + Clone,
{
    let created: Lean<MetadataOnly> = send_create(api, pp, obj).await?;
    Ok(created.0.metadata)
}

/// `Api::replace_status`, returning the written object's name and resourceVersion.
pub async fn replace_status_named<K>(
    api: &Api<K>,
    name: &str,
    pp: &PostParams,
    obj: &K,
) -> Result<Written, kube::Error>
where
    K: Resource + Serialize + Clone,
{
    let written: Named = send_replace_status(api, name, pp, obj).await?;
    Ok(written.metadata)
}

/// `Api::replace_status`, returning the written object without its managedFields.
pub async fn replace_status_lean<K>(
    api: &Api<K>,
    name: &str,
    pp: &PostParams,
    obj: &K,
) -> Result<K, kube::Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + 'static,
{
    let written: Lean<K> = send_replace_status(api, name, pp, obj).await?;
    Ok(written.0)
}

/// POSTs `obj` to its collection; the response is decoded as `T`.
async fn send_create<K, T>(api: &Api<K>, pp: &PostParams, obj: &K) -> Result<T, kube::Error>
where
    K: Resource + Serialize + Clone,
    T: DeserializeOwned,
{
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = Request::new(api.resource_url())
        .create(pp, body)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("create");
    api.clone().into_client().request(req).await
}

/// PUTs `obj` to its status subresource; the response is decoded as `T`.
async fn send_replace_status<K, T>(
    api: &Api<K>,
    name: &str,
    pp: &PostParams,
    obj: &K,
) -> Result<T, kube::Error>
where
    K: Resource + Serialize + Clone,
    T: DeserializeOwned,
{
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = Request::new(api.resource_url())
        .replace_subresource("status", name, pp, body)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("replace_status");
    api.clone().into_client().request(req).await
}
