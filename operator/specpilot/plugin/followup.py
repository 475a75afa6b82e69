"""`kubectl specpilot follow-up NAME`: the next pilot a decision asks for, as YAML to commit or apply.

An AdoptInLowLoadWindows decision cannot be deployed as it stands; the batch-size schedule the report
recommends for it can, once it too has been piloted. The follow-up is the same pilot (engine, scopes,
stages, analysis, router, quality, rollback: the whole spec) with that schedule on the speculative arm's
draft, or with a new engine image or served model for the next target upgrade, and beside it, as a
ConfigMap, the workload the pilot observed, to replay at its load. Pure: the pilot and its report in,
the manifests out, or a FollowUpError saying why not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from specpilot.api.pilot import FOLLOWS_ANNOTATION, GROUP
from specpilot.api.spec import BatchScheduleRange, SpeculationPilotSpec
from specpilot.api.validate import validate
from specpilot.report.followed import first_sentence
from specpilot.report.package import replay_workload_text
from specpilot.wire.batchschedule import ScheduleError
from specpilot.wire.batchschedule import validate as vllm_reads

Json = dict[str, Any]

FOLLOWS_DECISION_ANNOTATION = f"{GROUP}/follows-decision"  # value: its decision's outcome and first sentence
WORKLOAD_KEY = "workload.yaml"


class _Dumper(yaml.SafeDumper):
    """Safe YAML with text of several lines as a literal block, as a person would write it."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


class FollowUpError(Exception):
    """Why no follow-up can be written, in one line."""


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """What the follow-up changes besides the draft's schedule."""

    name: str | None = None
    image: str | None = None
    model: str | None = None
    keep_draft: bool = False

    @property
    def new_target(self) -> bool:
        return self.image is not None or self.model is not None


@dataclass(frozen=True)
class FollowUp:
    """The follow-up's manifests (the pilot, then its replay workload) and what to tell the user aside."""

    documents: tuple[Json, ...]
    header: tuple[str, ...]
    notes: tuple[str, ...]

    def render(self) -> str:
        """The manifests as one YAML stream, headed by comments."""
        body = "---\n".join(yaml.dump(doc, Dumper=_Dumper, sort_keys=False) for doc in self.documents)
        return "".join(f"# {line}\n" for line in self.header) + body


def quoted_decision(report: Mapping[str, Any]) -> str:
    """The decision the follow-up acts on: its outcome and first sentence, and whether it was stated."""
    decision = report["decision"]
    reasons = decision.get("reasons") or []
    quote = f"{decision['outcome']}: {first_sentence(reasons[0])}" if reasons else str(decision["outcome"])
    return quote if report["decisionStated"] else f"{quote} (provisional)"


def _recommended(report: Mapping[str, Any], spec: SpeculationPilotSpec) -> tuple[list[BatchScheduleRange], str] | None:
    """The schedule of the report's recommendations that switches speculation off at the smallest batch
    (the safest where scopes disagree), as the engine's vLLM reads it, and a line saying which it took."""
    found = [s for s in report.get("schedules") or [] if s["recommendation"]]
    if not found:
        return None
    chosen = min(found, key=lambda s: s["lastSpeculativeBatchSize"])  # the first of equals: scope order
    key = spec.vllm_release.schedule_key
    try:
        ranges = vllm_reads(chosen["speculativeConfig"].get(key), spec.vllm_release)
    except ScheduleError as error:
        raise FollowUpError(f"the report's schedule from scope {chosen['derivedFrom']!r}: {error}") from None
    schedule = [BatchScheduleRange(start=r.start, end=r.end, num_speculative_tokens=r.k) for r in ranges]
    line = (
        f"schedule from scope {chosen['derivedFrom']}: drafts up to a batch of {chosen['lastSpeculativeBatchSize']}"
        f", none above (the batch it ran at below the load it is adopted below, {chosen['adoptedBelow']} requests/s "
        "per replica)"
    )
    if len(found) > 1:
        switches = ", ".join(f"{s['derivedFrom']} {s['lastSpeculativeBatchSize']}" for s in found)
        line += f"; the smallest switch batch of the scopes' recommendations ({switches})"
    return schedule, line


