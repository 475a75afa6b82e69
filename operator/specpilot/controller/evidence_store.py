"""The evidence store's home: the ConfigMap `<pilot>-evidence`, owned by the pilot, outside status.

Kept in memory once read or written; read back from the ConfigMap after a restart, and applied
(server-side) only when its text changed.
"""

from __future__ import annotations

import logging

from specpilot.analysis import evidence
from specpilot.controller.core.objects import PilotRef
from specpilot.controller.core.render import render_evidence_configmap
from specpilot.controller.ports import KubeApi
from specpilot.wire.names import EVIDENCE_KEY, evidence_name

log = logging.getLogger("specpilot.operator")


class ConfigMapEvidence:
    """Each pilot's evidence in its ConfigMap, with the text last read or written kept beside it."""

    def __init__(self, kube: KubeApi) -> None:
        self._kube = kube
        self._kept: dict[tuple[str, str], tuple[evidence.Evidence, str]] = {}

    async def load(self, ref: PilotRef) -> evidence.Evidence | None:
        kept = self._kept.get((ref.namespace, ref.name))
        if kept is not None:
            return kept[0]
        found = await self._kube.get("v1", "ConfigMap", ref.namespace, evidence_name(ref.name))
        text = ((found or {}).get("data") or {}).get(EVIDENCE_KEY)
        if text is None:
            return None
        try:
            store = evidence.load(text)
        except ValueError as error:
            log.warning("%s/%s: evidence store unreadable, starting a new one: %s", ref.namespace, ref.name, error)
            return None
        self._kept[(ref.namespace, ref.name)] = (store, text)
        return store

    async def store(self, ref: PilotRef, store: evidence.Evidence) -> None:
        text = evidence.dump(store)
        kept = self._kept.get((ref.namespace, ref.name))
        if kept is None or kept[1] != text:
            await self._kube.apply(render_evidence_configmap(ref, text))
        self._kept[(ref.namespace, ref.name)] = (store, text)

    def forget(self, ref: PilotRef) -> None:
        self._kept.pop((ref.namespace, ref.name), None)
