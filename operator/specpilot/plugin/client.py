"""The plugin's Kubernetes calls, with kubectl's kubeconfig conventions, through the `kubernetes` client
(a short-lived command: its synchronous client is the simple fit here, unlike in the operator)."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from specpilot.analysis import evidence as ev
from specpilot.api.pilot import GROUP, PLURAL, VERSION
from specpilot.kubeaccess import Credentials, kubeconfig_credentials
from specpilot.wire.names import EVIDENCE_KEY, evidence_name

Json = dict[str, Any]


class PluginError(Exception):
    """What the user should read, in one line: a missing pilot, scope or context, a missing or malformed
    kubeconfig, a refusal by the API server, or a server that cannot be reached."""


def _kubeconfig(path: str | None) -> str:
    found = path or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if not any(Path(part).expanduser().is_file() for part in found.split(os.pathsep) if part):
        raise PluginError(f"no kubeconfig at {found}: pass --kubeconfig or set KUBECONFIG")
    return found


@dataclass(frozen=True)
class _Apis:
    """The typed API clients over one ApiClient, and the credentials it was built with."""

    built: tuple[object, ...]
    clients: tuple[Any, Any, Any, Any]  # ApiClient, CustomObjectsApi, CoreV1Api, BatchV1Api


def _apis(credentials: Credentials, before: _Apis | None) -> _Apis:
    """The API clients, built again when the credentials were renewed (a client certificate an exec
    plugin issued again, a tokenFile read again), as a long wait for a Job may outlive them."""
    cfg, _ = credentials.current()
    built = (cfg.cert_file, cfg.key_file, cfg.ssl_ca_cert, credentials.token())
    if before is not None and before.built == built:
        return before
    cfg = copy.deepcopy(cfg)
    cfg.api_key = {"BearerToken": built[3]} if built[3] else {}
    cfg.api_key_prefix, cfg.refresh_api_key_hook = {}, None
    api = client.ApiClient(configuration=cfg)
    return _Apis(built, (api, client.CustomObjectsApi(api), client.CoreV1Api(api), client.BatchV1Api(api)))


def _rebound(call: Any, apis: _Apis) -> Any:
    """`call`, a method of one of the API clients, on the client of its kind as built now."""
    owner = {type(api): api for api in apis.clients}.get(type(getattr(call, "__self__", None)))
    return getattr(owner, call.__name__) if owner is not None else call


class Client:
    """One namespace of one cluster, as a context of the kubeconfig reaches it."""

    def __init__(self, credentials: Credentials, namespace: str) -> None:
        self.namespace = namespace
        self._credentials = credentials
        self._connect()

    def _connect(self) -> None:
        """The API clients as the credentials stand now (`_apis`)."""
        self._apis = _apis(self._credentials, getattr(self, "_apis", None))
        self._api, self._custom, self._core, self._batch = self._apis.clients

    @property
    def server(self) -> str:
        return str(self._api.configuration.host)

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        for attempt in range(2):
            self._connect()
            try:
                return self._attempt(what, call, *args, **kwargs)
            except ApiException as error:
                if error.status != 401 or attempt:
                    raise PluginError(f"{what}: {_refusal(error)}") from None
                self._credentials.rejected()  # expired credentials: renewed (with backoff), asked once more
        raise AssertionError("unreachable")

    def _attempt(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """One call, through the API clients as they are now (`call` is named on them, so a rebuilt
        client is the one called)."""
        try:
            return _rebound(call, self._apis)(*args, **kwargs)
        except ApiException as error:
            if error.status == 401:
                raise
            if error.status == 404:
                raise PluginError(f"{what} not found in namespace {self.namespace!r}") from None
            raise PluginError(f"{what}: {_refusal(error)}") from None
        except (OSError, urllib3.exceptions.HTTPError) as error:
            raise PluginError(f"cannot reach the API server at {self.server}: {_unreachable(error)}") from None

    def all_pilots(self) -> list[Json]:
        """Every pilot in every namespace the user may list."""
        found = self._call("speculationpilots", self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        return sorted(found.get("items", []), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))

    def pilot(self, name: str) -> Json:
        return dict(
            self._call(
                f"speculationpilot {name!r}",
                self._custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
            )
        )

    def pilots(self) -> list[Json]:
        found = self._call(
            "speculationpilots",
            self._custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
        )
        return sorted(found.get("items", []), key=lambda p: p["metadata"]["name"])

    def annotate(self, name: str, annotations: dict[str, str]) -> None:
        self._call(
            f"speculationpilot {name!r}",
            self._custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            {"metadata": {"annotations": annotations}},
        )

    def create(self, obj: Json) -> None:
        """Create a ConfigMap or a Job in the namespace."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "Job":
            self._call(f"job {name!r}", self._batch.create_namespaced_job, self.namespace, obj)
        else:
            self._call(f"configmap {name!r}", self._core.create_namespaced_config_map, self.namespace, obj)

    def job(self, name: str) -> Json:
        found = self._call(f"job {name!r}", self._batch.read_namespaced_job, name, self.namespace)
        return dict(self._api.sanitize_for_serialization(found))

    def job_log(self, name: str) -> str:
        """The log of the Job's newest pod."""
        pods = self._call(
            f"pods of job {name!r}", self._core.list_namespaced_pod, self.namespace, label_selector=f"job-name={name}"
        ).items
        if not pods:
            raise PluginError(f"job {name!r} has no pod in namespace {self.namespace!r}")
        pod = max(pods, key=lambda p: p.metadata.creation_timestamp).metadata.name
        return str(self._call(f"the log of pod {pod!r}", self._core.read_namespaced_pod_log, pod, self.namespace))

    def patch_config_map(self, name: str, data: dict[str, str]) -> None:
        """Add (or replace) keys of a ConfigMap's data."""
        self._call(f"configmap {name!r}", self._core.patch_namespaced_config_map, name, self.namespace, {"data": data})

    def evidence(self, name: str) -> ev.Evidence | None:
        """The pilot's evidence store, or None when the operator has written none yet."""
        try:
            found = self._core.read_namespaced_config_map(evidence_name(name), self.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise PluginError(f"evidence of {name!r}: the API server answered {error.status} {error.reason}") from None
        text = (found.data or {}).get(EVIDENCE_KEY)
        if text is None:
            return None
        try:
            return ev.load(text)
        except ValueError as error:
            raise PluginError(f"the evidence ConfigMap {evidence_name(name)!r} cannot be read: {error}") from None

    def watch(self, name: str | None) -> Iterator[list[Json]]:
        """The namespace's pilots (or the one named) now, then again after every change."""
        current = {p["metadata"]["name"]: p for p in ([self.pilot(name)] if name else self.pilots())}
        yield [current[key] for key in sorted(current)]
        selector = {"field_selector": f"metadata.name={name}"} if name else {}
        while True:
            stream = watch.Watch().stream(
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                timeout_seconds=300,
                **selector,
            )
            for event in stream:
                obj = event["object"]
                key = obj["metadata"]["name"]
                if event["type"] == "DELETED":
                    current.pop(key, None)
                else:
                    current[key] = obj
                yield [current[k] for k in sorted(current)]


def _refusal(error: ApiException) -> str:
    """The API server's own message for a refusal, on one line (its Status object's, else its reason)."""
    try:
        doc = json.loads(error.body or "{}")
    except ValueError:
        doc = {}
    message = " ".join(str(doc.get("message") or "").split()) if isinstance(doc, dict) else ""
    what = {401: "Unauthorized", 403: "Forbidden"}.get(error.status or 0, f"{error.status} {error.reason}")
    return f"{what}: {message}" if message else what


def _unreachable(error: Exception) -> str:
    """Why the server could not be reached, in one line (urllib3 nests the cause in its retries)."""
    cause = getattr(error, "reason", None) or error
    text = str(cause).split(": ", 1)[-1] if isinstance(cause, Exception) else str(cause)
    return " ".join(text.split())[:200] or type(error).__name__


def _check_shape(path: str) -> None:
    """Refuse a kubeconfig file whose YAML or shape is wrong, naming the file and the field (the
    kubernetes client would fail on it with a bare TypeError)."""
    for part in (p for p in path.split(os.pathsep) if p and Path(p).expanduser().is_file()):
        doc = yaml.safe_load(Path(part).expanduser().read_text()) or {}
        if not isinstance(doc, dict):
            raise PluginError(
                f"kubeconfig {part}: expected a mapping (clusters, contexts, users), got a {type(doc).__name__}"
            )
        for key in ("clusters", "contexts", "users"):
            entries = doc.get(key) or []
            if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
                raise PluginError(f"kubeconfig {part}: {key} must be a list of entries, each with a name")


def _malformed(error: Exception) -> str:
    """What is wrong with a kubeconfig, in one line."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 text ({error.reason} at byte {error.start})"
    return " ".join(str(error).split())


def connect(*, kubeconfig: str | None, context: str | None, namespace: str | None) -> Client:
    """A client for the kubeconfig and context asked for, in the namespace asked for (else the
    context's, else default)."""
    path = _kubeconfig(kubeconfig)
    try:
        _check_shape(path)
        contexts, active = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else active
        if chosen is None:
            names = ", ".join(c["name"] for c in contexts)
            raise PluginError(f"context {context!r} not in the kubeconfig (contexts: {names})")
        credentials = kubeconfig_credentials(path, chosen["name"])
    except (config.ConfigException, yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError, OSError) as error:
        raise PluginError(f"kubeconfig {path}: {_malformed(error)}") from None
    return Client(credentials, namespace or chosen.get("context", {}).get("namespace") or "default")
