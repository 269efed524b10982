"""An MCP server built on the official Python SDK (MCPServer, formerly
FastMCP), for the execution-plan binding test. Each tool returns one kind of
value the SDK wraps its own way."""

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

server = MCPServer("pysdk")


class Point(BaseModel):
    x: int
    y: int


@server.tool()
def text() -> str:
    return "hello"


@server.tool()
def json_looking_text() -> str:
    return "[1, 2]"


@server.tool()
def number() -> int:
    return 42


@server.tool()
def numbers() -> list[int]:
    return [1, 2, 3]


@server.tool()
def mapping() -> dict[str, int]:
    return {"a": 1, "b": 2}


@server.tool()
def point() -> Point:
    return Point(x=1, y=2)


@server.tool()
def untyped():
    return "plain"


@server.tool()
def picture() -> Image:
    return Image(data=b"png!", format="png")


@server.tool()
def shout(text: str) -> str:
    return text.upper()


@server.tool()
def broken() -> str:
    raise ValueError("boom")


if __name__ == "__main__":
    server.run()
