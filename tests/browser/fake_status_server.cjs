#!/usr/bin/env node
// A stand-in for tether's status endpoints (the contract in the status API notes):
// serves the status page file at `/` and scripted data at /status, /events,
// /admin/{restart,reconnect}/NAME, /healthz, /readyz and /metrics, so the page and
// its browser test can run without building tether. Plain Node, no dependencies.
//
//   node tests/browser/fake_status_server.cjs [--port N] [--token T] [--demo] [--page FILE]
//
// Backends `alpha` and `beta` start online. A tools/call of `<server>__crash` on
// POST /mcp (stateless, or after initialize) "crashes" that backend: it goes to
// `error` with a crash message and a 10-minute retry, and comes back (connecting,
// discovering_tools, online) only when restarted or reconnected through /admin.
// POST /__fake/drop-events breaks every open /events stream (the page must reconnect).
// `--demo` adds rows in the other states, for looking at the colours. Prints
// `listening on http://127.0.0.1:PORT` once it serves.
"use strict";
const http = require("http");
const fs = require("fs");
const path = require("path");

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : dflt;
};
const PORT = Number(opt("--port", "0"));
const TOKEN = opt("--token", process.env.TETHER_AUTH_TOKEN || "");
const PAGE = opt("--page", path.join(__dirname, "../../runtime-smol/src/serve/status_page/index.html"));
const DEMO = args.includes("--demo");

const started = Date.now();
const now = () => Date.now() - started;

function backend(server, extra) {
    return Object.assign(
        {
            server, transport: "stdio", status: "online", breaker: "closed", reconnect_attempt: 0,
            next_retry_at: null, health: "ok", crashes_in_window: 0, tools: 11, estimated_tokens: 424,
            last_error: null, online_since: now(), era: "2025-11-25",
            calls: { ok: 0, error: 0, failed: 0 }, latency_ms: [],
        },
        extra,
    );
}

const backends = new Map();
for (const b of [backend("alpha"), backend("beta")]) backends.set(b.server, b);
if (DEMO) {
    const more = [
        backend("docs", { transport: "http", era: "2026-07-28", status: "requires_reauth", online_since: null,
            last_error: "HTTP 401 from https://docs.example.com/mcp: credentials rejected", tools: 0, estimated_tokens: 0 }),
        backend("idle", { status: "dormant", online_since: null, tools: 4, estimated_tokens: 310 }),
        backend("search", { transport: "http", status: "offline", breaker: "open", reconnect_attempt: 3,
            next_retry_at: now() + 15000, online_since: null, health: "degraded",
            last_error: "connection refused (os error 111) while connecting to http://127.0.0.1:9/mcp", tools: 7 }),
        backend("slowpoke", { status: "connecting", online_since: null, tools: 0, estimated_tokens: 0 }),
        backend("gone", { status: "permanently_failed", crashes_in_window: 3, online_since: null,
            last_error: "process exited with code 1; stderr: Error: Cannot find module 'left-pad'\n    at Module._resolveFilename (node:internal/modules/cjs/loader:1145:15)" }),
    ];
    for (const b of more) backends.set(b.server, b);
}

// ---- events ------------------------------------------------------------------
const kept = []; // [seq, text]
let nextSeq = 0;
const streams = new Set();

function emit(event, fields) {
    const seq = nextSeq++;
    const data = JSON.stringify(Object.assign({ seq, at_ms: now(), event }, fields));
    const text = `id: ${seq}\nevent: tether\ndata: ${data}\n\n`;
    kept.push([seq, text]);
    if (kept.length > 64) kept.shift();
    for (const res of streams) res.write(text);
}

function setStatus(b, to, message) {
    const from = b.status;
    if (from === to) return;
    b.status = to;
    emit("server_status_changed", message ? { server: b.server, from, to, message } : { server: b.server, from, to });
}

for (const b of backends.values()) {
    emit("server_status_changed", { server: b.server, from: "provisioning", to: "connecting" });
    if (b.status !== "connecting") emit("server_status_changed", { server: b.server, from: "connecting", to: b.status });
}

