"""The Python `kubernetes` client (unmodified) against `kbatch up`."""

import json
import time
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

NS = "default"


def job_body(name, labels=None):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }


def pod_body(name):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
        },
    }


def as_dict(obj):
    """Delete answers are a plain dict in newer clients and a model in older ones."""
    return obj if isinstance(obj, dict) else client.ApiClient().sanitize_for_serialization(obj)


def api_error(fn, *args, **kwargs):
    """Call fn, expect an ApiException, return (status, parsed Status body)."""
    with pytest.raises(ApiException) as info:
        fn(*args, **kwargs)
    e = info.value
    body = json.loads(e.body)
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    assert body["code"] == e.status, body
    return e.status, body


def test_job_create_get_list_patch_delete(kbatch):
    b = kbatch.batch()
    created = b.create_namespaced_job(NS, job_body("pyjob", {"app": "py"}))
    assert isinstance(created, client.V1Job)
    assert created.metadata.namespace == NS
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None  # RFC 3339, parsed by the client
    assert created.spec.backoff_limit == 6
    assert created.spec.completions == 1
    uid = created.metadata.uid
    assert created.spec.selector.match_labels["batch.kubernetes.io/controller-uid"] == uid

    got = b.read_namespaced_job("pyjob", NS)
    assert got.metadata.uid == uid
    b.create_namespaced_job(NS, job_body("other", {"app": "other"}))
    listed = b.list_namespaced_job(NS)
    assert sorted(j.metadata.name for j in listed.items) == ["other", "pyjob"]
    assert listed.metadata.resource_version
    selected = b.list_namespaced_job(NS, label_selector="app=py")
    assert [j.metadata.name for j in selected.items] == ["pyjob"]
    everywhere = b.list_job_for_all_namespaces(field_selector="metadata.name=other")
    assert [j.metadata.name for j in everywhere.items] == ["other"]

    # A dict body is sent as a strategic merge patch.
    patched = b.patch_namespaced_job("pyjob", NS, {"metadata": {"labels": {"tier": "x"}}, "spec": {"parallelism": 2}})
    assert patched.metadata.labels == {"app": "py", "tier": "x"}
    assert patched.spec.parallelism == 2
    assert patched.metadata.generation == 2
    # A list body is sent as a JSON patch.
    patched = b.patch_namespaced_job(
        "pyjob", NS, [{"op": "replace", "path": "/spec/parallelism", "value": 3}]
    )
    assert patched.spec.parallelism == 3

    status = as_dict(b.delete_namespaced_job("pyjob", NS, propagation_policy="Background"))
    assert (status["kind"], status["status"]) == ("Status", "Success"), status
    assert status["details"]["name"] == "pyjob"
    code, body = api_error(b.read_namespaced_job, "pyjob", NS)
    assert (code, body["reason"]) == (404, "NotFound")

    # Orphan keeps the Job, marked for deletion, until its dependents are released.
    orphaned = as_dict(b.delete_namespaced_job("other", NS, propagation_policy="Orphan"))
    assert orphaned["kind"] == "Job", orphaned
    assert orphaned["metadata"]["deletionTimestamp"]
    assert orphaned["metadata"]["finalizers"] == ["orphan"]


def test_pod_create_get_list_patch_delete(kbatch):
    c = kbatch.core()
    p = c.create_namespaced_pod(NS, pod_body("pypod"))
    assert p.status.phase == "Pending"
    assert p.spec.termination_grace_period_seconds == 30
    assert c.read_namespaced_pod("pypod", NS).metadata.uid == p.metadata.uid
    assert [x.metadata.name for x in c.list_namespaced_pod(NS).items] == ["pypod"]
    assert "pypod" in [x.metadata.name for x in c.list_pod_for_all_namespaces().items]

    patched = c.patch_namespaced_pod("pypod", NS, {"metadata": {"labels": {"k": "v"}}})
    assert patched.metadata.labels == {"k": "v"}
    running = c.patch_namespaced_pod_status("pypod", NS, {"status": {"phase": "Running"}})
    assert running.status.phase == "Running"
    assert int(running.metadata.resource_version) > int(patched.metadata.resource_version)
    assert c.read_namespaced_pod_status("pypod", NS).status.phase == "Running"

    deleted = as_dict(c.delete_namespaced_pod("pypod", NS))
    assert (deleted["kind"], deleted["metadata"]["name"]) == ("Pod", "pypod")  # pods return the Pod
    code, body = api_error(c.read_namespaced_pod, "pypod", NS)
    assert code == 404 and body["message"] == 'pods "pypod" not found'


