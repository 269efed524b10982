#!/usr/bin/env python3
"""Benchmark mcp-cli's plan executor (PlanRunner) against a real stdio MCP server.

Runs three plans through mcp-cli's own PlanRunner with library defaults
(no LLM / model_manager, so steps use the static-args path, exactly what
`/plan run` does when no model manager is supplied), using mcp-cli's real
ToolManager -> chuk-tool-processor StreamManager -> chuk-mcp stdio client.

  chain       50 x echo {"text": "step N"}, each depending on the previous
  wide        50 x sleep {"ms": 20}, all independent (one batch)
  wide_echo   50 x echo, all independent; also paired run by run with the
              same 50 calls made raw at the executor's concurrency
  first_call  1 x echo

Also measures the raw round-trip of a direct `echo` tools/call on the same
stdio connection (the chuk-tool-processor StdioTransport that ToolManager
uses), and ToolManager.execute_tool (the layer plan steps call into).

Prints one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

SERVER_NAME = "bench"


def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for pkg in ("mcp-cli", "chuk-ai-planner", "chuk-tool-processor", "chuk-mcp"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def chain_plan(n: int = 50) -> dict:
    return {
        "id": "bench-chain",
        "title": "chain",
        "steps": [
            {
                "index": str(i),
                "title": f"echo {i}",
                "tool": "echo",
                "args": {"text": f"step {i}"},
                "depends_on": [str(i - 1)] if i > 1 else [],
                "result_variable": f"r{i}",
            }
            for i in range(1, n + 1)
        ],
    }


def wide_plan(n: int = 50, ms: int = 20) -> dict:
    return {
        "id": "bench-wide",
        "title": "wide",
        "steps": [
            {
                "index": str(i),
                "title": f"sleep {i}",
                "tool": "sleep",
                "args": {"ms": ms},
                "depends_on": [],
                "result_variable": f"r{i}",
            }
            for i in range(1, n + 1)
        ],
    }


def wide_echo_plan(n: int = 50) -> dict:
    return {
        "id": "bench-wide-echo",
        "title": "wide echo",
        "steps": [
            {
                "index": str(i),
                "title": f"echo {i}",
                "tool": "echo",
                "args": {"text": f"wide {i}"},
                "depends_on": [],
                "result_variable": f"r{i}",
            }
            for i in range(1, n + 1)
        ],
    }


def first_call_plan() -> dict:
    return {
        "id": "bench-first-call",
        "title": "first_call",
        "steps": [
            {
                "index": "1",
                "title": "echo",
                "tool": "echo",
                "args": {"text": "step 1"},
                "depends_on": [],
                "result_variable": "r1",
            }
        ],
    }


def _default(fn, name: str):
    import inspect

    return inspect.signature(fn).parameters[name].default


def _ms(x: float) -> float:
    return round(x * 1000.0, 3)


async def run_plan_once(ctx, plan: dict, run_timeout: float) -> dict:
    from mcp_cli.planning import PlanRunner

    # `/plan run` builds a fresh PlanRunner per invocation with defaults.
    runner = PlanRunner(ctx)
    t0 = time.perf_counter()
    try:
        res = await asyncio.wait_for(runner.execute_plan(plan), run_timeout)
    except asyncio.TimeoutError:
        return {"wall_s": time.perf_counter() - t0, "ok": False,
                "steps": None, "steps_ok": None, "error": f"run exceeded {run_timeout}s"}
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "ok": bool(res.success),
        "steps": len(res.steps),
        "steps_ok": sum(1 for s in res.steps if s.success),
        "error": res.error,
    }


async def bench_plan(ctx, plan: dict, runs: int, warmup: int, run_timeout: float) -> dict:
    warm = [await run_plan_once(ctx, plan, run_timeout) for _ in range(warmup)]
    timed = [await run_plan_once(ctx, plan, run_timeout) for _ in range(runs)]
    walls = [r["wall_s"] for r in timed if r["ok"]]
    out = {
        "planned_steps": len(plan["steps"]),
        "runs": runs,
        "runs_ok": len(walls),
        "steps_executed": [r["steps"] for r in timed],
        "steps_succeeded": [r["steps_ok"] for r in timed],
        "wall_ms_median": _ms(statistics.median(walls)) if walls else None,
        "wall_ms_all": [_ms(r["wall_s"]) for r in timed],
        "warmup_wall_ms": [_ms(r["wall_s"]) for r in warm],
    }
    errors = [r["error"] for r in warm + timed if r["error"]]
    if errors:
        out["errors"] = errors[:3]
    return out


async def bench_raw(tm, n: int, warmup: int = 20) -> dict:
    transport = tm.stream_manager.transports[SERVER_NAME]
    args = {"text": "raw"}

    async def loop(fn):
        for _ in range(warmup):
            await fn()
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = await fn()
            samples.append(time.perf_counter() - t0)
        return samples, r

    # 1) Raw tools/call on the stdio connection (StdioTransport.call_tool ->
    #    chuk_mcp send_tools_call); no middleware, no ToolManager.
    raw, last_raw = await loop(lambda: transport.call_tool("echo", args))
    # 2) ToolManager.execute_tool (what McpToolBackend calls per plan step;
    #    includes the default CTP retry/circuit-breaker middleware).
    tmc, last_tm = await loop(lambda: tm.execute_tool("echo", args))
    return {
        "calls": n,
        "transport_call_tool_ms_median": _ms(statistics.median(raw)),
        "transport_call_tool_ms_p90": _ms(sorted(raw)[int(0.9 * n) - 1]),
        "tool_manager_execute_tool_ms_median": _ms(statistics.median(tmc)),
        "tool_manager_execute_tool_ms_p90": _ms(sorted(tmc)[int(0.9 * n) - 1]),
        "sample_raw_result": str(last_raw)[:120],
        "sample_tm_ok": bool(last_tm.success),
    }


async def bench_paired(ctx, tm, plan: dict, runs: int, burst: int, run_timeout: float) -> dict:
    """The chain's per-step overhead, each run set against a burst of raw
    calls made just before it, so both see the machine in the same state."""
    transport = tm.stream_manager.transports[SERVER_NAME]
    args = {"text": "raw"}
    steps = len(plan["steps"])
    overheads = []
    for _ in range(runs):
        raw = []
        for _ in range(burst):
            t0 = time.perf_counter()
            await transport.call_tool("echo", args)
            raw.append(time.perf_counter() - t0)
        run = await run_plan_once(ctx, plan, run_timeout)
        if run["ok"]:
            overheads.append(run["wall_s"] / steps - statistics.median(raw))
    return {
        "runs": runs,
        "burst": burst,
        "overhead_ms_median": _ms(statistics.median(overheads)) if overheads else None,
    }


async def raw_wide(transport, steps: int, width: int) -> float:
    """Seconds for `steps` raw echo calls with `width` in flight: the tool
    time of a wide plan of echo at the executor's concurrency."""
    gate = asyncio.Semaphore(width)

    async def one(n: int):
        async with gate:
            return await transport.call_tool("echo", {"text": f"wide {n}"})

    t0 = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(steps)))
    return time.perf_counter() - t0


