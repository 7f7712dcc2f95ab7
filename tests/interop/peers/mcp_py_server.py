"""A Streamable HTTP MCP server of the official Python SDK (`mcp`), served by uvicorn
with its default keep-alive (5 s): the keep-alive scenario's Python backend.

    mcp_py_server.py PORT [--stateless]

`mcp` 2.x renamed the FastMCP class to MCPServer (mcp.server.mcpserver); this is it.
"""

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

port = int(sys.argv[1])
stateless = "--stateless" in sys.argv[2:]

server = MCPServer("peers-py")
calls = {"n": 0}


@server.tool()
def echo(text: str) -> str:
    """Echoes the text back, with a call counter."""
    calls["n"] += 1
    return f"py echo #{calls['n']}: {text}"


app = server.streamable_http_app(stateless_http=stateless, host="127.0.0.1")
# uvicorn's defaults, spelled out: the 5 s keep-alive is what the scenario is about.
uvicorn.run(app, host="127.0.0.1", port=port, log_level="info", timeout_keep_alive=5)