def test_patch_job_status(kbatch):
    b = kbatch.batch()
    b.create_namespaced_job(NS, job_body("st"))
    start = "2026-01-01T00:00:00Z"
    j = b.patch_namespaced_job_status("st", NS, {"status": {"active": 1, "ready": 0, "startTime": start}})
    assert j.status.active == 1
    assert j.status.start_time.isoformat().startswith("2026-01-01T00:00:00")
    # The spec cannot be changed through /status.
    j = b.patch_namespaced_job_status("st", NS, {"spec": {"parallelism": 9}, "status": {"active": 2}})
    assert j.spec.parallelism == 1 and j.status.active == 2
    assert b.read_namespaced_job_status("st", NS).status.active == 2
    # Nor the status through the main resource.
    j = b.patch_namespaced_job("st", NS, {"status": {"active": 5}})
    assert j.status.active == 2


def test_watch_label_selector_added_modified_deleted(kbatch):
    b = kbatch.batch()
    b.create_namespaced_job(NS, job_body("watched", {"app": "py"}))
    b.create_namespaced_job(NS, job_body("ignored", {"app": "not-py"}))
    w = watch.Watch()
    seen = []
    # Without a resourceVersion the server first sends ADDED for what exists, then changes.
    # Each change is made when the previous event arrives, so no sleeps are needed.
    for ev in w.stream(b.list_namespaced_job, namespace=NS, label_selector="app=py", timeout_seconds=10):
        obj = ev["object"]
        seen.append((ev["type"], obj.metadata.name))
        b.patch_namespaced_job("ignored", NS, {"metadata": {"annotations": {"n": str(len(seen))}}})
        if ev["type"] == "ADDED":
            b.patch_namespaced_job("watched", NS, {"metadata": {"annotations": {"a": "1"}}})
        elif ev["type"] == "MODIFIED":
            assert obj.metadata.annotations == {"a": "1"}
            b.delete_namespaced_job("watched", NS, propagation_policy="Background")
        elif ev["type"] == "DELETED":
            w.stop()
    assert seen == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]


def test_watch_ends_after_timeout_seconds(kbatch):
    b = kbatch.batch()
    w = watch.Watch()
    events = list(w.stream(b.list_namespaced_job, namespace=NS, timeout_seconds=1))
    assert events == []


def test_watch_resumes_from_resource_version(kbatch):
    b = kbatch.batch()
    created = b.create_namespaced_job(NS, job_body("rv"))
    for i in range(3):
        b.patch_namespaced_job("rv", NS, {"metadata": {"labels": {"i": str(i)}}})
    b.create_namespaced_job(NS, job_body("rv2"))
    w = watch.Watch()
    seen = []
    last = int(created.metadata.resource_version)
    for ev in w.stream(
        b.list_namespaced_job, namespace=NS, resource_version=created.metadata.resource_version, timeout_seconds=5
    ):
        rv = int(ev["object"].metadata.resource_version)
        assert rv > last, "resourceVersions increase"
        last = rv
        seen.append((ev["type"], ev["object"].metadata.name, (ev["object"].metadata.labels or {}).get("i")))
        if len(seen) == 4:
            w.stop()
    assert seen == [
        ("MODIFIED", "rv", "0"),
        ("MODIFIED", "rv", "1"),
        ("MODIFIED", "rv", "2"),
        ("ADDED", "rv2", None),
    ]


def test_api_exception_status_codes(kbatch):
    b = kbatch.batch()
    code, body = api_error(b.read_namespaced_job, "nope", NS)
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'jobs.batch "nope" not found')
    assert body["details"] == {"name": "nope", "group": "batch", "kind": "jobs"}

    code, body = api_error(b.create_namespaced_job, "no-such-ns", job_body("x"))
    assert (code, body["reason"]) == (404, "NotFound")
    assert body["message"] == 'namespaces "no-such-ns" not found'

    v1 = b.create_namespaced_job(NS, job_body("dup"))
    code, body = api_error(b.create_namespaced_job, NS, job_body("dup"))
    assert (code, body["reason"], body["message"]) == (409, "AlreadyExists", 'jobs.batch "dup" already exists')

    b.patch_namespaced_job("dup", NS, {"metadata": {"labels": {"v": "2"}}})
    v1.metadata.labels = {"v": "stale"}
    code, body = api_error(b.replace_namespaced_job, "dup", NS, v1)
    assert (code, body["reason"]) == (409, "Conflict")
    assert body["message"].startswith('Operation cannot be fulfilled on jobs.batch "dup": the object has been modified')

    bad = job_body("bad")
    del bad["spec"]["template"]["spec"]["restartPolicy"]
    code, body = api_error(b.create_namespaced_job, NS, bad)
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'Job.batch "bad" is invalid: spec.template.spec.restartPolicy: '
        'Required value: valid values: "OnFailure", "Never"'
    )
    assert body["details"]["kind"] == "Job" and body["details"]["group"] == "batch"
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": 'Required value: valid values: "OnFailure", "Never"',
            "field": "spec.template.spec.restartPolicy",
        }
    ]

    code, body = api_error(b.delete_namespaced_job, "dup", NS, propagation_policy="Foo")
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Foo": '
        'supported values: "Foreground", "Background", "Orphan", "nil"'
    )


