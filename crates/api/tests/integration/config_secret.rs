//! ConfigMap and Secret defaulting and validation, ported from upstream's tables
//! (TestValidateConfigMap, TestValidateConfigMapUpdate, TestValidateSecret,
//! TestValidateSecretUpdate, TestValidateDockerConfigSecret, TestValidateBasicAuthSecret,
//! TestValidateSSHAuthSecret) with every expected error spelled out as
//! (field path, reason, full message).

use crate::common;

use common::{decode, merge, patched, triples};
use kbatch_api::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kbatch_api::{defaults, strategy, validation};
use serde_json::{Value, json};

const INV: &str = "FieldValueInvalid";
const REQ: &str = "FieldValueRequired";
const FORB: &str = "FieldValueForbidden";
const LONG: &str = "FieldValueTooLong";

const KEY_RE: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
const SUBDOMAIN_RE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const BAD_NAME: &str = "NoUppercaseOrSpecialCharsLike=Equals";
const MAX: usize = 1024 * 1024;

type Triple = (String, String, String);

fn e(field: &str, reason: &str, msg: &str) -> Triple {
    (field.to_string(), reason.to_string(), msg.to_string())
}

/// Upstream's `newConfigMap("validname", "validns", ...)`, changed by a merge patch.
fn configmap(patch: Value) -> ConfigMap {
    decode(patched(
        json!({"metadata": {"name": "validname", "namespace": "validns"}}),
        patch,
    ))
}

/// A Secret request body as the server decodes it: defaulted, stringData merged into data.
fn secret(v: Value) -> Secret {
    let mut s: Secret = decode(v);
    defaults::secret(&mut s);
    s
}

/// Upstream's `validSecret()` (`foo` in `bar`, `data-1: bar`), changed by a merge patch.
fn valid_secret(patch: Value) -> Secret {
    secret(patched(
        json!({"metadata": {"name": "foo", "namespace": "bar"}, "data": {"data-1": "YmFy"}}),
        patch,
    ))
}

fn b64(bytes: &[u8]) -> String {
    // A tiny standard-alphabet encoder: the fixtures need nothing more.
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The metadata rows both kinds' create tables share (upstream's name and namespace cases).
fn metadata_cases() -> Vec<(&'static str, Value, Vec<Triple>)> {
    vec![
        (
            "empty name",
            json!({"metadata": {"name": ""}}),
            vec![e(
                "metadata.name",
                REQ,
                "metadata.name: Required value: name or generateName is required",
            )],
        ),
        (
            "invalid name",
            json!({"metadata": {"name": BAD_NAME}}),
            vec![e(
                "metadata.name",
                INV,
                &format!("metadata.name: Invalid value: \"{BAD_NAME}\": {SUBDOMAIN_RE}"),
            )],
        ),
        (
            "empty namespace",
            json!({"metadata": {"namespace": ""}}),
            vec![e(
                "metadata.namespace",
                REQ,
                "metadata.namespace: Required value",
            )],
        ),
    ]
}

