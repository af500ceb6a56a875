"""Starts the real loopwatch binary on free loopback ports for tests and examples.

The binary: env `LOOPWATCH_BIN`, else `<repo>/target/debug/loopwatch`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def loopwatch_bin() -> Path:
    """Path of the loopwatch binary (may not exist)."""
    return Path(os.environ.get("LOOPWATCH_BIN") or REPO / "target" / "debug" / "loopwatch")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopwatchServer:
    """One `loopwatch serve` process with its own config.

    Attributes:
        grpc_endpoint: `http://127.0.0.1:<port>` (OTLP/gRPC, Signals/Watch, Guard/Check).
        admin_url: `http://127.0.0.1:<port>`.
        log_path: the server's stdout+stderr.
    """

    def __init__(self, config_toml: str = "", env: dict[str, str] | None = None) -> None:
        self.grpc_port, self.http_port, self.admin_port = free_port(), free_port(), free_port()
        self.grpc_endpoint = f"http://127.0.0.1:{self.grpc_port}"
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        self._dir = tempfile.TemporaryDirectory(prefix="loopwatch-test-")
        self.config_path = Path(self._dir.name) / "loopwatch.toml"
        self.config_path.write_text(
            config_toml
            + "\n[log.sampling]\nenabled = false\n"
        )
        self.log_path = Path(self._dir.name) / "loopwatch.log"
        self._env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> LoopwatchServer:
        """Starts the server and waits for `/readyz`; raises RuntimeError with the log tail."""
        binary = loopwatch_bin()
        if not binary.exists():
            raise FileNotFoundError(f"loopwatch binary not found at {binary} (set LOOPWATCH_BIN)")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWATCH_")}
        env.update(self._env)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                str(binary), "serve", "--config", str(self.config_path),
                "--grpc-listen", f"127.0.0.1:{self.grpc_port}",
                "--http-listen", f"127.0.0.1:{self.http_port}",
                "--admin-listen", f"127.0.0.1:{self.admin_port}",
            ],
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loopwatch exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.admin_url + "/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"loopwatch not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def get(self, path: str) -> object:
        """GET an admin path, decoded JSON."""
        with urllib.request.urlopen(self.admin_url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def env(self) -> dict[str, str]:
        """The environment the examples read to find this server."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.grpc_endpoint,
            "LOOPWATCH_ADMIN_URL": self.admin_url,
        }

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
        self._dir.cleanup()

    def __enter__(self) -> LoopwatchServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
