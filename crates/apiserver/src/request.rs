//! Request routing: Kubernetes REST paths to a target, and query parameters.

use std::collections::HashMap;

use crate::error::ApiError;
use crate::resources::{self, Resource};

/// Where a resource request points.
#[derive(Debug, Clone)]
pub struct Target {
    pub resource: &'static Resource,
    /// Namespace from the URL (`None` for cluster-wide lists and cluster-scoped kinds).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The legacy `/watch/` path prefix was used.
    pub watch_path: bool,
}

/// What a path addresses.
#[derive(Debug)]
pub enum Route {
    Resource(Target),
    /// A create-only access review of authorization.k8s.io (not stored).
    Review(crate::authorization::ReviewTarget),
    /// A create-only review of authentication.k8s.io (not stored).
    AuthenticationReview(&'static crate::authentication::Review),
    /// A read of metrics.k8s.io (computed from the scraper's points, not stored).
    Metrics(crate::metrics_api::Target),
    /// `/api`, `/apis`, `/api/v1`, `/apis/<group>`, `/apis/<group>/<version>`.
    Discovery {
        group: Option<String>,
        version: Option<String>,
        legacy_root: bool,
    },
}

pub fn route(path: &str) -> Result<Route, ApiError> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let (group, version, rest): (String, String, &[String]) = match segs.first().map(String::as_str)
    {
        Some("api") => match segs.get(1) {
            None => {
                return Ok(Route::Discovery {
                    group: None,
                    version: None,
                    legacy_root: true,
                });
            }
            Some(v) => (String::new(), v.clone(), &segs[2..]),
        },
        Some("apis") => match (segs.get(1), segs.get(2)) {
            (None, _) => {
                return Ok(Route::Discovery {
                    group: None,
                    version: None,
                    legacy_root: false,
                });
            }
            (Some(g), None) => {
                return Ok(Route::Discovery {
                    group: Some(g.clone()),
                    version: None,
                    legacy_root: false,
                });
            }
            (Some(g), Some(v)) => (g.clone(), v.clone(), &segs[3..]),
        },
        _ => return Err(ApiError::no_route()),
    };
    if rest.is_empty() {
        return Ok(Route::Discovery {
            group: Some(group),
            version: Some(version),
            legacy_root: false,
        });
    }
    let (watch_path, rest) = match rest.split_first() {
        Some((first, tail)) if first == "watch" => (true, tail),
        _ => (false, rest),
    };
    // `/api/v1/watch` names no resource.
    if rest.is_empty() {
        return Err(ApiError::no_route());
    }
    if group == crate::authorization::GROUP && version == crate::authorization::VERSION {
        // The reviews are never stored: nothing to watch.
        if watch_path {
            return Err(ApiError::no_route());
        }
        return crate::authorization::route(rest).map(Route::Review);
    }
    if group == crate::authentication::GROUP && version == crate::authentication::VERSION {
        // Never stored either.
        if watch_path {
            return Err(ApiError::no_route());
        }
        return crate::authentication::route(rest).map(Route::AuthenticationReview);
    }
    if group == crate::metrics_api::GROUP && version == crate::metrics_api::VERSION {
        // Nothing to watch: metrics-server's storages only get and list.
        if watch_path {
            return Err(ApiError::no_route());
        }
        return crate::metrics_api::route(rest).map(Route::Metrics);
    }
    let lookup =
        |plural: &str| resources::find(&group, &version, plural).ok_or_else(ApiError::no_route);

    // namespaces/{ns}/{resource}/... addresses a namespaced resource; namespaces[/{name}[/sub]]
    // addresses Namespace objects themselves.
    if rest[0] == "namespaces"
        && rest.len() >= 3
        && let Some(r) = resources::find(&group, &version, &rest[2]).filter(|r| r.namespaced)
    {
        if rest.len() > 5 {
            return Err(ApiError::no_route());
        }
        return Ok(Route::Resource(Target {
            resource: r,
            namespace: Some(rest[1].clone()),
            name: rest.get(3).cloned(),
            subresource: rest.get(4).cloned(),
            watch_path,
        }));
    }
    let r = lookup(&rest[0])?;
    if rest.len() > 3 {
        return Err(ApiError::no_route());
    }
    Ok(Route::Resource(Target {
        resource: r,
        namespace: None,
        name: rest.get(1).cloned(),
        subresource: rest.get(2).cloned(),
        watch_path,
    }))
}

