//! One table of invalid Job, CronJob and Pod inputs run through the create pipeline; each row
//! lists every expected error as (field path, reason, full message), in upstream's order.

use crate::common;

use common::*;
use serde_json::{Value, json};

const LABEL_RE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_RE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NAME_PART_RE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

enum Kind {
    Job,
    CronJob,
    Pod,
}

fn run(kind: &Kind, patch: Value) -> Vec<(String, String, String)> {
    let errs = match kind {
        Kind::Job => create_job(patch),
        Kind::CronJob => create_cronjob(patch),
        Kind::Pod => create_pod(patch),
    };
    triples(&errs)
}

fn e(field: &str, reason: &str, msg: &str) -> (String, String, String) {
    (field.to_string(), reason.to_string(), msg.to_string())
}

const INV: &str = "FieldValueInvalid";
const REQ: &str = "FieldValueRequired";
const NSUP: &str = "FieldValueNotSupported";
const FORB: &str = "FieldValueForbidden";
const DUP: &str = "FieldValueDuplicate";
const NF: &str = "FieldValueNotFound";
const LONG: &str = "FieldValueTooLong";

fn pfp(rules: Value) -> Value {
    json!({"spec": {"podFailurePolicy": {"rules": rules}}})
}

fn container_patch(c: Value) -> Value {
    let mut base = json!({"name": "c", "image": "busybox"});
    merge(&mut base, &c);
    json!({"spec": {"template": {"spec": {"containers": [base]}}}})
}

fn pod_container(c: Value) -> Value {
    let mut base = json!({"name": "c", "image": "busybox"});
    merge(&mut base, &c);
    json!({"spec": {"containers": [base]}})
}

