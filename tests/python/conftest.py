"""Fixtures: run the real `kbatch up` binary (`--executor none` unless a test picks one) on a
temporary data dir.

The binary comes from KBATCH_BIN (scripts/test sets it to the freshly built one), else from
Cargo's target directory (CARGO_TARGET_DIR, or target/ at the repository root).
"""

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, config

START_DEADLINE = 30.0
STOP_DEADLINE = 15.0


class Kbatch:
    """A running server and API clients configured from the kubeconfig it wrote."""

    def __init__(self, proc, data_dir, log_path):
        self.proc = proc
        self.data_dir = data_dir
        self.log_path = log_path
        self.url = None
        self.api_client = None

    @property
    def kubeconfig(self):
        return self.data_dir / "kubeconfig"

    def logs(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _assert_running(self, when):
        if self.proc.poll() is not None:
            raise AssertionError(
                f"kbatch up exited {when} with {self.proc.returncode}; logs:\n{self.logs()}"
            )

    def wait_ready(self):
        deadline = time.monotonic() + START_DEADLINE
        while True:
            self._assert_running("while starting")
            try:
                text = self.kubeconfig.read_text()
            except OSError:
                text = ""
            urls = [
                line.split("server:", 1)[1].strip()
                for line in text.splitlines()
                if line.strip().startswith("server:")
            ]
            if urls:
                self.url = urls[0]
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"no kubeconfig after {START_DEADLINE}s; logs:\n{self.logs()}")
            time.sleep(0.02)
        while True:
            self._assert_running("while waiting for /readyz")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"/readyz not 200 after {START_DEADLINE}s; logs:\n{self.logs()}")
            time.sleep(0.02)
        # Load it as a user would; the default namespace comes from the context.
        self.api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        _, active = config.list_kube_config_contexts(config_file=str(self.kubeconfig))
        assert active["context"]["namespace"] == "default"

    def stop(self):
        """SIGTERM; returns the exit code (killing the process if it hangs)."""
        if self.api_client is not None:
            self.api_client.close()
            self.api_client = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(
                    f"kbatch up ignored SIGTERM for {STOP_DEADLINE}s; logs:\n{self.logs()}"
                )
        return self.proc.returncode

    def batch(self):
        return client.BatchV1Api(self.api_client)

    def core(self):
        return client.CoreV1Api(self.api_client)


def kbatch_binary():
    if os.environ.get("KBATCH_BIN"):
        return Path(os.environ["KBATCH_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or Path(__file__).resolve().parents[2] / "target"
    return Path(target) / "debug" / "kbatch"


@pytest.fixture
def kbatch(request, tmp_path):
    """A fresh server per test; extra `kbatch up` flags via indirect parametrization."""
    extra_args = list(getattr(request, "param", []))
    # API tests run without controllers, so nothing but the test changes the objects; but for
    # the service account controller: pods need their namespace's default account.
    if not any(a.startswith("--controllers") for a in extra_args):
        extra_args.append("--controllers=serviceaccount")
    # No executor unless the test picks one: the test plays the kubelet.
    if not any(a.startswith("--executor") for a in extra_args):
        extra_args += ["--executor", "none"]
    binary = kbatch_binary()
    if not binary.is_file():
        raise RuntimeError(f"no kbatch binary at {binary}: build it, or set KBATCH_BIN")
    data_dir = tmp_path / "data"
    log_path = tmp_path / "kbatch.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(binary), "up", "--data-dir", str(data_dir),
             "--listen", "127.0.0.1:0", *extra_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    server = Kbatch(proc, data_dir, log_path)
    try:
        server.wait_ready()
        yield server
    finally:
        code = server.stop()
    assert code == 0, f"kbatch up exited with {code} after SIGTERM; logs:\n{server.logs()}"
