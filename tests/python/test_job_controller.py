"""The Job controller seen from the Python `kubernetes` client: a watch follows a Job from
creation to Complete while the test plays the kubelet's part through pods/status."""

import time

import pytest
from kubernetes import watch

from test_client import NS, job_body

CONTROLLERS = ["--controllers", "job,podgc,serviceaccount", "--pod-failure-backoff", "50ms"]


def wait_for(what, fn, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out: {what}")


def job_pods(core, name):
    pods = core.list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={name}")
    return [p for p in pods.items if p.metadata.deletion_timestamp is None
            and p.status.phase not in ("Succeeded", "Failed")]


def set_phase(core, pod, phase):
    core.patch_namespaced_pod_status(pod.metadata.name, NS, {"status": {"phase": phase}})


@pytest.mark.parametrize("kbatch", [CONTROLLERS], indirect=True)
def test_watch_a_job_to_completion(kbatch):
    batch, core = kbatch.batch(), kbatch.core()
    body = job_body("pywatch")
    body["spec"].update({"parallelism": 2, "completions": 3})
    created = batch.create_namespaced_job(NS, body)

    seen = []
    w = watch.Watch()
    pods_done = set()
    for event in w.stream(batch.list_namespaced_job, NS,
                          field_selector="metadata.name=pywatch",
                          resource_version=created.metadata.resource_version,
                          timeout_seconds=30):
        job = event["object"]
        status = job.status
        seen.append((status.active or 0, status.succeeded or 0))
        conditions = {c.type: c for c in (status.conditions or []) if c.status == "True"}
        if "Complete" in conditions:
            w.stop()
            break
        for pod in job_pods(core, "pywatch"):
            if pod.metadata.name not in pods_done:
                pods_done.add(pod.metadata.name)
                set_phase(core, pod, "Succeeded")
    job = batch.read_namespaced_job("pywatch", NS)
    assert job.status.succeeded == 3
    # `active` is omitempty in Go: a finished Job's status has none, as from kube-apiserver.
    assert job.status.active is None
    types = [c.type for c in job.status.conditions]
    assert "SuccessCriteriaMet" in types and "Complete" in types
    assert max(active for active, _ in seen) <= 2, seen


@pytest.mark.parametrize("kbatch", [CONTROLLERS], indirect=True)
def test_failed_pods_fail_the_job_with_the_upstream_reason(kbatch):
    batch, core = kbatch.batch(), kbatch.core()
    body = job_body("pyfail")
    body["spec"].update({"backoffLimit": 0})
    batch.create_namespaced_job(NS, body)
    pod = wait_for("a pod", lambda: (job_pods(core, "pyfail") or [None])[0])
    set_phase(core, pod, "Failed")

    def failed():
        job = batch.read_namespaced_job("pyfail", NS)
        conds = [c for c in (job.status.conditions or []) if c.type == "Failed" and c.status == "True"]
        return (job, conds[0]) if conds else None

    job, cond = wait_for("the Job fails", failed)
    assert cond.reason == "BackoffLimitExceeded"
    assert cond.message == "Job has reached the specified backoff limit"
    assert job.status.failed == 1

    def reasons():
        events = core.list_namespaced_event(
            NS, field_selector="involvedObject.kind=Job,involvedObject.name=pyfail")
        found = {e.reason for e in events.items}
        return found if {"SuccessfulCreate", "BackoffLimitExceeded"} <= found else None

    wait_for("the Job's events", reasons)