#[test]
fn configmap_create_table() {
    let k253 = "a".repeat(253);
    let k254 = "a".repeat(254);
    let big = "a".repeat(MAX + 1);
    let big_b64 = b64(&vec![b'a'; MAX + 1]);
    let cases: Vec<(&str, Value, Vec<Triple>)> = vec![
        (
            "valid",
            json!({"data": {"key": "value"}, "binaryData": {"bin": b64(b"value")}}),
            vec![],
        ),
        (
            "max key length",
            json!({"data": {k253.clone(): "value"}}),
            vec![],
        ),
        ("leading dot key", json!({"data": {".ab": "value"}}), vec![]),
        (
            "binary data leading dot key",
            json!({"binaryData": {".ab": b64(b"value")}}),
            vec![],
        ),
        (
            "binary data non utf-8 bytes",
            json!({"binaryData": {"key": b64(&[0, 0xfe, 0, 0xff])}}),
            vec![],
        ),
        (
            "exactly the size limit, data and binaryData together",
            json!({"data": {"a": "a".repeat(MAX - 3)}, "binaryData": {"b": b64(b"abc")}}),
            vec![],
        ),
        (
            "invalid key",
            json!({"data": {"a*b": "value"}}),
            vec![e(
                "data[a*b]",
                INV,
                &format!("data[a*b]: Invalid value: \"a*b\": {KEY_RE}"),
            )],
        ),
        (
            "dot key",
            json!({"data": {".": "value"}}),
            vec![e(
                "data[.]",
                INV,
                "data[.]: Invalid value: \".\": must not be '.'",
            )],
        ),
        (
            "double dot key",
            json!({"data": {"..": "value"}}),
            vec![e(
                "data[..]",
                INV,
                "data[..]: Invalid value: \"..\": must not be '..'",
            )],
        ),
        (
            "double dot prefix",
            json!({"data": {"..a": "value"}}),
            vec![e(
                "data[..a]",
                INV,
                "data[..a]: Invalid value: \"..a\": must not start with '..'",
            )],
        ),
        (
            "over max key length",
            json!({"data": {k254.clone(): "value"}}),
            vec![e(
                &format!("data[{k254}]"),
                INV,
                &format!(
                    "data[{k254}]: Invalid value: \"{k254}\": must be no more than 253 characters"
                ),
            )],
        ),
        (
            "over max size",
            json!({"data": {"key": big.clone()}}),
            vec![e(
                "[]",
                LONG,
                "[]: Too long: may not be more than 1048576 bytes",
            )],
        ),
        (
            "duplicated key",
            json!({"data": {"key": "value1"}, "binaryData": {"key": b64(b"value2")}}),
            vec![e(
                "data[key]",
                INV,
                "data[key]: Invalid value: \"key\": duplicate of key present in binaryData",
            )],
        ),
        (
            "binary data invalid key",
            json!({"binaryData": {"a*b": b64(b"value")}}),
            vec![e(
                "binaryData[a*b]",
                INV,
                &format!("binaryData[a*b]: Invalid value: \"a*b\": {KEY_RE}"),
            )],
        ),
        (
            "binary data dot key",
            json!({"binaryData": {".": b64(b"value")}}),
            vec![e(
                "binaryData[.]",
                INV,
                "binaryData[.]: Invalid value: \".\": must not be '.'",
            )],
        ),
        (
            "binary data double dot key",
            json!({"binaryData": {"..": b64(b"value")}}),
            vec![e(
                "binaryData[..]",
                INV,
                "binaryData[..]: Invalid value: \"..\": must not be '..'",
            )],
        ),
        (
            "binary data over max key length",
            json!({"binaryData": {k254.clone(): b64(b"value")}}),
            vec![e(
                &format!("binaryData[{k254}]"),
                INV,
                &format!(
                    "binaryData[{k254}]: Invalid value: \"{k254}\": must be no more than 253 characters"
                ),
            )],
        ),
        (
            "binary data max size",
            json!({"binaryData": {"bin": big_b64}}),
            vec![e(
                "[]",
                LONG,
                "[]: Too long: may not be more than 1048576 bytes",
            )],
        ),
        (
            "data and binaryData over the limit together",
            json!({"data": {"a": "a".repeat(MAX - 2)}, "binaryData": {"b": b64(b"abc")}}),
            vec![e(
                "[]",
                LONG,
                "[]: Too long: may not be more than 1048576 bytes",
            )],
        ),
        (
            "several bad keys: every message of each, in key order",
            json!({"data": {"b c": "1", "..": "2"}}),
            vec![
                e(
                    "data[..]",
                    INV,
                    "data[..]: Invalid value: \"..\": must not be '..'",
                ),
                e(
                    "data[b c]",
                    INV,
                    &format!("data[b c]: Invalid value: \"b c\": {KEY_RE}"),
                ),
            ],
        ),
    ];
    for (name, patch, want) in cases.into_iter().chain(metadata_cases()) {
        let cm = configmap(patch);
        assert_eq!(
            triples(&validation::configmap_create(&cm)),
            want,
            "case {name:?}"
        );
    }
}

