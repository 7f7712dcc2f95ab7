"""Interop test: the official MCP Python SDK as a client of `tether`, with real
backends behind it: `@modelcontextprotocol/server-everything` (Node) as
`everything` (stdio), `mcp-server-time` (Python) as `time` (stdio), and two more
server-everything processes that the test starts itself, reached over HTTP:
`everything_http` (Streamable HTTP, `index.js streamableHttp`, POST/GET /mcp) and
`everything_sse` (the legacy HTTP+SSE transport, `index.js sse`, GET /sse and
POST /message).

Then meta mode, with tethers of their own in front of server-everything,
`@modelcontextprotocol/server-memory` and `@modelcontextprotocol/server-filesystem`
(stdio): an SDK session with `--mode meta` sees exactly tether's six tools, finds
backend tools with `search_tools`, reads one with `describe_tool` and calls them
with `execute_tool`; and the size of `tools/list` over the same three servers,
measured in flat and in meta mode on the raw JSON-RPC lines (the run fails unless
meta mode's is under half of flat mode's; the numbers are printed).

Run by tests/interop/run.sh, which installs the pinned components, builds both
runtimes' binaries and runs this once per binary.
Environment:
  TETHER_BIN         the tether executable (`tether` or `tether-blocking`)
  INTEROP_RUNTIME    which runtime TETHER_BIN is: `smol` (default) or `blocking`; the
                     checks a runtime cannot pass by design (RUNTIME_SKIPS) are skipped
                     and reported as such
  INTEROP_DIR        where run.sh installed things (venv/, node/)
  INTEROP_VERBOSE=1  print the tail of tether's stderr, the HTTP servers' logs and the
                     notifications seen (always on failure)

Prints one line per check (`ok`, `FAIL`, or `skip` with the reason) and a closing
`N passed, N failed` (`, N skipped` when some were); exits non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any, AsyncIterator, Awaitable, Callable

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# logging, subscribe and roots are deprecated in the 2026-07-28 revision; tether speaks 2025-11-25.
warnings.simplefilter("ignore", MCPDeprecationWarning)

TETHER_BIN = Path(os.environ["TETHER_BIN"]).resolve()
INTEROP_DIR = Path(os.environ["INTEROP_DIR"]).resolve()
VERBOSE = os.environ.get("INTEROP_VERBOSE") == "1"
INTEROP_RUNTIME = os.environ.get("INTEROP_RUNTIME", "smol")

# Checks skipped for a runtime, by check name, with the reason: only for a feature the
# runtime does not have by design. The blocking runtime (`tether-blocking`) serves
# stdio only, with the same core, config, flags and backend transports (stdio,
# Streamable HTTP, legacy HTTP+SSE through tether-host) as `tether`; every check here
# is a stdio client's, so none is skipped. A check added later that needs what only
# `tether` has (serving HTTP: `--listen`) goes in the "blocking" table.
RUNTIME_SKIPS: dict[str, dict[str, str]] = {
    "smol": {},
    "blocking": {},
}

NODE_PKG = INTEROP_DIR / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything"
EVERYTHING_JS = NODE_PKG / "dist" / "index.js"
TIME_BIN = INTEROP_DIR / "venv" / "bin" / "mcp-server-time"
MEMORY_JS = NODE_PKG.parent / "server-memory" / "dist" / "index.js"
FILESYSTEM_JS = NODE_PKG.parent / "server-filesystem" / "dist" / "index.js"

# Values handed to the backends through the config's `env` blocks; the test reads
# them back through the backends (server-everything's `get-env` tool, and the local
# timezone that mcp-server-time names in its tool descriptions, taken from TZ).
EVERYTHING_MARK = "tether-interop-env-ok"
TIME_TZ = "Asia/Tokyo"

# Per-check time limit (seconds): generous, but a hang must fail, not stall CI.
CHECK_TIMEOUT = 30.0


class CheckFailed(Exception):
    pass


def check(condition: Any, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def text_of(result: types.CallToolResult | types.GetPromptResult) -> str:
    if isinstance(result, types.GetPromptResult):
        blocks = [m.content for m in result.messages]
    else:
        blocks = list(result.content)
    return "\n".join(b.text for b in blocks if isinstance(b, types.TextContent))


def from_everything(logger: str | None) -> bool:
    """A log message relayed from the stdio `everything` backend (tether prefixes the
    logger with the backend's name), not from `everything_http` or `everything_sse`."""
    return logger is not None and (logger == "everything" or logger.startswith("everything/"))


def describe(e: BaseException) -> str:
    """An exception as one line; exception groups (anyio task groups) by their leaves."""
    inner = getattr(e, "exceptions", None)
    if isinstance(inner, (list, tuple)) and inner:
        return "; ".join(describe(x) for x in inner)
    return f"{type(e).__name__}: {e}"


# The HTTP backends: their tether names, and the prefixes of what tether serves from them.
HTTP = "everything_http"  # Streamable HTTP
SSE = "everything_sse"  # legacy HTTP+SSE
# Resource URIs get a per-backend scheme alias (`_` is not allowed in a URI scheme).
URI_ALIASES = {"everything": "everything", HTTP: "everything-http", SSE: "everything-sse"}
TOOL_PREFIXES = ("everything__", "time__", f"{HTTP}__", f"{SSE}__")


def write_config(directory: Path, http_url: str, sse_url: str) -> Path:
    """A Claude Desktop style file: `mcpServers` entries with `env` blocks, plus a
    `tether` section. The SDK starts tether with a minimal environment (HOME, PATH,
    ...), so each backend's `env` passes on what it needs explicitly. The two `url`
    entries are remote backends: `/mcp` is Streamable HTTP, a path ending in `/sse`
    the legacy HTTP+SSE transport."""
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    config = {
        "tether": {"separator": "__"},
        "mcpServers": {
            "everything": {
                "command": "node",
                "args": [str(EVERYTHING_JS), "stdio"],
                "env": {**base_env, "TETHER_INTEROP_MARK": EVERYTHING_MARK},
            },
            "time": {
                "command": str(TIME_BIN),
                "args": [],
                "env": {**base_env, "TZ": TIME_TZ},
            },
            HTTP: {"url": http_url},
            SSE: {"url": sse_url},
        },
    }
    path = directory / "tether.json"
    path.write_text(json.dumps(config, indent=2))
    return path


# --------------------------------------------------------------------------------
# Processes (Linux /proc)


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _proc_ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1])


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def tether_pid(config_path: Path) -> int:
    pids = [
        pid
        for pid in _all_pids()
        if (cmd := _proc_cmdline(pid)) and Path(cmd[0]).name == TETHER_BIN.name and str(config_path) in cmd
    ]
    check(len(pids) == 1, f"expected one tether process for {config_path}, found {pids}")
    return pids[0]


