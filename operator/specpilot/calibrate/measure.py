"""Step costs of a team's decoder and its draft, measured on this machine's GPU, for the cost model.

A forward pass costs the same whatever its weights hold, so random weights of the model's shapes
(read from its `config.json`) stand in for the model: no weights are downloaded. Each step runs a
batch of sequences, each with `q` new tokens over `ctx` cached ones: q = 1 is a decode step, q = k + 1
verifies k draft tokens, ctx = 0 with a large q is a prefill. On a GPU each shape is captured once in
a CUDA graph and replayed (as vLLM runs decode steps), in bf16; on a CPU (tiny shapes, for tests) it
runs eagerly in float32. Left out, so a real engine costs somewhat more: RoPE, the embedding lookup,
sampling, the scheduler's CPU time, paged-attention block tables.

This file is standalone on purpose (the standard library of Python 3.10 or later, and torch 2.4 or later
imported when measuring): `kubectl specpilot calibrate` hands it to a pod of the team's own image, which
has torch but not specpilot.

    python3 measure.py --target config.json [--draft draft/config.json] [--grid quick] [--out FILE]

The measurements go to stdout as one line after MARKER (the plugin reads them from the pod's log), and
to --out; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

MARKER = "specpilot-stepcost: "
METHOD = "specpilot calibrate: random weights of the config's shapes, one forward pass per step"
Json = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Shape:
    """What a Llama-shaped decoder's step cost depends on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    vocab: int

    @property
    def params(self) -> int:
        """Weights read per step: the layers' and the LM head's (the embedding table is only looked up)."""
        attention = (
            self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim + self.heads * self.head_dim * self.hidden
        )
        layer = attention + 3 * self.hidden * self.mlp + 2 * self.hidden
        return self.layers * layer + self.vocab * self.hidden


MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")


