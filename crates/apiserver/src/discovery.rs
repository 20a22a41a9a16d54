//! Discovery documents: /version, /api, /apis, and the per-group-version resource lists.

use crate::reviews::ReviewNames;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::{GROUPS, RESOURCES, Resource};
use crate::{authentication, authorization, metrics_api};

/// The Kubernetes release whose API kbatch serves.
pub const MAJOR: &str = "1";
pub const MINOR: &str = "37";

pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

/// The served groups and their versions: metrics.k8s.io last (`metrics`: when served), where
/// kube-apiserver lists an aggregated API of metrics-server's low group priority.
fn served_groups(metrics: bool) -> Vec<(&'static str, &'static str)> {
    let mut groups = GROUPS.to_vec();
    if metrics {
        groups.push((metrics_api::GROUP, metrics_api::VERSION));
    }
    groups
}

pub fn api_group_list(metrics: bool) -> Value {
    let groups: Vec<Value> = served_groups(metrics)
        .iter()
        .map(|(g, v)| group_entry(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(group: &str, metrics: bool) -> Result<Value, ApiError> {
    let (g, v) = served_groups(metrics)
        .into_iter()
        .find(|(g, _)| *g == group)
        .ok_or_else(ApiError::no_route)?;
    let mut e = group_entry(g, v);
    if let Some(o) = e.as_object_mut() {
        o.insert("kind".into(), json!("APIGroup"));
        o.insert("apiVersion".into(), json!("v1"));
    }
    Ok(e)
}

fn resource_entries(r: &Resource) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind_name,
        "verbs": crate::resources::ALL_VERBS,
    });
    if let Some(o) = main.as_object_mut() {
        if !r.short_names.is_empty() {
            o.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            o.insert("categories".into(), json!(r.categories));
        }
    }
    let mut out = vec![main];
    for (sub, verbs) in r.subresources {
        let kind = subresource_kind(r, sub);
        let mut e = json!({"name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
        // A subresource whose kind is of another group says which (what `kubectl drain`
        // looks for to learn that evictions are served).
        if let Some((group, version)) = subresource_group_version(sub)
            && let Some(o) = e.as_object_mut()
        {
            o.insert("group".into(), json!(group));
            o.insert("version".into(), json!(version));
        }
        out.push(e);
    }
    out
}

/// The kind a subresource takes or answers with: its own for bindings and exec options,
/// the resource's for the rest (status, log).
fn subresource_kind(r: &Resource, sub: &str) -> &'static str {
    match sub {
        "binding" => "Binding",
        "attach" => "PodAttachOptions",
        "exec" => "PodExecOptions",
        "portforward" => "PodPortForwardOptions",
        "eviction" => "Eviction",
        _ => r.kind_name,
    }
}

/// The group and version of a subresource's kind when they are not its resource's.
fn subresource_group_version(sub: &str) -> Option<(&'static str, &'static str)> {
    (sub == "eviction").then_some(("policy", "v1"))
}

/// The reviews of a group version, in discovery order.
fn reviews_of(group: &str, version: &str) -> Vec<&'static ReviewNames> {
    let access = authorization::reviews_of(group, version)
        .iter()
        .map(|r| &r.names);
    let authn = authentication::reviews_of(group, version)
        .iter()
        .map(|r| &r.names);
    access.chain(authn).collect()
}

/// A review's `APIResource`: create only, no short names or categories.
fn review_entry(r: &ReviewNames) -> Value {
    json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
        "kind": r.kind_name, "verbs": authorization::VERBS})
}

pub fn api_resource_list(group: &str, version: &str, metrics: bool) -> Result<Value, ApiError> {
    let served = group.is_empty() && version == "v1"
        || served_groups(metrics)
            .iter()
            .any(|(g, v)| *g == group && *v == version);
    if !served {
        return Err(ApiError::no_route());
    }
    let resources: Vec<Value> = if group == metrics_api::GROUP {
        metrics_api::resource_entries()
    } else {
        RESOURCES
            .iter()
            .filter(|r| r.group == group && r.version == version)
            .flat_map(resource_entries)
            .chain(reviews_of(group, version).into_iter().map(review_entry))
            .collect()
    };
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// Which aggregated discovery version the Accept header asks for first, if any
/// (`application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`); a plain JSON
/// entry earlier in the list means the legacy documents.
pub fn aggregated_version(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("g=apidiscovery.k8s.io") && has("as=APIGroupDiscoveryList") {
            if has("v=v2") {
                return Some("v2");
            }
            if has("v=v2beta1") {
                return Some("v2beta1");
            }
        } else if params
            .first()
            .is_some_and(|m| *m == "application/json" || *m == "*/*")
        {
            return None;
        }
    }
    None
}

pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

