"""Drives `caduceus mcp serve` with the `mcp` Python SDK's own client, for
tests/tests/mcp_serve.rs and the benchmark (tests/mcp-client/bench.py).

    driver.py SCENARIO

The server is reached as the environment says:
    MCP_MODE=stdio   MCP_COMMAND='["caduceus", "mcp", "serve", ...]'
    MCP_MODE=http    MCP_URL=http://127.0.0.1:PORT/mcp  MCP_TOKEN=...

Prints one JSON object: what the client saw. The Rust test asserts on it.
"""

import asyncio
import contextlib
import json
import os
import sys

import httpx2
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


@contextlib.asynccontextmanager
async def connect(token=None, elicitation_callback=None):
    mode = os.environ["MCP_MODE"]
    if mode == "stdio":
        argv = json.loads(os.environ["MCP_COMMAND"])
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
        transport = stdio_client(params)
    else:
        token = token if token is not None else os.environ["MCP_TOKEN"]
        client = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120.0)
        )
        transport = streamable_http_client(os.environ["MCP_URL"], http_client=client)
    async with transport as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicitation_callback) as session:
            await session.initialize()
            yield session


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def parsed(result):
    return json.loads(text(result))


async def fleet():
    """Two environments on two workers, commands in both at once, a file
    written and read back, both released."""
    seen = {}
    rendezvous = os.environ["RENDEZVOUS"]
    async with connect() as session:
        tools = (await session.list_tools()).tools
        seen["tools"] = sorted(t.name for t in tools)
        seen["terminal_schema"] = next(t.input_schema for t in tools if t.name == "terminal")
        a = parsed(await session.call_tool("environment_create", {}))
        b = parsed(await session.call_tool("environment_create", {}))
        seen["created"] = [a, b]

        # Each command announces itself and waits for the other: they meet
        # only if both run at the same time.
        def meet(me, other):
            return (
                f"touch {rendezvous}/{me}; for i in $(seq 300); do "
                f"[ -e {rendezvous}/{other} ] && echo met-{me} && exit 0; sleep 0.1; done; echo alone-{me}"
            )

        progress = []

        async def on_progress(value, total, message):
            progress.append(message)

        ra, rb = await asyncio.gather(
            session.call_tool(
                "terminal",
                {"command": meet("a", "b"), "environment": a["environment"]},
                progress_callback=on_progress,
            ),
            session.call_tool("terminal", {"command": meet("b", "a"), "environment": b["environment"]}),
        )
        seen["together"] = [parsed(ra), parsed(rb)]

        # A long call reports progress while it runs (every 2 s).
        long = await session.call_tool(
            "terminal",
            {"command": "sleep 5; echo slept", "environment": b["environment"]},
            progress_callback=on_progress,
        )
        seen["long"] = parsed(long)
        seen["progress"] = progress

        path = f"{rendezvous}/written-by-a.txt"
        wrote = await session.call_tool(
            "write_file", {"path": path, "content": "hello from a\n", "environment": a["environment"]}
        )
        seen["write"] = parsed(wrote)
        seen["read"] = parsed(
            await session.call_tool("read_file", {"path": path, "environment": a["environment"]})
        )
        seen["default"] = parsed(await session.call_tool("terminal", {"command": "echo default-env"}))
        seen["listed"] = parsed(await session.call_tool("environment_list", {}))
        seen["unknown"] = {
            "text": text(r := await session.call_tool("terminal", {"command": "true", "environment": "nope"})),
            "is_error": r.is_error,
        }
        seen["released"] = [
            parsed(await session.call_tool("environment_release", {"environment": e["environment"]}))
            for e in (a, b)
        ]
        again = await session.call_tool("environment_release", {"environment": a["environment"]})
        seen["released_again"] = {"text": text(again), "is_error": again.is_error}
        seen["listed_after"] = parsed(await session.call_tool("environment_list", {}))
    return seen


async def approval():
    """A dangerous command: once without elicitation (pending_approval), once
    with a client that declares it and approves once."""
    seen = {"asked": []}
    command = os.environ["DANGEROUS"]
    async with connect() as session:
        seen["without"] = parsed(await session.call_tool("terminal", {"command": command}))

    async def approve(context, params):
        seen["asked"].append({"message": params.message, "schema": params.requested_schema})
        return types.ElicitResult(action="accept", content={"decision": "once"})

    async with connect(elicitation_callback=approve) as session:
        seen["with"] = parsed(await session.call_tool("terminal", {"command": command}))

    async def deny(context, params):
        return types.ElicitResult(action="decline")

    async with connect(elicitation_callback=deny) as session:
        seen["declined"] = parsed(await session.call_tool("terminal", {"command": command}))
    return seen


async def refused():
    """HTTP only: what a bad, missing or worker-scoped token gets."""
    url = os.environ["MCP_URL"]
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "driver", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    seen = {}
    async with httpx2.AsyncClient(timeout=30) as http:
        for name, token in [
            ("missing", None),
            ("wrong", "not-the-token"),
            ("worker", os.environ.get("WORKER_TOKEN")),
            ("client", os.environ.get("CLIENT_TOKEN")),
            ("shared", os.environ["MCP_TOKEN"]),
        ]:
            if name != "missing" and token is None:
                continue
            h = dict(headers)
            if token is not None:
                h["Authorization"] = f"Bearer {token}"
            response = await http.post(url, json=body, headers=h)
            seen[name] = {
                "status": response.status_code,
                "www_authenticate": response.headers.get("www-authenticate"),
                "body": response.text[:400],
            }
    if os.environ.get("CLIENT_TOKEN"):
        # A client token calls tools; it may not answer approvals, so a
        # dangerous command stays pending even with a client that could ask.
        asked = []

        async def approve(context, params):
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"decision": "once"})

        async with connect(token=os.environ["CLIENT_TOKEN"], elicitation_callback=approve) as session:
            seen["client_call"] = parsed(await session.call_tool("terminal", {"command": "echo as-client"}))
            seen["client_dangerous"] = parsed(
                await session.call_tool("terminal", {"command": os.environ["DANGEROUS"]})
            )
        seen["client_asked"] = asked
    return seen


async def cancel():
    """A call the client gives up on (it sends notifications/cancelled) stops
    its command on the worker; the environment takes the next call."""
    import subprocess

    marker = f"sleep 4{os.getpid() % 1000:03d}.5"
    seen = {}
    async with connect() as session:
        try:
            await session.call_tool("terminal", {"command": f"{marker}; echo finished"}, read_timeout_seconds=3)
            seen["gave_up"] = False
        except Exception as error:  # the SDK's timeout
            seen["gave_up"] = type(error).__name__
        running = True
        for _ in range(100):
            running = subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
            if not running:
                break
            await asyncio.sleep(0.1)
        seen["still_running"] = running
        seen["next"] = parsed(await session.call_tool("terminal", {"command": "echo next"}))
    return seen


SCENARIOS = {"fleet": fleet, "approval": approval, "refused": refused, "cancel": cancel}

if __name__ == "__main__":
    print(json.dumps(asyncio.run(SCENARIOS[sys.argv[1]]())))
