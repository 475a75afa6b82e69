"""One proxied request as it goes: the engine's response relayed to the client piece by piece, the
facts of how it ended, and the request sample a measured one becomes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import orjson

from specpilot.router.core.choice import Endpoint
from specpilot.router.core.outcome import Facts, Failure, StreamEnd, request_outcome
from specpilot.router.core.stream_meter import StreamMeter, usage_tokens
from specpilot.router.recipient import Recipient
from specpilot.router.rewrite import relayed
from specpilot.router.server import ERROR_TYPES
from specpilot.router.upstream import UpstreamConnection
from specpilot.wire.buckets import FineCounts
from specpilot.wire.names import Arm
from specpilot.wire.samples import Fallback, RequestSample, deadline_met

_MAX_KEPT_RESPONSE = 8 << 20  # a whole (non-streamed) answer is kept up to this size to read its usage


class Failed(Exception):
    """The upstream exchange failed; `before_response`: no byte of a response came (safe to retry)."""

    def __init__(self, exc: Exception, *, before_response: bool) -> None:
        super().__init__(repr(exc))
        self.exc, self.before_response = exc, before_response


@dataclass(slots=True, eq=False, kw_only=True)
class Exchange:
    """One proxied request as it goes: the upstream response's `Sink`, and the facts of its outcome.

    `client` gets the answer: the client's connection, or nobody for a mirrored copy.
    """

    client: Recipient
    measured: bool
    started: float  # monotonic
    scope: str
    arm: Arm
    model: str = ""
    stream: bool = False
    deadline: float | None = None
    strip_usage: bool = False  # the router asked for the usage chunk: the client does not get it
    fallback: Fallback | None = None
    at: float = field(init=False)  # wall-clock start, Unix seconds
    endpoint: Endpoint | None = None
    conn: UpstreamConnection | None = None
    finished: asyncio.Future[None] | None = None
    status: int = 0
    responded: bool = False  # the response head went to the client
    delivered: bool = False  # the client has the whole answer
    failure: Failure | None = None
    timed_out: bool = False
    cancelled: bool = False
    meter: StreamMeter | None = None
    keep: list[bytes] | None = None
    kept: int = 0
    tokens: int | None = None
    prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        self.at = time.time() - (time.monotonic() - self.started)

    def facts(self) -> Facts:
        meter = self.meter
        stream = None
        if meter is not None:
            stream = StreamEnd.ERROR_EVENT if meter.error else StreamEnd.DONE if meter.done else StreamEnd.UNFINISHED
        return Facts(
            status=self.status,
            responded=self.responded,
            delivered=self.delivered,
            failure=self.failure,
            timed_out=self.timed_out,
            cancelled=self.cancelled,
            stream=stream,
        )

    def send(self, conn: UpstreamConnection, request: bytes, *, head_only: bool) -> asyncio.Future[None]:
        self.conn = conn
        self.finished = asyncio.get_running_loop().create_future()
        self.client.flow.attach(conn.transport)
        conn.send(request, self, head_only=head_only)
        return self.finished

    def detach(self) -> None:
        """Stop relaying; an exchange still under way upstream is abandoned (the engine cancels it)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            self.client.flow.detach(conn.transport)
            conn.abandon()

    def _done(self) -> None:
        """The connection is done with this exchange (back in the pool, or closed)."""
        if self.conn is not None:
            self.client.flow.detach(self.conn.transport)
            self.conn = None

    # Sink

    def head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        block, length, event_stream = relayed(headers, named=(self.arm, self.scope) if self.measured else None)
        if self.measured:
            if self.stream and event_stream:
                self.meter = StreamMeter(strip_usage=self.strip_usage)
                length = None  # the usage chunk the router asked for may be taken out
            elif status < 300:
                self.keep = []
        self.client.respond(status, reason.decode("latin-1"), block, length)
        self.responded = True

    def body(self, data: bytes) -> None:
        meter = self.meter
        if meter is not None:
            out = meter.feed(data, time.monotonic())
            if out:
                self.client.write(out)
                self.delivered = meter.done  # [DONE] is out: whatever happens next, the client has it all
            return
        keep = self.keep
        if keep is not None:
            self.kept += len(data)
            if self.kept <= _MAX_KEPT_RESPONSE:
                keep.append(data)
            else:
                self.keep = None
        self.client.write(data)

    def end(self) -> None:
        self._done()
        meter = self.meter
        if meter is not None:
            self.client.write(meter.finish())
        else:
            self.delivered = True
            if self.keep is not None:
                self.tokens, self.prompt_tokens = usage_tokens(b"".join(self.keep))
        self.client.finish()
        if self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    def failed(self, exc: Exception, *, before_response: bool) -> None:
        self._done()
        if self.finished is not None and not self.finished.done():
            self.finished.set_exception(Failed(exc, before_response=before_response))

    # Ending a response that has started

    def cut(self, message: str) -> None:
        """An SSE error event when streaming, else a cut connection (a cut body is not a whole one)."""
        if self.meter is None:
            self.client.cut()
            return
        status = 504 if self.timed_out else 502
        error = {"error": {"message": message, "type": ERROR_TYPES[status], "param": None, "code": status}}
        self.client.write(b"data: " + orjson.dumps(error) + b"\n\ndata: [DONE]\n\n")
        self.client.finish()


def request_sample(ex: Exchange, *, seq: int, e2e: float) -> RequestSample:
    """What a measured exchange that has ended becomes."""
    outcome, status = request_outcome(ex.facts())
    meter = ex.meter
    tokens, prompt_tokens, ttft, decode = ex.tokens, ex.prompt_tokens, None, None
    if meter is not None:
        tokens = meter.usage_tokens if meter.usage_tokens is not None else meter.content_chunks
        prompt_tokens = meter.usage_prompt_tokens
        ttft, decode = meter.timing(ex.started)
    return RequestSample(
        seq=seq,
        at=ex.at,
        scope=ex.scope,
        arm=ex.arm,
        endpoint=ex.endpoint.address if ex.endpoint is not None else "",
        model=ex.model[:200],
        stream=ex.stream,
        status=status,
        outcome=outcome,
        e2e=e2e,
        ttft=ttft,
        output_tokens=tokens,
        prompt_tokens=prompt_tokens,
        tokens_from_usage=tokens is not None and (meter is None or meter.usage_tokens is not None),
        decode=decode,
        deadline_met=deadline_met(outcome, e2e, ex.deadline),
        fallback=ex.fallback.value if ex.fallback is not None else None,
        chunk_gaps=meter.chunk_gaps() if meter is not None else FineCounts(),
    )
