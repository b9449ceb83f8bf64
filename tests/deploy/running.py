"""Real processes for the deployment tests: a `redis-server` and `tollgate serve` on free loopback ports.

Both are killed when the `with` block ends. `Serve.metric_names()` scrapes
`/metrics` and gives the name of every sample it holds (a histogram's
`_bucket`, `_sum` and `_count`, a counter's `_total`), as Prometheus stores them.
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# How long a process may take to answer after its start.
START_BUDGET = 20.0


def tollgate_binary():
    return os.environ.get("TOLLGATE_BIN", str(ROOT / "target" / "debug" / "tollgate"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll_until(what, ready, process=None):
    """Calls `ready` until it is true, within START_BUDGET; fails naming `what`."""
    deadline = time.monotonic() + START_BUDGET
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {process.returncode}")
        if ready():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} within {START_BUDGET} s")


def stop(process):
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


class Redis:
    """One `redis-server` without persistence on 127.0.0.1, with `password` if given."""

    def __init__(self, password=None):
        self.port = free_port()
        self.password = password
        self.args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no"]
        if password is not None:
            self.args += ["--requirepass", password]

    def cli(self, *command):
        args = ["redis-cli", "-p", str(self.port), "--no-auth-warning"]
        if self.password is not None:
            args += ["-a", self.password]
        return subprocess.run(args + list(command), capture_output=True, text=True, timeout=10).stdout.strip()

    def __enter__(self):
        assert shutil.which("redis-server"), "redis-server is installed (scripts/test.sh installs it)"
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        poll_until(f"redis-server on port {self.port} answers PING",
                   lambda: self.cli("PING") == "PONG", self.process)
        return self

    def __exit__(self, *_):
        stop(self.process)


class Serve:
    """`tollgate serve ARGS` with the gRPC and HTTP listeners on free loopback ports."""

    def __init__(self, args, env=None):
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.args = [tollgate_binary(), "serve", *args,
                     f"--grpc-addr=127.0.0.1:{self.grpc_port}",
                     f"--http-addr=127.0.0.1:{self.http_port}"]
        self.env = {"PATH": os.environ.get("PATH", ""), **(env or {})}

    def url(self, path):
        return f"http://127.0.0.1:{self.http_port}{path}"

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url(path), timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return None, ""

    def check(self, body):
        """POSTs `body` (JSON text) to /json, upstream's HTTP API; the status code."""
        request = urllib.request.Request(self.url("/json"), data=body.encode(),
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def metric_names(self):
        status, text = self.get("/metrics")
        assert status == 200, (status, text)
        return {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
                for line in text.splitlines() if line and not line.startswith("#")}

    def __enter__(self):
        # A file, not a pipe: a pipe nobody reads would stop the process when full.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(self.args, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            poll_until("tollgate serve answers /readyz 200",
                       lambda: self.get("/readyz")[0] == 200, self.process)
        except AssertionError as error:
            stop(self.process)
            output = self.output()
            self.log.close()
            raise AssertionError(f"{error}; {self.args}: {output[-4000:]}") from None
        return self

    def output(self):
        """What the process wrote so far (stdout and stderr)."""
        self.log.seek(0)
        return self.log.read()

    def __exit__(self, *_):
        stop(self.process)
        self.log.close()