// Scripted traffic: online backends answer a call now and then.
setInterval(() => {
    for (const b of backends.values()) {
        if (b.status !== "online") continue;
        const ms = Math.round(5 + Math.random() * 40 + (Math.random() < 0.1 ? 120 : 0));
        b.latency_ms.push(ms);
        if (b.latency_ms.length > 32) b.latency_ms.shift();
        if (Math.random() < 0.1) b.calls.error++;
        else b.calls.ok++;
    }
}, 700).unref();

function crash(b) {
    if (b.status !== "online") return false;
    emit("server_disconnected", { server: b.server, intentional: false });
    b.calls.failed++;
    b.crashes_in_window++;
    b.online_since = null;
    b.last_error = "process exited with code 3; stderr: mock: crashing (crash tool)";
    b.next_retry_at = now() + 600000;
    setStatus(b, "error", b.last_error);
    return true;
}

const timers = new Map();
function restart(b) {
    clearTimeout(timers.get(b.server));
    b.next_retry_at = null;
    b.reconnect_attempt = 0;
    setStatus(b, "connecting");
    timers.set(b.server, setTimeout(() => {
        setStatus(b, "discovering_tools");
        timers.set(b.server, setTimeout(() => {
            b.last_error = null;
            b.crashes_in_window = 0;
            b.breaker = "closed";
            b.health = "ok";
            b.online_since = now();
            if (!b.tools) b.tools = 3;
            emit("tools_discovered", { server: b.server, count: b.tools, estimated_tokens: b.estimated_tokens });
            setStatus(b, "online");
        }, 400));
    }, 400));
}

// ---- HTTP --------------------------------------------------------------------
function send(res, code, body, type) {
    res.writeHead(code, { "Content-Type": type || "application/json", "Cache-Control": "no-store" });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
}

// The last hour as tether's /status gives it (history.minutes): an hour made up from
// the backend's current status, with an incident 20 minutes ago, so the timeline
// and the latency sparkline have something to draw.
const CONDITIONS = ["online", "degraded", "starting", "dormant", "offline", "failed"];
function condition(b) {
    if (b.status === "online") return b.breaker !== "closed" || b.health === "degraded" ? "degraded" : "online";
    if (["connecting", "discovering_tools", "restarting"].includes(b.status)) return "starting";
    if (["provisioning", "dormant", "disconnected"].includes(b.status)) return "dormant";
    if (b.status === "permanently_failed") return "failed";
    return "offline";
}
function history(b) {
    const minutes = [];
    const seed = [...b.server].reduce((a, c) => a + c.charCodeAt(0), 0);
    for (let ago = 59; ago >= 0; ago--) {
        const ms = [0, 0, 0, 0, 0, 0];
        const was = ago === 0 ? condition(b) : ago <= 8 ? condition(b) : ago >= 17 && ago <= 20 ? "offline" : ago === 16 ? "starting" : "online";
        ms[CONDITIONS.indexOf(was)] = ago === 0 ? now() % 60000 : 60000;
        const minute = { ago, ms };
        if (was === "online" || was === "degraded") {
            const p50 = 12 + ((seed + ago * 7) % 20);
            Object.assign(minute, { calls: 20 + ((seed + ago) % 30), p50_ms: p50, p99_ms: p50 * (ago % 11 === 3 ? 30 : 4) });
        }
        minutes.push(minute);
    }
    return { minute_ms: 60000, conditions: CONDITIONS, minutes };
}

function statusJson() {
    const list = [...backends.values()].sort((a, b) => (a.server < b.server ? -1 : 1)).map((b) => {
        const { next_retry_at, online_since, ...rest } = b;
        return Object.assign(rest, {
            next_retry_ms: next_retry_at == null ? null : Math.max(0, next_retry_at - now()),
            uptime_ms: online_since == null ? null : now() - online_since,
            calls: Object.assign({}, b.calls),
            latency_ms: b.latency_ms.slice(),
            history: history(b),
        });
    });
    return { tether: { version: "0.1.0-fake", uptime_ms: now(), sessions: 1, in_flight: 0, mode: "flat" }, backends: list };
}

function readBody(req) {
    return new Promise((resolve) => {
        const chunks = [];
        req.on("data", (c) => chunks.push(c));
        req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    });
}