def test_raw_watch_with_go_style_bool_and_newline_framing(kbatch):
    """Older clients (v31) send `watch=True`; the Python watch splits the stream on newlines."""
    b = kbatch.batch()
    b.create_namespaced_job(NS, job_body("raw", {"app": "raw"}))
    url = kbatch.url + "/apis/batch/v1/namespaces/default/jobs?labelSelector=app%3Draw&watch=True&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        body = resp.read().decode()
    assert body.endswith("\n"), body
    lines = body.splitlines()
    assert len(lines) == 1, body
    ev = json.loads(lines[0])
    assert ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "raw"
    assert ev["object"]["kind"] == "Job" and ev["object"]["apiVersion"] == "batch/v1"


@pytest.mark.parametrize("kbatch", [["--watch-history-events", "3"]], indirect=True)
def test_watch_from_expired_resource_version_raises_410(kbatch):
    b = kbatch.batch()
    old = b.create_namespaced_job(NS, job_body("old")).metadata.resource_version
    for i in range(10):
        b.patch_namespaced_job("old", NS, {"metadata": {"labels": {"i": str(i)}}})
    w = watch.Watch()
    with pytest.raises(ApiException) as info:
        for _ in w.stream(b.list_namespaced_job, namespace=NS, resource_version=old, timeout_seconds=5):
            pass
    assert info.value.status == 410
    assert info.value.reason.startswith("Expired: too old resource version"), info.value.reason
    # Recovery as the client documents it: list, then watch from the list's resourceVersion.
    listed = b.list_namespaced_job(NS)
    b.patch_namespaced_job("old", NS, {"metadata": {"labels": {"i": "after"}}})
    seen = []
    for ev in w.stream(
        b.list_namespaced_job, namespace=NS, resource_version=listed.metadata.resource_version, timeout_seconds=5
    ):
        seen.append((ev["type"], ev["object"].metadata.labels["i"]))
        w.stop()
    assert seen == [("MODIFIED", "after")]


def test_list_pagination(kbatch):
    b = kbatch.batch()
    for i in range(5):
        b.create_namespaced_job(NS, job_body(f"page-{i}"))
    names, token, pages = [], None, 0
    while True:
        page = b.list_namespaced_job(NS, limit=2, _continue=token)
        pages += 1
        names += [j.metadata.name for j in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3
    assert sorted(names) == [f"page-{i}" for i in range(5)]


def test_configmap_and_secret(kbatch):
    c = kbatch.core()
    cm = c.create_namespaced_config_map(
        NS, {"metadata": {"name": "settings"}, "data": {"MODE": "fast"}, "binaryData": {"blob": "AAE="}}
    )
    assert (cm.data, cm.binary_data) == ({"MODE": "fast"}, {"blob": "AAE="})
    patched = c.patch_namespaced_config_map("settings", NS, {"data": {"LEVEL": "debug"}})
    assert patched.data == {"LEVEL": "debug", "MODE": "fast"}
    assert [x.metadata.name for x in c.list_namespaced_config_map(NS).items] == ["settings"]

    # stringData is merged into data (base64 on the wire) and never stored or returned.
    s = c.create_namespaced_secret(
        NS, {"metadata": {"name": "token"}, "data": {"a": "eA=="}, "stringData": {"a": "y", "b": "z"}}
    )
    assert (s.type, s.data, s.string_data) == ("Opaque", {"a": "eQ==", "b": "eg=="}, None)
    raw = json.loads(c.read_namespaced_secret("token", NS, _preload_content=False).data)
    assert "stringData" not in raw and raw["data"] == {"a": "eQ==", "b": "eg=="}

    code, body = api_error(
        c.create_namespaced_config_map, NS, {"metadata": {"name": "bad"}, "data": {"a*b": "v"}}
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert [x["field"] for x in body["details"]["causes"]] == ["data[a*b]"]

    c.delete_namespaced_secret("token", NS)
    code, body = api_error(c.read_namespaced_secret, "token", NS)
    assert code == 404 and body["message"] == 'secrets "token" not found'


def test_pod_eviction(kbatch):
    c = kbatch.core()
    body = pod_body("evictee")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    c.create_namespaced_pod(NS, body)
    c.patch_namespaced_pod_status("evictee", NS, {"status": {"phase": "Running"}})
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="evictee", namespace=NS))
    c.create_namespaced_pod_eviction("evictee", NS, eviction)
    p = c.read_namespaced_pod("evictee", NS)
    assert p.metadata.deletion_timestamp is not None
    [cond] = [x for x in p.status.conditions if x.type == "DisruptionTarget"]
    assert (cond.status, cond.reason, cond.message) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    c.patch_namespaced_pod("evictee", NS, {"metadata": {"finalizers": None}})
    code, _ = api_error(c.read_namespaced_pod, "evictee", NS)
    assert code == 404

    wrong = client.V1Eviction(metadata=client.V1ObjectMeta(name="someone-else"))
    c.create_namespaced_pod(NS, pod_body("kept"))
    code, err = api_error(c.create_namespaced_pod_eviction, "kept", NS, wrong)
    assert code == 400
    assert err["message"] == "name in URL does not match name in Eviction object"
    assert c.read_namespaced_pod("kept", NS).metadata.deletion_timestamp is None


