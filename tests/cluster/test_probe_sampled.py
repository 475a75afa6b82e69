"""A sampled scope whose speculative answers score worse through the team's own rater is flipped back.

The rater is a score webhook on 127.0.0.1 that this test starts: the operator runs as a local process,
so it reaches it once allowed to (`--allow-outbound 127.0.0.1:*`). It scores each answer by its share
of distinct words. A repetition fault on the speculative pod's mock engine makes that arm's answers
loop on their last words until they are cut, so they score low, while the rater never learns which
arm answered: the sampled check shows the speculative scores worse and flips chat."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from specpilot.testing.waiting import wait_until
from tests.cluster.faults import chat, fault_pilot, inject
from tests.cluster.local import Cluster
from tests.cluster.operator_process import Operator, pilot, running_operator, start_load, wait_ready
from tests.cluster.pilots import PROFILE, TIME_SCALE, router_ip, use_profile

pytestmark = pytest.mark.cluster

# Short natural answers (16 tokens on average) end by themselves well within maxTokens on a healthy arm.
SHORT_ANSWERS = {**PROFILE, "model": {"mean_output_tokens": 16}}
LOOPING = {"kind": "repetition", "rate": 1.0, "after_tokens": 4}


class Rater:
    """A score webhook on loopback: an answer's share of distinct words, and every body it was sent."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    received.append(body)
                words = str(body["answer"]["text"]).split()
                reply = json.dumps({"score": len(set(words)) / max(len(words), 1)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/score"


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("sampled") / "operator.log"
    with running_operator(cluster, log, "--allow-outbound", "127.0.0.1:*") as running:
        yield running


@pytest.fixture
def rater() -> Iterator[Rater]:
    found = Rater()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()
        thread.join(timeout=5)


def test_a_sampled_scope_whose_answers_score_worse_through_a_webhook_is_flipped(
    cluster: Cluster, operator: Operator, namespace: str, rater: Rater
) -> None:
    doc = fault_pilot()
    spec = doc["spec"]
    use_profile(spec, SHORT_ANSWERS, time_scale=TIME_SCALE)
    case = {
        "kind": "sampled",
        "prompt": "A customer cannot log in after resetting their password. Reply to them.",
        "temperature": 0.8,
        "repeats": 8,
        "maxTokens": 48,
        "score": {"webhook": {"url": rater.url, "timeout": "5s", "metadata": {"rubric": "distinct-words"}}},
    }
    spec["quality"] = {"probes": {"interval": "10s", "cases": [case]}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_ready(cluster, operator, namespace)
    load = start_load(cluster, router_ip(cluster, namespace), seconds=90)
    try:
        inject(cluster, namespace, LOOPING)
        injected = datetime.now(UTC)
        try:
            wait_until(
                "chat flipped back",
                lambda: chat(cluster, namespace).get("state") == "RolledBack",
                timeout=75,
                every=0.5,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}: {chat(cluster, namespace)}\n{operator.tail(40)}") from None
    finally:
        load.terminate()
        load.wait(timeout=30)
    (record,) = pilot(cluster, namespace)["status"]["fallbacks"]
    assert (record["scope"], record["reason"], record["metric"]) == ("chat", "QualityRegression", "probeSampled")
    assert record["observed"] > record["threshold"] == 0.5  # the share of untied pairs the speculative arm lost
    assert datetime.fromisoformat(record["at"]) >= injected.replace(microsecond=0)
    assert "sampled probe scores worse than the baseline's" in chat(cluster, namespace)["lastWindow"]["reason"]
    # The rater got each answer with its case and the metadata, and never which arm gave it.
    assert rater.received
    assert {tuple(sorted(body)) for body in rater.received} == {("answer", "case", "metadata")}
    assert {body["case"]["prompt"] for body in rater.received} == {case["prompt"]}
    assert {body["metadata"]["rubric"] for body in rater.received} == {"distinct-words"}