def _engine(spec: SpeculationPilotSpec, overrides: Overrides, pilot: str) -> tuple[SpeculationPilotSpec, list[str]]:
    """The spec with the engine's image and target model overridden where asked, and lines saying what
    changed. A revision pins a commit of the old model, so a new model drops it."""
    if not overrides.new_target:
        return spec, []
    if spec.engine is None:
        raise FollowUpError(
            f"pilot {pilot!r} runs the engine of spec.workloadRef: --image and --model override spec.engine; "
            "upgrade the Deployment itself instead"
        )
    update: Json = {
        key: value for key, value in (("image", overrides.image), ("model", overrides.model)) if value is not None
    }
    lines = [f"engine.{key}: {getattr(spec.engine, key)} -> {value}" for key, value in update.items()]
    if overrides.model is not None and spec.engine.revision is not None:
        update["revision"] = None
        lines.append(f"engine.revision {spec.engine.revision} pinned the old model: dropped, pin the new model's")
    return spec.model_copy(update={"engine": spec.engine.model_copy(update=update)}), lines


def _draft(
    spec: SpeculationPilotSpec, report: Mapping[str, Any], overrides: Overrides, pilot: str
) -> tuple[SpeculationPilotSpec, str]:
    """The spec with the recommended schedule on its draft, or as it was (--no-schedule, or a new target
    and no recommendation), and a line saying which."""
    if overrides.keep_draft:
        return spec, "draft carried unchanged (--no-schedule)"
    recommended = _recommended(report, spec)
    if recommended is None:
        if overrides.new_target:
            return spec, "draft carried unchanged: the decision recommends no schedule"
        raise FollowUpError(
            f"pilot {pilot!r} recommends no schedule (decision {quoted_decision(report)}): pass --no-schedule "
            "to pilot its draft as it was, or --image/--model to pilot a new target"
        )
    schedule, line = recommended
    draft = spec.speculative.draft.model_copy(update={"schedule": schedule})
    return spec.model_copy(update={"speculative": spec.speculative.model_copy(update={"draft": draft})}), line


def _metadata(pilot: Mapping[str, Any], name: str, report: Mapping[str, Any]) -> Json:
    meta = pilot.get("metadata", {})
    return {
        "name": name,
        **({"namespace": meta["namespace"]} if "namespace" in meta else {}),
        **({"labels": dict(meta["labels"])} if meta.get("labels") else {}),
        "annotations": {FOLLOWS_ANNOTATION: meta["name"], FOLLOWS_DECISION_ANNOTATION: quoted_decision(report)},
    }


def _workload(pilot_meta: Json, report: Mapping[str, Any]) -> Json:
    """The observed workload as a ConfigMap beside the follow-up (replay/workload.yaml of the package)."""
    meta = {key: pilot_meta[key] for key in ("namespace", "labels") if key in pilot_meta}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{pilot_meta['name']}-workload", **meta},
        "data": {WORKLOAD_KEY: replay_workload_text(report)},
    }


def follow_up(pilot: Mapping[str, Any], report: Mapping[str, Any], overrides: Overrides) -> FollowUp:
    """The pilot that follows `pilot` (as the API server returns it) on its report's decision."""
    old = pilot["metadata"]["name"]
    spec, engine_lines = _engine(SpeculationPilotSpec.from_wire(pilot["spec"]), overrides, old)
    spec, draft_line = _draft(spec, report, overrides, old)
    metadata = _metadata(pilot, overrides.name or f"{old}-follow-up", report)
    manifest = {
        "apiVersion": pilot.get("apiVersion"),
        "kind": pilot.get("kind"),
        "metadata": metadata,
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True),
    }
    problems = validate(manifest)
    if problems:
        fix = " (name it with --name)" if problems[0].field == "metadata.name" else ""
        raise FollowUpError(f"the follow-up would be refused: {problems[0]}{fix}")
    documents: Sequence[Json] = (manifest,)
    header = [f"The pilot that follows {old}: {quoted_decision(report)}", *engine_lines, draft_line]
    if report["replay"]["mix"]["scopes"]:
        workload = _workload(metadata, report)
        documents = (manifest, workload)
        name, rate = workload["metadata"]["name"], report["replay"]["ratePerSecond"]
        header += [
            f"Its load: configmap {name} holds the workload {old} observed. Replay it with",
            f"  kubectl get configmap {name} -o jsonpath='{{.data.workload\\.yaml}}' > {WORKLOAD_KEY}",
            f"  specpilot loadgen --url ROUTER_URL --mix {WORKLOAD_KEY} --rate {rate} --arrivals poisson",
        ]
    notes = [] if report["decisionStated"] else [f"{old} has stated no decision yet: this follows its provisional one"]
    return FollowUp(tuple(documents), tuple(header), tuple(notes))