def backend_pids(parent: int, marker: str) -> list[int]:
    """Live children of `parent` whose command line contains `marker`."""
    found = []
    for pid in _all_pids():
        if _proc_ppid(pid) != parent:
            continue
        if any(marker in part for part in _proc_cmdline(pid)):
            try:
                state = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if state[state.rindex(")") + 2] != "Z":  # not a zombie
                found.append(pid)
    return found


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies (Linux
    PR_SET_PDEATHSIG), so a test killed by run.sh's timeout leaves no server behind."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """server-everything run by the test with an HTTP transport (`streamableHttp` or
    `sse`) on a free port; its output goes to a log file shown on failure."""

    def __init__(self, mode: str, log_path: Path):
        self.mode = mode
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def spawn(self) -> None:
        if self._log is None:
            self._log = open(self.log_path, "ab")
        self._log.write(f"---- node index.js {self.mode} on port {self.port}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            ["node", str(EVERYTHING_JS), self.mode],
            env={**os.environ, "PORT": str(self.port)},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    async def wait_listening(self, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise CheckFailed(f"{self.mode} server exited with status {self.proc.returncode}: {self.log_tail(5)}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise CheckFailed(f"{self.mode} server not listening on port {self.port} after {seconds:.0f} s")
            await anyio.sleep(0.05)

    async def start(self) -> None:
        """On a fresh free port; a port taken meanwhile (the server exits) gets another try."""
        for attempt in range(3):
            self.port = free_port()
            self.spawn()
            try:
                return await self.wait_listening()
            except CheckFailed:
                self.kill()
                if attempt == 2:
                    raise

    async def restart(self) -> None:
        """On the same port."""
        self.spawn()
        await self.wait_listening()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------
# The client side


class Recorder:
    """Everything the server pushes that the test looks at later."""

    def __init__(self) -> None:
        self.notifications: list[tuple[float, str, Any]] = []  # (time, method, params)
        self.logs: list[tuple[float, types.LoggingMessageNotificationParams]] = []
        self.sampling_requests: list[types.CreateMessageRequestParams] = []
        self.elicitations: list[types.ElicitRequestParams] = []
        self.roots_asked = 0
        self.roots = [types.Root(uri="file:///tmp/tether-interop-root-1", name="first root")]

    async def message_handler(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notifications.append((time.monotonic(), "exception", repr(message)))
            return
        self.notifications.append((time.monotonic(), message.method, getattr(message, "params", None)))

    async def logging_callback(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((time.monotonic(), params))

    async def sampling_callback(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling_requests.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="canned answer from the interop test"),
            model="interop-test-model",
            stop_reason="endTurn",
        )

    async def elicitation_callback(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.elicitations.append(params)
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True, "integer": 7})

    async def list_roots_callback(self, context: Any) -> types.ListRootsResult:
        self.roots_asked += 1
        return types.ListRootsResult(roots=list(self.roots))

    def methods_since(self, since: float) -> list[str]:
        return [m for (t, m, _) in self.notifications if t >= since]


@asynccontextmanager
async def sdk_session(
    params: StdioServerParameters, errlog: Any, client_name: str, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """The SDK's ClientSession over a tether it starts (not yet initialized)."""
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(
            read,
            write,
            read_timeout_seconds=CHECK_TIMEOUT,
            client_info=types.Implementation(name=client_name, version="1"),
            **callbacks,
        ) as session:
            yield session


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def wait_for_tool(session: ClientSession, name: str, seconds: float) -> list[types.Tool]:
    """Lists tools until `name` shows up (backends may register tools late)."""
    deadline = time.monotonic() + seconds
    while True:
        tools = await list_all_tools(session)
        if any(t.name == name for t in tools) or time.monotonic() > deadline:
            return tools
        await anyio.sleep(0.25)