#[test]
fn configmap_update_table() {
    let valid =
        || configmap(json!({"data": {"key": "value"}, "metadata": {"resourceVersion": "1"}}));
    let with = |patch: Value| {
        let mut v = serde_json::to_value(valid()).unwrap();
        merge(&mut v, &patch);
        decode::<ConfigMap>(v)
    };
    let immutable = with(json!({"immutable": true}));
    let forbidden = |f: &str| {
        e(
            f,
            FORB,
            &format!("{f}: Forbidden: field is immutable when `immutable` is set"),
        )
    };
    let cases: Vec<(&str, ConfigMap, ConfigMap, Vec<Triple>)> = vec![
        ("valid", valid(), valid(), vec![]),
        (
            "namespace changed",
            valid(),
            with(json!({"metadata": {"namespace": "otherns"}})),
            vec![e(
                "metadata.namespace",
                INV,
                "metadata.namespace: Invalid value: \"otherns\": field is immutable",
            )],
        ),
        (
            "make configmap immutable",
            valid(),
            immutable.clone(),
            vec![],
        ),
        (
            "make immutable configmap mutable",
            immutable.clone(),
            with(json!({"immutable": false})),
            vec![forbidden("immutable")],
        ),
        (
            "unset immutable",
            immutable.clone(),
            valid(),
            vec![forbidden("immutable")],
        ),
        (
            "change data of an immutable configmap",
            immutable.clone(),
            with(json!({"immutable": true, "data": {"key": "other"}})),
            vec![forbidden("data")],
        ),
        (
            "add binaryData to an immutable configmap",
            immutable.clone(),
            with(json!({"immutable": true, "binaryData": {"b": "YQ=="}})),
            vec![forbidden("binaryData")],
        ),
        (
            "immutable configmap: metadata may change",
            immutable.clone(),
            with(json!({"immutable": true, "metadata": {"labels": {"a": "b"}}})),
            vec![],
        ),
        (
            "mutable configmap: data may change",
            valid(),
            with(json!({"data": {"key": "other", "k2": "v"}})),
            vec![],
        ),
        (
            "the new object is validated as on create",
            valid(),
            with(json!({"data": {"a*b": "v"}})),
            vec![e(
                "data[a*b]",
                INV,
                &format!("data[a*b]: Invalid value: \"a*b\": {KEY_RE}"),
            )],
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(
            triples(&validation::configmap_update(&new, &old)),
            want,
            "case {name:?}"
        );
    }
}

#[test]
fn secret_defaulting_and_string_data() {
    // Type defaults to Opaque; an explicit type stays.
    let s = secret(json!({"metadata": {"name": "s"}}));
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(s.data, None);
    let s = secret(json!({"metadata": {"name": "s"}, "type": ""}));
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    let s = secret(json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"}));
    assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));

    // stringData is merged into data, overwriting the same keys, and is gone.
    let s = secret(json!({
        "metadata": {"name": "s"},
        "data": {"a": b64(b"from-data"), "b": b64(b"kept")},
        "stringData": {"a": "from-stringData", "c": "new"}
    }));
    assert_eq!(s.string_data, None);
    let encoded = serde_json::to_value(&s).unwrap();
    assert_eq!(
        encoded["data"],
        json!({"a": b64(b"from-stringData"), "b": b64(b"kept"), "c": b64(b"new")})
    );
    assert!(encoded.get("stringData").is_none(), "{encoded}");

    // stringData alone creates data; an empty stringData leaves data unset.
    let s = secret(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}));
    assert_eq!(
        serde_json::to_value(&s).unwrap()["data"],
        json!({"k": b64(b"v")})
    );
    let s = secret(json!({"metadata": {"name": "s"}, "stringData": {}}));
    assert_eq!(s.data, None);
    assert_eq!(s.string_data, None);

    // A stringData key is validated under data, as upstream (the merge comes first).
    let s = secret(
        json!({"metadata": {"name": "s", "namespace": "ns"}, "stringData": {"bad key": "v"}}),
    );
    assert_eq!(
        triples(&validation::secret_create(&s)),
        vec![e(
            "data[bad key]",
            INV,
            &format!("data[bad key]: Invalid value: \"bad key\": {KEY_RE}"),
        )]
    );
    // stringData counts toward the size limit.
    let s = secret(json!({"metadata": {"name": "s", "namespace": "ns"},
        "data": {"a": b64(b"xy")}, "stringData": {"b": "a".repeat(MAX - 1)}}));
    assert_eq!(
        triples(&validation::secret_create(&s)),
        vec![e(
            "data",
            LONG,
            "data: Too long: may not be more than 1048576 bytes"
        )]
    );
}

