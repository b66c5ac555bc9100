"""One tool call three ways, in one run, from the same machine:

  1. through `caduceus mcp serve` (stdio) by the `mcp` SDK's client;
  2. through `caduceus call` (one process per call, as a script would);
  3. a direct call of `mcp-server-time` by the same client (the floor: an
     MCP round trip to a server that does no work).

    python3 tests/mcp-client/bench.py --caduceus target/release/caduceus [--calls 200]

Starts its own coordinator (127.0.0.1, random token) and one local worker in
a temporary CADUCEUS_HOME, and prints a Markdown table.
"""

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

CALL = {"command": "true"}


def start(cmd, env, needle=None):
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    if needle is None:
        return proc, None
    for line in proc.stderr:
        if needle in line:
            return proc, line.strip().rsplit(" ", 1)[-1]
    raise SystemExit(f"{cmd[1]} did not start")


def summary(name, samples):
    samples = sorted(samples)
    p = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    return f"| {name} | {len(samples)} | {statistics.median(samples) * 1e3:.2f} | {p(0.95) * 1e3:.2f} | {statistics.mean(samples) * 1e3:.2f} |"


async def mcp_calls(params, tool, arguments, calls):
    samples = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(5):  # warm: the environment's shell starts on the first call
                await session.call_tool(tool, arguments)
            for _ in range(calls):
                started = time.perf_counter()
                result = await session.call_tool(tool, arguments)
                samples.append(time.perf_counter() - started)
                if result.is_error:
                    raise SystemExit(f"{tool} failed: {result.content}")
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--caduceus", required=True)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="caduceus-mcp-bench-")
    token = secrets.token_hex(16)
    env = dict(os.environ, CADUCEUS_HOME=home, CADUCEUS_TOKEN=token, CADUCEUS_ALLOW_ROOT_SANDBOX="1", CADUCEUS_LOG="warn")
    env.pop("CADUCEUS_COORDINATOR", None)
    coordinator, address = start([args.caduceus, "serve", "--listen", "127.0.0.1:0"], env, "listening on")
    url = f"http://{address}"
    worker, _ = start([args.caduceus, "worker", "--coordinator", url, "--name", "bench"], env)
    try:
        for _ in range(100):
            out = subprocess.run([args.caduceus, "status", "--json", "--coordinator", url], env=env, capture_output=True, text=True)
            if out.returncode == 0 and json.loads(out.stdout)["workers"]:
                break
            time.sleep(0.1)
        served = StdioServerParameters(command=args.caduceus, args=["mcp", "serve", "--coordinator", url], env=env)
        through_mcp = asyncio.run(mcp_calls(served, "terminal", CALL, args.calls))

        through_call = []
        argv = [args.caduceus, "call", "terminal", json.dumps(CALL), "--coordinator", url, "--task", "bench-call"]
        for i in range(min(args.calls, 50) + 5):
            started = time.perf_counter()
            subprocess.run(argv, env=env, capture_output=True, check=True)
            if i >= 5:
                through_call.append(time.perf_counter() - started)

        time_server = StdioServerParameters(command="mcp-server-time", args=[], env=dict(os.environ))
        direct = asyncio.run(mcp_calls(time_server, "get_current_time", {"timezone": "UTC"}, args.calls))
    finally:
        for proc in (worker, coordinator):
            proc.terminate()
            proc.wait(timeout=30)

    print("| path | calls | median ms | p95 ms | mean ms |")
    print("|---|---|---|---|---|")
    print(summary("`terminal {\"command\":\"true\"}` through `caduceus mcp serve` (stdio, SDK client)", through_mcp))
    print(summary("the same call through `caduceus call` (a process per call)", through_call))
    print(summary("`get_current_time` of `mcp-server-time` (stdio, same client)", direct))


if __name__ == "__main__":
    sys.exit(main())
