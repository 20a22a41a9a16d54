"""Exec from the Python `kubernetes` client (`kubernetes.stream`, the WebSocket channel
protocol) through kbatch's API server to a container run by the process executor."""

import time

import pytest
from kubernetes.stream import stream

from test_client import NS

EXECUTOR = ["--executor", "process"]


def running_pod(core, name, workdir):
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox", "command": ["sleep", "60"],
            "workingDir": str(workdir),
            "env": [{"name": "GREETING", "value": "hi from python"}]}]},
    })
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, NS)
        statuses = pod.status.container_statuses or []
        if statuses and statuses[0].state.running is not None:
            return pod
        time.sleep(0.05)
    raise AssertionError(f"pod {name} never ran")


def exec_in(core, name, command, **kw):
    kw.setdefault("stderr", True)
    kw.setdefault("stdin", False)
    kw.setdefault("stdout", True)
    kw.setdefault("tty", False)
    return stream(core.connect_get_namespaced_pod_exec, name, NS, command=command, **kw)


@pytest.mark.parametrize("kbatch", [EXECUTOR], indirect=True)
def test_exec_output_exit_code_and_stdin(kbatch, tmp_path):
    core = kbatch.core()
    running_pod(core, "py-exec", tmp_path)

    out = exec_in(core, "py-exec", ["sh", "-c", 'echo "$GREETING"; pwd'])
    assert out == f"hi from python\n{tmp_path.resolve()}\n"

    resp = exec_in(core, "py-exec", ["sh", "-c", "echo out; echo err >&2; exit 4"],
                   _preload_content=False)
    resp.run_forever(timeout=20)
    assert resp.read_stdout() == "out\n"
    assert resp.read_stderr() == "err\n"
    assert resp.returncode == 4

    resp = exec_in(core, "py-exec", ["head", "-n", "1"], stdin=True, _preload_content=False)
    resp.write_stdin("typed line\n")
    resp.run_forever(timeout=20)
    assert resp.read_stdout() == "typed line\n"
    assert resp.returncode == 0
    resp.close()


@pytest.mark.parametrize("kbatch", [EXECUTOR], indirect=True)
def test_ephemeral_container_runs_beside_the_pod(kbatch, tmp_path):
    """What `kubectl debug` does, from the Python client: an ephemeral container added
    through `pods/ephemeralcontainers` runs once, with its output in its log, and leaves the
    pod's own container alone; an existing one may not be changed."""
    from kubernetes.client.rest import ApiException

    core = kbatch.core()
    running_pod(core, "py-debug", tmp_path)
    patched = core.patch_namespaced_pod_ephemeralcontainers("py-debug", NS, {
        "spec": {"ephemeralContainers": [{
            "name": "debugger", "image": "busybox",
            "command": ["sh", "-c", "echo debugging from python"]}]},
    })
    assert [c.name for c in patched.spec.ephemeral_containers] == ["debugger"]

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod("py-debug", NS)
        statuses = pod.status.ephemeral_container_statuses or []
        if statuses and statuses[0].state.terminated is not None:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the debugger never ended:\n{kbatch.logs()}")
    ended = statuses[0].state.terminated
    assert (ended.exit_code, ended.reason) == (0, "Completed")
    assert statuses[0].restart_count == 0
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].state.running is not None

    log = core.read_namespaced_pod_log("py-debug", NS, container="debugger")
    assert log == "debugging from python\n"

    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod_ephemeralcontainers("py-debug", NS, {
            "spec": {"ephemeralContainers": [{"name": "debugger", "command": ["true"]}]},
        })
    assert err.value.status == 422
    assert "may not be changed" in err.value.body