#[test]
fn secret_create_table() {
    let sa = |annotations: Value| json!({"type": "kubernetes.io/service-account-token", "metadata": {"annotations": annotations}});
    let sa_required = e(
        "metadata.annotations[kubernetes.io/service-account.name]",
        REQ,
        "metadata.annotations[kubernetes.io/service-account.name]: Required value",
    );
    let cases: Vec<(&str, Value, Vec<Triple>)> = vec![
        ("valid", json!({}), vec![]),
        (
            "over max size",
            json!({"data": {"over": b64(&vec![0u8; MAX + 1])}}),
            vec![e(
                "data",
                LONG,
                "data: Too long: may not be more than 1048576 bytes",
            )],
        ),
        (
            "invalid key",
            json!({"data": {"a*b": b64(b"whoops")}}),
            vec![e(
                "data[a*b]",
                INV,
                &format!("data[a*b]: Invalid value: \"a*b\": {KEY_RE}"),
            )],
        ),
        ("leading dot key", json!({"data": {".key": "YmFy"}}), vec![]),
        (
            "dot key",
            json!({"data": {".": "YmFy"}}),
            vec![e(
                "data[.]",
                INV,
                "data[.]: Invalid value: \".\": must not be '.'",
            )],
        ),
        (
            "double dot key",
            json!({"data": {"..": "YmFy"}}),
            vec![e(
                "data[..]",
                INV,
                "data[..]: Invalid value: \"..\": must not be '..'",
            )],
        ),
        (
            "valid service-account-token secret",
            sa(json!({"kubernetes.io/service-account.name": "foo"})),
            vec![],
        ),
        (
            "empty service-account-token annotation",
            sa(json!({"kubernetes.io/service-account.name": ""})),
            vec![sa_required.clone()],
        ),
        (
            "missing service-account-token annotation",
            sa(json!({"other": "x"})),
            vec![sa_required.clone()],
        ),
        (
            "missing service-account-token annotations",
            json!({"type": "kubernetes.io/service-account-token"}),
            vec![sa_required],
        ),
        (
            "valid tls secret",
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}),
            vec![],
        ),
        (
            "tls secret without its keys",
            json!({"type": "kubernetes.io/tls"}),
            vec![
                e("data[tls.crt]", REQ, "data[tls.crt]: Required value"),
                e("data[tls.key]", REQ, "data[tls.key]: Required value"),
            ],
        ),
        (
            "tls secret without its key",
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "YQ=="}}),
            vec![e("data[tls.key]", REQ, "data[tls.key]: Required value")],
        ),
        (
            "valid basic-auth secret",
            json!({"type": "kubernetes.io/basic-auth", "data": {"username": b64(b"username"), "password": b64(b"password")}}),
            vec![],
        ),
        (
            "basic-auth secret with only a username",
            json!({"type": "kubernetes.io/basic-auth", "data": {"data-1": null, "username": ""}}),
            vec![],
        ),
        (
            "missing basic-auth username and password keys",
            json!({"type": "kubernetes.io/basic-auth"}),
            vec![
                e("data[username]", REQ, "data[username]: Required value"),
                e("data[password]", REQ, "data[password]: Required value"),
            ],
        ),
        (
            "valid ssh-auth secret",
            json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": b64(b"foo-bar-baz")}}),
            vec![],
        ),
        (
            "missing ssh-auth private key",
            json!({"type": "kubernetes.io/ssh-auth"}),
            vec![e(
                "data[ssh-privatekey]",
                REQ,
                "data[ssh-privatekey]: Required value",
            )],
        ),
        (
            "empty ssh-auth private key",
            json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}}),
            vec![e(
                "data[ssh-privatekey]",
                REQ,
                "data[ssh-privatekey]: Required value",
            )],
        ),
        (
            "valid dockercfg secret",
            json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64(br#"{"https://index.docker.io/v1/": {"auth": "Y2x1ZWRyb29sZXIwMDAxOnBhc3N3b3Jk","email": "fake@example.com"}}"#)}}),
            vec![],
        ),
        (
            "missing dockercfg key",
            json!({"type": "kubernetes.io/dockercfg"}),
            vec![e(
                "data[.dockercfg]",
                REQ,
                "data[.dockercfg]: Required value",
            )],
        ),
        (
            "empty dockercfg key",
            json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": ""}}),
            vec![e(
                "data[.dockercfg]",
                INV,
                "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": unexpected end of JSON input",
            )],
        ),
        (
            "invalid dockercfg key",
            json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64(b"bad")}}),
            vec![e(
                "data[.dockercfg]",
                INV,
                "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": invalid character 'b' looking for beginning of value",
            )],
        ),
        (
            "valid dockerconfigjson secret",
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(br#"{"auths":{"https://index.docker.io/v1/": {"auth": "Y2x1ZWRyb29sZXIwMDAxOnBhc3N3b3Jk","email": "fake@example.com"}}}"#)}}),
            vec![],
        ),
        (
            "missing dockerconfigjson key",
            json!({"type": "kubernetes.io/dockerconfigjson"}),
            vec![e(
                "data[.dockerconfigjson]",
                REQ,
                "data[.dockerconfigjson]: Required value",
            )],
        ),
        (
            "dockerconfigjson that is a JSON array",
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(b"[]")}}),
            vec![e(
                "data[.dockerconfigjson]",
                INV,
                "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            )],
        ),
        (
            "a type of the user's own has no rules",
            json!({"type": "example.com/custom", "data": null}),
            vec![],
        ),
    ];
    for (name, patch, want) in cases.into_iter().chain(metadata_cases()) {
        let s = valid_secret(patch);
        assert_eq!(
            triples(&validation::secret_create(&s)),
            want,
            "case {name:?}"
        );
    }
}

