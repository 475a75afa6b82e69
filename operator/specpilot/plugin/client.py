"""The plugin's Kubernetes calls, with kubectl's kubeconfig conventions, through the `kubernetes` client
(a short-lived command: its synchronous client is the simple fit here, unlike in the operator)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from specpilot.analysis import evidence as ev
from specpilot.api.pilot import GROUP, PLURAL, VERSION
from specpilot.wire.names import EVIDENCE_KEY, evidence_name

Json = dict[str, Any]


class PluginError(Exception):
    """What the user should read: a missing pilot, scope, context or kubeconfig."""


def _kubeconfig(path: str | None) -> str:
    found = path or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if not any(Path(part).expanduser().is_file() for part in found.split(os.pathsep) if part):
        raise PluginError(f"no kubeconfig at {found}: pass --kubeconfig or set KUBECONFIG")
    return found


class Client:
    """One namespace of one cluster, as a context of the kubeconfig reaches it."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.namespace = namespace
        self._api = api
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except ApiException as error:
            if error.status == 404:
                raise PluginError(f"{what} not found in namespace {self.namespace!r}") from None
            raise PluginError(f"{what}: the API server answered {error.status} {error.reason}") from None
        except OSError as error:  # urllib3's connection errors are OSErrors
            raise PluginError(f"cannot reach the API server: {error}") from None

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


def connect(*, kubeconfig: str | None, context: str | None, namespace: str | None) -> Client:
    """A client for the kubeconfig and context asked for, in the namespace asked for (else the
    context's, else default)."""
    path = _kubeconfig(kubeconfig)
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else active
        if chosen is None:
            names = ", ".join(c["name"] for c in contexts)
            raise PluginError(f"context {context!r} not in the kubeconfig (contexts: {names})")
        api = config.new_client_from_config(config_file=path, context=chosen["name"], persist_config=False)
    except config.ConfigException as error:
        raise PluginError(f"kubeconfig {path}: {error}") from None
    return Client(api, namespace or chosen.get("context", {}).get("namespace") or "default")
