"""The router's configuration: one typed value that is also the router's command line.

The operator renders a router Deployment's container args with `RouterConfig.to_args` (after the
``router`` subcommand); the router reads them back with `RouterConfig.parse`, so both sides go
through this module and ``RouterConfig.parse(config.to_args(), {}) == config``.

Every flag has an environment fallback, ``SPECPILOT_<FLAG>`` (``SPECPILOT_MAX_TABLE_AGE`` for
``--max-table-age``), used when the flag is not given; the namespace falls back to
``SPECPILOT_NAMESPACE``, then ``POD_NAMESPACE``. ``--static-endpoints`` (with ``--static-routes``)
runs the router without Kubernetes, for benchmarks and loopback tests; it has no fallback.

Values are checked when a config is made, so a config that `to_args` renders is one the router
accepts; whether a namespace is needed is checked by `parse`, once the environment is known.
Problems raise `RouterConfigError` with a message that names the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from specpilot.wire.names import ROUTER_ADMIN_PORT, ROUTER_PORT, SCOPE_HEADER, Arm
from specpilot.wire.routes import SCOPE_NAME_PATTERN

ENV_PREFIX = "SPECPILOT_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an HTTP token
ORDINARY_ARMS = (Arm.BASELINE, Arm.CONTROL)  # the arms that run the engine without a draft, at production's config
_NAMESPACE_REQUIRED = "--namespace (or SPECPILOT_NAMESPACE / POD_NAMESPACE) is required to watch Kubernetes"


class RouterConfigError(ValueError):
    """The router cannot run with this configuration; the message names the flag."""


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    """Everything the router is told at start-up. Durations in seconds, sizes in bytes."""

    pilot: str
    namespace: str | None = None  # None: no Kubernetes namespace given (fine with static endpoints)
    listen: str = f"0.0.0.0:{ROUTER_PORT}"  # traffic HOST:PORT (":PORT" binds every interface)
    admin_listen: str = f":{ROUTER_ADMIN_PORT}"
    scope_header: str = SCOPE_HEADER
    affinity_header: str | None = None
    default_scope: str = "default"
    request_timeout: float = 600.0
    connect_timeout: float = 5.0
    read_timeout: float = 30.0  # a client must send its whole request within this
    max_table_age: float = 300.0  # 0: a table never turns stale
    max_body_bytes: int = 8 << 20
    max_header_bytes: int = 8190
    max_headers: int = 100
    max_samples: int = 100_000
    max_mirrored: int = 512  # mirrored copies in flight at once; past it a copy is not sent
    static_routes: str | None = None  # routing table JSON file, read once
    static_endpoints: tuple[tuple[Arm, tuple[str, ...]], ...] = ()  # HOST:PORT per arm
    drain_seconds: float = 5.0
    log_level: str = "INFO"
    # The arm of ordinary decoding, where every fallback goes: production's baseline, or the control
    # arm in a rehearsal router, which must never reach production.
    ordinary_arm: Arm = Arm.BASELINE

    def __post_init__(self) -> None:
        _check(bool(self.pilot), "--pilot (or SPECPILOT_PILOT) is required")
        _check(self.namespace is None or bool(self.namespace), "--namespace: must not be empty")
        _address("--listen", self.listen)
        _address("--admin-listen", self.admin_listen)
        _check(bool(_HEADER_NAME.match(self.scope_header)), f"--scope-header: not a header name: {self.scope_header!r}")
        _check(
            self.affinity_header is None or bool(_HEADER_NAME.match(self.affinity_header)),
            f"--affinity-header: not a header name: {self.affinity_header!r}",
        )
        _check(
            bool(re.match(SCOPE_NAME_PATTERN, self.default_scope)),
            f"--default-scope: not a scope name (lower-case letters, digits, '-'): {self.default_scope!r}",
        )
        for flag, seconds in (
            ("--request-timeout", self.request_timeout),
            ("--connect-timeout", self.connect_timeout),
            ("--read-timeout", self.read_timeout),
        ):
            _check(math.isfinite(seconds) and seconds > 0, f"{flag}: must be positive seconds, got {seconds}")
        for flag, seconds in (("--max-table-age", self.max_table_age), ("--drain-seconds", self.drain_seconds)):
            _check(math.isfinite(seconds) and seconds >= 0, f"{flag}: must be 0 or more seconds, got {seconds}")
        for flag, count in (
            ("--max-body-bytes", self.max_body_bytes),
            ("--max-header-bytes", self.max_header_bytes),
            ("--max-headers", self.max_headers),
            ("--max-samples", self.max_samples),
            ("--max-mirrored", self.max_mirrored),
        ):
            _check(count > 0, f"{flag}: must be positive, got {count}")
        _check(self.static_routes is None or bool(self.static_routes), "--static-routes: must not be empty")
        _check(
            self.static_routes is None or bool(self.static_endpoints),
            "--static-routes needs --static-endpoints (without them the router watches Kubernetes)",
        )
        arms = [arm for arm, _ in self.static_endpoints]
        for arm, addresses in self.static_endpoints:
            _check(isinstance(arm, Arm), f"--static-endpoints: unknown arm {arm!r}")
            _check(arms.count(arm) == 1, f"--static-endpoints: arm {arm} given more than once")
            for address in addresses:
                host, port = _address("--static-endpoints", address)
                _check(bool(host) and port > 0, f"--static-endpoints: want a host and a port, got {address!r}")
        _check(self.log_level.upper() in LOG_LEVELS, f"--log-level: want one of {', '.join(LOG_LEVELS)}")
        _check(
            self.ordinary_arm in ORDINARY_ARMS,
            f"--ordinary-arm: want one of {', '.join(ORDINARY_ARMS)}, got {self.ordinary_arm!r}",
        )

    @property
    def kubernetes(self) -> bool:
        """Whether the router watches Kubernetes for its table and endpoints (no static endpoints)."""
        return not self.static_endpoints

    def watched_namespace(self) -> str:
        """The namespace whose routing ConfigMap and EndpointSlices the router watches."""
        if self.namespace is None:
            raise RouterConfigError(_NAMESPACE_REQUIRED)
        return self.namespace

    def to_args(self) -> list[str]:
        """The command-line flags (``--flag=value``) that `parse` turns back into this config.

        Every value is given, defaults included, so the environment cannot change what the flags
        say; only flags whose value is None are left out.
        """
        args: list[str] = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            flag = "--" + field.name.replace("_", "-")
            if field.name == "static_endpoints":
                args += [f"{flag}={arm.value}={','.join(addresses)}" for arm, addresses in value]
            elif value is not None:
                args.append(f"{flag}={_text(value)}")
        return args

    @classmethod
    def parse(cls, argv: Sequence[str], environ: Mapping[str, str]) -> RouterConfig:
        """The config that flags `argv` and environment `environ` describe; raises `RouterConfigError`."""
        options = vars(_parser(environ).parse_args(list(argv)))
        options["static_endpoints"] = tuple(options["static_endpoints"])
        # An empty value is an unset one: Deployments often set a variable to "" rather than drop it.
        values = {name: value for name, value in options.items() if value is not None and value != ""}
        if "pilot" not in values:
            raise RouterConfigError("--pilot (or SPECPILOT_PILOT) is required")
        config = cls(**values)
        if config.kubernetes and config.namespace is None:
            raise RouterConfigError(_NAMESPACE_REQUIRED)
        return config


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` as host and port; the host is empty for ``:PORT``, an IPv6 one loses its brackets."""
    host, colon, port = address.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"want HOST:PORT, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 host needs brackets ([HOST]:PORT), got {address!r}")
    if any(c.isspace() or c in "[]/" for c in host):
        raise ValueError(f"want HOST:PORT, got {address!r}")
    return host, int(port)