def shape_of(config: Mapping[str, Any]) -> Shape:
    """The shape a Hugging Face `config.json` describes (a multimodal model's `text_config`); a ValueError
    names what is missing or inconsistent."""
    if "hidden_size" not in config and isinstance(config.get("text_config"), Mapping):
        config = config["text_config"]
    if any(config.get(key) for key in MOE_KEYS):
        raise ValueError("a mixture-of-experts model: only dense decoders are measured")

    def number(key: str, default: int | None = None) -> int:
        value = config.get(key, default)
        if value is None:
            raise ValueError(f"config.json has no {key}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"config.json's {key} is {value!r}, not a positive integer")
        return value

    hidden, heads = number("hidden_size"), number("num_attention_heads")
    kv_heads = number("num_key_value_heads", heads)
    head_dim = number("head_dim") if config.get("head_dim") is not None else hidden // heads
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    return Shape(
        hidden=hidden,
        layers=number("num_hidden_layers"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        mlp=number("intermediate_size"),
        vocab=number("vocab_size"),
    )


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """Every (batch, q, ctx) combination of one model's steps."""

    role: str  # "target" or "draft"
    batches: tuple[int, ...]
    qs: tuple[int, ...]
    ctxs: tuple[int, ...]


BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Per grid: the target's decode and verification steps, their dependence on context, prefill steps, and
# the draft's own decode steps. `tiny` is for tiny shapes on a CPU (tests).
GRIDS: dict[str, tuple[Sweep, ...]] = {
    "tiny": (
        Sweep(role="target", batches=(1, 8, 64), qs=(1, 3), ctxs=(32,)),
        Sweep(role="target", batches=(1, 8), qs=(1,), ctxs=(128,)),
        Sweep(role="target", batches=(1,), qs=(32,), ctxs=(0,)),
        Sweep(role="draft", batches=(1, 8, 64), qs=(1,), ctxs=(32,)),
    ),
    "quick": (
        Sweep(role="target", batches=(1, 4, 16, 64, 256), qs=(1, 3, 5), ctxs=(1024,)),
        Sweep(role="target", batches=(1, 64), qs=(1, 5), ctxs=(256, 4096)),
        Sweep(role="target", batches=(1,), qs=(256, 1024), ctxs=(0,)),
        Sweep(role="draft", batches=(1, 4, 16, 64, 256), qs=(1,), ctxs=(1024,)),
    ),
    "standard": (
        Sweep(role="target", batches=BATCHES, qs=(1, 2, 3, 4, 5, 6, 8), ctxs=(1024,)),
        Sweep(role="target", batches=(1, 16, 64), qs=(1, 5), ctxs=(256, 4096)),
        Sweep(role="target", batches=(1, 4), qs=(256, 1024), ctxs=(0,)),
        Sweep(role="draft", batches=BATCHES, qs=(1,), ctxs=(1024,)),
    ),
}


def plan(grid: str, *, roles: Sequence[str], max_batch: int | None = None) -> tuple[Sweep, ...]:
    """The grid's sweeps of the models given, without batches above `max_batch`."""
    sweeps = []
    for sweep in GRIDS[grid]:
        batches = tuple(b for b in sweep.batches if max_batch is None or b <= max_batch)
        if sweep.role in roles and batches:
            sweeps.append(Sweep(role=sweep.role, batches=batches, qs=sweep.qs, ctxs=sweep.ctxs))
    return tuple(sweeps)


def steps(sweep: Sweep) -> Iterator[tuple[int, int, int]]:
    """(batch, q, ctx) in the order measured: batches ascending last, so an out-of-memory batch ends its row."""
    for ctx in sweep.ctxs:
        for q in sweep.qs:
            for batch in sweep.batches:
                yield batch, q, ctx


def summary(name: str, batch: int, q: int, ctx: int, times_ms: Sequence[float], *, graph: bool) -> Json:
    """One measured step as a row: the median, fastest and 90th percentile of its replays."""
    ordered = sorted(times_ms)
    p90 = ordered[math.floor(0.9 * (len(ordered) - 1))]
    row: Json = {"model": name, "batch": batch, "q": q, "ctx": ctx, "graph": graph}
    return {**row, "ms": ordered[len(ordered) // 2], "ms_min": ordered[0], "ms_p90": p90}


ROW_KEYS = ("model", "batch", "q", "ctx")
TIMES = ("ms", "ms_min", "ms_p90")


def problems(document: Any) -> list[str]:
    """What makes a measurements document unreadable to the cost model's fit (nothing: readable)."""
    if not isinstance(document, dict):
        return ["not a JSON object"]
    found = [f"no {key}" for key in ("gpu", "torch", "rows") if key not in document]
    rows = document.get("rows")
    if not isinstance(rows, list):
        return [*found, "rows is not a list"] if "rows" in document else found
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            found.append(f"rows[{index}] is not an object")
            continue
        found += [f"rows[{index}] has no {key}" for key in ROW_KEYS if key not in row]
        if "error" not in row:
            bad = [key for key in TIMES if not isinstance(row.get(key), int | float) or row[key] <= 0]
            found += [f"rows[{index}].{key} is no positive time" for key in bad]
    if not any(isinstance(r, dict) and "ms" in r for r in rows):
        found.append("no row was measured")
    return found


# ---- torch from here on: imported when measuring only --------------------------------------------------


class Decoder:
    """A Llama-shaped decoder of random weights: per layer a fused QKV and gate-up projection, grouped-query
    attention over a static KV cache, and the LM head."""

    def __init__(self, shape: Shape, torch: Any, device: str, dtype: Any) -> None:
        self.shape, self.torch, self.device, self.dtype = shape, torch, device, dtype
        s = shape

        def weight(*size: int) -> Any:
            return torch.randn(*size, device=device, dtype=dtype) * 0.02

        def ones() -> Any:
            return torch.ones(s.hidden, device=device, dtype=dtype)

        self.layers = [
            {
                "qkv": weight((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden),
                "out": weight(s.hidden, s.heads * s.head_dim),
                "gate_up": weight(2 * s.mlp, s.hidden),
                "down": weight(s.hidden, s.mlp),
                "norm_attention": ones(),
                "norm_mlp": ones(),
            }
            for _ in range(s.layers)
        ]
        self.norm, self.head = ones(), weight(s.vocab, s.hidden)

    def cache(self, batch: int, length: int) -> list[tuple[Any, Any]]:
        size = (batch, self.shape.kv_heads, length, self.shape.head_dim)

        def zeros() -> Any:
            return self.torch.zeros(size, device=self.device, dtype=self.dtype)

        return [(zeros(), zeros()) for _ in self.layers]

    def forward(self, x: Any, cache: Sequence[tuple[Any, Any]], ctx: int) -> Any:
        """x: [batch, q, hidden]; the q tokens' K and V are written at ctx.. of the cache."""
        functional = self.torch.nn.functional
        s, (batch, q, _) = self.shape, x.shape
        group = s.heads // s.kv_heads
        for layer, (keys, values) in zip(self.layers, cache, strict=True):
            y = functional.rms_norm(x, (s.hidden,), layer["norm_attention"])
            query, key, value = (y @ layer["qkv"].t()).split(
                [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1
            )
            keys[:, :, ctx : ctx + q].copy_(key.reshape(batch, q, s.kv_heads, s.head_dim).transpose(1, 2))
            values[:, :, ctx : ctx + q].copy_(value.reshape(batch, q, s.kv_heads, s.head_dim).transpose(1, 2))
            # Grouped-query attention as decode kernels run it: a KV head's query heads, times the q tokens,
            # form one block of queries, so each K and V is read once and never repeated per query head.
            blocks = query.reshape(batch, q, s.kv_heads, group, s.head_dim).permute(0, 2, 3, 1, 4)
            blocks = blocks.reshape(batch, s.kv_heads, group * q, s.head_dim)
            attended = functional.scaled_dot_product_attention(blocks, keys[:, :, : ctx + q], values[:, :, : ctx + q])
            attended = attended.reshape(batch, s.kv_heads, group, q, s.head_dim).permute(0, 3, 1, 2, 4)
            x = x + attended.reshape(batch, q, s.heads * s.head_dim) @ layer["out"].t()
            gate, up = (functional.rms_norm(x, (s.hidden,), layer["norm_mlp"]) @ layer["gate_up"].t()).chunk(2, -1)
            x = x + (functional.silu(gate) * up) @ layer["down"].t()
        return functional.rms_norm(x, (s.hidden,), self.norm) @ self.head.t()


def _timed_gpu(torch: Any, step: Callable[[], Any], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return times


def _timed_cpu(step: Callable[[], Any], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def _measure_gpu(torch: Any, forward: Callable[[], Any], reps: int) -> tuple[list[float], bool]:
    """The step's times replayed from a CUDA graph, else (a shape the graph cannot capture) eagerly."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture asks
        for _ in range(2):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
    except RuntimeError:
        return _timed_gpu(torch, forward, reps), False
    return _timed_gpu(torch, graph.replay, reps), True


def measure_step(torch: Any, model: Decoder, name: str, step: tuple[int, int, int], reps: int) -> Json:
    batch, q, ctx = step
    cache = model.cache(batch, ctx + q)
    x = torch.randn(batch, q, model.shape.hidden, device=model.device, dtype=model.dtype)

    def forward() -> Any:
        return model.forward(x, cache, ctx)

    with torch.no_grad():
        if model.device == "cuda":
            times, graph = _measure_gpu(torch, forward, reps)
        else:
            forward()  # warm-up
            times, graph = _timed_cpu(forward, reps), False
    return summary(name, batch, q, ctx, times, graph=graph)


def run(
    models: Mapping[str, tuple[str, Shape]],
    sweeps: Sequence[Sweep],
    *,
    device: str,
    reps: int,
    budget_s: float,
    progress: Callable[[str], None] = lambda line: None,
) -> Json:
    """Measure every step of the sweeps; `models` maps a role to its name and shape. Stops at the budget
    (the document says so); a step that fails (out of memory) is a row with its error, and ends its row."""
    import torch  # noqa: PLC0415 - torch is the measuring pod's, not the project's, dependency

    started = time.monotonic()
    rows: list[Json] = []
    document = _document(torch, models, device=device, rows=rows)
    loaded: tuple[str, Decoder] | None = None
    for sweep in sweeps:
        name, shape = models[sweep.role]
        if loaded is None or loaded[0] != sweep.role:
            loaded = None  # the previous model's memory goes before the next one's
            loaded = _load(torch, sweep, name, shape, device=device, rows=rows, progress=progress)
            if loaded is None:
                continue
        _sweep(
            torch,
            loaded[1],
            name,
            sweep,
            device=device,
            reps=reps,
            started=started,
            budget_s=budget_s,
            document=document,
            progress=progress,
        )
        if "stopped" in document:
            break
    document["elapsed_s"] = round(time.monotonic() - started, 3)
    return document


def _document(torch: Any, models: Mapping[str, tuple[str, Shape]], *, device: str, rows: list[Json]) -> Json:
    """The measurement document's header: the device, the models' shapes, and the rows to come."""
    on_gpu = device == "cuda"
    return {
        "gpu": torch.cuda.get_device_name() if on_gpu else "cpu",
        "torch": str(torch.__version__),
        "device": device,
        "dtype": "bfloat16" if on_gpu else "float32",
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017 - Python 3.10 too
        "method": METHOD,
        "roles": {role: name for role, (name, _) in models.items()},
        "shapes": {name: asdict(shape) for name, shape in models.values()},
        "params": {name: shape.params for name, shape in models.values()},
        "rows": rows,
    }


def _load(
    torch: Any,
    sweep: Sweep,
    name: str,
    shape: Shape,
    *,
    device: str,
    rows: list[Json],
    progress: Callable[[str], None],
) -> tuple[str, Decoder] | None:
    """A sweep's model on the device; None, and a row with the error, where it does not load."""
    on_gpu = device == "cuda"
    if on_gpu:
        torch.cuda.empty_cache()
    try:
        return (sweep.role, Decoder(shape, torch, device, torch.bfloat16 if on_gpu else torch.float32))
    except (RuntimeError, MemoryError) as error:
        batch, q, ctx = next(steps(sweep))
        rows.append({"model": name, "batch": batch, "q": q, "ctx": ctx, "error": f"loading: {error}"[:300]})
        progress(f"{name}: {rows[-1]['error']}")
        return None


def _sweep(
    torch: Any,
    model: Decoder,
    name: str,
    sweep: Sweep,
    *,
    device: str,
    reps: int,
    started: float,
    budget_s: float,
    document: Json,
    progress: Callable[[str], None],
) -> None:
    """Measure a sweep's steps into the document's rows, until the budget is spent (then `stopped`)."""
    rows: list[Json] = document["rows"]
    failed: set[tuple[int, int]] = set()
    for step in steps(sweep):
        if time.monotonic() - started > budget_s:
            document["stopped"] = "budget"
            break
        if (step[1], step[2]) in failed:
            continue  # a larger batch than one that ran out of memory
        try:
            rows.append(measure_step(torch, model, name, step, reps))
        except (RuntimeError, MemoryError) as error:
            rows.append({"model": name, "batch": step[0], "q": step[1], "ctx": step[2], "error": str(error)[:300]})
            failed.add((step[1], step[2]))
        if device == "cuda":
            torch.cuda.empty_cache()  # the step's cache and graph go before the next step's
        row = rows[-1]
        progress(f"{name} batch {step[0]} q {step[1]} ctx {step[2]}: {row.get('ms', row.get('error'))}")


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the target model's config.json")
    parser.add_argument("--draft", help="the draft model's config.json (an EAGLE head's: its one layer)")
    parser.add_argument("--target-name", default="target", help="the target's name in the rows")
    parser.add_argument("--draft-name", default="draft", help="the draft's name in the rows")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="quick", help="which steps (default: quick)")
    parser.add_argument("--max-batch", type=int, help="leave out larger batches")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--reps", type=int, default=15, help="replays per step (default: 15)")
    parser.add_argument("--budget-s", type=float, default=600.0, help="stop measuring after this long")
    parser.add_argument("--out", help="also write the measurements to this file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    models: dict[str, tuple[str, Shape]] = {}
    for role, path, name in (("target", args.target, args.target_name), ("draft", args.draft, args.draft_name)):
        if path is None:
            continue
        try:
            models[role] = (name, shape_of(json.loads(Path(path).read_text())))
        except (OSError, ValueError) as error:
            print(f"error: {role} {path}: {error}", file=sys.stderr)
            return 1
    try:
        import torch  # noqa: PLC0415 - see run()
    except ImportError as error:
        print(f"error: no torch here ({error}): measuring needs an image with torch 2.4 or later", file=sys.stderr)
        return 1
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        print(f"error: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 1
    sweeps = plan(args.grid, roles=list(models), max_batch=args.max_batch)
    document = run(
        models,
        sweeps,
        device=device,
        reps=args.reps,
        budget_s=args.budget_s,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    text = json.dumps(document, separators=(",", ":"))
    if args.out:
        Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(MARKER + text, flush=True)
    found = problems(document)
    if found:
        print(f"error: {'; '.join(found)}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