class Run:
    s: ClientSession  # set once connected

    def __init__(self, rec: Recorder, config_path: Path, http_server: HttpServer):
        self.rec = rec
        self.config_path = config_path
        self.http_server = http_server  # the Streamable HTTP backend's process, killed and restarted
        self.passed: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.skipped: list[tuple[str, str]] = []
        self.init: types.InitializeResult | None = None

    async def step(self, name: str, fn: Callable[[], Awaitable[str]], timeout: float = CHECK_TIMEOUT) -> bool:
        why = RUNTIME_SKIPS[INTEROP_RUNTIME].get(name)
        if why is not None:
            self.skipped.append((name, why))
            print(f"skip {name}: not run against the {INTEROP_RUNTIME} runtime: {why}", flush=True)
            return True
        started = time.monotonic()
        try:
            with anyio.fail_after(timeout):
                detail = await fn()
        except CheckFailed as e:
            self.failed.append((name, str(e)))
            print(f"FAIL {name}: {e}", flush=True)
            return False
        except TimeoutError:
            msg = f"no answer within {timeout:.0f} s"
            self.failed.append((name, msg))
            print(f"FAIL {name}: {msg}", flush=True)
            return False
        except Exception as e:  # an SDK error, a JSON-RPC error from tether, ...
            msg = describe(e)
            self.failed.append((name, msg))
            print(f"FAIL {name}: {msg}", flush=True)
            if VERBOSE:
                traceback.print_exc()
            return False
        self.passed.append(name)
        print(f"ok   {name} ({time.monotonic() - started:.1f} s){': ' + detail if detail else ''}", flush=True)
        return True

    # ---- the checks -------------------------------------------------------------

    async def initialize(self) -> str:
        self.init = await self.s.initialize()
        r = self.init
        check(r.protocol_version == "2025-11-25", f"protocolVersion: expected 2025-11-25, got {r.protocol_version!r}")
        caps = r.capabilities
        check(caps.tools is not None, f"tools capability missing: {caps!r}")
        check(caps.resources is not None, f"resources capability missing: {caps!r}")
        check(caps.prompts is not None, f"prompts capability missing: {caps!r}")
        return f"server {r.server_info.name} {r.server_info.version}, protocol {r.protocol_version}"

    async def list_tools(self) -> str:
        # The everything server registers its capability-dependent tools (sampling,
        # elicitation, roots) just after the handshake and announces them with
        # list_changed, so allow it a moment to show up. mcp-server-time (Python)
        # may take longer to start than tether's 2 s list aggregation deadline on a
        # loaded machine; it then appears with list_changed: wait for it too.
        await wait_for_tool(self.s, "time__get_current_time", 20)
        tools = await wait_for_tool(self.s, "everything__trigger-sampling-request", 10)
        names = sorted(t.name for t in tools)
        for expected in ("everything__echo", "everything__trigger-long-running-operation", "time__get_current_time"):
            check(expected in names, f"tool {expected!r} missing from tools/list: {names}")
        check(
            "everything__trigger-sampling-request" in names,
            "everything__trigger-sampling-request missing: the backend registers it only when tether "
            f"announces the sampling capability; tools: {names}",
        )
        bad = [n for n in names if not n.startswith(TOOL_PREFIXES)]
        check(not bad, f"tools not namespaced: {bad}")
        for t in tools:
            check(1 <= len(t.name) <= 64, f"tool name out of bounds: {t.name!r}")
        time_tool = next(t for t in tools if t.name == "time__get_current_time")
        check(
            TIME_TZ in json.dumps(time_tool.input_schema),
            f"time backend did not get TZ={TIME_TZ} from its config env block: {time_tool.input_schema}",
        )
        n_every = sum(n.startswith("everything__") for n in names)
        n_time = sum(n.startswith("time__") for n in names)
        return f"{len(names)} tools ({n_every} everything, {n_time} time); time env TZ seen"

    async def list_resources(self) -> str:
        res = await self.s.list_resources()
        uris = [str(r.uri) for r in res.resources]
        check(uris, "resources/list is empty")
        prefixes = tuple(f"{a}+" for a in URI_ALIASES.values())
        bad = [u for u in uris if not u.startswith(prefixes)]
        check(not bad, f"resource URIs not prefixed with one of {prefixes}: {bad[:5]}")
        check(any(u.startswith("everything+") for u in uris), f"no 'everything+' resource listed: {uris[:5]}")
        templates = await self.s.list_resource_templates()
        tpl = [t.uri_template for t in templates.resource_templates]
        check(tpl, "resources/templates/list is empty")
        bad = [t for t in tpl if not t.startswith(prefixes)]
        check(not bad, f"resource templates not prefixed: {bad}")
        return f"{len(uris)} resources, {len(tpl)} templates, e.g. {uris[0]}"

    async def list_prompts(self) -> str:
        res = await self.s.list_prompts()
        names = sorted(p.name for p in res.prompts)
        check("everything__simple-prompt" in names, f"everything__simple-prompt missing: {names}")
        check("everything__args-prompt" in names, f"everything__args-prompt missing: {names}")
        bad = [n for n in names if "__" not in n]
        check(not bad, f"prompts not namespaced: {bad}")
        return f"{len(names)} prompts"

    async def call_echo(self) -> str:
        r = await self.s.call_tool("everything__echo", {"message": "hello through tether"})
        check(not r.is_error, f"echo returned isError: {r}")
        check("hello through tether" in text_of(r), f"echo text: {text_of(r)!r}")
        return text_of(r)

    async def call_time(self) -> str:
        r = await self.s.call_tool("time__get_current_time", {"timezone": "UTC"})
        check(not r.is_error, f"get_current_time returned isError: {text_of(r)!r}")
        body = text_of(r)
        check('"timezone"' in body and "UTC" in body, f"unexpected get_current_time result: {body!r}")
        data = json.loads(body)
        check("datetime" in data, f"no datetime in {data}")
        return f"UTC now {data['datetime']}"

    async def env_block(self) -> str:
        r = await self.s.call_tool("everything__get-env", {})
        check(not r.is_error, f"get-env returned isError: {text_of(r)!r}")
        body = text_of(r)
        check(
            EVERYTHING_MARK in body,
            f"TETHER_INTEROP_MARK from the config env block not in the backend's environment: {body[:400]!r}",
        )
        return "everything backend sees TETHER_INTEROP_MARK"

    async def read_resource(self) -> str:
        res = await self.s.list_resources()
        mine = [r for r in res.resources if str(r.uri).startswith("everything+")]
        check(mine, "no 'everything+' resource listed")
        doc = next((r for r in mine if "static/document" in str(r.uri)), mine[0])
        uri = str(doc.uri)
        r = await self.s.read_resource(uri)
        check(r.contents, f"resources/read {uri} returned no contents")
        got = [str(c.uri) for c in r.contents]
        check(got[0] == uri, f"resources/read {uri}: contents uri {got[0]!r} was not rewritten to the served URI")
        text = getattr(r.contents[0], "text", "") or ""
        check(len(text) > 0, f"resources/read {uri}: empty text")
        # A templated resource, through the prefixed template.
        turi = "everything+demo://resource/dynamic/text/7"
        t = await self.s.read_resource(turi)
        check(t.contents and str(t.contents[0].uri) == turi, f"templated read {turi}: {t.contents!r}")
        return f"{uri} ({len(text)} chars), {turi}"

    async def get_prompt(self) -> str:
        p = await self.s.get_prompt("everything__simple-prompt")
        check("simple prompt" in text_of(p), f"simple-prompt text: {text_of(p)!r}")
        a = await self.s.get_prompt("everything__args-prompt", {"city": "Lisbon"})
        check("Lisbon" in text_of(a), f"args-prompt text: {text_of(a)!r}")
        return text_of(a)

    async def progress(self) -> str:
        seen: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total))

        r = await self.s.call_tool(
            "everything__trigger-long-running-operation",
            {"duration": 2, "steps": 4},
            progress_callback=on_progress,
        )
        check(not r.is_error, f"long-running operation failed: {text_of(r)!r}")
        check("completed" in text_of(r), f"unexpected result: {text_of(r)!r}")
        check(len(seen) == 4, f"expected 4 progress notifications through the SDK callback, got {seen}")
        check([p for p, _ in seen] == [1, 2, 3, 4], f"progress out of order: {seen}")
        check(all(t == 4 for _, t in seen), f"progress total should be 4: {seen}")
        return f"progress {[p for p, _ in seen]}"

    async def cancellation(self) -> str:
        """The client gives up on a long call: the SDK sends notifications/cancelled,
        tether forwards it and stops relaying that call's progress; later calls work."""
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        with anyio.move_on_after(1.6) as scope:
            await self.s.call_tool(
                "everything__trigger-long-running-operation",
                {"duration": 4, "steps": 8},
                progress_callback=on_progress,
            )
        check(scope.cancelled_caught, "the 4 s operation finished within 1.6 s?")
        at_cancel = len(seen)
        check(at_cancel >= 1, "no progress before the cancellation")
        before = [m for _, m, _ in self.rec.notifications].count("notifications/progress")
        await anyio.sleep(1.5)  # the backend keeps counting; nothing of it may reach us
        after = [m for _, m, _ in self.rec.notifications].count("notifications/progress")
        check(after == before and len(seen) == at_cancel, f"progress still relayed after the cancel: {seen}")
        r = await self.s.call_tool("everything__echo", {"message": "after the cancel"})
        check("after the cancel" in text_of(r), f"call after the cancel: {text_of(r)!r}")
        return f"cancelled after progress {seen}; nothing relayed after"

    async def sampling(self) -> str:
        before = len(self.rec.sampling_requests)
        r = await self.s.call_tool("everything__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
        check(not r.is_error, f"sampling tool failed: {text_of(r)!r}")
        check(len(self.rec.sampling_requests) == before + 1, "the sampling callback was not called exactly once")
        req = self.rec.sampling_requests[-1]
        check(req.max_tokens == 20, f"sampling request maxTokens: {req.max_tokens}")
        check("canned answer from the interop test" in text_of(r), f"sampling answer not relayed: {text_of(r)!r}")
        check("interop-test-model" in text_of(r), f"model not relayed: {text_of(r)!r}")
        return "backend got the client's sampling answer"

    def everything_pid(self) -> tuple[int, int]:
        tpid = tether_pid(self.config_path)
        pids = backend_pids(tpid, str(EVERYTHING_JS))
        check(len(pids) == 1, f"expected one everything backend under tether (pid {tpid}), found {pids}")
        return tpid, pids[0]

    async def kill_in_flight(self) -> str:
        """SIGKILL the backend while a call is running on it. The tool is marked
        readOnly/idempotent and the backend has not crashed yet, so tether resends
        the call on the fresh process; in any case the call must end, not hang."""
        tpid, old = self.everything_pid()
        seen: list[float] = []
        first = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)
            first.set()

        outcome: dict[str, Any] = {}

        async def call() -> None:
            try:
                outcome["result"] = await self.s.call_tool(
                    "everything__trigger-long-running-operation",
                    {"duration": 3, "steps": 3},
                    progress_callback=on_progress,
                )
            except MCPError as e:
                outcome["error"] = e

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(10):
                await first.wait()
            os.kill(old, signal.SIGKILL)
            killed_at = time.monotonic()
        took = time.monotonic() - killed_at
        new = backend_pids(tpid, str(EVERYTHING_JS))
        check(new and old not in new, f"killed process {old} still listed; now {new}")
        if "error" in outcome:
            e = outcome["error"]
            raise CheckFailed(
                f"the idempotent call was not resent after the crash: error {e.error.code} {e.error.message!r} "
                f"data={e.error.data!r}"
            )
        r = outcome["result"]
        check(not r.is_error and "completed" in text_of(r), f"resent call result: {text_of(r)!r}")
        # MCP: progress must increase, even though the fresh process counts from 1 again.
        check(all(a < b for a, b in zip(seen, seen[1:])), f"progress went backwards across the resend: {seen}")
        return f"pid {old} killed mid-call, call resent and completed {took:.1f} s later on pid {new[0]}; progress {seen}"

    async def survive_kill(self) -> str:
        """SIGKILL the idle backend. Once tether has seen the exit (it hides the
        backend's tools and says so with tools/list_changed), the next call must
        succeed: it waits for the restart and goes to the fresh process."""
        tpid, old = self.everything_pid()
        marker = str(EVERYTHING_JS)
        killed_at = time.monotonic()
        os.kill(old, signal.SIGKILL)

        # A call sent in the instant after the kill may reach the dying process and
        # fail with "backend disconnected" (by design no resend: the backend crashed
        # already in this window), so wait until tether knows.
        while "notifications/tools/list_changed" not in self.rec.methods_since(killed_at):
            check(
                time.monotonic() - killed_at < 10,
                "no notifications/tools/list_changed within 10 s of the kill; seen since: "
                f"{self.rec.methods_since(killed_at)}",
            )
            await anyio.sleep(0.05)
        noticed = time.monotonic() - killed_at

        try:
            r = await self.s.call_tool("everything__echo", {"message": "after the kill"})
        except MCPError as e:
            raise CheckFailed(
                f"first call after the kill failed: {e.error.code} {e.error.message!r} data={e.error.data!r}"
            ) from e
        check(not r.is_error and "after the kill" in text_of(r), f"first call after the kill: {text_of(r)!r}")
        recovered = time.monotonic() - killed_at

        new = backend_pids(tpid, marker)
        check(len(new) == 1 and new[0] != old, f"expected a fresh everything process, old {old}, now {new}")
        tools = await wait_for_tool(self.s, "everything__echo", 5)
        check(any(t.name == "everything__echo" for t in tools), "everything__echo not listed after the restart")
        return (
            f"pid {old} killed; list_changed after {noticed:.2f} s; the next call succeeded "
            f"{recovered:.1f} s after the kill on new pid {new[0]}"
        )

    async def ping(self) -> str:
        await self.s.send_ping()
        return ""

    async def completion(self) -> str:
        ref = types.PromptReference(type="ref/prompt", name="everything__completable-prompt")
        r = await self.s.complete(ref, {"name": "department", "value": "Eng"})
        check(r.completion.values == ["Engineering"], f"completion of department 'Eng': {r.completion.values}")
        r = await self.s.complete(
            ref, {"name": "name", "value": ""}, context_arguments={"department": "Sales"}
        )
        check(r.completion.values == ["David", "Eve", "Frank"], f"completion with context: {r.completion.values}")
        return "department 'Eng' -> Engineering; names in Sales"

    async def logging(self) -> str:
        await self.s.set_logging_level("debug")
        since = time.monotonic()
        r = await self.s.call_tool("everything__toggle-simulated-logging", {})
        check(not r.is_error and "Started" in text_of(r), f"toggle-simulated-logging: {text_of(r)!r}")
        try:
            while not [p for t, p in self.rec.logs if t >= since and from_everything(p.logger)]:
                check(time.monotonic() - since < 8, "no notifications/message from the everything backend")
                await anyio.sleep(0.1)
        finally:
            await self.s.call_tool("everything__toggle-simulated-logging", {})  # off again
        got = [p for t, p in self.rec.logs if t >= since and from_everything(p.logger)][0]
        check(got.logger == "everything", f"logger of a backend message without one should be 'everything': {got}")
        check("message" in str(got.data), f"unexpected log data: {got.data!r}")
        return f"[{got.level}] logger={got.logger} {got.data}"

    async def subscribe(self) -> str:
        uri = "everything+demo://resource/static/document/architecture.md"
        await self.s.subscribe_resource(uri)
        since = time.monotonic()
        r = await self.s.call_tool("everything__toggle-subscriber-updates", {})
        check(not r.is_error and "Started" in text_of(r), f"toggle-subscriber-updates: {text_of(r)!r}")

        def updates() -> list[str]:
            return [str(p.uri) for t, m, p in self.rec.notifications if t >= since and m == "notifications/resources/updated"]

        try:
            while not updates():
                check(time.monotonic() - since < 8, "no notifications/resources/updated for a subscribed resource")
                await anyio.sleep(0.1)
        finally:
            await self.s.call_tool("everything__toggle-subscriber-updates", {})  # off again
            await self.s.unsubscribe_resource(uri)
        check(updates()[0] == uri, f"resources/updated carried {updates()[0]!r}, expected the served URI {uri!r}")
        return f"updated {uri}"

    async def elicitation(self) -> str:
        r = await self.s.call_tool("everything__trigger-elicitation-request", {})
        check(not r.is_error, f"elicitation tool failed: {text_of(r)!r}")
        check(len(self.rec.elicitations) == 1, f"elicitation callback called {len(self.rec.elicitations)} times")
        check("Ada Lovelace" in text_of(r), f"elicitation answer not relayed: {text_of(r)!r}")
        return "backend got the client's elicitation answer"

    async def roots(self) -> str:
        r = await self.s.call_tool("everything__get-roots-list", {})
        check(not r.is_error, f"get-roots-list failed: {text_of(r)!r}")
        check("tether-interop-root-1" in text_of(r), f"client roots not seen by the backend: {text_of(r)!r}")
        # Change the roots and tell the server: the backend should ask again.
        asked = self.rec.roots_asked
        self.rec.roots = [types.Root(uri="file:///tmp/tether-interop-root-2", name="second root")]
        await self.s.send_roots_list_changed()
        deadline = time.monotonic() + 8
        while True:
            r = await self.s.call_tool("everything__get-roots-list", {})
            if "tether-interop-root-2" in text_of(r):
                break
            check(
                time.monotonic() < deadline,
                f"roots/list_changed did not reach the backend (roots asked {self.rec.roots_asked - asked} "
                f"times since): {text_of(r)!r}",
            )
            await anyio.sleep(0.2)
        return f"roots/list answered {self.rec.roots_asked} times; list_changed forwarded"

    async def unknown_tool(self) -> str:
        try:
            r = await self.s.call_tool("everything__no-such-tool", {})
        except MCPError as e:
            check(e.error.code == -32602, f"unknown tool: expected -32602, got {e.error.code} {e.error.message}")
            return f"-32602 {e.error.message}"
        check(r.is_error, f"unknown tool call succeeded: {r}")
        return f"isError: {text_of(r)}"

    # ---- the HTTP backends ----------------------------------------------------------

    async def http_online(self) -> str:
        """Both HTTP backends are online (tools are listed only then) and serve the
        same tools as the stdio `everything`, including those the server registers
        after the handshake and announces with list_changed (on the Streamable HTTP
        backend that notification has no request to ride on: it comes on the GET stream)."""
        deadline = time.monotonic() + 10
        while True:
            tools = await list_all_tools(self.s)
            names = {t.name for t in tools}
            stdio = {n.removeprefix("everything__") for n in names if n.startswith("everything__")}
            served = {b: {n.removeprefix(f"{b}__") for n in names if n.startswith(f"{b}__")} for b in (HTTP, SSE)}
            if all(served[b] == stdio for b in served) or time.monotonic() > deadline:
                break
            await anyio.sleep(0.25)
        for b, got in served.items():
            check(got, f"no {b}__* tools listed: is {b} online? tools: {sorted(names)}")
            check(
                got == stdio,
                f"{b} serves other tools than the stdio everything backend: missing {sorted(stdio - got)}, "
                f"extra {sorted(got - stdio)}",
            )
        check("trigger-sampling-request" in served[HTTP], f"{HTTP}__trigger-sampling-request missing")
        return f"{HTTP}: {len(served[HTTP])} tools, {SSE}: {len(served[SSE])} tools (same as the stdio backend)"

    async def http_echo(self, backend: str) -> str:
        message = f"hello through {backend}"
        r = await self.s.call_tool(f"{backend}__echo", {"message": message})
        check(not r.is_error, f"echo returned isError: {r}")
        check(message in text_of(r), f"echo text: {text_of(r)!r}")
        return text_of(r)

    async def http_read_resource(self, backend: str) -> str:
        alias = URI_ALIASES[backend]
        uri = f"{alias}+demo://resource/static/document/architecture.md"
        r = await self.s.read_resource(uri)
        check(r.contents, f"resources/read {uri} returned no contents")
        check(str(r.contents[0].uri) == uri, f"resources/read {uri}: contents uri {r.contents[0].uri!s}")
        text = getattr(r.contents[0], "text", "") or ""
        check(len(text) > 0, f"resources/read {uri}: empty text")
        turi = f"{alias}+demo://resource/dynamic/text/3"
        t = await self.s.read_resource(turi)
        check(t.contents and str(t.contents[0].uri) == turi, f"templated read {turi}: {t.contents!r}")
        return f"{uri} ({len(text)} chars), {turi}"

    async def http_progress(self) -> str:
        """The Streamable HTTP server answers a tools/call POST with an SSE stream that
        carries the progress notifications before the result."""
        seen: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total))

        r = await self.s.call_tool(
            f"{HTTP}__trigger-long-running-operation", {"duration": 2, "steps": 4}, progress_callback=on_progress
        )
        check(not r.is_error and "completed" in text_of(r), f"long-running operation: {text_of(r)!r}")
        check([p for p, _ in seen] == [1, 2, 3, 4], f"expected progress 1..4 through the SDK callback, got {seen}")
        check(all(t == 4 for _, t in seen), f"progress total should be 4: {seen}")
        return f"progress {[p for p, _ in seen]}"

    async def http_sampling(self) -> str:
        """The server's sampling/createMessage travels on the tools/call POST's SSE
        stream; tether asks the client and POSTs the answer back in the session."""
        before = len(self.rec.sampling_requests)
        r = await self.s.call_tool(f"{HTTP}__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 21})
        check(not r.is_error, f"sampling tool failed: {text_of(r)!r}")
        check(len(self.rec.sampling_requests) == before + 1, "the sampling callback was not called exactly once")
        check(self.rec.sampling_requests[-1].max_tokens == 21, "sampling request maxTokens not relayed")
        check("canned answer from the interop test" in text_of(r), f"sampling answer not relayed: {text_of(r)!r}")
        return "backend got the client's sampling answer"

    async def http_killed(self) -> str:
        """SIGKILL the Streamable HTTP server: a call to it fails with a structured
        error (-32001 with data.status), and the other backends keep working."""
        old = self.http_server.proc.pid if self.http_server.proc else None
        self.http_server.kill()
        killed_at = time.monotonic()
        try:
            r = await self.s.call_tool(f"{HTTP}__echo", {"message": "server is gone"})
        except MCPError as e:
            took = time.monotonic() - killed_at
            error = e.error
        else:
            raise CheckFailed(f"a call to the killed server succeeded: {text_of(r)!r}")
        data = error.data
        check(error.code == -32001, f"expected -32001 (backend unavailable), got {error.code} {error.message}")
        check(isinstance(data, dict) and data.get("status"), f"error without data.status: data={data!r}")
        check(data.get("server") == HTTP, f"data.server: {data!r}")
        r = await self.s.call_tool(f"{SSE}__echo", {"message": "sse still up"})
        check("sse still up" in text_of(r), f"{SSE} affected by the other server's death: {text_of(r)!r}")
        return (
            f"pid {old} killed; the call failed after {took:.1f} s: {error.message!r}, "
            f"status={data['status']}, next_retry_ms={data.get('next_retry_ms')}"
        )

    async def http_restarted(self) -> str:
        """Restart the server on the same port: tether reconnects (a fresh
        initialize: the old session died with the process) and calls work again."""
        await self.http_server.restart()
        restarted = time.monotonic()
        failures: list[str] = []
        while True:
            try:
                r = await self.s.call_tool(f"{HTTP}__echo", {"message": "after the restart"})
            except MCPError as e:
                data = e.error.data
                failures.append(str(data.get("status") if isinstance(data, dict) else e.error.code))
                check(
                    time.monotonic() - restarted < 15,
                    f"calls still fail 15 s after the restart ({len(failures)} tries): {e.error.message!r} "
                    f"data={e.error.data!r}",
                )
                await anyio.sleep(0.25)
                continue
            break
        took = time.monotonic() - restarted
        check(not r.is_error and "after the restart" in text_of(r), f"call after the restart: {text_of(r)!r}")
        # Rediscovered in full, including the tools registered after the handshake.
        tools = await wait_for_tool(self.s, f"{HTTP}__trigger-sampling-request", 5)
        check(
            any(t.name == f"{HTTP}__trigger-sampling-request" for t in tools),
            f"{HTTP}__trigger-sampling-request not listed after the restart",
        )
        return f"a call succeeded {took:.1f} s after the restart ({len(failures)} failed before: {failures})"

    async def http_restarted_unnoticed(self) -> str:
        """Kill and restart the server at once, while tether is idle: its next POST
        carries the session the new process never issued. The spec says 404; the
        TypeScript SDK's example server answers 400 "No valid session ID provided".
        Either way tether must open a fresh session and resend, so the call succeeds."""
        old = self.http_server.proc.pid if self.http_server.proc else None
        # Let the re-discovery after the last reconnect finish: a request in flight
        # at the kill would tell tether (connection reset) and the test nothing.
        await anyio.sleep(1)
        self.http_server.kill()
        await self.http_server.restart()
        started = time.monotonic()
        try:
            r = await self.s.call_tool(f"{HTTP}__echo", {"message": "new process, old session"})
        except MCPError as e:
            raise CheckFailed(
                f"the call with the stale session failed: {e.error.code} {e.error.message!r} data={e.error.data!r}"
            ) from e
        check("new process, old session" in text_of(r), f"call after the quick restart: {text_of(r)!r}")
        r = await self.s.call_tool(f"{HTTP}__echo", {"message": "and the next one"})
        check("and the next one" in text_of(r), f"second call after the quick restart: {text_of(r)!r}")
        new = self.http_server.proc.pid if self.http_server.proc else None
        took = time.monotonic() - started
        return f"pid {old} replaced by {new}; the call opened a fresh session and succeeded in {took:.1f} s"


async def stateless_client(params: StdioServerParameters, errlog: Any) -> str:
    """The SDK's high-level Client with its defaults (mode="auto") probes with
    `server/discover`; tether serves the 2026-07-28 revision, so the whole
    exchange is stateless: lists, calls to a handshake-era backend (everything)
    and to a stateless one (mcp-server-time), sampling and elicitation of the
    handshake-era backend as `input_required` rounds the SDK drives, and a
    `subscriptions/listen` that delivers the backend's resource updates."""
    from mcp.client.client import Client
    from mcp.client.subscriptions import ResourceUpdated

    rec = Recorder()
    client = Client(
        stdio_client(params, errlog=errlog),
        sampling_callback=rec.sampling_callback,
        elicitation_callback=rec.elicitation_callback,
        read_timeout_seconds=CHECK_TIMEOUT,
    )
    async with client as c:
        session = c.session
        check(session.discover_result is not None, "the high-level client did not take the stateless era")
        check(session.initialize_result is None, "an initialize went out after the probe")
        check(session.protocol_version == "2026-07-28", f"negotiated {session.protocol_version!r}")
        # A fresh tether answers its first list after waiting at most 2 s for the
        # backends; mcp-server-time (Python) can take longer to start on a busy
        # machine, and a stateless client sees it on a later list.
        wanted = {"time__get_current_time", "everything__echo"}
        deadline = time.monotonic() + 20
        while True:
            tools = await c.list_tools()
            names = {t.name for t in tools.tools}
            if wanted <= names or time.monotonic() > deadline:
                break
            await anyio.sleep(0.5)
        check(wanted <= names, f"servers listed: {sorted({n.split('__')[0] for n in names})}")
        r = await c.call_tool("everything__echo", {"message": "from the stateless client"})
        check("from the stateless client" in text_of(r), f"echo via a stateless client: {text_of(r)!r}")
        r = await c.call_tool("time__get_current_time", {"timezone": "UTC"})
        check(not r.is_error and "UTC" in text_of(r), f"time via a stateless client: {text_of(r)!r}")
        # A handshake-era backend's sampling request: an input_required round.
        r = await c.call_tool("everything__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
        check(not r.is_error, f"sampling tool failed: {text_of(r)!r}")
        check(len(rec.sampling_requests) == 1, f"sampling callback called {len(rec.sampling_requests)} times")
        check("canned answer from the interop test" in text_of(r), f"sampling answer not relayed: {text_of(r)!r}")
        r = await c.call_tool("everything__trigger-elicitation-request", {})
        check(not r.is_error and "Ada Lovelace" in text_of(r), f"elicitation answer not relayed: {text_of(r)!r}")
        # Resource updates arrive on a listen, with tether's served URI.
        uri = "everything+demo://resource/static/document/architecture.md"
        async with c.listen(resource_subscriptions=[uri]) as sub:
            honored = list(sub.honored.resource_subscriptions or []) if sub.honored else []
            check(honored == [uri], f"listen acknowledged {honored!r}")
            r = await c.call_tool("everything__toggle-subscriber-updates", {})
            check(not r.is_error and "Started" in text_of(r), f"toggle-subscriber-updates: {text_of(r)!r}")
            try:
                with anyio.fail_after(8):
                    async for event in sub:
                        if isinstance(event, ResourceUpdated):
                            check(str(event.uri) == uri, f"resources/updated carried {event.uri!r}, expected {uri!r}")
                            break
            except TimeoutError:
                raise CheckFailed("no resources/updated on the listen within 8 s") from None
            finally:
                await c.call_tool("everything__toggle-subscriber-updates", {})  # off again
    return f"protocol {session.protocol_version}, {len(tools.tools)} tools, calls, sampling, elicitation, listen ok"


# --------------------------------------------------------------------------------
# Meta mode: tether in front of server-everything, server-memory and
# server-filesystem serves six tools of its own; the SDK finds and calls backend
# tools through them. And the savings: tools/list measured in flat and meta mode
# over the same three servers.

META_TOOLS = ["list_servers", "search_tools", "describe_tool", "execute_tool", "reconnect_server", "server_events"]
META_SERVERS = ("everything", "memory", "filesystem")
# Meta mode's tools/list must be under this share of flat mode's (bytes and tokens).
META_MAX_SHARE = 0.5
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tool-catalogs"


def write_meta_config(directory: Path, name: str, fs_dir: Path, mode: str | None = None) -> Path:
    """The three servers over stdio; `mode` goes into the `tether` section."""
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    section: dict[str, Any] = {"separator": "__"}
    if mode is not None:
        section["mode"] = mode
    config = {
        "tether": section,
        "mcpServers": {
            "everything": {"command": "node", "args": [str(EVERYTHING_JS), "stdio"], "env": base_env},
            "memory": {
                "command": "node",
                "args": [str(MEMORY_JS)],
                "env": {**base_env, "MEMORY_FILE_PATH": str(directory / f"{name}-memory.jsonl")},
            },
            "filesystem": {"command": "node", "args": [str(FILESYSTEM_JS), str(fs_dir)], "env": base_env},
        },
    }
    path = directory / f"{name}.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def structured_of(r: types.CallToolResult, what: str) -> dict[str, Any]:
    """An own tool's structured result, checked against its text twin."""
    check(not r.is_error, f"{what} returned isError: {text_of(r)!r}")
    data = r.structured_content
    check(isinstance(data, dict), f"{what}: no structuredContent: {r!r}")
    check(json.loads(text_of(r)) == data, f"{what}: the text content is not the structured content as JSON")
    return data


class MetaRun:
    """The checks of one SDK session with tether in meta mode."""

    s: ClientSession

    def __init__(self, fs_dir: Path):
        self.fs_dir = fs_dir
        self.rec = Recorder()

    async def own(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return structured_of(await self.s.call_tool(tool, arguments), f"{tool}({json.dumps(arguments)})")

    async def execute(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self.s.call_tool("execute_tool", {"name": name, "arguments": arguments})

    async def search(self, query: str, want: str, **extra: Any) -> tuple[dict[str, Any], int]:
        """search_tools must return `want` among its results; returns the result and its rank."""
        data = await self.own("search_tools", {"query": query, **extra})
        check(data.get("query") == query, f"search_tools echoed query {data.get('query')!r}")
        names = [t.get("name") for t in data.get("tools", [])]
        check(want in names, f"search_tools {query!r}: {want} not among {names}")
        hit = data["tools"][names.index(want)]
        check(set(hit) >= {"name", "server", "description", "available", "status"}, f"result fields: {hit}")
        check(hit["server"] == want.split("__")[0], f"{want}: server {hit['server']!r}")
        check(hit["available"] is True and hit["status"] == "online", f"{want} not available: {hit}")
        return data, names.index(want) + 1

    async def initialize(self) -> str:
        r = await self.s.initialize()
        check(r.capabilities.tools is not None, f"tools capability missing: {r.capabilities!r}")
        return f"server {r.server_info.name} {r.server_info.version}, protocol {r.protocol_version}"

    async def list_tools(self) -> str:
        tools = await list_all_tools(self.s)
        names = [t.name for t in tools]
        check(names == META_TOOLS, f"meta mode should list exactly {META_TOOLS}, listed {names}")
        for t in tools:
            check(
                t.description and t.input_schema.get("type") == "object",
                f"{t.name}: {t.description!r} {t.input_schema}",
            )
        return ", ".join(names)

    async def list_servers(self) -> str:
        """All three come online (node takes a moment to start each)."""
        deadline = time.monotonic() + 20
        while True:
            data = await self.own("list_servers", {})
            servers = {s["server"]: s for s in data.get("servers", [])}
            if all(servers.get(n, {}).get("status") == "online" for n in META_SERVERS):
                break
            check(
                time.monotonic() < deadline,
                f"not all of {META_SERVERS} online within 20 s: "
                + ", ".join(f"{n}={s.get('status')} ({s.get('last_error')})" for n, s in servers.items()),
            )
            await anyio.sleep(0.25)
        check(sorted(servers) == sorted(META_SERVERS), f"servers listed: {sorted(servers)}")
        for n, s in servers.items():
            check(s["available"] is True and s["tools"] > 0, f"{n}: {s}")
        return ", ".join(
            f"{n} online ({s['tools']} tools, ~{s['estimated_tokens']} tokens)" for n, s in servers.items()
        )

    async def search_echo(self) -> str:
        data, rank = await self.search("echo", "everything__echo")
        check(rank == 1, f"everything__echo ranked {rank} for 'echo': {[t['name'] for t in data['tools']]}")
        _, sum_rank = await self.search("add numbers", "everything__get-sum")
        only, _ = await self.search("echo", "everything__echo", server="everything", limit=3)
        check(len(only["tools"]) <= 3, f"limit 3 returned {len(only['tools'])}")
        check(all(t["server"] == "everything" for t in only["tools"]), f"server filter: {only['tools']}")
        return (
            f"'echo' -> everything__echo first of {len(data['tools'])} ({data['searched']} tools searched); "
            f"'add numbers' -> everything__get-sum at rank {sum_rank}"
        )

    async def describe_echo(self) -> str:
        data = await self.own("describe_tool", {"name": "everything__echo"})
        check(data.get("server") == "everything" and data.get("available") is True, f"describe_tool: {data}")
        tool = data.get("tool", {})
        check(tool.get("name") == "everything__echo", f"tool.name: {tool.get('name')!r}")
        props = tool.get("inputSchema", {}).get("properties", {})
        check("message" in props, f"everything__echo's inputSchema has no 'message': {tool.get('inputSchema')}")
        return f"inputSchema properties {sorted(props)}, status {data.get('status')}"

    async def execute_echo(self) -> str:
        r = await self.execute("everything__echo", {"message": "hello through meta mode"})
        check(not r.is_error, f"execute_tool everything__echo returned isError: {text_of(r)!r}")
        check("hello through meta mode" in text_of(r), f"echo text: {text_of(r)!r}")
        return text_of(r)

    async def execute_relays(self) -> str:
        """execute_tool is the backend's own call: its progress reaches the caller's
        progress callback, and a sampling request made during it the client."""
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        r = await self.s.call_tool(
            "execute_tool",
            {"name": "everything__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2}},
            progress_callback=on_progress,
        )
        check(not r.is_error and "completed" in text_of(r), f"long-running operation: {text_of(r)!r}")
        check(seen == [1, 2], f"expected progress [1, 2] through execute_tool, got {seen}")
        before = len(self.rec.sampling_requests)
        r = await self.execute("everything__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 22})
        check(not r.is_error, f"sampling tool failed: {text_of(r)!r}")
        check(len(self.rec.sampling_requests) == before + 1, "the sampling callback was not called exactly once")
        check(self.rec.sampling_requests[-1].max_tokens == 22, "sampling request maxTokens not relayed")
        check("canned answer from the interop test" in text_of(r), f"sampling answer not relayed: {text_of(r)!r}")
        return f"progress {seen}; the backend's sampling request answered by the client"

    async def execute_memory(self) -> str:
        await self.search("create entities knowledge graph", "memory__create_entities")
        entity = {"name": "tether-interop", "entityType": "gateway", "observations": ["found through search_tools"]}
        r = await self.execute("memory__create_entities", {"entities": [entity]})
        check(not r.is_error, f"memory__create_entities: {text_of(r)!r}")
        r = await self.execute("memory__search_nodes", {"query": "tether-interop"})
        check(not r.is_error and "found through search_tools" in text_of(r), f"memory__search_nodes: {text_of(r)!r}")
        return "entity created and found again"

    async def execute_filesystem(self) -> str:
        await self.search("write file", "filesystem__write_file")
        path = self.fs_dir / "meta-note.txt"
        r = await self.execute("filesystem__write_file", {"path": str(path), "content": "written via execute_tool"})
        check(not r.is_error, f"filesystem__write_file: {text_of(r)!r}")
        check(path.read_text() == "written via execute_tool", f"{path} holds {path.read_text()!r}")
        r = await self.execute("filesystem__read_text_file", {"path": str(path)})
        check(
            not r.is_error and "written via execute_tool" in text_of(r), f"filesystem__read_text_file: {text_of(r)!r}"
        )
        return f"{path.name} written and read back"

    async def execute_unknown(self) -> str:
        r = await self.execute("everything__no-such-tool", {})
        check(r.is_error, f"execute_tool of an unknown tool succeeded: {text_of(r)!r}")
        check("search_tools" in text_of(r), f"the error does not point to search_tools: {text_of(r)!r}")
        return f"isError: {text_of(r)}"

    async def direct_call_still_works(self) -> str:
        """Not listed, but a backend tool called by its namespaced name still runs in
        meta mode (core/tests/meta_mode.rs says so too): a client that remembers a
        name from flat mode keeps working."""
        r = await self.s.call_tool("everything__echo", {"message": "direct in meta mode"})
        check(not r.is_error and "direct in meta mode" in text_of(r), f"direct call in meta mode: {text_of(r)!r}")
        return text_of(r)


async def meta_session(run: Run, tmpdir: Path) -> None:
    fs_dir = tmpdir / "meta-files"
    fs_dir.mkdir(exist_ok=True)
    config = write_meta_config(tmpdir, "tether-meta", fs_dir)
    log_path = tmpdir / "tether-meta.stderr"
    params = StdioServerParameters(
        command=str(TETHER_BIN), args=["--config", str(config), "--mode", "meta", "--log-level", "debug"]
    )
    meta = MetaRun(fs_dir)
    failed_before = len(run.failed)
    try:
        with open(log_path, "w") as errlog:
            async with sdk_session(
                params, errlog, "tether-interop-meta", sampling_callback=meta.rec.sampling_callback
            ) as session:
                meta.s = session
                if not await run.step("meta: initialize (--mode meta)", meta.initialize):
                    return
                await run.step("meta: tools/list is exactly the six own tools", meta.list_tools)
                if not await run.step("meta: list_servers: all three servers online", meta.list_servers):
                    return
                for name, fn in (
                    ("meta: search_tools finds everything__echo", meta.search_echo),
                    ("meta: describe_tool everything__echo", meta.describe_echo),
                    ("meta: execute_tool everything__echo", meta.execute_echo),
                    ("meta: execute_tool relays progress and a sampling request", meta.execute_relays),
                    ("meta: search_tools + execute_tool on server-memory", meta.execute_memory),
                    ("meta: search_tools + execute_tool on server-filesystem", meta.execute_filesystem),
                    ("meta: execute_tool of an unknown tool is a tool error", meta.execute_unknown),
                    ("meta: a backend tool called by its namespaced name still runs", meta.direct_call_still_works),
                ):
                    await run.step(name, fn)
    except Exception as e:
        run.failed.append(("meta: connection to tether", describe(e)))
        print(f"FAIL meta: connection to tether: {describe(e)}", flush=True)
        traceback.print_exc()
    finally:
        if len(run.failed) > failed_before or VERBOSE:
            print("---- tether --mode meta stderr (last 40 lines) ----")
            print("\n".join(log_path.read_text(errors="replace").splitlines()[-40:]))


class RawTether:
    """tether spoken to as plain JSON-RPC lines over its stdio, so that sizes are
    measured on what it sends, not on the SDK's models of it."""

    def __init__(self, config: Path, log_path: Path):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(TETHER_BIN), "--config", str(config), "--log-level", "debug"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            preexec_fn=_die_with_parent,
        )
        self.frames: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1
        self.log_path = log_path

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.frames.put(json.loads(line))

    def request(self, method: str, params: dict[str, Any], timeout: float = CHECK_TIMEOUT) -> dict[str, Any]:
        id_ = self.next_id
        self.next_id += 1
        assert self.proc.stdin is not None
        frame = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                frame = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise CheckFailed(f"no answer to {method} within {timeout:.0f} s") from None
            if frame.get("id") == id_ and "method" not in frame:
                check("result" in frame, f"{method}: {frame}")
                return frame["result"]

    def initialize(self) -> None:
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "tether-interop-raw", "version": "1"},
            },
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def tools_list(self) -> dict[str, Any]:
        result = self.request("tools/list", {})
        check("nextCursor" not in result, "tools/list came in pages; the measure expects one")
        return result

    def own(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        r = self.request("tools/call", {"name": tool, "arguments": arguments})
        check(not r.get("isError") and isinstance(r.get("structuredContent"), dict), f"{tool}: {r}")
        return r["structuredContent"]

    def log_tail(self, lines: int) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Closes stdin (tether shuts down and stops its backends); kills it if it lingers."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def size_of(result: dict[str, Any]) -> dict[str, int]:
    """tools, bytes of the result's JSON, and estimated tokens (characters / 4: the
    rule of tether's catalog, core/src/catalog.rs)."""
    text = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
    return {"tools": len(result.get("tools", [])), "bytes": len(text.encode()), "tokens": len(text) // 4}


class Savings:
    """tools/list over everything, memory and filesystem, in flat mode, then meta."""

    def __init__(self, tmpdir: Path):
        self.tmpdir = tmpdir
        self.fs_dir = tmpdir / "savings-files"
        self.fs_dir.mkdir(exist_ok=True)
        self.flat: dict[str, int] | None = None
        self.meta: dict[str, int] | None = None
        self.flat_tools: list[dict[str, Any]] = []
        self.estimated = 0

    def flat_mode(self) -> str:
        config = write_meta_config(self.tmpdir, "tether-flat", self.fs_dir)
        t = RawTether(config, self.tmpdir / "tether-flat.stderr")
        try:
            t.initialize()
            # Every server online and everything's late tools registered; then the
            # list must hold still.
            deadline = time.monotonic() + 20
            last: list[str] = []
            while True:
                result = t.tools_list()
                names = sorted(x["name"] for x in result["tools"])
                complete = "everything__trigger-sampling-request" in names and all(
                    any(n.startswith(f"{s}__") for n in names) for s in META_SERVERS
                )
                if complete and names == last:
                    break
                if time.monotonic() > deadline:
                    raise CheckFailed(
                        f"the flat list did not settle with all three servers in 20 s: {names}\n{t.log_tail(20)}"
                    )
                last = names
                time.sleep(0.5)
        finally:
            t.close()
        self.flat = size_of(result)
        self.flat_tools = result["tools"]
        per = {s: sum(n.startswith(f"{s}__") for n in names) for s in META_SERVERS}
        return f"{self.flat['tools']} tools ({per}), {self.flat['bytes']} bytes, ~{self.flat['tokens']} tokens"

    def meta_mode(self) -> str:
        """Started with the mode in the config file (the SDK session used --mode)."""
        config = write_meta_config(self.tmpdir, "tether-meta-config", self.fs_dir, mode="meta")
        t = RawTether(config, self.tmpdir / "tether-meta-config.stderr")
        try:
            t.initialize()
            deadline = time.monotonic() + 20
            while True:
                servers = t.own("list_servers", {})["servers"]
                if all(s["status"] == "online" for s in servers) and len(servers) == len(META_SERVERS):
                    break
                if time.monotonic() > deadline:
                    raise CheckFailed(f"not all servers online in 20 s: {servers}")
                time.sleep(0.25)
            searched = t.own("search_tools", {"query": ""})["searched"]
            result = t.tools_list()
        finally:
            t.close()
        names = [x["name"] for x in result["tools"]]
        check(names == META_TOOLS, f"meta mode (from the config file) listed {names}")
        flat_count = len(self.flat_tools)
        check(not flat_count or searched == flat_count, f"meta mode searches {searched} tools, flat lists {flat_count}")
        self.meta = size_of(result)
        self.estimated = sum(s["estimated_tokens"] for s in servers)
        m = self.meta
        return f"{m['tools']} tools, {m['bytes']} bytes, ~{m['tokens']} tokens; {searched} tools behind them"

    def compare(self) -> str:
        check(self.flat and self.meta, "a measure is missing (see the failures above)")
        assert self.flat and self.meta
        share = self.meta["bytes"] / self.flat["bytes"]
        line = (
            f"tools/list flat: {self.flat['tools']} tools, {self.flat['bytes']} bytes, ~{self.flat['tokens']} tokens; "
            f"meta: {self.meta['tools']} tools, {self.meta['bytes']} bytes, ~{self.meta['tokens']} tokens; "
            f"meta is {100 * share:.1f}% of flat"
        )
        print(f"     {line}", flush=True)
        print(
            "     (list_servers' own estimate for the backends' tools, counting name, description and inputSchema: "
            f"~{self.estimated} tokens)",
            flush=True,
        )
        check(share < META_MAX_SHARE, f"meta mode saves too little: {line} (must be under {100 * META_MAX_SHARE:.0f}%)")
        check(self.meta["tokens"] < META_MAX_SHARE * self.flat["tokens"], f"tokens: {line}")
        return f"meta is {100 * share:.1f}% of flat (limit {100 * META_MAX_SHARE:.0f}%)"

    def fixtures_current(self) -> str:
        """tests/fixtures/tool-catalogs (what tests/tests/meta_savings.rs measures
        without node) hold what the pinned servers list: same tools, same
        descriptions and schemas."""
        check(self.flat_tools, "no flat list measured")
        drift = []
        total = 0
        for server in META_SERVERS:
            fixture = json.loads((FIXTURES / f"{server}.json").read_text())
            want = {t["name"]: t for t in fixture["result"]["tools"]}
            total += len(want)
            prefix = f"{server}__"
            live = {t["name"].removeprefix(prefix): t for t in self.flat_tools if t["name"].startswith(prefix)}
            if sorted(want) != sorted(live):
                drift.append(f"{server}: tools {sorted(set(want) ^ set(live))} differ")
                continue
            for name, tool in want.items():
                for key in ("description", "inputSchema", "outputSchema", "annotations"):
                    if tool.get(key) != live[name].get(key):
                        drift.append(f"{server}/{name}: {key} differs")
        check(
            not drift,
            "the fixtures are stale (rerun python3 tests/fixtures/tool-catalogs/capture.py): " + "; ".join(drift[:8]),
        )
        return f"{total} tools of {len(META_SERVERS)} servers match {FIXTURES.relative_to(FIXTURES.parents[2])}"


async def savings_checks(run: Run, tmpdir: Path) -> None:
    savings = Savings(tmpdir)
    failed_before = len(run.failed)

    async def in_thread(fn: Callable[[], str]) -> str:
        return await anyio.to_thread.run_sync(fn)

    for name, fn, timeout in (
        ("savings: tools/list in flat mode (everything, memory, filesystem)", savings.flat_mode, 45),
        ("savings: tools/list in meta mode (mode set in the config file)", savings.meta_mode, 45),
        (f"savings: meta mode's tools/list under {100 * META_MAX_SHARE:.0f}% of flat mode's", savings.compare, 5),
        ("savings: tests/fixtures/tool-catalogs match the live servers", savings.fixtures_current, 5),
    ):
        await run.step(name, lambda fn=fn: in_thread(fn), timeout)
    if len(run.failed) > failed_before or VERBOSE:
        for name in ("tether-flat", "tether-meta-config"):
            log = tmpdir / f"{name}.stderr"
            if log.exists():
                print(f"---- {name} stderr (last 30 lines) ----")
                print("\n".join(log.read_text(errors="replace").splitlines()[-30:]))


STARTED = time.monotonic()


async def session_checks(run: Run) -> None:
    if not await run.step("initialize", run.initialize):
        return
    await run.step("tools/list namespaced", run.list_tools)
    await run.step("resources/list namespaced", run.list_resources)
    await run.step("prompts/list namespaced", run.list_prompts)
    await run.step("tools/call everything__echo", run.call_echo)
    await run.step("tools/call time__get_current_time", run.call_time)
    await run.step("config env block reaches the backend", run.env_block)
    await run.step("resources/read", run.read_resource)
    await run.step("prompts/get", run.get_prompt)
    await run.step("unknown tool is an error", run.unknown_tool)
    await run.step("ping", run.ping)
    await run.step("completion/complete", run.completion)
    await run.step("logging/setLevel and backend log messages", run.logging)
    await run.step("resources/subscribe and resources/updated", run.subscribe)
    await run.step("elicitation request answered by the client", run.elicitation)
    await run.step("roots/list and roots/list_changed", run.roots)
    await run.step("progress notifications", run.progress)
    await run.step("cancellation of a running call", run.cancellation)
    await run.step("sampling request answered by the client", run.sampling)
    await run.step("backend killed during a call, call resent", run.kill_in_flight, 45)
    await run.step("backend killed with SIGKILL, tether recovers", run.survive_kill, 45)
    await run.step("tools/call everything__echo after recovery", run.call_echo)
    await run.step("tools/call time__get_current_time after recovery", run.call_time)
    # The HTTP backends: server-everything over Streamable HTTP and over legacy HTTP+SSE.
    await run.step("http: both HTTP backends online with namespaced tools", run.http_online)
    for backend, how in ((HTTP, "Streamable HTTP"), (SSE, "legacy SSE")):
        await run.step(f"http: tools/call {backend}__echo ({how})", lambda b=backend: run.http_echo(b))
        await run.step(f"http: resources/read via {backend} ({how})", lambda b=backend: run.http_read_resource(b))
    await run.step(f"http: progress notifications via {HTTP} (SSE-answered POST)", run.http_progress)
    await run.step(f"http: sampling request from {HTTP} answered by the client", run.http_sampling)
    await run.step(f"http: {HTTP} server killed, a call gets a structured error", run.http_killed, 45)
    await run.step(f"http: {HTTP} server restarted on its port, calls work again", run.http_restarted, 45)
    await run.step(f"http: {HTTP} restarted unnoticed, the stale session is replaced", run.http_restarted_unnoticed, 45)


async def main() -> int:
    if INTEROP_RUNTIME not in RUNTIME_SKIPS:
        print(f"FAIL setup: INTEROP_RUNTIME={INTEROP_RUNTIME!r}: expected one of {sorted(RUNTIME_SKIPS)}", flush=True)
        return 1
    skips = RUNTIME_SKIPS[INTEROP_RUNTIME]
    print(
        f"interop: {TETHER_BIN.name} ({INTEROP_RUNTIME} runtime) at {TETHER_BIN}; "
        + (f"{len(skips)} check(s) skipped for this runtime" if skips else "no check skipped"),
        flush=True,
    )
    for path, what in (
        (TETHER_BIN, "tether"),
        (EVERYTHING_JS, "server-everything"),
        (TIME_BIN, "mcp-server-time"),
        (MEMORY_JS, "server-memory"),
        (FILESYSTEM_JS, "server-filesystem"),
    ):
        if not path.exists():
            print(f"FAIL setup: {what} not found at {path}", flush=True)
            return 1

    rec = Recorder()
    with tempfile.TemporaryDirectory(prefix="tether-interop-") as tmp:
        tmpdir = Path(tmp)
        # The HTTP backends are the test's own processes, killed in the end whatever happens.
        http_server = HttpServer("streamableHttp", tmpdir / "everything-http.log")
        sse_server = HttpServer("sse", tmpdir / "everything-sse.log")
        try:
            return await run_all(rec, tmpdir, http_server, sse_server)
        finally:
            http_server.close()
            sse_server.close()


async def run_all(rec: Recorder, tmpdir: Path, http_server: HttpServer, sse_server: HttpServer) -> int:
    try:
        with anyio.fail_after(30):
            await http_server.start()
            await sse_server.start()
    except (CheckFailed, TimeoutError) as e:
        print(f"FAIL setup: HTTP servers: {describe(e)}", flush=True)
        for server in (http_server, sse_server):
            print(f"---- {server.log_path.name} ----\n{server.log_tail(20)}")
        print("interop: 0 passed, 1 failed")
        return 1
    config_path = write_config(
        tmpdir, f"http://127.0.0.1:{http_server.port}/mcp", f"http://127.0.0.1:{sse_server.port}/sse"
    )
    run = Run(rec, config_path, http_server)
    log_path = tmpdir / "tether.stderr"
    params = StdioServerParameters(
        command=str(TETHER_BIN), args=["--config", str(config_path), "--log-level", "debug"]
    )
    try:
        with open(log_path, "w") as errlog:
            async with sdk_session(
                params,
                errlog,
                "tether-interop-test",
                sampling_callback=rec.sampling_callback,
                elicitation_callback=rec.elicitation_callback,
                list_roots_callback=rec.list_roots_callback,
                message_handler=rec.message_handler,
                logging_callback=rec.logging_callback,
            ) as session:
                run.s = session
                await session_checks(run)
        # The SDK's high-level Client with its defaults (mode="auto"): it probes
        # with `server/discover` and speaks the stateless revision to tether.
        if not run.failed:
            with open(log_path, "a") as errlog:
                await run.step(
                    "high-level Client, mode=auto: the stateless 2026-07-28 revision end to end",
                    lambda: stateless_client(params, errlog),
                    60,
                )
    except Exception as e:  # the connection itself broke (tether died, the SDK gave up, ...)
        run.failed.append(("connection to tether", describe(e)))
        print(f"FAIL connection to tether: {describe(e)}", flush=True)
        traceback.print_exc()
    stderr = log_path.read_text(errors="replace")
    main_failed = bool(run.failed)

    # Meta mode, and the savings it brings, with their own tethers and backends.
    await meta_session(run, tmpdir)
    await savings_checks(run, tmpdir)

    if main_failed or VERBOSE:
        print("---- tether stderr (last 80 lines) ----")
        print("\n".join(stderr.splitlines()[-80:]))
        for server in (http_server, sse_server):
            print(f"---- {server.log_path.name} (last 20 lines) ----")
            print(server.log_tail(20))
        print("---- notifications received ----")
        print(", ".join(m for _, m, _ in rec.notifications) or "(none)")
    print()
    for name, why in run.failed:
        print(f"FAILED: {name}: {why}")
    for name, why in run.skipped:
        print(f"SKIPPED ({INTEROP_RUNTIME} runtime): {name}: {why}")
    setup = os.environ.get("INTEROP_SETUP_SECONDS")
    print(f"interop: {'setup ' + setup + ' s, ' if setup else ''}checks {time.monotonic() - STARTED:.1f} s")
    skipped = f", {len(run.skipped)} skipped" if run.skipped else ""
    print(f"interop: {len(run.passed)} passed, {len(run.failed)} failed{skipped}")
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
