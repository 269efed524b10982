"""An agent on the official MCP Python SDK, which sends no progress token
unless given a progress callback, with a short request timeout like the MCP
Inspector's (scaled down). It asks one question and keeps calling
ask_user {askId} while planb says the form is still open.

Usage: python_no_progress.py PLANB_MCP_BINARY DATA_DIR TIMEOUT_SECONDS
Prints one JSON object per line on stdout: {"waiting": url} once the form is
open, then {"answers": ..., "structured": ..., "calls": n}.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def emit(value):
    print(json.dumps(value), flush=True)


async def main(binary, data_dir, timeout):
    server = StdioServerParameters(
        command=binary,
        env={"PLANB_MCP_DATA_DIR": data_dir, "ASK_NO_OPEN": "1", "PLANB_HAND_BACK_MS": str(int(timeout * 1000 / 3))},
        cwd=data_dir,
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # Listing first lets the SDK check every structured result
            # against the tool's declared output schema.
            tools = await session.list_tools()
            assert any(t.name == "ask_user" and t.output_schema for t in tools.tools), tools
            created = await session.call_tool("init_planb_session", {"title": "python sdk"})
            session_id = created.content[0].text.splitlines()[0].removeprefix("sessionId: ")
            result = await session.call_tool(
                "ask_user",
                {
                    "sessionId": session_id,
                    "title": "Storage",
                    "questions": [
                        {"id": "db", "kind": "single", "label": "Which database?", "options": ["Postgres", "SQLite"], "required": True}
                    ],
                },
                read_timeout_seconds=timeout,
            )
            calls = 1
            announced = False
            while not result.is_error and result.structured_content["status"] == "waiting":
                if not announced:
                    emit({"waiting": result.structured_content["url"]})
                    announced = True
                result = await session.call_tool(
                    "ask_user",
                    {"askId": result.structured_content["askId"]},
                    read_timeout_seconds=timeout,
                )
                calls += 1
            if result.is_error:
                raise SystemExit("ask_user failed: " + result.content[0].text)
            emit({"answers": json.loads(result.content[0].text), "structured": result.structured_content, "calls": calls})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
