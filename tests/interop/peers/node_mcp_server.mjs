// A Streamable HTTP MCP server of the official TypeScript SDK
// (@modelcontextprotocol/sdk, StreamableHTTPServerTransport) on node's own http
// server, whose keepAliveTimeout stays at node's default (5 s): the keep-alive
// scenario's Node backend. Stateful: one transport per MCP session.
//
//   node node_mcp_server.mjs PORT
//
// Run from a copy beside the peers' node_modules (peers_test.py copies it there).
// Logs each new TCP connection (a count), so the report can tell how often the
// client reconnected.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const port = Number(process.argv[2]);
let calls = 0;
let connections = 0;
const transports = new Map();

function makeServer() {
  const server = new McpServer({ name: "peers-node", version: "1.0.0" });
  server.registerTool(
    "echo",
    { description: "Echoes the text back, with a call counter.", inputSchema: { text: z.string() } },
    async ({ text }) => {
      calls += 1;
      return { content: [{ type: "text", text: `node echo #${calls}: ${text}` }] };
    },
  );
  return server;
}

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks).toString("utf8");
  return raw ? JSON.parse(raw) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, `http://127.0.0.1:${port}`);
    if (url.pathname !== "/mcp") {
      res.writeHead(404).end("not found");
      return;
    }
    const sid = req.headers["mcp-session-id"];
    if (req.method === "POST") {
      const body = await readJson(req);
      let transport = sid ? transports.get(sid) : undefined;
      if (!transport && !sid && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => transports.set(id, transport),
        });
        transport.onclose = () => {
          if (transport.sessionId) transports.delete(transport.sessionId);
        };
        await makeServer().connect(transport);
      }
      if (!transport) {
        res.writeHead(sid ? 404 : 400, { "content-type": "application/json" }).end(
          JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: sid ? "unknown session" : "no session" }, id: null }),
        );
        return;
      }
      await transport.handleRequest(req, res, body);
      return;
    }
    if (req.method === "GET" || req.method === "DELETE") {
      const transport = sid ? transports.get(sid) : undefined;
      if (!transport) {
        res.writeHead(sid ? 404 : 400).end("no session");
        return;
      }
      await transport.handleRequest(req, res);
      return;
    }
    res.writeHead(405, { allow: "GET, POST, DELETE" }).end();
  } catch (e) {
    console.error("node server error:", e);
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});
httpServer.on("connection", () => {
  connections += 1;
  console.log(`connection #${connections} (keepAliveTimeout ${httpServer.keepAliveTimeout} ms)`);
});
httpServer.listen(port, "127.0.0.1", () => {
  console.log(`node MCP server on http://127.0.0.1:${port}/mcp, keepAliveTimeout ${httpServer.keepAliveTimeout} ms`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