/// Query parameters, with Go-style boolean parsing.
#[derive(Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let mut m = HashMap::new();
        if let Some(q) = raw {
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                m.insert(k.into_owned(), v.into_owned());
            }
        }
        Query(m)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// `strconv.ParseBool`: 1,t,T,TRUE,true,True,0,f,F,FALSE,false,False.
    pub fn bool(&self, k: &str) -> Result<bool, ApiError> {
        match self.get(k) {
            None => Ok(false),
            Some(v) => parse_go_bool(v).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "invalid value {v:?} for query parameter {k}: must be a boolean"
                ))
            }),
        }
    }

    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {v:?} for query parameter {k}: must be an integer"
                ))
            }),
        }
    }

    /// Add `other`'s parameters that this query does not set.
    pub fn merge_from(&mut self, other: &Query) {
        for (k, v) in &other.0 {
            self.0.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// `dryRun=All` (the only value upstream accepts).
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.0.get("dryRun").map(String::as_str) {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            ))),
        }
    }
}

pub use kbatch_api::strconv::parse_go_bool;

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Target {
        match route(path).unwrap() {
            Route::Resource(t) => t,
            other => panic!("not a resource route: {other:?}"),
        }
    }

    #[test]
    fn routes_namespaced_paths() {
        let t = target("/apis/batch/v1/namespaces/default/jobs/pi/status");
        assert_eq!(t.resource.plural, "jobs");
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.name.as_deref(), Some("pi"));
        assert_eq!(t.subresource.as_deref(), Some("status"));
        let t = target("/apis/batch/v1/jobs");
        assert!(t.namespace.is_none() && t.name.is_none());
        let t = target("/api/v1/watch/namespaces/default/pods");
        assert!(t.watch_path);
        assert_eq!(t.resource.plural, "pods");
    }

    #[test]
    fn routes_namespace_objects() {
        let t = target("/api/v1/namespaces/kube-system");
        assert_eq!(t.resource.plural, "namespaces");
        assert_eq!(t.name.as_deref(), Some("kube-system"));
        let t = target("/api/v1/namespaces/x/status");
        assert_eq!(t.resource.plural, "namespaces");
        assert_eq!(t.subresource.as_deref(), Some("status"));
    }

    #[test]
    fn routes_access_reviews() {
        match route("/apis/authorization.k8s.io/v1/namespaces/ns/localsubjectaccessreviews") {
            Ok(Route::Review(t)) => {
                assert_eq!(t.review.plural, "localsubjectaccessreviews");
                assert_eq!(t.namespace.as_deref(), Some("ns"));
            }
            other => panic!("not a review route: {other:?}"),
        }
        assert!(route("/apis/authorization.k8s.io/v1/watch/selfsubjectaccessreviews").is_err());
        assert!(matches!(
            route("/apis/authorization.k8s.io/v1"),
            Ok(Route::Discovery { .. })
        ));
    }

    #[test]
    fn routes_authentication_reviews() {
        match route("/apis/authentication.k8s.io/v1/selfsubjectreviews") {
            Ok(Route::AuthenticationReview(r)) => assert_eq!(r.kind_name, "SelfSubjectReview"),
            other => panic!("not a review route: {other:?}"),
        }
        assert!(route("/apis/authentication.k8s.io/v1/watch/tokenreviews").is_err());
        assert!(route("/apis/authentication.k8s.io/v1/namespaces/ns/tokenreviews").is_err());
        assert!(matches!(
            route("/apis/authentication.k8s.io/v1"),
            Ok(Route::Discovery { .. })
        ));
    }

    #[test]
    fn unknown_paths_are_404() {
        assert!(route("/apis/batch/v1/widgets").is_err());
        assert!(route("/foo").is_err());
        assert!(route("/api/v1/namespaces/a/pods/b/c/d").is_err());
        assert!(route("/api/v1/watch").is_err());
        assert!(route("/apis/batch/v1/watch/").is_err());
    }

    #[test]
    fn go_bools() {
        let q = Query::parse(Some("watch=True&a=0&b=maybe"));
        assert!(q.bool("watch").unwrap());
        assert!(!q.bool("a").unwrap());
        assert!(q.bool("b").is_err());
        assert!(!q.bool("missing").unwrap());
    }
}