def _address(flag: str, address: str) -> tuple[str, int]:
    try:
        return split_host_port(address)
    except ValueError as exc:
        raise RouterConfigError(f"{flag}: {exc}") from None


def _check(holds: bool, message: str) -> None:
    if not holds:
        raise RouterConfigError(message)


def _text(value: object) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise RouterConfigError(message)


def _arm(value: str) -> Arm:
    try:
        return Arm(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want one of {', '.join(ORDINARY_ARMS)}, got {value!r}") from None


def _static_endpoints(spec: str) -> tuple[Arm, tuple[str, ...]]:
    name, equals, addresses = spec.partition("=")
    if not equals or name not in {arm.value for arm in Arm}:
        arms = ", ".join(arm.value for arm in Arm)
        raise argparse.ArgumentTypeError(f"want ARM=HOST:PORT[,HOST:PORT...] with ARM one of {arms}, got {spec!r}")
    return Arm(name), tuple(address for address in addresses.split(",") if address)


def _parser(environ: Mapping[str, str]) -> _Parser:
    def env(flag: str) -> str | None:
        return environ.get(ENV_PREFIX + flag.upper().replace("-", "_"))

    def add(flag: str, help: str | None = None, **kwargs: Any) -> None:
        p.add_argument(f"--{flag}", default=env(flag), help=help, **kwargs)

    p = _Parser(prog="specpilot router", description="Per-pilot scope router (OpenAI-compatible).")
    add("namespace", "namespace of the pilot (env SPECPILOT_NAMESPACE, then POD_NAMESPACE)")
    p.set_defaults(namespace=env("namespace") or environ.get("POD_NAMESPACE"))
    add("pilot", "name of the SpeculationPilot")
    add("listen", f"traffic HOST:PORT (default 0.0.0.0:{ROUTER_PORT})")
    add("admin-listen", f"HOST:PORT of /metrics, /samples, /healthz, /readyz, /routes (default :{ROUTER_ADMIN_PORT})")
    add("scope-header", f"header naming a request's scope (default {SCOPE_HEADER})")
    add("affinity-header", "header whose value keeps a conversation on one arm (default: none)")
    add("default-scope", "scope label of requests no scope takes when the table names no defaultScope")
    add("request-timeout", "seconds a request may take end to end before 504", type=float)
    add("connect-timeout", "seconds to connect to an engine", type=float)
    add("read-timeout", "seconds a client may take to send a whole request before 408", type=float)
    add("max-table-age", "seconds after updatedAt a routing table turns stale (0: never)", type=float)
    add("max-body-bytes", "largest request body", type=int)
    add("max-header-bytes", "longest request line or header field", type=int)
    add("max-headers", "most request header fields", type=int)
    add("max-samples", "raw samples kept for /samples", type=int)
    add("max-mirrored", "mirrored copies (a scope's `mirror`) in flight at once; past it a copy is not sent", type=int)
    add("static-routes", "routing table JSON file; with --static-endpoints, runs without Kubernetes")
    p.add_argument(
        "--static-endpoints",
        action="append",
        default=[],
        type=_static_endpoints,
        metavar="ARM=HOST:PORT[,HOST:PORT]",
        help="fixed endpoints of an arm (repeatable); no Kubernetes access",
    )
    add("drain-seconds", "on SIGTERM, seconds of reporting not ready while still serving, before draining", type=float)
    add("log-level", f"one of {', '.join(LOG_LEVELS)}")
    add(
        "ordinary-arm",
        "arm of ordinary decoding and every fallback: baseline (default), or control in a rehearsal router",
        type=_arm,
    )
    return p
