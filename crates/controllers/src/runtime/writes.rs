//! Writes whose response the controller does not need whole.
//!
//! kube's `Api::create` and `Api::patch` decode the whole response (a pod is about 4 KiB of
//! JSON with its managedFields) into the typed form; the Job controller reads pods from its
//! informer and only needs a created pod's name (for its event) and resourceVersion (to wait
//! for its cache to see it). These send the same requests and decode only that much: serde
//! skips the rest of the response without building it. The `_lean` ones return the object
//! without its managedFields, which no controller reads.

use kbatch_api::lean::Lean;
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
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = Request::new(api.resource_url())
        .create(pp, body)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("create");
    let created: Named = api.clone().into_client().request(req).await?;
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

/// `Api::create`, returning the created object without its managedFields.
pub async fn create_lean<K>(api: &Api<K>, pp: &PostParams, obj: &K) -> Result<K, kube::Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone,
{
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = Request::new(api.resource_url())
        .create(pp, body)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("create");
    let created: Lean<K> = api.clone().into_client().request(req).await?;
    Ok(created.0)
}

/// `Api::replace_status`, returning the written object without its managedFields.
pub async fn replace_status_lean<K>(
    api: &Api<K>,
    name: &str,
    pp: &PostParams,
    obj: &K,
) -> Result<K, kube::Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone,
{
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = Request::new(api.resource_url())
        .replace_subresource("status", name, pp, body)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("replace_status");
    let written: Lean<K> = api.clone().into_client().request(req).await?;
    Ok(written.0)
}