fn aggregated_resource(r: &Resource) -> Value {
    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind_name});
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .map(|(sub, verbs)| {
            let (group, version) = subresource_group_version(sub).unwrap_or((r.group, r.version));
            let k = json!({"group": group, "version": version, "kind": subresource_kind(r, sub)});
            json!({"subresource": sub, "responseKind": k, "verbs": verbs})
        })
        .collect();
    let mut e = json!({
        "resource": r.plural,
        "responseKind": kind,
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": crate::resources::ALL_VERBS,
    });
    if let Some(o) = e.as_object_mut() {
        if !r.short_names.is_empty() {
            o.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            o.insert("categories".into(), json!(r.categories));
        }
        if !subresources.is_empty() {
            o.insert("subresources".into(), Value::Array(subresources));
        }
    }
    e
}

/// A review's aggregated discovery entry.
fn aggregated_review(r: &ReviewNames) -> Value {
    json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind_name},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": authorization::VERBS,
    })
}

/// `APIGroupDiscoveryList` for `/api` (legacy_root) or `/apis`.
pub fn aggregated(version: &str, legacy_root: bool, metrics: bool) -> Value {
    let groups: Vec<(&str, &str)> = if legacy_root {
        vec![("", "v1")]
    } else {
        served_groups(metrics)
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(g, v)| {
            let resources: Vec<Value> = if *g == metrics_api::GROUP {
                metrics_api::aggregated_entries()
            } else {
                RESOURCES
                    .iter()
                    .filter(|r| r.group == *g && r.version == *v)
                    .map(aggregated_resource)
                    .chain(reviews_of(g, v).into_iter().map(aggregated_review))
                    .collect()
            };
            json!({
                "metadata": {"name": g, "creationTimestamp": null},
                "versions": [{"version": v, "resources": resources, "freshness": "Current"}],
            })
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_like_kubectl_expects() {
        let k130 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(k130), Some("v2"));
        let k129 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(k129), Some("v2beta1"));
        assert_eq!(aggregated_version("application/json, */*"), None);
        assert_eq!(aggregated_version(""), None);
    }

    #[test]
    fn aggregated_documents_list_every_resource() {
        let core = aggregated("v2", true, false);
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
        let res = &core["items"][0]["versions"][0]["resources"];
        assert!(
            res.as_array()
                .unwrap()
                .iter()
                .any(|r| r["resource"] == "pods" && r["shortNames"] == json!(["po"]))
        );
        // The eviction subresource answers with policy/v1's kind, as upstream lists it.
        let pods = res
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        let eviction = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .unwrap();
        assert_eq!(
            eviction,
            &json!({"subresource": "eviction",
                "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "verbs": ["create"]})
        );
        let binding = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "binding")
            .unwrap();
        assert_eq!(binding["responseKind"]["group"], "");
        let groups = aggregated("v2beta1", false, false);
        let names: Vec<&str> = groups["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "batch",
                "events.k8s.io",
                "coordination.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "policy",
                "scheduling.k8s.io"
            ]
        );
        assert_eq!(
            groups["items"][3]["versions"][0]["resources"],
            json!([
                {"resource": "selfsubjectreviews",
                    "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "SelfSubjectReview"},
                    "scope": "Cluster", "singularResource": "selfsubjectreview", "verbs": ["create"]},
                {"resource": "tokenreviews",
                    "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenReview"},
                    "scope": "Cluster", "singularResource": "tokenreview", "verbs": ["create"]},
            ])
        );
        let reviews = &groups["items"][4]["versions"][0]["resources"];
        assert_eq!(
            reviews[1],
            json!({"resource": "selfsubjectaccessreviews",
                "responseKind": {"group": "authorization.k8s.io", "version": "v1", "kind": "SelfSubjectAccessReview"},
                "scope": "Cluster", "singularResource": "selfsubjectaccessreview", "verbs": ["create"]})
        );
        assert_eq!(reviews[0]["scope"], "Namespaced");
    }

    #[test]
    fn legacy_documents_list_the_reviews() {
        let g = api_group("authorization.k8s.io", false).unwrap();
        assert_eq!(
            g["preferredVersion"]["groupVersion"],
            "authorization.k8s.io/v1"
        );
        let list = api_resource_list("authorization.k8s.io", "v1", false).unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "localsubjectaccessreviews",
                "selfsubjectaccessreviews",
                "selfsubjectrulesreviews",
                "subjectaccessreviews"
            ]
        );
        assert_eq!(
            list["resources"][2],
            json!({"name": "selfsubjectrulesreviews", "singularName": "selfsubjectrulesreview",
                "namespaced": false, "kind": "SelfSubjectRulesReview", "verbs": ["create"]})
        );
        let list = api_resource_list("authentication.k8s.io", "v1", false).unwrap();
        assert_eq!(
            list["resources"],
            json!([
                {"name": "selfsubjectreviews", "singularName": "selfsubjectreview",
                    "namespaced": false, "kind": "SelfSubjectReview", "verbs": ["create"]},
                {"name": "tokenreviews", "singularName": "tokenreview",
                    "namespaced": false, "kind": "TokenReview", "verbs": ["create"]},
            ])
        );
    }
}
