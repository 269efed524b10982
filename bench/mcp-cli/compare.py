#!/usr/bin/env python3
"""planb's execution plans and mcp-cli's PlanRunner side by side, in one run.

Each round runs, one after another on the same machine and the same
downstream server binary (the `downstream` example, release build):

- planb's plan benchmark (`cargo bench -p planb-mcp --bench server -- plans`)
  with its data root on the disk (every append synced);
- the same with its data root on tmpfs (`PLANB_BENCH_DIR`, syncs almost free:
  what is left is the engine itself);
- `plans_bench.py` (mcp-cli 0.20.1 / chuk-ai-planner 0.5.1, its defaults).

It prints every round and the medians, and the ratios of mcp-cli's per-step
overhead to planb's. Run from the repository root or from here:

    /work/mcpcli-venv/bin/python bench/mcp-cli/compare.py --rounds 3

The planb figures come from the bench's `plan-figures` line; mcp-cli's from
the JSON `plans_bench.py` prints. Overheads are wall time per step minus a
raw call of `echo` on each one's own client (planb: a synchronous JSON-RPC
round trip; mcp-cli: its `StdioTransport.call_tool`).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def pinned(cpus, command):
    """`command` run on the CPUs `cpus` only (all of them when None)."""
    return (["taskset", "-c", cpus] if cpus else []) + command


def planb(tmpfs, cpus):
    env = dict(os.environ)
    if tmpfs:
        env["PLANB_BENCH_DIR"] = tmpfs
    else:
        env.pop("PLANB_BENCH_DIR", None)
    out = subprocess.run(
        pinned(cpus, ["cargo", "bench", "-q", "-p", "planb-mcp", "--bench", "server", "--", "plans"]),
        cwd=REPO, env=env, check=True, capture_output=True, text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("plan-figures "):
            return json.loads(line[len("plan-figures "):])
    raise SystemExit("the planb bench printed no plan-figures line:\n" + out)


def peer(python, server, cpus):
    out = subprocess.run(
        pinned(cpus, [python, os.path.join(HERE, "plans_bench.py"), "--server", server,
                      "--server-args", "bench", "echo", "sleep"]),
        check=True, capture_output=True, text=True,
    ).stdout
    found = json.loads(out)
    return {
        "chain_ms_per_step": found["derived"]["chain_ms_per_step"],
        "raw_call_ms": found["raw_echo"]["transport_call_tool_ms_median"],
        "overhead_ms": found["derived"]["per_step_overhead_ms_vs_transport"],
        "overhead_paired_ms": found["derived"]["per_step_overhead_ms_paired"],
        "wide_ms": found["plans"]["wide"]["wall_ms_median"],
        "one_step_ms": found["plans"]["first_call"]["wall_ms_median"],
        "wide_echo_ms": found["plans"]["wide_echo"]["wall_ms_median"],
        "wide_echo_overhead_ms": found["derived"]["wide_echo_overhead_ms"],
        "wide_echo_raw_ms": found["derived"]["wide_echo_raw_ms"],
        "wide_echo_overhead_paired_ms": found["derived"]["wide_echo_overhead_paired_ms"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default="/work/mcpcli-venv/bin/python",
                        help="a Python with mcp-cli 0.20.1 installed (see README.md)")
    parser.add_argument("--cpus", default=None,
                        help="run both benchmarks (and the servers they start) on these CPUs "
                             "only, as taskset -c takes them: with one, every process shares "
                             "it and no wake-up crosses CPUs")
    args = parser.parse_args()
    if not os.path.exists(args.python):
        raise SystemExit(f"{args.python}: no such Python; install mcp-cli as README.md says")
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "planb-mcp",
                    "--example", "downstream"], cwd=REPO, check=True)
    # Built before any timing, on every CPU.
    subprocess.run(["cargo", "bench", "-q", "-p", "planb-mcp", "--bench", "server", "--no-run"],
                   cwd=REPO, check=True)
    server = os.path.join(REPO, "target", "release", "examples", "downstream")
    tmpfs = tempfile.mkdtemp(prefix="planb-bench-", dir="/dev/shm")
    rounds = []
    try:
        for n in range(args.rounds):
            row = {"disk": planb(None, args.cpus), "tmpfs": planb(tmpfs, args.cpus),
                   "mcp-cli": peer(args.python, server, args.cpus)}
            rounds.append(row)
            print(f"round {n + 1}: " + json.dumps(row), file=sys.stderr)
    finally:
        shutil.rmtree(tmpfs, ignore_errors=True)

    def median(who, key):
        return statistics.median(r[who][key] for r in rounds)

    print(f"{'':34} {'planb (disk)':>14} {'planb (tmpfs)':>14} {'mcp-cli':>10}")
    for key, label in [("chain_ms_per_step", "50-step echo chain, ms a step"),
                       ("raw_call_ms", "raw echo call, ms"),
                       ("overhead_ms", "overhead a step, ms"),
                       ("overhead_paired_ms", "the same, paired run by run, ms"),
                       ("rmcp_call_ms", "echo through rmcp's client, ms"),
                       ("overhead_vs_rmcp_ms", "per step - that call, ms"),
                       ("wide_ms", "50 wide x 20 ms sleep, ms"),
                       ("one_step_ms", "one-step plan, ms"),
                       ("wide_echo_ms", "50 wide x echo, ms"),
                       ("wide_echo_overhead_ms", "the same less 13 raw calls, ms a step"),
                       ("wide_echo_raw_ms", "50 raw echo calls 4 at a time, ms"),
                       ("wide_echo_overhead_paired_ms", "wide echo less those, paired, ms a step")]:
        theirs = f"{median('mcp-cli', key):10.3f}" if key in rounds[0]["mcp-cli"] else f"{'-':>10}"
        print(f"{label:34} {median('disk', key):14.3f} {median('tmpfs', key):14.3f} {theirs}")
    print("(planb's one-step plan is timed through JSON-RPC plan_execute from another process; mcp-cli's in its own)")
    fsync = median("disk", "raw_fsync_ms")
    peer_overhead = median("mcp-cli", "overhead_ms")
    print(f"the wide plan's floor (13 x planb's raw sleep call): {median('disk', 'wide_floor_ms'):.1f} ms; the ideal 13 x 20 ms: 260 ms")
    print(f"raw write+fdatasync on the disk: {fsync:.3f} ms (planb makes one durable append a step; mcp-cli syncs nothing)")

    def ratios(title, key):
        """mcp-cli's `key` over planb's, of the medians and round by round."""
        theirs = median("mcp-cli", key)
        print(f"{title}: {theirs / median('disk', key):.2f}x on the disk, "
              f"{theirs / median('tmpfs', key):.2f}x on tmpfs")
        for where in ("disk", "tmpfs"):
            each = [r["mcp-cli"][key] / r[where][key] for r in rounds]
            print(f"  round by round, {where}: " + ", ".join(f"{x:.2f}" for x in each))

    ratios("mcp-cli's overhead / planb's (tmpfs: syncs almost free)", "overhead_ms")
    ratios("paired run by run (each chain run against raw calls just before it)", "overhead_paired_ms")
    ratios("50 wide x echo, each run against the same 50 calls made raw 4 at a time just before it",
           "wide_echo_overhead_paired_ms")
    # The tool's own time, measured once for both: the same calls through
    # the leanest client (planb's bench's raw JSON-RPC over the pipe). Each
    # engine's overhead is then everything it adds to it, its client
    # library included.
    print("with one tool time for both (the raw call through the leanest client; a client library's cost counts as its engine's):")
    for where in ("disk", "tmpfs"):
        chain = [(r["mcp-cli"]["chain_ms_per_step"] - r[where]["raw_call_ms"])
                 / (r[where]["chain_ms_per_step"] - r[where]["raw_call_ms"]) for r in rounds]
        wide = [(r["mcp-cli"]["wide_echo_ms"] - r[where]["wide_echo_raw_ms"])
                / (r[where]["wide_echo_ms"] - r[where]["wide_echo_raw_ms"]) for r in rounds]
        print(f"  {where}: chain {statistics.median(chain):.2f}x (rounds " + ", ".join(f"{x:.2f}" for x in chain)
              + f"), 50 wide {statistics.median(wide):.2f}x (rounds " + ", ".join(f"{x:.2f}" for x in wide) + ")")
    net = median("disk", "overhead_ms") - fsync
    print(f"planb's overhead on the disk less one raw fdatasync: {net:.3f} ms -> mcp-cli's / that: {peer_overhead / net:.2f}x")


if __name__ == "__main__":
    main()
