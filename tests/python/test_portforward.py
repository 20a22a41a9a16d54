"""Port-forward from the Python `kubernetes` client (`kubernetes.stream.portforward`, kubelet's
WebSocket channel protocol: a data and an error channel per port) through kbatch's API server
to a server in a container run by the process executor."""

import socket
import time

import pytest
from kubernetes.stream import portforward

from test_client import NS

EXECUTOR = ["--executor", "process"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving_pod(core, name, port):
    # A one-line TCP server: answers each connection with what it read, upper-cased.
    server = (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('127.0.0.1', {port})); s.listen()\n"
        "while True:\n"
        "    c, _ = s.accept(); c.sendall(c.recv(1024).upper()); c.close()\n"
    )
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "python", "command": ["python3", "-c", server],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}}]},
    })
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, NS)
        if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
            return
        time.sleep(0.1)
    raise AssertionError(f"pod {name} never became ready")


@pytest.mark.parametrize("kbatch", [EXECUTOR], indirect=True)
def test_portforward_reaches_the_pods_port_and_reports_a_closed_one(kbatch):
    core = kbatch.core()
    port, closed = free_port(), free_port()
    serving_pod(core, "py-forward", port)

    pf = portforward(core.connect_get_namespaced_pod_portforward, "py-forward", NS,
                     ports=f"{port},{closed}")
    sock = pf.socket(port)
    sock.setblocking(True)
    sock.settimeout(20)
    sock.sendall(b"hello through the node")
    got = b""
    while True:
        chunk = sock.recv(1024)
        if not chunk:
            break
        got += chunk
    assert got == b"HELLO THROUGH THE NODE"
    sock.close()

    # Nothing listens on the other port: kubelet's words come back on its error channel.
    dead = pf.socket(closed)
    dead.settimeout(20)
    assert dead.recv(1024) == b""
    error = pf.error(closed)
    assert error is not None
    assert f"error forwarding port {closed} to pod" in error
    assert "connection refused" in error