#[allow(clippy::type_complexity)]
fn cases() -> Vec<(&'static str, Kind, Value, Vec<(String, String, String)>)> {
    let name64 = "a".repeat(64);
    let name61 = "b".repeat(61);
    let name53 = "c".repeat(53);
    vec![
        (
            "job without restartPolicy (defaulted to Always)",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"restartPolicy": null}}}}),
            vec![e(
                "spec.template.spec.restartPolicy",
                REQ,
                "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            )],
        ),
        (
            "job restartPolicy Sometimes: core and job checks",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"restartPolicy": "Sometimes"}}}}),
            vec![
                e(
                    "spec.template.spec.restartPolicy",
                    NSUP,
                    "spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
                ),
                e(
                    "spec.template.spec.restartPolicy",
                    NSUP,
                    "spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"OnFailure\", \"Never\"",
                ),
            ],
        ),
        (
            "job name of 64 characters",
            Kind::Job,
            json!({"metadata": {"name": name64}}),
            vec![
                e(
                    "spec.template.labels",
                    INV,
                    &format!(
                        "spec.template.labels: Invalid value: \"{name64}\": must be no more than 63 bytes"
                    ),
                ),
                e(
                    "spec.template.labels",
                    INV,
                    &format!(
                        "spec.template.labels: Invalid value: \"{name64}\": must be no more than 63 bytes"
                    ),
                ),
            ],
        ),
        (
            "indexed job whose last pod hostname is too long",
            Kind::Job,
            json!({"metadata": {"name": name61}, "spec": {"completionMode": "Indexed", "completions": 100}}),
            vec![e(
                "metadata.name",
                INV,
                &format!(
                    "metadata.name: Invalid value: \"{name61}\": will not able to create pod with invalid DNS label: {name61}-99"
                ),
            )],
        ),
        (
            "manualSelector without selector",
            Kind::Job,
            json!({"spec": {"manualSelector": true}}),
            vec![
                e("spec.selector", REQ, "spec.selector: Required value"),
                e(
                    "spec.template.metadata.labels",
                    INV,
                    "spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`",
                ),
            ],
        ),
        (
            "negative parallelism",
            Kind::Job,
            json!({"spec": {"parallelism": -1}}),
            vec![e(
                "spec.parallelism",
                INV,
                "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        (
            "negative completions",
            Kind::Job,
            json!({"spec": {"completions": -1}}),
            vec![e(
                "spec.completions",
                INV,
                "spec.completions: Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        (
            "negative activeDeadlineSeconds",
            Kind::Job,
            json!({"spec": {"activeDeadlineSeconds": -1}}),
            vec![e(
                "spec.activeDeadlineSeconds",
                INV,
                "spec.activeDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        (
            "negative backoffLimit",
            Kind::Job,
            json!({"spec": {"backoffLimit": -1}}),
            vec![e(
                "spec.backoffLimit",
                INV,
                "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        (
            "negative ttlSecondsAfterFinished",
            Kind::Job,
            json!({"spec": {"ttlSecondsAfterFinished": -1}}),
            vec![e(
                "spec.ttlSecondsAfterFinished",
                INV,
                "spec.ttlSecondsAfterFinished: Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        (
            "indexed without completions",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "parallelism": 2}}),
            vec![e(
                "spec.completions",
                REQ,
                "spec.completions: Required value: when completion mode is Indexed",
            )],
        ),
        (
            "podFailurePolicy with restartPolicy OnFailure",
            Kind::Job,
            patched(
                pfp(
                    json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}]),
                ),
                json!({"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}),
            ),
            vec![e(
                "spec.template.spec.restartPolicy",
                INV,
                "spec.template.spec.restartPolicy: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified",
            )],
        ),
        (
            "onExitCodes In with 0",
            Kind::Job,
            pfp(json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].onExitCodes.values[0]",
                INV,
                "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator",
            )],
        ),
        (
            "backoffLimitPerIndex on a NonIndexed job",
            Kind::Job,
            json!({"spec": {"backoffLimitPerIndex": 1}}),
            vec![e(
                "spec.backoffLimitPerIndex",
                INV,
                "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
            )],
        ),
        (
            "maxFailedIndexes without backoffLimitPerIndex",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 2, "maxFailedIndexes": 1}}),
            vec![e(
                "spec.backoffLimitPerIndex",
                REQ,
                "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified",
            )],
        ),
        (
            "maxFailedIndexes above completions",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 1, "maxFailedIndexes": 3}}),
            vec![e(
                "spec.maxFailedIndexes",
                INV,
                "spec.maxFailedIndexes: Invalid value: 3: must be less than or equal to completions",
            )],
        ),
        (
            "indexed parallelism above 100000",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 100001, "parallelism": 100001}}),
            vec![e(
                "spec.parallelism",
                INV,
                "spec.parallelism: Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed",
            )],
        ),
        (
            "high completions with backoffLimitPerIndex",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 100001, "parallelism": 10001, "backoffLimitPerIndex": 1}}),
            vec![
                e(
                    "spec.maxFailedIndexes",
                    REQ,
                    "spec.maxFailedIndexes: Required value: must be specified when completions is above 100000",
                ),
                e(
                    "spec.parallelism",
                    INV,
                    "spec.parallelism: Invalid value: 10001: must be less than or equal to 10000 when completions are above 100000 and used with backoff limit per index",
                ),
            ],
        ),
        (
            "managedBy empty",
            Kind::Job,
            json!({"spec": {"managedBy": ""}}),
            vec![e("spec.managedBy", REQ, "spec.managedBy: Required value")],
        ),
        (
            "managedBy without domain",
            Kind::Job,
            json!({"spec": {"managedBy": "foo"}}),
            vec![e(
                "spec.managedBy",
                INV,
                "spec.managedBy: Invalid value: \"foo\": must be a domain-prefixed path (such as \"acme.io/foo\")",
            )],
        ),
        (
            "managedBy too long",
            Kind::Job,
            json!({"spec": {"managedBy": format!("example.com/{}", "a".repeat(60))}}),
            vec![e(
                "spec.managedBy",
                LONG,
                "spec.managedBy: Too long: may not be more than 63 bytes",
            )],
        ),
        (
            "unknown completionMode",
            Kind::Job,
            json!({"spec": {"completionMode": "Foo"}}),
            vec![e(
                "spec.completionMode",
                NSUP,
                "spec.completionMode: Unsupported value: \"Foo\": supported values: \"NonIndexed\", \"Indexed\"",
            )],
        ),
        (
            "successPolicy on a NonIndexed job",
            Kind::Job,
            json!({"spec": {"successPolicy": {"rules": [{"succeededCount": 1}]}}}),
            vec![e(
                "spec.successPolicy",
                INV,
                "spec.successPolicy: Invalid value: {\"rules\":[{\"succeededCount\":1}]}: requires indexed completion mode",
            )],
        ),
        (
            "successPolicy without rules",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": []}}}),
            vec![e(
                "spec.successPolicy.rules",
                REQ,
                "spec.successPolicy.rules: Required value: at least one rules must be specified when the successPolicy is specified",
            )],
        ),
        (
            "successPolicy rule with neither field",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [{}]}}}),
            vec![e(
                "spec.successPolicy.rules[0]",
                REQ,
                "spec.successPolicy.rules[0]: Required value: at least one of succeededCount or succeededIndexes must be specified",
            )],
        ),
        (
            "succeededIndexes with three parts",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [{"succeededIndexes": "1-3-4"}]}}}),
            vec![e(
                "spec.successPolicy.rules[0].succeededIndexes",
                INV,
                "spec.successPolicy.rules[0].succeededIndexes: Invalid value: \"1-3-4\": error parsing succeededIndexes: the fragment \"1-3-4\" violates the requirement that an index interval can have at most two parts separated by '-'",
            )],
        ),
        (
            "succeededCount above completions",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [{"succeededCount": 6}]}}}),
            vec![e(
                "spec.successPolicy.rules[0].succeededCount",
                INV,
                "spec.successPolicy.rules[0].succeededCount: Invalid value: 6: must be less than or equal to 5 (the number of specified completions)",
            )],
        ),
        (
            "succeededCount above the listed indexes",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [{"succeededIndexes": "0-1", "succeededCount": 3}]}}}),
            vec![e(
                "spec.successPolicy.rules[0].succeededCount",
                INV,
                "spec.successPolicy.rules[0].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)",
            )],
        ),
        (
            "successPolicy on an Indexed job without completions (upstream would panic)",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "parallelism": 2, "successPolicy": {"rules": [{"succeededIndexes": "0-1", "succeededCount": 1}]}}}),
            vec![e(
                "spec.completions",
                REQ,
                "spec.completions: Required value: when completion mode is Indexed",
            )],
        ),
        (
            "bad succeededIndexes also caps succeededCount at zero",
            Kind::Job,
            json!({"spec": {"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [{"succeededIndexes": "9", "succeededCount": 1}]}}}),
            vec![
                e(
                    "spec.successPolicy.rules[0].succeededIndexes",
                    INV,
                    "spec.successPolicy.rules[0].succeededIndexes: Invalid value: \"9\": error parsing succeededIndexes: too large index: \"9\"",
                ),
                e(
                    "spec.successPolicy.rules[0].succeededCount",
                    INV,
                    "spec.successPolicy.rules[0].succeededCount: Invalid value: 1: must be less than or equal to 0 (the number of indexes in the specified succeededIndexes field)",
                ),
            ],
        ),
        (
            "podFailurePolicy action empty",
            Kind::Job,
            pfp(json!([{"action": "", "onExitCodes": {"operator": "In", "values": [1]}}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].action",
                REQ,
                "spec.podFailurePolicy.rules[0].action: Required value: valid values: [\"Count\" \"FailIndex\" \"FailJob\" \"Ignore\"]",
            )],
        ),
        (
            "FailIndex without backoffLimitPerIndex",
            Kind::Job,
            pfp(json!([{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].action",
                INV,
                "spec.podFailurePolicy.rules[0].action: Invalid value: \"FailIndex\": requires the backoffLimitPerIndex to be set",
            )],
        ),
        (
            "unknown podFailurePolicy action",
            Kind::Job,
            pfp(json!([{"action": "Bogus", "onExitCodes": {"operator": "In", "values": [1]}}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].action",
                NSUP,
                "spec.podFailurePolicy.rules[0].action: Unsupported value: \"Bogus\": supported values: \"Count\", \"FailIndex\", \"FailJob\", \"Ignore\"",
            )],
        ),
        (
            "rule with both requirements",
            Kind::Job,
            pfp(
                json!([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}, "onPodConditions": [{"type": "DisruptionTarget"}]}]),
            ),
            vec![e(
                "spec.podFailurePolicy.rules[0]",
                INV,
                "spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and OnPodConditions is not supported",
            )],
        ),
        (
            "rule with no requirement",
            Kind::Job,
            pfp(json!([{"action": "Ignore"}])),
            vec![e(
                "spec.podFailurePolicy.rules[0]",
                INV,
                "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
            )],
        ),
        (
            "onExitCodes operator empty",
            Kind::Job,
            pfp(json!([{"action": "Count", "onExitCodes": {"operator": "", "values": [1]}}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].onExitCodes.operator",
                REQ,
                "spec.podFailurePolicy.rules[0].onExitCodes.operator: Required value: valid values: [\"In\" \"NotIn\"]",
            )],
        ),
        (
            "onExitCodes unknown container",
            Kind::Job,
            pfp(
                json!([{"action": "Count", "onExitCodes": {"containerName": "nope", "operator": "NotIn", "values": [0]}}]),
            ),
            vec![e(
                "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
                INV,
                "spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: \"nope\": must be one of the container or initContainer names in the pod template",
            )],
        ),
        (
            "onExitCodes without values",
            Kind::Job,
            pfp(json!([{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": []}}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].onExitCodes.values",
                INV,
                "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []: at least one value is required",
            )],
        ),
        (
            "onExitCodes values unordered and repeated",
            Kind::Job,
            pfp(
                json!([{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [2, 1, 1]}}]),
            ),
            vec![
                e(
                    "spec.podFailurePolicy.rules[0].onExitCodes.values[2]",
                    DUP,
                    "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Duplicate value: 1",
                ),
                e(
                    "spec.podFailurePolicy.rules[0].onExitCodes.values",
                    INV,
                    "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: [2,1,1]: must be ordered",
                ),
            ],
        ),
        (
            "onPodConditions type not a qualified name",
            Kind::Job,
            pfp(json!([{"action": "Ignore", "onPodConditions": [{"type": "bad type"}]}])),
            vec![e(
                "spec.podFailurePolicy.rules[0].onPodConditions[0].type",
                INV,
                &format!(
                    "spec.podFailurePolicy.rules[0].onPodConditions[0].type: Invalid value: \"bad type\": {NAME_PART_RE}"
                ),
            )],
        ),
        (
            "onPodConditions unknown status",
            Kind::Job,
            pfp(
                json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]}]),
            ),
            vec![e(
                "spec.podFailurePolicy.rules[0].onPodConditions[0].status",
                NSUP,
                "spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
            )],
        ),
        (
            "podReplacementPolicy TerminatingOrFailed with podFailurePolicy",
            Kind::Job,
            patched(
                pfp(
                    json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]),
                ),
                json!({"spec": {"podReplacementPolicy": "TerminatingOrFailed"}}),
            ),
            vec![e(
                "spec.podReplacementPolicy",
                NSUP,
                "spec.podReplacementPolicy: Unsupported value: \"TerminatingOrFailed\": supported values: \"Failed\"",
            )],
        ),
        (
            "unknown podReplacementPolicy",
            Kind::Job,
            json!({"spec": {"podReplacementPolicy": "Foo"}}),
            vec![e(
                "spec.podReplacementPolicy",
                NSUP,
                "spec.podReplacementPolicy: Unsupported value: \"Foo\": supported values: \"Failed\", \"TerminatingOrFailed\"",
            )],
        ),
        (
            "user selector without manualSelector",
            Kind::Job,
            json!({"spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "x"}}}}}),
            vec![e(
                "spec.selector",
                INV,
                "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"x\",\"batch.kubernetes.io/controller-uid\":\"uid-1\"}}: `selector` not auto-generated",
            )],
        ),
        (
            "template label conflicting with the generated one",
            Kind::Job,
            json!({"spec": {"template": {"metadata": {"labels": {"controller-uid": "other"}}}}}),
            vec![e(
                "spec.template.metadata.labels[controller-uid]",
                INV,
                "spec.template.metadata.labels[controller-uid]: Invalid value: {\"batch.kubernetes.io/controller-uid\":\"uid-1\",\"batch.kubernetes.io/job-name\":\"pi\",\"controller-uid\":\"other\",\"job-name\":\"pi\"}: must be 'uid-1'",
            )],
        ),
        (
            "finalizer neither standard nor qualified",
            Kind::Job,
            json!({"metadata": {"finalizers": ["cleanup"]}}),
            vec![e(
                "metadata.finalizers[0]",
                INV,
                "metadata.finalizers[0]: Invalid value: \"cleanup\": name is neither a standard finalizer name nor is it fully qualified",
            )],
        ),
        (
            "orphan and foregroundDeletion together",
            Kind::Job,
            json!({"metadata": {"finalizers": ["orphan", "foregroundDeletion"]}}),
            vec![e(
                "metadata.finalizers",
                INV,
                "metadata.finalizers: Invalid value: [\"orphan\",\"foregroundDeletion\"]: finalizer orphan and foregroundDeletion cannot be both set",
            )],
        ),
        (
            "job template annotation key invalid",
            Kind::Job,
            json!({"spec": {"template": {"metadata": {"annotations": {"a/b/c": "x"}}}}}),
            vec![e(
                "spec.template.annotations",
                INV,
                "spec.template.annotations: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            )],
        ),
        (
            "invalid generateName and the name generated from it",
            Kind::Job,
            json!({"metadata": {"name": "Bad-x1z2q", "generateName": "Bad-"}}),
            vec![
                e(
                    "metadata.generateName",
                    INV,
                    &format!("metadata.generateName: Invalid value: \"Bad-\": {SUBDOMAIN_RE}"),
                ),
                e(
                    "metadata.name",
                    INV,
                    &format!("metadata.name: Invalid value: \"Bad-x1z2q\": {SUBDOMAIN_RE}"),
                ),
            ],
        ),
        (
            "manual selector with a bad operator and an empty In",
            Kind::Job,
            json!({"spec": {"manualSelector": true, "selector": {"matchExpressions": [
                {"key": "app", "operator": "Nope"},
                {"key": "app", "operator": "In", "values": []}
            ]}}}),
            vec![
                e(
                    "spec.selector.matchExpressions[0].operator",
                    INV,
                    "spec.selector.matchExpressions[0].operator: Invalid value: \"Nope\": not a valid selector operator",
                ),
                e(
                    "spec.selector.matchExpressions[1].values",
                    REQ,
                    "spec.selector.matchExpressions[1].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                ),
            ],
        ),
        (
            "ephemeral containers in a pod template",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}}}}),
            vec![e(
                "spec.template.spec.ephemeralContainers",
                FORB,
                "spec.template.spec.ephemeralContainers: Forbidden: ephemeral containers not allowed in pod template",
            )],
        ),
        (
            "no containers",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"containers": []}}}}),
            vec![e(
                "spec.template.spec.containers",
                REQ,
                "spec.template.spec.containers: Required value",
            )],
        ),
        (
            "container name not a DNS label",
            Kind::Job,
            container_patch(json!({"name": "Bad_Name"})),
            vec![e(
                "spec.template.spec.containers[0].name",
                INV,
                &format!(
                    "spec.template.spec.containers[0].name: Invalid value: \"Bad_Name\": {LABEL_RE}"
                ),
            )],
        ),
        (
            "duplicate container names",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a"}, {"name": "c", "image": "b"}]}}}}),
            vec![e(
                "spec.template.spec.containers[1].name",
                DUP,
                "spec.template.spec.containers[1].name: Duplicate value: \"c\"",
            )],
        ),
        (
            "init container named like a container",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"initContainers": [{"name": "c", "image": "a"}]}}}}),
            vec![e(
                "spec.template.spec.initContainers[0].name",
                DUP,
                "spec.template.spec.initContainers[0].name: Duplicate value: \"c\"",
            )],
        ),
        (
            "container without image",
            Kind::Job,
            container_patch(json!({"image": null})),
            vec![e(
                "spec.template.spec.containers[0].image",
                REQ,
                "spec.template.spec.containers[0].image: Required value",
            )],
        ),
        (
            "unknown imagePullPolicy",
            Kind::Job,
            container_patch(json!({"imagePullPolicy": "Sometimes"})),
            vec![e(
                "spec.template.spec.containers[0].imagePullPolicy",
                NSUP,
                "spec.template.spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            )],
        ),
        (
            "unknown dnsPolicy",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"dnsPolicy": "Bogus"}}}}),
            vec![e(
                "spec.template.spec.dnsPolicy",
                NSUP,
                "spec.template.spec.dnsPolicy: Unsupported value: \"Bogus\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            )],
        ),
        (
            "volumeMount of a missing volume",
            Kind::Job,
            container_patch(json!({"volumeMounts": [{"name": "data", "mountPath": "/data"}]})),
            vec![e(
                "spec.template.spec.containers[0].volumeMounts[0].name",
                NF,
                "spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"data\"",
            )],
        ),
        (
            "duplicate volume names",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]}}}}),
            vec![e(
                "spec.template.spec.volumes[1].name",
                DUP,
                "spec.template.spec.volumes[1].name: Duplicate value: \"v\"",
            )],
        ),
        (
            "env name with '='",
            Kind::Job,
            container_patch(json!({"env": [{"name": "A=B", "value": "x"}]})),
            vec![e(
                "spec.template.spec.containers[0].env[0].name",
                INV,
                "spec.template.spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
            )],
        ),
        (
            "env with value and valueFrom",
            Kind::Job,
            container_patch(
                json!({"env": [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
            ),
            vec![e(
                "spec.template.spec.containers[0].env[0].valueFrom",
                INV,
                "spec.template.spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
            )],
        ),
        (
            "env fieldRef to an unknown field",
            Kind::Job,
            container_patch(
                json!({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}),
            ),
            vec![e(
                "spec.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
                INV,
                "spec.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Invalid value: \"spec.bogus\": error converting fieldPath: field label not supported: spec.bogus",
            )],
        ),
        (
            "containerPort out of range",
            Kind::Job,
            container_patch(json!({"ports": [{"containerPort": 70000}]})),
            vec![e(
                "spec.template.spec.containers[0].ports[0].containerPort",
                INV,
                "spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            )],
        ),
        (
            "malformed resource quantity",
            Kind::Job,
            container_patch(json!({"resources": {"limits": {"cpu": "abc"}}})),
            vec![e(
                "spec.template.spec.containers[0].resources.limits[cpu]",
                INV,
                "spec.template.spec.containers[0].resources.limits[cpu]: Invalid value: \"abc\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )],
        ),
        (
            "request above limit",
            Kind::Job,
            container_patch(
                json!({"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}),
            ),
            vec![e(
                "spec.template.spec.containers[0].resources.requests",
                INV,
                "spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            )],
        ),
        (
            "pod template activeDeadlineSeconds 0",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"activeDeadlineSeconds": 0}}}}),
            vec![e(
                "spec.template.spec.activeDeadlineSeconds",
                INV,
                "spec.template.spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
            )],
        ),
        (
            "toleration without key must use Exists",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"tolerations": [{"operator": "Equal", "value": "v"}]}}}}),
            vec![e(
                "spec.template.spec.tolerations[0].operator",
                INV,
                "spec.template.spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            )],
        ),
        (
            "tolerationSeconds without NoExecute",
            Kind::Job,
            json!({"spec": {"template": {"spec": {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}}}}),
            vec![e(
                "spec.template.spec.tolerations[0].effect",
                INV,
                "spec.template.spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
            )],
        ),
        (
            "cronjob name of 53 characters",
            Kind::CronJob,
            json!({"metadata": {"name": name53}}),
            vec![e(
                "metadata.name",
                INV,
                &format!(
                    "metadata.name: Invalid value: \"{name53}\": must be no more than 52 characters"
                ),
            )],
        ),
        (
            "cron schedule with four fields",
            Kind::CronJob,
            json!({"spec": {"schedule": "* * * *"}}),
            vec![e(
                "spec.schedule",
                INV,
                "spec.schedule: Invalid value: \"* * * *\": expected exactly 5 fields, found 4: [* * * *]",
            )],
        ),
        (
            "cron schedule empty",
            Kind::CronJob,
            json!({"spec": {"schedule": ""}}),
            vec![e("spec.schedule", REQ, "spec.schedule: Required value")],
        ),
        (
            "unknown time zone",
            Kind::CronJob,
            json!({"spec": {"timeZone": "Mars/Olympus"}}),
            vec![e(
                "spec.timeZone",
                INV,
                "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus",
            )],
        ),
        (
            "time zone in the wrong case",
            Kind::CronJob,
            json!({"spec": {"timeZone": "europe/berlin"}}),
            vec![e(
                "spec.timeZone",
                INV,
                "spec.timeZone: Invalid value: \"europe/berlin\": unknown time zone europe/berlin",
            )],
        ),
        (
            "time zone Local",
            Kind::CronJob,
            json!({"spec": {"timeZone": "Local"}}),
            vec![e(
                "spec.timeZone",
                INV,
                "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            )],
        ),
        (
            "empty time zone",
            Kind::CronJob,
            json!({"spec": {"timeZone": ""}}),
            vec![e(
                "spec.timeZone",
                INV,
                "spec.timeZone: Invalid value: \"\": timeZone must be nil or non-empty string",
            )],
        ),
        (
            "time zone with a parent-directory part",
            Kind::CronJob,
            json!({"spec": {"timeZone": "../etc/passwd"}}),
            vec![e(
                "spec.timeZone",
                INV,
                "spec.timeZone: Invalid value: \"../etc/passwd\": unknown time zone ../etc/passwd",
            )],
        ),
        (
            "TZ prefix in schedule on create",
            Kind::CronJob,
            json!({"spec": {"schedule": "TZ=UTC 0 * * * *"}}),
            vec![e(
                "spec.schedule",
                INV,
                "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            )],
        ),
        (
            "unknown concurrencyPolicy",
            Kind::CronJob,
            json!({"spec": {"concurrencyPolicy": "Sometimes"}}),
            vec![e(
                "spec.concurrencyPolicy",
                NSUP,
                "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
            )],
        ),
        (
            "negative startingDeadlineSeconds",
            Kind::CronJob,
            json!({"spec": {"startingDeadlineSeconds": -1}}),
            vec![e(
                "spec.startingDeadlineSeconds",
                INV,
                "spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        (
            "negative history limits",
            Kind::CronJob,
            json!({"spec": {"successfulJobsHistoryLimit": -1, "failedJobsHistoryLimit": -2}}),
            vec![
                e(
                    "spec.successfulJobsHistoryLimit",
                    INV,
                    "spec.successfulJobsHistoryLimit: Invalid value: -1: must be greater than or equal to 0",
                ),
                e(
                    "spec.failedJobsHistoryLimit",
                    INV,
                    "spec.failedJobsHistoryLimit: Invalid value: -2: must be greater than or equal to 0",
                ),
            ],
        ),
        (
            "jobTemplate with a selector",
            Kind::CronJob,
            json!({"spec": {"jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}}}}}}),
            vec![e(
                "spec.jobTemplate.spec.selector",
                INV,
                "spec.jobTemplate.spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` will be auto-generated",
            )],
        ),
        (
            "jobTemplate with manualSelector",
            Kind::CronJob,
            json!({"spec": {"jobTemplate": {"spec": {"manualSelector": true}}}}),
            vec![e(
                "spec.jobTemplate.spec.manualSelector",
                NSUP,
                "spec.jobTemplate.spec.manualSelector: Unsupported value: true: supported values: \"nil\", \"false\"",
            )],
        ),
        (
            "jobTemplate without restartPolicy",
            Kind::CronJob,
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": null}}}}}}),
            vec![e(
                "spec.jobTemplate.spec.template.spec.restartPolicy",
                REQ,
                "spec.jobTemplate.spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            )],
        ),
        (
            "jobTemplate onPodConditions status is not defaulted",
            Kind::CronJob,
            json!({"spec": {"jobTemplate": {"spec": {
                "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                "template": {"spec": {"restartPolicy": "Never"}}
            }}}}),
            vec![e(
                "spec.jobTemplate.spec.podFailurePolicy.rules[0].onPodConditions[0].status",
                REQ,
                "spec.jobTemplate.spec.podFailurePolicy.rules[0].onPodConditions[0].status: Required value: valid values: [\"False\" \"True\" \"Unknown\"]",
            )],
        ),
        (
            "pod restartPolicy unknown",
            Kind::Pod,
            json!({"spec": {"restartPolicy": "Sometimes"}}),
            vec![e(
                "spec.restartPolicy",
                NSUP,
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            )],
        ),
        (
            "pod container restartPolicy",
            Kind::Pod,
            pod_container(json!({"restartPolicy": "Always"})),
            vec![e(
                "spec.containers[0].restartPolicy",
                FORB,
                "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers",
            )],
        ),
        (
            "pod init container probe without restartPolicy Always",
            Kind::Pod,
            json!({"spec": {"initContainers": [{"name": "i", "image": "busybox", "livenessProbe": {"exec": {"command": ["true"]}}}]}}),
            vec![e(
                "spec.initContainers[0].livenessProbe",
                FORB,
                "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
            )],
        ),
        (
            "pod name not a subdomain",
            Kind::Pod,
            json!({"metadata": {"name": "Bad"}}),
            vec![e(
                "metadata.name",
                INV,
                &format!("metadata.name: Invalid value: \"Bad\": {SUBDOMAIN_RE}"),
            )],
        ),
        (
            "pod namespace not a DNS label",
            Kind::Pod,
            json!({"metadata": {"namespace": "a.b"}}),
            vec![e(
                "metadata.namespace",
                INV,
                "metadata.namespace: Invalid value: \"a.b\": must not contain dots",
            )],
        ),
        (
            "pod label value too long",
            Kind::Pod,
            json!({"metadata": {"labels": {"k": "v".repeat(64)}}}),
            vec![e(
                "metadata.labels",
                INV,
                &format!(
                    "metadata.labels: Invalid value: \"{}\": must be no more than 63 bytes",
                    "v".repeat(64)
                ),
            )],
        ),
        (
            "pod with two controller owners",
            Kind::Pod,
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "b", "uid": "2", "controller": true}
            ]}}),
            vec![e(
                "metadata.ownerReferences",
                INV,
                "metadata.ownerReferences: Invalid value: [{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"a\",\"uid\":\"1\",\"controller\":true},{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"b\",\"uid\":\"2\",\"controller\":true}]: Only one reference can have Controller set to true. Found \"true\" in references for Job/a and Job/b",
            )],
        ),
        (
            "pod owned by an Event",
            Kind::Pod,
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"}]}}),
            vec![e(
                "metadata.ownerReferences",
                INV,
                "metadata.ownerReferences: Invalid value: {\"apiVersion\":\"v1\",\"kind\":\"Event\",\"name\":\"e\",\"uid\":\"1\"}: /v1, Kind=Event is disallowed from being an owner",
            )],
        ),
        (
            "pod owner reference without uid",
            Kind::Pod,
            json!({"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "a", "uid": ""}]}}),
            vec![e(
                "metadata.ownerReferences.uid",
                INV,
                "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty",
            )],
        ),
        (
            "pod nodeSelector key invalid",
            Kind::Pod,
            json!({"spec": {"nodeSelector": {"/x": "y"}}}),
            vec![e(
                "spec.nodeSelector",
                INV,
                "spec.nodeSelector: Invalid value: \"/x\": prefix part must be non-empty",
            )],
        ),
        (
            "pod extended resource request without limit",
            Kind::Pod,
            pod_container(json!({"resources": {"requests": {"example.com/gpu": "1"}}})),
            vec![e(
                "spec.containers[0].resources.limits",
                REQ,
                "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
            )],
        ),
        (
            "pod with ephemeral containers on create",
            Kind::Pod,
            json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}]}}),
            vec![e(
                "spec.ephemeralContainers",
                FORB,
                "spec.ephemeralContainers: Forbidden: cannot be set on create",
            )],
        ),
        (
            "pod hostname not a DNS label",
            Kind::Pod,
            json!({"spec": {"hostname": "a.b"}}),
            vec![e(
                "spec.hostname",
                INV,
                "spec.hostname: Invalid value: \"a.b\": must not contain dots",
            )],
        ),
    ]
}

#[test]
fn invalid_inputs_report_upstream_errors() {
    let all = cases();
    assert!(all.len() >= 40, "the table must stay comprehensive");
    let mut failures = Vec::new();
    for (name, kind, patch, want) in all {
        let got = run(&kind, patch);
        if got != want {
            failures.push(format!("{name}:\n  want {want:#?}\n  got  {got:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
