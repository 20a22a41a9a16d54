use super::*;

/// Every `$ref` in `v`.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(r.to_string());
            }
            m.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn definitions() -> &'static Map<String, Value> {
    document()["definitions"].as_object().unwrap()
}

fn prop(definition: &str, field: &str) -> &'static Value {
    &definitions()[definition]["properties"][field]
}

#[test]
fn a_swagger_document_of_every_served_group_version() {
    let doc = document();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(doc["info"]["title"], "Kubernetes");
    assert_eq!(
        doc["info"]["version"],
        crate::discovery::version()["gitVersion"]
    );
    assert_eq!(doc["security"], json!([{"BearerToken": []}]));
    assert_eq!(doc["securityDefinitions"]["BearerToken"]["in"], "header");
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/namespaces/{namespace}/pods/{name}",
        "/api/v1/namespaces/{name}/status",
        "/api/v1/nodes",
        "/apis/batch/v1/jobs",
        "/apis/batch/v1/namespaces/{namespace}/cronjobs/{name}/status",
        "/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}",
        "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    ] {
        assert!(paths.contains_key(p), "{p}");
    }
}

/// Every reference resolves (kubectl's parser rejects the whole document otherwise), and no
/// v3-only form is left.
#[test]
fn references_point_into_the_definitions() {
    let doc = document();
    let mut all = Vec::new();
    refs(doc, &mut all);
    assert!(all.len() > 300);
    for r in all {
        let name = r
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("{r}"));
        assert!(definitions().contains_key(name), "dangling {r}");
    }
    let text = doc.to_string();
    for v3 in [
        "#/components/schemas/",
        "\"allOf\"",
        "x-kubernetes-int-or-string",
        "\"nullable\"",
    ] {
        assert!(!text.contains(v3), "{v3} left in the v2 document");
    }
    // A described reference is a `$ref` beside its description, as upstream's v2 writes it.
    let affinity = prop("io.k8s.api.core.v1.PodSpec", "affinity");
    assert_eq!(
        affinity["$ref"],
        "#/definitions/io.k8s.api.core.v1.Affinity"
    );
    assert!(affinity["description"].is_string());
    let ios = &definitions()["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
    assert_eq!(
        (&ios["type"], &ios["format"]),
        (&json!("string"), &json!("int-or-string"))
    );
    assert_eq!(
        definitions()["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"],
        "string"
    );
}

#[test]
fn the_kinds_carry_their_group_version_kind() {
    for (def, gvk) in [
        (
            "io.k8s.api.batch.v1.Job",
            json!({"group": "batch", "kind": "Job", "version": "v1"}),
        ),
        (
            "io.k8s.api.core.v1.Pod",
            json!({"group": "", "kind": "Pod", "version": "v1"}),
        ),
        (
            "io.k8s.api.events.v1.Event",
            json!({"group": "events.k8s.io", "kind": "Event", "version": "v1"}),
        ),
        (
            "io.k8s.api.batch.v1.CronJobList",
            json!({"group": "batch", "kind": "CronJobList", "version": "v1"}),
        ),
    ] {
        assert_eq!(
            definitions()[def]["x-kubernetes-group-version-kind"],
            json!([gvk]),
            "{def}"
        );
    }
    assert!(
        definitions()["io.k8s.api.core.v1.PodSpec"]
            .get("x-kubernetes-group-version-kind")
            .is_none()
    );
}

