"""The local demo: the operator runs a pilot of mock vLLM arms on the local cluster, judged on real traffic.

It starts the operator, applies `manifests/demo/pilot.yaml` (with `make demo REHEARSAL=1`, plus the peak
rehearsal below, which runs once the decision is stated), waits for Ready, drives chat, code and
longform traffic through the router with the load generator, and shows each scope's progress as the
operator judges its windows on the step costs measured on an H200 (an EAGLE-style draft head on
Llama-3.1-8B): chat and longform (drafts accepted often) are adopted through both stages, and code
(drafts rarely accepted) is flipped back to ordinary decoding for a net slowdown in time per committed
token. It ends with each scope's path, the fallback records and the decisions the operator states,
writes the handover package with `specpilot report` (into demo-report/), then deletes the pilot (ordered
teardown) and stops the operator and the load; its last lines say where the package is. With `make demo
SCENARIO=schedule`, a climb in its place (`manifests/demo/schedule.yaml`: one scope that wins at its first
stage's load and fails at its second's), then the pilot that follows its decision (`kubectl specpilot
follow-up`, with the schedule its report recommends) under the same load in its place, and the two pilots'
decisions side by side; where the decision recommends no schedule, the scenario says why and stops there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specpilot.loadgen.workload import load_mix
from specpilot.wire.batchschedule import BatchRange, switched_off_above
from specpilot.wire.names import router_selector

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = os.environ.get("SPECPILOT_DEMO_NAMESPACE", "specpilot-demo")


@dataclass(frozen=True)
class Scenario:
    """A pilot the demo runs, the traffic it drives through its router, and where its scopes end."""

    pilot: str
    manifest: Path
    mix: Path
    rate: str  # requests per second, all scopes
    outcomes: dict[str, str]  # each scope's state at the end, which its profile and traffic lead to
    timeout: float  # seconds the scopes have to get there


# `make demo`: chat and longform adopted through both stages, code flipped back.
DEMO = Scenario(
    pilot="demo",
    manifest=ROOT / "manifests/demo/pilot.yaml",
    mix=ROOT / "manifests/demo/mix.yaml",
    rate="10",
    outcomes={"chat": "Speculative", "code": "RolledBack", "longform": "Speculative"},
    timeout=300,
)
# `make demo SCENARIO=schedule`: mid wins at its first stage's load and loses at its second's
# (manifests/demo/schedule.yaml says why), so it is flipped back and adopted only below a load; then the
# pilot that follows its decision (`kubectl specpilot follow-up`, applied as it prints it) pilots the
# schedule its report recommends, under the same load; its package in FOLLOW_UP_DIR.
CLIMB = Scenario(
    pilot="climb",
    manifest=ROOT / "manifests/demo/schedule.yaml",
    mix=ROOT / "manifests/demo/schedule-mix.yaml",
    rate="5",  # 0.4 requests/s per replica of each compared arm at 8%, 2.5 at 50%
    outcomes={"mid": "RolledBack"},
    timeout=600,  # stages of two and five minutes, and windows held inconclusive on the first's few requests
)
SCENARIO = os.environ.get("SPECPILOT_DEMO_SCENARIO", "")
SCENARIOS = {"": DEMO, "schedule": CLIMB}
SCENE = SCENARIOS.get(SCENARIO, DEMO)
PILOT = SCENE.pilot
RATE = os.environ.get("SPECPILOT_DEMO_RATE", SCENE.rate)
TIMEOUT = float(os.environ.get("SPECPILOT_DEMO_TIMEOUT", SCENE.timeout))
CLUSTER_DIR = Path(os.environ.get("SPECPILOT_CLUSTER_DIR", ROOT / ".cluster"))
REPORT_DIR = Path(os.environ.get("SPECPILOT_DEMO_REPORT", ROOT / "demo-report"))
REHEARSE = os.environ.get("SPECPILOT_DEMO_REHEARSAL", "") not in ("", "0")
# `make demo WORKLOAD=1`: the same pilot on the engine as a team already runs it (manifests/demo/team-vllm.yaml),
# named by spec.workloadRef instead of described in spec.engine.
WORKLOAD = os.environ.get("SPECPILOT_DEMO_WORKLOAD", "") not in ("", "0")
TEAM_MANIFEST = ROOT / "manifests/demo/team-vllm.yaml"
# The peak rehearsal of `make demo REHEARSAL=1`: from production's median load per replica to twice its
# highest, three steps of 30 s, a minute at each adopted scope's crossover where the ladder finds one and
# the cap leaves room, then a 20 s burst at 1.5 times the peak, then both fallbacks at peak.
REHEARSAL = {
    "peak": {"productionFactor": 2.0},
    "steps": 3,
    "stepDuration": "30s",
    "burst": {"factor": 1.5, "duration": "20s"},
    "maxDuration": "5m",
}
REHEARSAL_SECONDS = 330  # its cap and half a minute: it is due a little before it is watched
FOLLOW_UP = f"{PILOT}-follow-up"
FOLLOW_UP_DIR = REPORT_DIR / "follow-up"
BASELINE_REPLICAS = 3
MODEL_LOAD_SECONDS = 15  # with the rehearsal, engines load their model this long: what a restart costs


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    out = subprocess.run(["kubectl", "-n", NAMESPACE, *args], input=input, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def status(name: str = PILOT) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", "speculationpilot", name, "-o", "json")).get("status", {})
    return result


def scope_line(scope: dict[str, Any]) -> str:
    window = scope.get("lastWindow") or {}
    stage = "-" if scope.get("stage") is None else str(scope["stage"] + 1)
    ratio = f"{window['ratio']:.2f}" if window.get("ratio") is not None else "  - "
    verdict = window.get("verdict", "-")
    return f"  {scope['name']:<9} {scope['state']:<12} stage {stage:<2} {scope['weight']:>3}%  ratio {ratio}  {verdict}"


def settled(scopes: dict[str, dict[str, Any]]) -> bool:
    return all(scopes.get(name, {}).get("state") == state for name, state in SCENE.outcomes.items())


def start_operator() -> subprocess.Popen[bytes]:
    log = CLUSTER_DIR / "demo-operator.log"
    argv = [sys.executable, "-m", "specpilot.cli", "operator", "--namespace", NAMESPACE]
    argv += [
        "--router-image",
        "specpilot/specpilot:dev",
        "--liveness",
        "127.0.0.1:18581",
        "--metrics",
        "127.0.0.1:18582",
        "--allow-address=127.0.0.0/8",  # the local cluster's pods run on loopback, which no real one's do
    ]
    print(f"  specpilot operator --namespace {NAMESPACE}   (log: {log})")
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def start_load(router_ip: str) -> subprocess.Popen[bytes]:
    seconds = int(TIMEOUT) + (REHEARSAL_SECONDS if REHEARSE else 0)
    argv = [sys.executable, "-m", "specpilot.cli", "loadgen", "--url", f"http://{router_ip}:8080"]
    argv += ["--mix", str(SCENE.mix), "--arrivals", "poisson", "--rate", RATE]
    argv += ["--duration", str(seconds), "--timeout", "60", "--no-progress"]
    scopes = ", ".join(scope.name for scope in load_mix(str(SCENE.mix)))
    print(f"  specpilot loadgen --rate {RATE}/s ({scopes}; Poisson arrivals) -> router {router_ip}:8080")
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summary(name: str = PILOT) -> None:
    final = status(name)
    say(f"Summary: phase {final.get('phase')}, speculative scopes {final.get('speculativeScopes')}")
    for scope in final.get("scopes", []):
        print(scope_line(scope))
        print(f"         last window: {(scope.get('lastWindow') or {}).get('reason', '')[:160]}")
    uid = json.loads(kubectl("get", "speculationpilot", name, "-o", "json"))["metadata"]["uid"]
    selector = f"involvedObject.kind=SpeculationPilot,involvedObject.uid={uid}"  # this run's pilot only
    events = json.loads(kubectl("get", "events", "--field-selector", selector, "-o", "json"))["items"]
    print("\n  path (Events, oldest first):")
    for event in sorted(events, key=lambda e: e.get("firstTimestamp") or e["metadata"]["creationTimestamp"]):
        if event["reason"].startswith("Scope") or event["reason"] in ("RoutesTaken", "PilotReady"):
            print(f"    {event['reason']:<18} {event['message'][:140]}")
    print("\n  fallback records:")
    for record in final.get("fallbacks", []):
        print(
            f"    {record['scope']}: {record['reason']} on {record['metric']}: observed {record['observed']:.3f}"
            f" > threshold {record['threshold']:.3f}, window {record['window']['start']} .. {record['window']['end']}"
        )


EVIDENCE_SECONDS = float(os.environ.get("SPECPILOT_DEMO_EVIDENCE_SECONDS", "150"))
SETTLED_SECONDS = 30


def _waiting_for_evidence(found: dict[str, Any]) -> bool:
    scopes = [scope.get("decision") or {} for scope in found.get("scopes", [])]
    return any(d.get("deferReason") == "InsufficientEvidence" for d in scopes)


def decisions(name: str = PILOT, folder: Path = REPORT_DIR) -> Path | None:
    """The decisions the operator states once every scope has settled, and the handover package (into `folder`)."""
    say("Decisions (stated by the operator once every scope settled), and the handover package")
    # Production's own load moves once the flipped scopes' share is back on it: a few more windows let
    # the decision hold it against the load production runs at now (a move is a DecisionRevised).
    print(
        f"  the load keeps running {SETTLED_SECONDS} s, so that the evidence covers production's load after the flips"
    )
    time.sleep(SETTLED_SECONDS)
    if REHEARSE:
        rehearse(name)  # it begins once the decision is stated, and the decision reads what it measured
    deadline = time.monotonic() + 30
    while not status(name).get("decision") and time.monotonic() < deadline:
        time.sleep(1)
    if not status(name).get("decision"):
        kubectl("annotate", f"speculationpilot/{name}", "specpilot.io/decide=demo", "--overwrite")
        while not status(name).get("decision") and time.monotonic() < deadline + 30:
            time.sleep(1)
    # A decision stated on too little evidence is revised as windows come in (DecisionRevised): the load
    # keeps running until no scope waits for evidence any more.
    while _waiting_for_evidence(status(name)) and time.monotonic() < deadline + EVIDENCE_SECONDS:
        time.sleep(5)
    final = status(name)
    decision = final.get("decision") or {}
    print(f"  pilot: {decision.get('outcome', 'no decision stated')}")
    for scope in final.get("scopes", []):
        reasons = (scope.get("decision") or {}).get("reasons", [])
        for reason in [*reasons[:1], *(r for r in reasons[1:] if r.startswith("At the loads adopted"))]:
            print(f"    {reason[:220]}")
    argv = [sys.executable, "-m", "specpilot.cli", "report", name, "-n", NAMESPACE, "-o", str(folder)]
    written = subprocess.run(argv, capture_output=True, text=True, check=False)
    if written.returncode != 0:
        print(f"  the report could not be written: {written.stderr.strip()}")
        return None
    return folder / "report.md"


def rehearse(name: str = PILOT) -> None:
    """The peak rehearsal's steps as they come, until it completes or stops."""
    say("The peak rehearsal: the adopted scopes' own mix through a rehearsal router, at a ladder of loads")
    deadline, shown = time.monotonic() + REHEARSAL_SECONDS, ""
    while time.monotonic() < deadline:
        found = status(name).get("rehearsal") or {}
        line = f"  {found.get('phase', 'not due yet')}: {found.get('message', '')}"
        if line != shown:
            print(line[:240])
            shown = line
        if found.get("phase") in ("Completed", "Stopped"):
            for index, step in enumerate(found.get("steps", []), start=1):
                kind = (
                    f"crossover step ({step['crossover']})"
                    if step.get("crossover")
                    else "burst"
                    if step.get("burst")
                    else "routing fallback"
                    if step.get("flip")
                    else "restart fallback"
                    if step.get("restart")
                    else "step"
                )
                for arm in ("speculative", "control"):
                    f = step.get(arm) or {}
                    print(
                        f"    {kind} {index} at {step['load']:.2f}/s per replica, {arm:<11} kept up {f.get('keptUp')}, "
                        f"on time {f.get('onTime')}, TTFT p99 {f.get('ttftP99')} s"
                    )
            for which, fallback in (("routing", found.get("routingFlip")), ("restart", found.get("restartFallback"))):
                if fallback is not None:
                    print(f"    {which} fallback: {json.dumps(fallback)}")
            return
        time.sleep(2)
    print(f"  the rehearsal did not finish within {REHEARSAL_SECONDS} s")