def test_priority_classes(kbatch):
    s = client.SchedulingV1Api(kbatch.api_client)
    names = [pc.metadata.name for pc in s.list_priority_class().items]
    assert names == ["system-cluster-critical", "system-node-critical"]
    s.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="batch-high"), value=500))
    pc = s.read_priority_class("batch-high")
    assert (pc.value, pc.preemption_policy, pc.global_default) == (500, "PreemptLowerPriority", None)

    c = kbatch.core()
    body = pod_body("prio")
    body["spec"]["priorityClassName"] = "batch-high"
    p = c.create_namespaced_pod(NS, body)
    assert (p.spec.priority, p.spec.preemption_policy) == (500, "PreemptLowerPriority")
    plain = c.create_namespaced_pod(NS, pod_body("plain"))
    assert (plain.spec.priority, plain.spec.priority_class_name) == (0, None)

    code, err = api_error(s.delete_priority_class, "system-node-critical")
    assert code == 403
    assert err["message"].endswith("this is a system priority class and cannot be deleted")


def test_service_accounts(kbatch):
    c = kbatch.core()
    # The service account controller makes every namespace's default account.
    deadline = time.time() + 10
    while not [sa for sa in c.list_namespaced_service_account(NS).items if sa.metadata.name == "default"]:
        assert time.time() < deadline, "no default service account"
        time.sleep(0.1)
    c.create_namespaced_service_account(
        NS,
        client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(name="builder"),
            image_pull_secrets=[client.V1LocalObjectReference(name="registry")],
        ),
    )
    assert c.read_namespaced_service_account("builder", NS).image_pull_secrets[0].name == "registry"

    plain = c.create_namespaced_pod(NS, pod_body("plain"))
    assert (plain.spec.service_account_name, plain.spec.service_account) == ("default", "default")
    body = pod_body("built")
    body["spec"]["serviceAccountName"] = "builder"
    built = c.create_namespaced_pod(NS, body)
    assert [s.name for s in built.spec.image_pull_secrets] == ["registry"]

    body = pod_body("ghost")
    body["spec"]["serviceAccountName"] = "ghost"
    code, err = api_error(c.create_namespaced_pod, NS, body)
    assert code == 403
    assert err["message"] == (
        'pods "ghost" is forbidden: error looking up service account '
        f'{NS}/ghost: serviceaccount "ghost" not found'
    )


def test_pod_disruption_budgets(kbatch):
    p = client.PolicyV1Api(kbatch.api_client)
    p.create_namespaced_pod_disruption_budget(
        NS,
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="guard"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=1, selector=client.V1LabelSelector(match_labels={"app": "a"})
            ),
        ),
    )
    pdb = p.read_namespaced_pod_disruption_budget("guard", NS)
    assert (pdb.spec.min_available, pdb.metadata.generation) == (1, 1)
    assert [b.metadata.name for b in p.list_namespaced_pod_disruption_budget(NS).items] == ["guard"]
    code, err = api_error(
        p.create_namespaced_pod_disruption_budget,
        NS,
        {"metadata": {"name": "both"}, "spec": {"minAvailable": 1, "maxUnavailable": 1}},
    )
    assert code == 422
    assert err["message"].endswith("minAvailable and maxUnavailable cannot be both set")