#[test]
fn secret_update_table() {
    let valid = |patch: Value| {
        valid_secret(patched(
            json!({"metadata": {"resourceVersion": "20"}}),
            patch,
        ))
    };
    let forbidden = |f: &str| {
        e(
            f,
            FORB,
            &format!("{f}: Forbidden: field is immutable when `immutable` is set"),
        )
    };
    let immutable = || valid(json!({"immutable": true}));
    let cases: Vec<(&str, Secret, Secret, Vec<Triple>)> = vec![
        ("mutable secret", valid(json!({})), valid(json!({})), vec![]),
        ("immutable secret", immutable(), immutable(), vec![]),
        (
            "make secret immutable",
            valid(json!({})),
            immutable(),
            vec![],
        ),
        (
            "make immutable secret mutable",
            immutable(),
            valid(json!({"immutable": false})),
            vec![forbidden("immutable")],
        ),
        (
            "add data in secret",
            valid(json!({})),
            valid(json!({"data": {"data-2": "YmF6"}})),
            vec![],
        ),
        (
            "add data in immutable secret",
            immutable(),
            valid(json!({"immutable": true, "data": {"data-2": "YmF6"}})),
            vec![forbidden("data")],
        ),
        (
            "change data in secret",
            valid(json!({})),
            valid(json!({"data": {"data-1": "Zm9v"}})),
            vec![],
        ),
        (
            "change data in immutable secret",
            immutable(),
            valid(json!({"immutable": true, "data": {"data-1": "Zm9v"}})),
            vec![forbidden("data")],
        ),
        (
            "change data in immutable secret through stringData",
            immutable(),
            valid(json!({"immutable": true, "stringData": {"data-1": "foo"}})),
            vec![forbidden("data")],
        ),
        (
            "stringData repeating the stored value changes nothing",
            immutable(),
            valid(json!({"immutable": true, "stringData": {"data-1": "bar"}})),
            vec![],
        ),
        (
            "type is immutable",
            valid(json!({})),
            valid(json!({"type": "kubernetes.io/basic-auth", "data": {"username": ""}})),
            vec![e(
                "type",
                INV,
                "type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable",
            )],
        ),
        (
            "unset immutable and change data and type: every error, type first",
            immutable(),
            valid(json!({"type": "kubernetes.io/tls", "data": {"data-1": null}})),
            vec![
                e(
                    "type",
                    INV,
                    "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
                ),
                forbidden("immutable"),
                forbidden("data"),
                e("data[tls.crt]", REQ, "data[tls.crt]: Required value"),
                e("data[tls.key]", REQ, "data[tls.key]: Required value"),
            ],
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(
            triples(&validation::secret_update(&new, &old)),
            want,
            "case {name:?}"
        );
    }

    // A new object without a type keeps the stored one (before validation, as upstream).
    let old = valid(json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}));
    let mut new: Secret = decode(serde_json::to_value(&old).unwrap());
    new.type_ = None;
    strategy::secret_prepare_for_update(&mut new, &old);
    assert_eq!(new.type_.as_deref(), Some("kubernetes.io/tls"));
    assert!(validation::secret_update(&new, &old).is_empty());
}