def team_service(namespace: str) -> str:
    """The team's own engine (WORKLOAD=1) in `namespace`: its Deployment and what it needs, with a volume
    bound to its claim so that it schedules."""
    docs = list(yaml.safe_load_all(TEAM_MANIFEST.read_text()))
    claim = next(doc for doc in docs if doc["kind"] == "PersistentVolumeClaim")
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{claim['metadata']['name']}"},
        "spec": {
            "storageClassName": claim["spec"]["storageClassName"],
            "capacity": claim["spec"]["resources"]["requests"],
            "accessModes": claim["spec"]["accessModes"],
            "hostPath": {"path": f"/tmp/{namespace}-models"},
            "claimRef": {"namespace": namespace, "name": claim["metadata"]["name"]},
        },
    }
    return yaml.safe_dump_all([volume, *docs])


def pilot_manifest() -> str:
    """The scenario's pilot, with the peak rehearsal when asked for, on the team's Deployment with WORKLOAD=1."""
    text = SCENE.manifest.read_text()
    if not REHEARSE and not WORKLOAD:
        return text
    doc = yaml.safe_load(text)
    if WORKLOAD:
        team = next(d for d in yaml.safe_load_all(TEAM_MANIFEST.read_text()) if d["kind"] == "Deployment")
        doc["spec"].pop("engine")
        doc["spec"].pop("baseline")  # the team's Deployment, at its own replicas
        doc["spec"]["workloadRef"] = {"name": team["metadata"]["name"]}
        print(f"  with spec.workloadRef: {json.dumps(doc['spec']['workloadRef'])} in place of spec.engine")
    if not REHEARSE:
        return json.dumps(doc)
    doc["spec"]["rehearsal"] = REHEARSAL
    # While the rehearsal runs, production serves every scope's live traffic, longform's long answers
    # included: at two replicas it sits at the saturation guard's edge, which stops the rehearsal.
    doc["spec"]["baseline"]["replicas"] = BASELINE_REPLICAS
    engine = doc["spec"]["engine"]
    engine["extraArgs"] = [*engine.get("extraArgs", []), f"--model-load-seconds={MODEL_LOAD_SECONDS}"]
    print(
        f"  with spec.rehearsal: {json.dumps(REHEARSAL)}, {BASELINE_REPLICAS} baseline replicas, engines loading "
        f"their model for {MODEL_LOAD_SECONDS} s"
    )
    return json.dumps(doc)


