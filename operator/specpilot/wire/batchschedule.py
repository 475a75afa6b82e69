"""vLLM's dynamic speculative decoding schedule: the draft tokens (k) each step proposes, by batch size.

One home for the rules both sides hold: the operator renders a pilot's schedule into
`--speculative-config`, the report recommends one, and the mock engine refuses at start-up what vLLM
refuses and looks up each step's k the way vLLM does. The rules are vLLM 0.33's
(`vllm/v1/spec_decode/dynamic/utils.py`):

- the field is a non-empty list of 3-item inclusive ranges ``[range_start, range_end, k]``, each
  positive, start <= end, k >= 0; sorted by start they must not overlap, and the first starts at 1;
- the dense lookup fills each range with ``min(k, num_speculative_tokens)``, a gap between ranges and the
  tail after the last carry the previous range's k, and batches past the engine's max_num_seqs are cut;
- k = 0 is a step without drafting.

Later vLLM (built from main) names the field ``speculative_token_schedule`` and adds 5-item entries on a
batch x context grid; the 3-item form is still accepted there, so a schedule over batch size alone
renders in either, under the key of the engine's `VllmRelease`, with that key in each message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class VllmRelease(StrEnum):
    """The vLLM the engine runs, for what it names the schedule's field."""

    V0_33 = "0.33"
    MAIN = "main"

    @property
    def schedule_key(self) -> str:
        """The `--speculative-config` key of the batch-size schedule in this release."""
        return "num_speculative_tokens_per_batch_size" if self is VllmRelease.V0_33 else "speculative_token_schedule"


class ScheduleError(ValueError):
    """A schedule vLLM refuses at start-up, with vLLM's message."""


@dataclass(frozen=True, order=True)
class BatchRange:
    """Batches `start` to `end` (inclusive) each propose `k` draft tokens a step."""

    start: int
    end: int
    k: int

    def render(self) -> list[int]:
        return [self.start, self.end, self.k]


def _entry(item: object, key: str) -> BatchRange:
    if not isinstance(item, list | tuple) or len(item) != 3:
        raise ScheduleError(
            f"Each {key} entry must be a 3-item sequence: (range_start, range_end, num_speculative_tokens)."
        )
    try:
        start, end, k = (int(v) for v in item)
    except (TypeError, ValueError) as error:
        raise ScheduleError(f"{key} entries must hold integers: {item!r}") from error
    if start <= 0 or end <= 0:
        raise ScheduleError(f"Batch-size range ({start}, {end}) must be positive.")
    if start > end:
        raise ScheduleError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
    if k < 0:
        raise ScheduleError(f"{key} values must be >= 0.")
    return BatchRange(start, end, k)


def validate(entries: object, release: VllmRelease = VllmRelease.V0_33) -> tuple[BatchRange, ...]:
    """`entries` as vLLM reads them at start-up (sorted by start), or the ScheduleError vLLM raises."""
    key = release.schedule_key
    if entries is None:
        raise ScheduleError(f"{key} is required for dynamic speculative decoding.")
    if not isinstance(entries, list):
        raise ScheduleError(
            f"{key} must be a non-empty list of (range_start, range_end, num_speculative_tokens) entries."
        )
    if not entries:
        raise ScheduleError(f"{key} must not be empty.")
    ranges = sorted((_entry(item, key) for item in entries), key=lambda r: r.start)
    previous_end = 0
    for found in ranges:
        if found.start <= previous_end:
            raise ScheduleError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = found.end
    if ranges[0].start != 1:
        raise ScheduleError(
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule."
        )
    return tuple(ranges)


def lookup(ranges: Sequence[BatchRange], max_batch: int, num_speculative_tokens: int) -> tuple[int, ...]:
    """The dense k by batch size (index 0 unused) for an engine of `max_batch` sequences drafting at
    most `num_speculative_tokens`: gaps and the tail carry the previous range's k."""
    if max_batch <= 0:
        raise ScheduleError("vllm_max_batch_size must be > 0.")
    if num_speculative_tokens <= 0:
        raise ScheduleError("vllm_num_speculative_tokens must be > 0.")
    dense = [0] * (max_batch + 1)
    carried = min(ranges[0].k, num_speculative_tokens)
    nxt = 1
    for found in sorted(ranges):
        for batch in range(nxt, min(found.start, max_batch + 1)):
            dense[batch] = carried
        carried = min(found.k, num_speculative_tokens)
        for batch in range(max(found.start, nxt), min(found.end, max_batch) + 1):
            dense[batch] = carried
        nxt = max(nxt, found.end + 1)
    for batch in range(nxt, max_batch + 1):
        dense[batch] = carried
    return tuple(dense)


def k_at(dense: Sequence[int], batch: int) -> int:
    """The k a step of `batch` running sequences proposes (batches past the table take its last)."""
    return dense[min(max(batch, 1), len(dense) - 1)]


def switched_off_above(ranges: Sequence[BatchRange]) -> int | None:
    """The largest batch that still drafts, where every larger batch proposes k = 0 (the schedule's
    switch); None where drafting never stops for good."""
    ordered = sorted(ranges)
    if ordered[-1].k != 0:
        return None
    last_drafting = max((r for r in ordered if r.k > 0), key=lambda r: r.start, default=None)
    if last_drafting is None:
        return 0
    zero_from = min(r.start for r in ordered if r.start > last_drafting.start)
    return zero_from - 1


def below_and_off(k: int, batch: int) -> tuple[BatchRange, ...]:
    """The schedule that drafts `k` tokens up to `batch` sequences and none above."""
    return (BatchRange(1, batch, k), BatchRange(batch + 1, batch + 1, 0))