/// Upstream's patch and list extensions, in the v2 definitions and the v3 components alike.
#[test]
fn patch_and_list_extensions_as_upstream() {
    let v3 = crate::openapi::for_path("apis/batch/v1").unwrap();
    let v3_prop = |def: &str, field: &str| &v3["components"]["schemas"][def]["properties"][field];
    let containers = prop("io.k8s.api.core.v1.PodSpec", "containers");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    let volumes = prop("io.k8s.api.core.v1.PodSpec", "volumes");
    assert_eq!(volumes["x-kubernetes-patch-strategy"], "merge,retainKeys");
    assert_eq!(volumes["x-kubernetes-patch-merge-key"], "name");
    let conditions = prop("io.k8s.api.batch.v1.JobStatus", "conditions");
    assert_eq!(conditions["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(conditions["x-kubernetes-patch-merge-key"], "type");
    assert_eq!(conditions["x-kubernetes-list-type"], "atomic");
    let ports = prop("io.k8s.api.core.v1.Container", "ports");
    assert_eq!(
        ports["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    assert_eq!(
        prop(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers"
        )["x-kubernetes-list-type"],
        "set"
    );
    assert_eq!(
        prop("io.k8s.api.core.v1.PodSpec", "nodeSelector")["x-kubernetes-map-type"],
        "atomic"
    );
    assert_eq!(
        definitions()["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"]["x-kubernetes-map-type"],
        "atomic"
    );
    assert!(
        prop("io.k8s.api.core.v1.PodSpec", "nodeName")
            .get("x-kubernetes-list-type")
            .is_none()
    );
    for (def, field) in [
        ("io.k8s.api.core.v1.PodSpec", "containers"),
        ("io.k8s.api.core.v1.PodSpec", "volumes"),
        ("io.k8s.api.batch.v1.JobStatus", "conditions"),
        ("io.k8s.api.core.v1.Container", "ports"),
    ] {
        let v2 = prop(def, field).as_object().unwrap();
        let v3 = v3_prop(def, field).as_object().unwrap();
        for (k, v) in v2.iter().filter(|(k, _)| k.starts_with("x-kubernetes-")) {
            assert_eq!(v3.get(k), Some(v), "{def}.{field} {k} in v3");
        }
    }
    assert_eq!(
        v3["components"]["schemas"]["io.k8s.api.core.v1.ObjectReference"]["x-kubernetes-map-type"],
        "atomic"
    );
}

/// The v3 documents' operations, in v2 form.
#[test]
fn operations_are_the_v3_ones_in_v2_form() {
    let doc = document();
    let mut compared = 0;
    for (key, _, _) in crate::openapi::group_versions() {
        let v3 = crate::openapi::for_path(&key).unwrap();
        for (path, item) in v3["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let v2 = &doc["paths"][path][method];
                for k in [
                    "operationId",
                    "description",
                    "x-kubernetes-action",
                    "x-kubernetes-group-version-kind",
                ] {
                    assert_eq!(v2[k], op[k], "{method} {path} {k}");
                }
                let query: Vec<&Value> = v2["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p["in"] == "query")
                    .collect();
                let names =
                    |ps: Vec<&Value>| ps.iter().map(|p| p["name"].clone()).collect::<Vec<_>>();
                assert_eq!(
                    names(query.clone()),
                    names(op["parameters"].as_array().unwrap().iter().collect())
                );
                for p in query {
                    assert!(p.get("schema").is_none() && p["type"].is_string(), "{p}");
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 60, "{compared}");

    let job = &doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"];
    let names: Vec<&Value> = job["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert_eq!(names, [&json!("name"), &json!("namespace")]);
    let patch = &job["patch"];
    assert!(
        patch["consumes"]
            .as_array()
            .unwrap()
            .contains(&json!("application/strategic-merge-patch+json"))
    );
    assert_eq!(
        patch["parameters"][0],
        json!({"in": "body", "name": "body", "required": true, "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}})
    );
    assert_eq!(
        patch["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.batch.v1.Job"
    );
    assert_eq!(patch["tags"], json!(["batch_v1"]));
    let put = &job["put"];
    assert_eq!(
        put["parameters"][0]["schema"]["$ref"],
        "#/definitions/io.k8s.api.batch.v1.Job"
    );
    let list = &doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs"]["get"];
    assert_eq!(
        list["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.api.batch.v1.JobList"
    );
    assert_eq!(
        job["delete"]["responses"]["200"]["schema"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Status"
    );
    let force = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "force");
    assert_eq!(force.unwrap()["type"], "boolean");
    // A review has no schema here: its create takes no body parameter rather than a
    // dangling reference.
    let review = &doc["paths"]["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"]["post"];
    assert!(
        review["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["in"] == "query")
    );
    assert!(review["responses"]["200"].get("schema").is_none());
}

#[test]
fn extension_values_as_gnostic_writes_them() {
    assert_eq!(proto::yaml(&json!("merge")), "merge\n");
    assert_eq!(
        proto::yaml(&json!("merge,retainKeys")),
        "merge,retainKeys\n"
    );
    assert_eq!(
        proto::yaml(&json!(["containerPort", "protocol"])),
        "- containerPort\n- protocol\n"
    );
    assert_eq!(
        proto::yaml(&json!([{"group": "", "kind": "Pod", "version": "v1"}])),
        "- group: \"\"\n  kind: Pod\n  version: v1\n"
    );
    assert_eq!(
        proto::yaml(&json!({"group": "batch", "kind": "Job", "version": "v1"})),
        "group: batch\nkind: Job\nversion: v1\n"
    );
    assert_eq!(proto::yaml(&json!("true")), "\"true\"\n");
    assert_eq!(proto::yaml(&json!("1")), "\"1\"\n");
    assert_eq!(proto::yaml(&json!(true)), "true\n");
}

/// A protobuf reader for the tests: the fields of one message.
fn fields(mut b: &[u8]) -> Vec<(u32, Field<'_>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut n = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[0];
            *b = &b[1..];
            n |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return n;
            }
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let field = (key >> 3) as u32;
        let value = match key & 7 {
            0 => Field::Varint(varint(&mut b)),
            1 => {
                let (v, rest) = b.split_at(8);
                b = rest;
                Field::Bytes(v)
            }
            2 => {
                let len = varint(&mut b) as usize;
                let (v, rest) = b.split_at(len);
                b = rest;
                Field::Bytes(v)
            }
            w => panic!("wire type {w}"),
        };
        out.push((field, value));
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn all(b: &[u8], field: u32) -> Vec<&[u8]> {
    fields(b)
        .into_iter()
        .filter(|(f, _)| *f == field)
        .map(|(_, v)| match v {
            Field::Bytes(b) => b,
            Field::Varint(_) => panic!("field {field} is a varint"),
        })
        .collect()
}

fn one(b: &[u8], field: u32) -> &[u8] {
    let found = all(b, field);
    assert_eq!(found.len(), 1, "field {field}");
    found[0]
}

fn text(b: &[u8], field: u32) -> &str {
    std::str::from_utf8(one(b, field)).unwrap()
}

/// The value of the `Named…` entry called `name` among the repeated `field` of `b`.
fn named<'a>(b: &'a [u8], field: u32, name: &str) -> &'a [u8] {
    all(b, field)
        .into_iter()
        .find(|entry| text(entry, 1) == name)
        .map(|entry| one(entry, 2))
        .unwrap_or_else(|| panic!("no {name}"))
}

/// A vendor extension's YAML (`NamedAny` → `Any.yaml`, field 2).
fn extension<'a>(b: &'a [u8], field: u32, name: &str) -> &'a str {
    text(named(b, field, name), 2)
}

#[test]
fn the_protobuf_encoding_decodes_to_the_document() {
    let pb = proto::document(document()).unwrap();
    assert_eq!(pb, served().protobuf);
    // Document: swagger 1, info 2 (title 1, version 2).
    assert_eq!(text(&pb, 1), "2.0");
    let info = one(&pb, 2);
    assert_eq!(text(info, 1), "Kubernetes");
    assert_eq!(
        text(info, 2),
        document()["info"]["version"].as_str().unwrap()
    );
    // definitions 9: NamedSchema 1; Schema: description 4, type 22, properties 25,
    // vendor_extension 31.
    let defs = one(&pb, 9);
    assert_eq!(all(defs, 1).len(), definitions().len());
    let pod_spec = named(defs, 1, "io.k8s.api.core.v1.PodSpec");
    assert_eq!(text(one(pod_spec, 22), 1), "object");
    assert_eq!(text(pod_spec, 19), "containers");
    let props = one(pod_spec, 25);
    let containers = named(props, 1, "containers");
    assert_eq!(
        extension(containers, 31, "x-kubernetes-patch-strategy"),
        "merge\n"
    );
    assert_eq!(
        extension(containers, 31, "x-kubernetes-patch-merge-key"),
        "name\n"
    );
    assert_eq!(
        extension(containers, 31, "x-kubernetes-list-map-keys"),
        "- name\n"
    );
    // items 23: ItemsItem, schema 1 with $ref 1.
    assert_eq!(
        text(one(one(containers, 23), 1), 1),
        "#/definitions/io.k8s.api.core.v1.Container"
    );
    let volumes = named(props, 1, "volumes");
    assert_eq!(
        extension(volumes, 31, "x-kubernetes-patch-strategy"),
        "merge,retainKeys\n"
    );
    let job = named(defs, 1, "io.k8s.api.batch.v1.Job");
    assert_eq!(
        extension(job, 31, "x-kubernetes-group-version-kind"),
        "- group: batch\n  kind: Job\n  version: v1\n"
    );
    // paths 8: NamedPathItem 2; PathItem: patch 8, parameters 9; Operation: operation_id 5,
    // consumes 7, parameters 8, responses 9, vendor_extension 13.
    let paths = one(&pb, 8);
    let item = named(
        paths,
        2,
        "/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
    );
    let patch = one(item, 8);
    let want = document()["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"]
        ["operationId"]
        .as_str()
        .unwrap();
    assert_eq!(text(patch, 5), want);
    assert_eq!(extension(patch, 13, "x-kubernetes-action"), "patch\n");
    let consumes: Vec<&[u8]> = all(patch, 7);
    assert!(consumes.contains(&&b"application/strategic-merge-patch+json"[..]));
    // A path parameter: ParametersItem 1 → Parameter, non_body 2 → path sub-schema 4.
    let name_param = one(one(all(item, 9)[0], 1), 2);
    let path_schema = one(name_param, 4);
    assert_eq!(text(path_schema, 4), "name");
    assert_eq!(fields(path_schema)[0], (1, Field::Varint(1)), "required");
    // The body parameter: Parameter, body 1; its schema 5.
    let body = one(one(all(patch, 8)[0], 1), 1);
    assert_eq!(text(body, 3), "body");
    assert_eq!(
        text(one(body, 5), 1),
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    // Responses: NamedResponseValue 1 → ResponseValue, response 1 → schema 2 → Schema 1.
    let ok = one(named(one(patch, 9), 1, "200"), 1);
    assert_eq!(text(ok, 1), "OK");
    assert_eq!(
        text(one(one(ok, 2), 1), 1),
        "#/definitions/io.k8s.api.batch.v1.Job"
    );
    // security 12 and securityDefinitions 13, byte for byte as upstream's document has them.
    assert_eq!(one(&pb, 12), b"\n\x0f\n\x0bBearerToken\x12\x00");
    assert_eq!(
        one(&pb, 13),
        &b"\nM\n\x0bBearerToken\x12>\x12<\n\x06apiKey\x12\rauthorization\x1a\x06header\"\x1bBearer Token authentication"[..]
    );
}

#[test]
fn content_negotiation_as_kube_openapi() {
    assert_eq!(negotiate(""), Some(Format::Json));
    assert_eq!(negotiate("*/*"), Some(Format::Json));
    assert_eq!(negotiate("application/json"), Some(Format::Json));
    assert_eq!(negotiate(PROTOBUF_DEPRECATED), Some(Format::Protobuf));
    assert_eq!(negotiate(PROTOBUF), Some(Format::Protobuf));
    assert_eq!(
        negotiate(&format!("{PROTOBUF_DEPRECATED}, application/json;q=0.9")),
        Some(Format::Protobuf)
    );
    assert_eq!(
        negotiate(&format!("application/json;q=0.5, {PROTOBUF}")),
        Some(Format::Protobuf)
    );
    assert_eq!(negotiate("text/html, */*;q=0.1"), Some(Format::Json));
    assert_eq!(negotiate("text/html"), None);
    assert_eq!(negotiate("application/yaml"), None);
}

fn request(accept: Option<&str>, extra: &[(header::HeaderName, &str)]) -> Response {
    let mut h = HeaderMap::new();
    if let Some(a) = accept {
        h.insert(header::ACCEPT, HeaderValue::from_str(a).unwrap());
    }
    for (k, v) in extra {
        h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
    }
    serve(&Method::GET, &h)
}

fn get(r: &Response, h: header::HeaderName) -> Option<&str> {
    r.headers().get(h).map(|v| v.to_str().unwrap())
}

#[test]
fn the_handler_answers_as_upstreams() {
    let json = request(None, &[]);
    assert_eq!(json.status(), StatusCode::OK);
    assert_eq!(get(&json, header::CONTENT_TYPE), Some("application/json"));
    assert_eq!(get(&json, header::VARY), Some("Accept"));
    let etag = get(&json, header::ETAG).unwrap().to_string();
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 10,
        "{etag}"
    );
    let modified = get(&json, header::LAST_MODIFIED).unwrap().to_string();
    assert!(modified.ends_with(" GMT"), "{modified}");

    for accept in [PROTOBUF_DEPRECATED, PROTOBUF] {
        let pb = request(Some(accept), &[]);
        assert_eq!(pb.status(), StatusCode::OK);
        assert_eq!(get(&pb, header::CONTENT_TYPE), Some(PROTOBUF));
        // One ETag for both representations, as upstream's (computed on the JSON).
        assert_eq!(get(&pb, header::ETAG), Some(etag.as_str()));
    }

    let refused = request(Some("text/html"), &[]);
    assert_eq!(refused.status(), StatusCode::NOT_ACCEPTABLE);
    assert_eq!(get(&refused, header::VARY), Some("Accept"));
    assert!(get(&refused, header::CONTENT_TYPE).is_none());

    for inm in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"x\", {etag}"),
        "*".into(),
    ] {
        let cached = request(None, &[(header::IF_NONE_MATCH, &inm)]);
        assert_eq!(cached.status(), StatusCode::NOT_MODIFIED, "{inm}");
        assert_eq!(get(&cached, header::ETAG), Some(etag.as_str()));
        assert_eq!(get(&cached, header::VARY), Some("Accept"));
        assert!(get(&cached, header::CONTENT_TYPE).is_none());
        assert!(get(&cached, header::LAST_MODIFIED).is_none());
    }
    let stale = request(None, &[(header::IF_NONE_MATCH, "\"other\"")]);
    assert_eq!(stale.status(), StatusCode::OK);
    let since = request(None, &[(header::IF_MODIFIED_SINCE, &modified)]);
    assert_eq!(since.status(), StatusCode::NOT_MODIFIED);
    let before = request(
        None,
        &[(header::IF_MODIFIED_SINCE, "Thu, 01 Jan 1970 00:00:00 GMT")],
    );
    assert_eq!(before.status(), StatusCode::OK);
    let mismatch = request(None, &[(header::IF_MATCH, "\"other\"")]);
    assert_eq!(mismatch.status(), StatusCode::PRECONDITION_FAILED);
}
