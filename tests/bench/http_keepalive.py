"""A plain keep-alive HTTP client of Python's standard library, calling one tool
of a Streamable HTTP MCP endpoint back to back: the outside check of the HTTP
front's figures (tether-bench's client is Rust, and agrees with tether).

    python3 tests/bench/http_keepalive.py HOST PORT CALLS TOOL

Prints the p50 and p90 of the calls after the first tenth (warm-up). Compare
`mock-mcp --http` called directly with `tether serve --listen` in front of the
same mock over stdio, interleaved, on an idle machine.
"""

import http.client
import json
import statistics
import sys
import time

host, port, calls, tool = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
conn = http.client.HTTPConnection(host, port)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def post(body, extra=None):
    conn.request("POST", "/mcp", json.dumps(body), {**HEADERS, **(extra or {})})
    response = conn.getresponse()
    return response, response.read()


init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "keepalive", "version": "1"}}
response, data = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
text = data.decode()
answer = json.loads(text.split("data: ")[-1] if text.startswith("event") else text)
session = {"MCP-Protocol-Version": answer["result"]["protocolVersion"]}
if response.getheader("Mcp-Session-Id"):
    session["Mcp-Session-Id"] = response.getheader("Mcp-Session-Id")
post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
latencies = []
for i in range(calls):
    call = {"name": tool, "arguments": {"text": "hi"}}
    start = time.perf_counter()
    post({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": call}, session)
    latencies.append(time.perf_counter() - start)
latencies = sorted(latencies[calls // 10 :])
print(f"p50 {statistics.median(latencies) * 1e6:.0f} us  p90 {latencies[int(len(latencies) * 0.9)] * 1e6:.0f} us")