def plugin(*args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl specpilot ...`: kubectl finds the plugin (`kubectl-specpilot`) beside this Python on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    argv = ["kubectl", "specpilot", *args, "-n", NAMESPACE]
    return subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, "PATH": path})


def take_follow_up() -> str | None:
    """The pilot that follows the first pilot's decision, as `kubectl specpilot follow-up` prints it (its
    header shown); None, saying why, where the decision recommends no schedule."""
    say(f"The follow-up: kubectl specpilot follow-up {PILOT} | kubectl apply -f -")
    made = plugin("follow-up", PILOT)
    for note in made.stderr.strip().splitlines():
        print(f"  {note}")
    if made.returncode == 0:
        for line in made.stdout.splitlines():
            if line.startswith("# "):
                print(f"  {line}")
        return made.stdout
    body = json.loads((REPORT_DIR / "report.json").read_text())
    if any(item["recommendation"] for item in body["schedules"]):
        sys.exit(f"kubectl specpilot follow-up {PILOT} failed although the report recommends a schedule")
    print(f"  the {PILOT} pilot's decision recommends no schedule ({REPORT_DIR / 'report.md'}): no follow-up to run")
    for item in body["schedules"]:
        print(f"    No schedule for {item['derivedFrom']}: {item['why']}.")
    return None


def every_scope_settled(scopes: dict[str, dict[str, Any]]) -> bool:
    return bool(scopes) and all(scope.get("state") in ("Speculative", "RolledBack") for scope in scopes.values())


def _first_sentence(decision: dict[str, Any]) -> str:
    """A decision's outcome and the first sentence of its reasons."""
    outcome = decision.get("outcome", "no decision stated")
    reasons = decision.get("reasons")
    if not reasons:
        return str(outcome)
    head, dot, _ = " ".join(reasons[0].split()).partition(". ")
    return f"{outcome}: {head}{'.' if dot else ''}"


def _bands(scope: dict[str, Any], switch: int) -> list[str]:
    """The scheduled arm's bands of a scope in the report, each side of the switch: load, requests in flight
    per replica, time per committed token over the control arm's, and whether it wins there, is measured
    (enough windows to judge) or too thin to judge."""
    lines: dict[bool, list[str]] = {True: [], False: []}
    for band, compared in zip(scope["bands"]["speculative"], scope["comparisons"], strict=True):
        in_flight = band["inFlightPerReplica"]
        ratio = "   -  " if compared["ratio"] is None else f"{compared['ratio']:.2f}x"
        found = "wins" if compared["speculationWins"] else "measured" if compared["powered"] else "thin"
        lines[in_flight is not None and in_flight <= switch].append(
            f"      {band['load']:.2f}/s per replica, {in_flight or 0:.1f} in flight, {ratio} ({found})"
        )
    below = lines[True] or ["      none"]
    above = lines[False] or ["      none"]
    return [f"    at or below the switch ({switch} in flight):", *below, "    above it (ordinary decoding):", *above]


def side_by_side(first: dict[str, Any], second: dict[str, Any], report: Path | None) -> None:
    """The follow-up's decisions beside the first pilot's: outcomes and first sentences, the switch, and the
    scheduled arm's bands (load, requests in flight, time per committed token against the control arm)."""
    draft = json.loads(kubectl("get", "speculationpilot", FOLLOW_UP, "-o", "json"))["spec"]["speculative"]["draft"]
    ranges = [BatchRange(r["start"], r["end"], r["numSpeculativeTokens"]) for r in draft.get("schedule") or []]
    switch = switched_off_above(ranges) if ranges else None  # the last batch that drafts, as the operator reads it
    say(f"{PILOT} and its follow-up side by side (the follow-up drafts up to a batch of {switch}, none above)")
    print(f"  {PILOT:<15} {_first_sentence(first.get('decision') or {})}")
    print(f"  {FOLLOW_UP:<15} {_first_sentence(second.get('decision') or {})}")
    body = json.loads((report.parent / "report.json").read_text()) if report is not None else {"scopes": []}
    bands = {scope["name"]: scope for scope in body["scopes"]}
    before = {scope["name"]: scope.get("decision") or {} for scope in first.get("scopes", [])}
    for scope in second.get("scopes", []):
        print(f"\n  {scope['name']}")
        print(f"    {PILOT:<15} {_first_sentence(before.get(scope['name'], {}))}")
        print(f"    {FOLLOW_UP:<15} {_first_sentence(scope.get('decision') or {})}")
        if switch is not None and scope["name"] in bands:
            print("\n".join(_bands(bands[scope["name"]], switch)))


def launch(name: str, manifest: str) -> subprocess.Popen[bytes]:
    """Apply the pilot, wait for it to be Ready, show what it runs, and start the load through its router."""
    kubectl("apply", "-f", "-", input=manifest)
    waited = subprocess.run(
        ["kubectl", "-n", NAMESPACE, "wait", "--for=condition=Ready", f"speculationpilot/{name}", "--timeout=180s"],
        capture_output=True,
        text=True,
        check=False,
    )
    if waited.returncode != 0:
        print(kubectl("get", "pods", "-o", "wide"))
        sys.exit(f"the pilot did not become Ready: {waited.stderr.strip()}; pod output: {CLUSTER_DIR}/node/pods/")
    print(kubectl("get", "speculationpilots,deployments,pods", "-o", "wide"))
    selector = ",".join(f"{key}={value}" for key, value in router_selector(name).items())
    pods = json.loads(kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    return start_load(pods[0]["status"]["podIP"])


def watch(name: str, done: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
    """Each scope's progress every 5 s until `done` holds or TIMEOUT passes; the scopes as last seen."""
    say("The operator judges each scope every 5 s on the last 20 s (state, stage, weight, ratio, verdict)")
    started, scopes = time.monotonic(), {}
    while time.monotonic() - started < TIMEOUT:
        time.sleep(5)
        scopes = {s["name"]: s for s in status(name).get("scopes", [])}
        print(f"  t+{time.monotonic() - started:4.0f}s")
        for scope in scopes.values():
            print(scope_line(scope))
        if done(scopes):
            break
    return scopes


def stop_load(load: subprocess.Popen[bytes]) -> None:
    load.send_signal(signal.SIGINT)
    try:
        load.wait(timeout=30)
    except subprocess.TimeoutExpired:  # requests still in flight after 30 s: stop it outright
        load.kill()
        load.wait()


def main() -> int:
    if REHEARSE and WORKLOAD:
        sys.exit("REHEARSAL=1 runs on the inline engine: the team's Deployment keeps the size and flags it has")
    if SCENARIO not in SCENARIOS:
        sys.exit(f"SCENARIO={SCENARIO!r} is no demo scenario: leave it out for the demo pilot, or SCENARIO=schedule")
    if SCENARIO and (REHEARSE or WORKLOAD):
        sys.exit(f"SCENARIO={SCENARIO} runs its own pilot: leave REHEARSAL and WORKLOAD out")
    say(f"The SpeculationPilot API and the operator, in namespace {NAMESPACE}")
    subprocess.run(["kubectl", "apply", "--server-side", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    subprocess.run(["kubectl", "create", "namespace", NAMESPACE], capture_output=True, check=False)
    operator = start_operator()
    load: subprocess.Popen[bytes] | None = None
    report: Path | None = None
    followed: Path | None = None
    live = PILOT
    try:
        say(f"The {PILOT} pilot: kubectl apply -f {SCENE.manifest.relative_to(ROOT)}")
        # a pilot an interrupted run left behind would carry its status over: it goes first
        kubectl("delete", "speculationpilot", PILOT, "--ignore-not-found", "--timeout=120s", check=False)
        if SCENARIO:
            kubectl("delete", "speculationpilot", FOLLOW_UP, "--ignore-not-found", "--timeout=120s", check=False)
            shutil.rmtree(FOLLOW_UP_DIR, ignore_errors=True)  # an earlier run's follow-up package
        if WORKLOAD:
            print(
                f"  the team's engine: kubectl apply -f {TEAM_MANIFEST.relative_to(ROOT)} (and a volume for its claim)"
            )
            kubectl("apply", "-f", "-", input=team_service(NAMESPACE))
        load = launch(PILOT, pilot_manifest())
        scopes = watch(PILOT, settled)
        summary()
        report = decisions()
        if not settled(scopes):
            expected = ", ".join(f"{name} {state}" for name, state in SCENE.outcomes.items())
            sys.exit(f"the scopes did not reach {expected} within {TIMEOUT:.0f} s")
        manifest = take_follow_up() if SCENARIO and report is not None else None
        if manifest is not None:
            first = status()
            stop_load(load)
            load = None
            say(f"{PILOT} makes way: kubectl delete speculationpilot {PILOT} (flip to baseline, then the arms)")
            kubectl("delete", "speculationpilot", PILOT, "--timeout=120s", check=False)
            live = FOLLOW_UP
            say(f"The follow-up pilot {FOLLOW_UP}, under the same load")
            load = launch(FOLLOW_UP, manifest)
            watch(FOLLOW_UP, every_scope_settled)
            summary(FOLLOW_UP)
            followed = decisions(FOLLOW_UP, FOLLOW_UP_DIR)
            side_by_side(first, status(FOLLOW_UP), followed)
    finally:
        if load is not None:
            stop_load(load)
        say("Cleaning up: deleting the pilot (flip to baseline, then the arms), stopping the operator")
        kubectl("delete", "speculationpilot", live, "--timeout=120s", check=False)
        if live == FOLLOW_UP:
            kubectl("delete", "configmap", f"{FOLLOW_UP}-workload", "--ignore-not-found", check=False)
        operator.terminate()
        operator.wait(timeout=30)
    print("  the cluster keeps running: make cluster-down stops it")
    if report is not None:
        print(f"  the handover package (report.md, report.json, plots/, replay/): {report.parent}")
        print(f"  its summary: {report}")
    if followed is not None:
        print(f"  the follow-up's package: {followed.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
