"""`specpilot mock-vllm`: assemble the engine, metrics and apps, and serve them.

`MockServer` is the whole server in one object, so tests and benchmarks can run it in-process
on loopback port 0; `main` is the command-line entry point with `vllm serve`'s flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from specpilot.mockvllm.apimetrics import HttpMetrics, ToolParserMetrics, new_registry
from specpilot.mockvllm.cmdline import PROG, ConfigError
from specpilot.mockvllm.config import VLLM_VERSION, EngineLimits, ServeConfig, parse_args, resolve_limits
from specpilot.mockvllm.engine import Engine, ModelClock
from specpilot.mockvllm.faults import FaultBoard
from specpilot.mockvllm.http_api import ServerState, build_admin_app, build_app
from specpilot.mockvllm.metrics import EngineMetrics
from specpilot.mockvllm.profile import Profile, ProfileError, load_profile

log = logging.getLogger("specpilot.mockvllm")


def cache_config_info(config: ServeConfig, limits: EngineLimits, profile: Profile) -> dict[str, str]:
    """`vllm:cache_config_info` labels: str() of each CacheConfig attribute, as vLLM 0.33 has them."""
    block, blocks = limits.block_size, limits.num_gpu_blocks
    return {
        "block_size": str(block),
        "user_specified_block_size": str(config.block_size is not None),
        "kv_cache_layout": "NHD",
        "prefix_match_unit": str(block),
        "gpu_memory_utilization": str(config.gpu_memory_utilization),
        "cache_dtype": "auto",
        "is_attention_free": "False",
        "num_gpu_blocks_override": str(profile.memory.num_gpu_blocks),
        "sliding_window": "None",
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "prefix_caching_hash_algo": "sha256",
        "prefix_cache_retention_interval": "0",
        "kv_cache_dtype_skip_layers": "[]",
        "mamba_page_size_padded": "None",
        "skip_page_size_padded": "None",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "enable_mamba_shared_prefix_checkpoint": "False",
        "replayssm_buffer_len": "16",
        "use_replayssm": "False",
        "use_kda_recoverssm": "False",
        "num_gpu_blocks": str(blocks),
        "num_cpu_blocks": "None",
        "simple_cpu_offload_num_blocks": "None",
        "effective_attention_block_size": str(block),
        "kv_cache_size_tokens": str(blocks * block),
        "kv_cache_max_concurrency": str(round(blocks * block / limits.max_model_len, 2)),
        "hash_block_size": str(block),
        "cache_hit_alignment_tokens": str(block),
        "kv_sharing_fast_prefill": "False",
        "swa_bounded_replay": "False",
        "kv_cache_memory_bytes": "None",
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
        "_block_size_resolved": "True",
    }


def _exit_process(exit_code: int) -> None:
    log.error("EngineCore died unexpectedly (injected crash); exiting with code %d", exit_code)
    logging.shutdown()
    os._exit(exit_code)


class MockServer:
    """One mock vLLM server: engine, metrics, API app and admin app."""

    def __init__(
        self,
        config: ServeConfig,
        profile: Profile,
        *,
        on_crash: Callable[[int], None] = _exit_process,
        env: dict[str, str] | None = None,
    ) -> None:
        env = dict(os.environ) if env is None else env
        self.config = config
        self.limits = resolve_limits(config, profile)
        self.registry = registry = new_registry()
        # With --disable-log-stats vLLM registers no engine families; the engine still needs sinks.
        engine_registry = CollectorRegistry() if config.disable_log_stats else registry
        metrics = EngineMetrics(
            engine_registry,
            model_name=config.model_name,
            max_model_len=self.limits.max_model_len,
            num_speculative_tokens=self.limits.num_speculative_tokens,
            cache_info=cache_config_info(config, self.limits, profile),
            custom_buckets=config.custom_histogram_buckets,
            kv_cache_metrics=config.kv_cache_metrics,
            corrupted_requests="1" in (env.get("VLLM_COMPUTE_NANS_IN_LOGITS"), env.get("VLLM_RAISE_ON_LOGIT_NANS")),
        )
        self.faults = FaultBoard(seed=config.seed)
        for spec in profile.faults:
            self.faults.add(spec, 0.0)
        self.engine = Engine(
            limits=self.limits,
            profile=profile,
            metrics=metrics,
            faults=self.faults,
            clock=ModelClock(config.time_scale),
            seed=config.seed,
            tensor_parallel_size=config.tensor_parallel_size,
            enable_chunked_prefill=config.enable_chunked_prefill,
            max_num_queued_reqs=config.max_num_queued_reqs,
            max_num_queued_tokens=config.max_num_queued_tokens,
            kv_cache_metrics_sample=config.kv_cache_metrics_sample,
            enable_mfu_metrics=config.enable_mfu_metrics,
            on_crash=on_crash,
        )
        state = ServerState(
            config=config,
            limits=self.limits,
            profile=profile,
            engine=self.engine,
            faults=self.faults,
            registry=registry,
            http_metrics=HttpMetrics(registry),
            started=int(time.time()),
            tool_metrics=ToolParserMetrics(registry, model_name=config.model_name) if config.tool_call_parser else None,
        )
        self.app = build_app(state)
        self.admin_app = build_admin_app(state)
        self._runners: list[web.AppRunner] = []
        self._engine_task: asyncio.Task[None] | None = None
        self.port = 0
        self.admin_port: int | None = None

    async def start(self, host: str | None, port: int, admin_port: int | None) -> None:
        """Start the engine loop and listen; ports may be 0 (the bound ports are then recorded)."""
        self._engine_task = asyncio.create_task(self.engine.run(), name="mock-vllm-engine")
        self.port = await self._listen(self.app, host, port)
        if admin_port is not None:
            self.admin_port = await self._listen(self.admin_app, host, admin_port)

    async def _listen(self, app: web.Application, host: str | None, port: int) -> int:
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        self._runners.append(runner)
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening and stop the engine loop."""
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self._engine_task is not None:
            self._engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._engine_task


async def _serve(server: MockServer) -> None:
    config = server.config
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if config.model_load_seconds > 0:
        # A real server listens only once its weights are loaded: until then connections are refused.
        log.info("Loading model weights for %g s (mock)", config.model_load_seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=config.model_load_seconds * config.time_scale)
        if stop.is_set():
            return
    await server.start(config.host, config.port, config.admin_port)
    where = config.host or "0.0.0.0"
    spec = config.speculative
    log.info("vLLM API server version %s (mock), model %s, served as %s", VLLM_VERSION, config.model, config.model_name)
    log.info(
        "speculative decoding: %s",
        f"{spec.method} k={spec.num_speculative_tokens} draft={spec.model}" if spec else "off",
    )
    log.info(
        "KV cache: %d blocks of %d tokens; max_model_len %d, max_num_seqs %d, time scale %g",
        server.limits.num_gpu_blocks,
        server.limits.block_size,
        server.limits.max_model_len,
        server.limits.max_num_seqs,
        config.time_scale,
    )
    log.info("Starting vLLM API server 0 on http://%s:%d", where, server.port)
    if server.admin_port is not None:
        log.info("mock admin endpoint on http://%s:%d/faults", where, server.admin_port)
    try:
        await stop.wait()
    finally:
        log.info("Shutting down")
        await server.stop()


def main(argv: list[str]) -> int:
    """Entry point of `specpilot mock-vllm`; flags as for `vllm serve`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s [mock-vllm] %(message)s")
    try:
        config = parse_args(argv)
        server = MockServer(config, load_profile(config.profile, os.environ))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except (ConfigError, ProfileError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_serve(server))
    return 0