async function mcp(req, res) {
    let msg;
    try { msg = JSON.parse(await readBody(req)); } catch { return send(res, 400, { error: "bad json" }); }
    if (msg.id == null) return send(res, 202, "");
    if (msg.method === "initialize") {
        res.setHeader("Mcp-Session-Id", "fake-session");
        return send(res, 200, { jsonrpc: "2.0", id: msg.id, result: { protocolVersion: "2025-11-25", capabilities: { tools: {} }, serverInfo: { name: "fake-tether", version: "0" } } });
    }
    const name = (msg.params && msg.params.name) || "";
    const m = /^(.*)__crash$/.exec(name);
    if (msg.method === "tools/call" && m && backends.has(m[1]) && crash(backends.get(m[1]))) {
        const b = backends.get(m[1]);
        return send(res, 200, { jsonrpc: "2.0", id: msg.id, error: { code: -32001, message: `backend '${b.server}' disconnected: ${b.last_error}` } });
    }
    const echo = /^(.*)__echo$/.exec(name);
    if (msg.method === "tools/call" && echo && backends.has(echo[1])) {
        const text = String((msg.params.arguments || {}).text || "");
        return send(res, 200, { jsonrpc: "2.0", id: msg.id, result: { resultType: "complete", content: [{ type: "text", text }] } });
    }
    return send(res, 200, { jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "the fake serves only <server>__crash and <server>__echo" } });
}

const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://x");
    if (url.pathname === "/" && req.method === "GET") return send(res, 200, fs.readFileSync(PAGE, "utf8"), "text/html; charset=utf-8");
    if (TOKEN && req.headers.authorization !== `Bearer ${TOKEN}`) {
        res.setHeader("WWW-Authenticate", "Bearer");
        return send(res, 401, { error: "unauthorized" });
    }
    const p = url.pathname;
    if (p === "/mcp" && req.method === "POST") return mcp(req, res);
    if (p === "/__fake/drop-events" && req.method === "POST") { // test hook: the event streams break
        for (const s of streams) s.destroy();
        streams.clear();
        return send(res, 200, { ok: true });
    }
    const admin = /^\/admin\/(restart|reconnect)\/([^/]+)$/.exec(p);
    if (admin) {
        if (req.method !== "POST") return send(res, 405, { error: "method not allowed" });
        if (!/^application\/json/i.test(req.headers["content-type"] || "")) return send(res, 415, { error: "send Content-Type: application/json" });
        const b = backends.get(decodeURIComponent(admin[2]));
        if (!b) return send(res, 404, { error: `unknown backend: ${decodeURIComponent(admin[2])}` });
        restart(b);
        return send(res, 202, { ok: true });
    }
    if (req.method !== "GET") return send(res, 405, { error: "method not allowed" });
    if (p === "/healthz") return send(res, 200, { status: "ok" });
    if (p === "/readyz") return send(res, 200, { ready: true });
    if (p === "/status") return send(res, 200, statusJson());
    const logs = /^\/logs\/([^/]+)$/.exec(p);
    if (logs) { // its events, and its last error as the stderr line that told it
        const name = decodeURIComponent(logs[1]);
        const b = backends.get(name);
        if (!b) return send(res, 404, { error: `unknown backend: ${name}` });
        const lines = kept.map(([, text]) => JSON.parse(text.split("data: ")[1]))
            .filter((e) => e.server === name)
            .map((e) => ({ at: e.at_ms, source: "event", text: `${e.event} ${JSON.stringify(e)}` }));
        if (b.last_error) lines.push({ at: now(), source: "stderr", text: b.last_error });
        return send(res, 200, { server: name, lines });
    }
    if (p === "/metrics") {
        const lines = [...backends.values()].map((b) => `tether_calls_total{server="${b.server}",outcome="ok"} ${b.calls.ok}`);
        return send(res, 200, lines.join("\n") + "\n# EOF\n", "text/plain; version=0.0.4");
    }
    if (p === "/events") {
        res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-store" });
        res.write(": tether events\n\n");
        const last = Number.parseInt(req.headers["last-event-id"], 10);
        for (const [seq, text] of kept) if (Number.isNaN(last) || seq > last) res.write(text);
        streams.add(res);
        const keepAlive = setInterval(() => res.write(": keep-alive\n\n"), 15000);
        req.on("close", () => { clearInterval(keepAlive); streams.delete(res); });
        return;
    }
    return send(res, 404, { error: "not found" });
});

server.listen(PORT, "127.0.0.1", () => {
    console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
