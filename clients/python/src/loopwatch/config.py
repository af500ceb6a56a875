"""Where loopwatch is and how to talk to it: endpoints from arguments and the environment.

Precedence everywhere: explicit argument > environment variable > default.

| setting | environment | default |
|---|---|---|
| OTLP/gRPC endpoint (spans) | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT` | `http://localhost:4317` |
| loopwatch gRPC endpoint (`Signals/Watch`, `Guard/Check`) | `LOOPWATCH_ENDPOINT` | the OTLP endpoint |
| admin API URL (`/v1/check`, approve/deny, `/v1/signals`) | `LOOPWATCH_ADMIN_URL` | `http://127.0.0.1:8787` |
| admin token (`admin.auth_token`) | `LOOPWATCH_TOKEN` | none |
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import grpc

from .errors import AdminError, ConfigError, TransportError

DEFAULT_OTLP_ENDPOINT = "http://localhost:4317"
DEFAULT_ADMIN_URL = "http://127.0.0.1:8787"


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def otlp_endpoint(endpoint: str | None = None) -> str:
    """The OTLP/gRPC endpoint spans are exported to (see the module table)."""
    return (
        endpoint
        or _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or _env("OTEL_EXPORTER_OTLP_ENDPOINT")
        or DEFAULT_OTLP_ENDPOINT
    )


def grpc_endpoint(endpoint: str | None = None, fallback: str | None = None) -> str:
    """loopwatch's gRPC endpoint (`Signals/Watch`, `Guard/Check`): the OTLP port by default."""
    return endpoint or _env("LOOPWATCH_ENDPOINT") or fallback or otlp_endpoint()


def admin_url(url: str | None = None) -> str:
    """The admin API base URL, without a trailing slash."""
    value = url or _env("LOOPWATCH_ADMIN_URL") or DEFAULT_ADMIN_URL
    parsed = urllib.parse.urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"admin URL must be http(s)://host:port, got {value!r}")
    return value.rstrip("/")


def token(value: str | None = None) -> str | None:
    """The admin bearer token (`admin.auth_token`), or None."""
    return value or _env("LOOPWATCH_TOKEN")


def grpc_target(endpoint: str) -> tuple[str, bool]:
    """`(host:port, secure)` of an endpoint written `http://host:port`, `https://…` or `host:port`.

    Raises ConfigError for another scheme or a missing port.
    """
    if "://" in endpoint:
        parsed = urllib.parse.urlparse(endpoint)
        if parsed.scheme not in ("http", "https", "grpc", "grpcs"):
            raise ConfigError(f"gRPC endpoint scheme must be http or https, got {endpoint!r}")
        if not parsed.hostname or parsed.port is None:
            raise ConfigError(f"gRPC endpoint needs host:port, got {endpoint!r}")
        host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
        return f"{host}:{parsed.port}", parsed.scheme in ("https", "grpcs")
    if ":" not in endpoint:
        raise ConfigError(f"gRPC endpoint needs host:port, got {endpoint!r}")
    return endpoint, False


def grpc_channel(endpoint: str) -> grpc.Channel:
    """A channel to `endpoint` (TLS with the system roots for `https://`)."""
    target, secure = grpc_target(endpoint)
    if secure:
        return grpc.secure_channel(target, grpc.ssl_channel_credentials())
    return grpc.insecure_channel(target)


def grpc_metadata(bearer: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying the admin token (loopwatch checks it on `Signals/Watch`)."""
    return (("authorization", f"Bearer {bearer}"),) if bearer else ()


class AdminClient:
    """Small JSON client of loopwatch's admin API (standard library only).

    Args:
        url: base URL, e.g. `http://127.0.0.1:8787` (see `admin_url`).
        bearer: admin token sent as `Authorization: Bearer …`, or None.
        timeout: seconds per request.
    """

    def __init__(self, url: str | None = None, bearer: str | None = None, timeout: float = 5.0) -> None:
        self.url = admin_url(url)
        self.bearer = token(bearer)
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        """Sends one request and returns the decoded JSON body.

        Raises AdminError for an HTTP error status (with its status and body), and
        TransportError when the server cannot be reached or the body is not JSON.
        """
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.bearer:
            req.add_header("Authorization", f"Bearer {self.bearer}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            raise AdminError(f"{method} {path}: HTTP {err.code}: {text}", err.code, text) from None
        except (urllib.error.URLError, OSError) as err:
            raise TransportError(f"{method} {url}: {err}") from err
        try:
            return json.loads(raw)
        except ValueError as err:
            raise TransportError(f"{method} {path}: answer is not JSON: {err}") from err