async def bench_paired_wide(ctx, tm, plan: dict, runs: int, width: int, run_timeout: float) -> dict:
    """The wide plan's per-step overhead, each run set against the same
    number of raw calls, `width` at a time, made just before it."""
    transport = tm.stream_manager.transports[SERVER_NAME]
    steps = len(plan["steps"])
    overheads, floors = [], []
    for _ in range(runs):
        floor = await raw_wide(transport, steps, width)
        run = await run_plan_once(ctx, plan, run_timeout)
        if run["ok"]:
            floors.append(floor)
            overheads.append((run["wall_s"] - floor) / steps)
    return {
        "runs": runs,
        "width": width,
        "raw_ms_median": _ms(statistics.median(floors)) if floors else None,
        "overhead_ms_median": _ms(statistics.median(overheads)) if overheads else None,
    }


async def main_async(a) -> dict:
    from mcp_cli.config.logging import setup_logging
    from mcp_cli.config.defaults import (
        DEFAULT_MIDDLEWARE_ENABLED,
        DEFAULT_PLAN_MAX_CONCURRENCY,
        DEFAULT_PLAN_MAX_STEP_RETRIES,
        DEFAULT_PLANS_DIR,
    )
    from mcp_cli.planning import PlanningContext, PlanRunner
    from mcp_cli.tools.manager import ToolManager

    log_level = os.environ.get("LOG_LEVEL", "WARNING")  # same as mcp-cli's run_command
    setup_logging(level=log_level)

    state_dir = Path(a.state_dir or tempfile.mkdtemp(prefix="mcpcli-bench-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = state_dir / "server_config.json"
    cfg_path.write_text(json.dumps({"mcpServers": {SERVER_NAME: {
        "command": a.server, "args": a.server_args}}}))
    plans_dir = Path(a.plans_dir) if a.plans_dir else state_dir / "plans"

    # Same construction as mcp_cli.run_command._init_tool_manager.
    tm = ToolManager(str(cfg_path), [SERVER_NAME], None, initialization_timeout=120.0)
    t0 = time.perf_counter()
    ok = await tm.initialize()
    connect_s = time.perf_counter() - t0
    setup_logging(level=log_level)
    if not ok or tm.stream_manager is None:
        raise SystemExit("ToolManager failed to initialise (server did not start?)")
    tools = sorted(t.name for t in await tm.get_all_tools())
    if not {"echo", "sleep"} <= set(tools):
        raise SystemExit(f"server must expose echo and sleep, got {tools}")

    try:
        ctx = PlanningContext(tm, plans_dir=plans_dir)
        results = {}
        # first_call goes first so its warm-up is the first plan on a fresh connection.
        for name, plan in (("first_call", first_call_plan()),
                           ("chain", chain_plan(50)),
                           ("wide", wide_plan(50, 20)),
                           ("wide_echo", wide_echo_plan(50))):
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            results[name] = await bench_plan(ctx, plan, a.runs, a.warmup, a.run_timeout)
        print("[bench] raw calls ...", file=sys.stderr, flush=True)
        raw = await bench_raw(tm, a.raw_calls)
        print("[bench] chain runs paired with raw calls ...", file=sys.stderr, flush=True)
        paired = await bench_paired(ctx, tm, chain_plan(50), 15, 30, a.run_timeout)
        print("[bench] wide echo runs paired with raw calls at the plan's width ...",
              file=sys.stderr, flush=True)
        paired_wide = await bench_paired_wide(ctx, tm, wide_echo_plan(50), 15,
                                              DEFAULT_PLAN_MAX_CONCURRENCY, a.run_timeout)
    finally:
        await tm.close()

    chain_med = results["chain"]["wall_ms_median"]
    derived = {}
    if chain_med is not None:
        per_step = chain_med / 50
        derived = {
            "chain_ms_per_step": round(per_step, 3),
            "per_step_overhead_ms_vs_transport":
                round(per_step - raw["transport_call_tool_ms_median"], 3),
            "per_step_overhead_ms_vs_tool_manager":
                round(per_step - raw["tool_manager_execute_tool_ms_median"], 3),
        }
    if paired["overhead_ms_median"] is not None:
        derived["per_step_overhead_ms_paired"] = round(paired["overhead_ms_median"], 3)
    if results["wide_echo"]["wall_ms_median"] is not None:
        batches = -(-50 // DEFAULT_PLAN_MAX_CONCURRENCY)
        derived["wide_echo_overhead_ms"] = round(
            (results["wide_echo"]["wall_ms_median"]
             - batches * raw["transport_call_tool_ms_median"]) / 50, 3)
    if paired_wide["overhead_ms_median"] is not None:
        derived["wide_echo_raw_ms"] = paired_wide["raw_ms_median"]
        derived["wide_echo_overhead_paired_ms"] = paired_wide["overhead_ms_median"]
    if results["wide"]["wall_ms_median"] is not None:
        derived["wide_ideal_ms_at_concurrency"] = round(
            -(-50 // DEFAULT_PLAN_MAX_CONCURRENCY) * 20, 3)

    return {
        "peer": "mcp-cli PlanRunner (static args, no LLM)",
        "versions": _versions(),
        "server": {"command": a.server, "args": a.server_args, "tools": tools},
        "defaults": {
            "plan_max_concurrency": DEFAULT_PLAN_MAX_CONCURRENCY,
            "plan_max_step_retries_llm_only": DEFAULT_PLAN_MAX_STEP_RETRIES,
            "checkpoint_per_batch": _default(PlanRunner.execute_plan, "checkpoint"),
            "enable_guards": _default(PlanRunner.__init__, "enable_guards"),
            "middleware_enabled": DEFAULT_MIDDLEWARE_ENABLED,
            "tool_timeout_s": tm.tool_timeout,
            "default_plans_dir": DEFAULT_PLANS_DIR,
            "plans_dir_used": str(plans_dir),
        },
        "connect_ms": _ms(connect_s),
        "plans": results,
        "raw_echo": raw,
        "derived": derived,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="path to the stdio MCP server binary")
    p.add_argument("--server-args", nargs="*", default=[], help="arguments for the server")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--raw-calls", type=int, default=200)
    p.add_argument("--run-timeout", type=float, default=60.0,
                   help="abort a single plan run after this many seconds (counted as failed)")
    p.add_argument("--state-dir", default=None, help="where to write the server config (default: temp dir)")
    p.add_argument("--plans-dir", default=None,
                   help="PlanningContext plans_dir (checkpoints land here); default: <state-dir>/plans")
    a = p.parse_args()

    # Keep stdout for the JSON only: route any stray prints to stderr.
    json_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    result = asyncio.run(main_async(a))
    json_out.write(json.dumps(result, indent=2) + "\n")
    json_out.flush()


if __name__ == "__main__":
    main()
