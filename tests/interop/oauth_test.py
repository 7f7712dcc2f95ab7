"""Acceptance test: `tether serve --listen` as an OAuth 2.1 protected resource, logged in to by
the official MCP Python SDK's OAuth client (`mcp.client.auth.OAuthClientProvider`).

The authorization server is tests/interop/oauth_server.py (the SDK's own AS routes with an
auto-approving provider, RS256 JWT access tokens, /jwks, RFC 7662 /introspect and test-only
/test/mint). In front of tether are two real backends: mcp-server-time as `time` and
@modelcontextprotocol/server-everything as `everything` (stdio). tether's config gives
the scopes: `mcp` is required for everything, `time` grants the `time` server's tools,
`echo` grants `everything__echo`; no other tool is granted by any scope.

Checks, first with tether validating JWTs against the AS's JWKS:
- Protected Resource Metadata (RFC 9728) at /.well-known/oauth-protected-resource/mcp and at
  the root form /.well-known/oauth-protected-resource;
- an initialize POST without a token: 401 with a `Bearer` challenge naming the metadata URL
  (`resource_metadata`) and a `scope`;
- SDK clients asking for "mcp time echo", "mcp time" and "mcp echo": each discovers the AS from
  tether's metadata, registers, authorizes (a headless user agent takes the code from the
  redirect), gets a token, initializes, and sees exactly the tools its scopes grant; a tool
  outside them is refused as an unknown tool (a JSON-RPC error or an isError result on HTTP
  200, not a 401/403); the "mcp time" client's token, expired on the client side, is
  refreshed and the new token accepted;
- an SDK client left to its own scope choice (the challenge's `scope`) sees what its grant
  allows;
- raw HTTP with tokens minted by the AS: another audience, expired, signed with another key
  under the same kid, another issuer, unsigned (alg none), no aud claim, not a JWT -> 401
  `invalid_token` with `resource_metadata`; no `mcp` scope -> 403 `insufficient_scope` with a
  `scope` naming `mcp`; a valid "mcp time" token, also with a list `aud` -> 200;
- tether fetched the AS's JWKS and introspected nothing.
Then again with a tether that introspects tokens at the AS (RFC 7662, client_secret_basic)
instead: the "mcp time echo" and "mcp time" clients, the raw-HTTP cases (an introspection answer
without `aud` is refused too: tether must know the token was minted for it), and that it
introspected as its configured client.

Run by tests/interop/run.sh with the smol binary (`tether`; the blocking runtime serves stdio
only). By hand, after run.sh has installed the pinned components:
    TETHER_BIN=target/debug/tether INTEROP_DIR=target/interop \\
        target/interop/venv/bin/python tests/interop/oauth_test.py
Environment:
  TETHER_BIN         the tether executable
  INTEROP_DIR        where run.sh installed things (venv/, node/)
  INTEROP_VERBOSE=1  print the logs of tether and the AS even when every check passes

Prints one line per check (`ok` or `FAIL` with the reason) and a closing `oauth: N passed,
N failed`; exits non-zero on any failure. Every process it starts is killed at the end.
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
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

warnings.simplefilter("ignore", MCPDeprecationWarning)

TETHER_BIN = Path(os.environ["TETHER_BIN"]).resolve()
INTEROP_DIR = Path(os.environ["INTEROP_DIR"]).resolve()
VERBOSE = os.environ.get("INTEROP_VERBOSE") == "1"
STARTED = time.monotonic()

HERE = Path(__file__).resolve().parent
AS_SCRIPT = HERE / "oauth_server.py"
EVERYTHING_JS = (
    INTEROP_DIR / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
TIME_BIN = INTEROP_DIR / "venv" / "bin" / "mcp-server-time"

TIME_TOOLS = frozenset({"time__get_current_time", "time__convert_time"})
ECHO = "everything__echo"
# What each of tether's scopes grants, as configured in write_config.
SCOPE_GRANTS: dict[str, frozenset[str]] = {"time": TIME_TOOLS, "echo": frozenset({ECHO})}
REQUIRED_SCOPE = "mcp"
# The confidential client tether introspects with (pre-registered at the AS).
# The scope for tether's status endpoints (`authorization.admin_scope`).
ADMIN_SCOPE = "mcp:admin"
INTROSPECTION_CLIENT = ("tether", "tether-introspection-secret")
# Where the AS sends the browser back to; nothing listens there, the headless user agent
# never follows the redirect.
REDIRECT_URI = "http://127.0.0.1/oauth/callback"

CHECK_TIMEOUT = 30.0
JSON_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class CheckFailed(Exception):
    pass


def check(condition: Any, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def describe(e: BaseException) -> str:
    """An exception as one line; exception groups (anyio task groups) by their leaves."""
    inner = getattr(e, "exceptions", None)
    if isinstance(inner, (list, tuple)) and inner:
        return "; ".join(describe(x) for x in inner)
    if isinstance(e, CheckFailed):
        return str(e)
    return f"{type(e).__name__}: {e}"


def initialize_body(request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "tether-oauth-test-raw", "version": "1"},
        },
    }


# --------------------------------------------------------------------------------
# WWW-Authenticate (RFC 9110 §11.6.1: challenges with auth-params, quoted strings)

_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TOKEN68 = frozenset("-._~+/0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_www_authenticate(value: str) -> list[tuple[str, dict[str, str]]]:
    """The challenges of a WWW-Authenticate value (RFC 9110 §11.6.1):
        challenge  = auth-scheme [ 1*SP ( token68 / [ auth-param *( OWS "," OWS auth-param ) ] ) ]
        auth-param = token BWS "=" BWS ( token / quoted-string )
    as [(scheme lower-cased, {param name lower-cased: value})], quoted strings unescaped, a
    token68 under the name "". Raises CheckFailed on a syntax error, or a parameter given twice
    in one challenge (§11.2)."""
    s, n = value, len(value)

    def ows(i: int) -> int:
        while i < n and s[i] in " \t":
            i += 1
        return i

    def run_of(i: int, chars: frozenset[str]) -> int:
        while i < n and s[i] in chars:
            i += 1
        return i

    def param_at(i: int) -> tuple[str, int] | None:
        """`name BWS "=" BWS` starting at i, followed by a value: (name, start of value)."""
        end = run_of(i, _TCHAR)
        j = ows(end)
        if end == i or j >= n or s[j] != "=":
            return None
        k = ows(j + 1)
        if k >= n or s[k] == "=" or (s[k] != '"' and s[k] not in _TCHAR):
            return None  # `name=` then nothing, or more `=`: a token68
        return s[i:end], k

    def quoted(i: int) -> tuple[str, int]:  # s[i] == '"'
        out, i = [], i + 1
        while i < n:
            if s[i] == "\\" and i + 1 < n:
                out.append(s[i + 1])
                i += 2
            elif s[i] == '"':
                return "".join(out), i + 1
            else:
                out.append(s[i])
                i += 1
        raise CheckFailed(f"unterminated quoted string in WWW-Authenticate {value!r}")

    def fail(i: int, what: str) -> CheckFailed:
        return CheckFailed(f"WWW-Authenticate {value!r}: expected {what} at offset {i}")

    challenges: list[tuple[str, dict[str, str]]] = []
    i = 0
    while True:
        while i < n and s[i] in " \t,":  # empty list elements are allowed
            i += 1
        if i >= n:
            return challenges
        end = run_of(i, _TCHAR)
        if end == i:
            raise fail(i, "an auth scheme")
        scheme, params = s[i:end].lower(), {}
        challenges.append((scheme, params))
        i = end
        if i >= n or s[i] == ",":
            continue  # a scheme alone
        if s[i] != " ":
            raise fail(i, "a space after the auth scheme")
        i = ows(i)
        if i >= n or s[i] == ",":
            continue
        if param_at(i) is None:  # token68
            end = run_of(run_of(i, _TOKEN68), frozenset("="))
            if end == i:
                raise fail(i, "a token68 or an auth-param")
            params[""] = s[i:end]
            i = end
            continue
        while True:
            found = param_at(i)
            assert found is not None
            name, v = found
            if s[v] == '"':
                val, i = quoted(v)
            else:
                end = run_of(v, _TCHAR)
                val, i = s[v:end], end
            key = name.lower()
            if key in params:
                raise CheckFailed(f"WWW-Authenticate {value!r}: parameter {key!r} twice in one challenge")
            params[key] = val
            i = ows(i)
            if i >= n:
                break
            if s[i] != ",":
                raise fail(i, "','")
            j = i
            while j < n and s[j] in " \t,":
                j += 1
            if j < n and param_at(j) is not None:
                i = j  # another parameter of this challenge
            else:
                break  # the next challenge (or the end)


def bearer_challenge(response: httpx2.Response) -> dict[str, str]:
    """The Bearer challenge's params of a 401/403; CheckFailed unless exactly one is there."""
    values = response.headers.get_list("www-authenticate")
    check(values, f"HTTP {response.status_code} without WWW-Authenticate")
    challenges = [c for v in values for c in parse_www_authenticate(v)]
    bearer = [p for scheme, p in challenges if scheme == "bearer"]
    check(len(bearer) == 1, f"expected one Bearer challenge, got {values}")
    return bearer[0]


# --------------------------------------------------------------------------------
# Processes


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies (Linux
    PR_SET_PDEATHSIG), so a test killed by run.sh's timeout leaves no server behind."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (Linux /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Child:
    """A process of the test's, in its own process group, its output in a log file."""

    def __init__(self, name: str, log_path: Path):
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def spawn(self, argv: list[str], stdout: int | None = None) -> subprocess.Popen[bytes]:
        if self._log is None:
            self._log = open(self.log_path, "ab")
        self._log.write(f"---- {' '.join(argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else self._log,
            stderr=self._log,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        return self.proc

    def kill(self) -> None:
        """SIGTERM (tether stops its backends), then SIGKILL to the group and every
        descendant still there."""
        proc = self.proc
        if proc is None:
            return
        family = _descendants(proc.pid)
        if proc.poll() is None:
            try:
                proc.terminate()
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for pid in [proc.pid, *family]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if proc.stdout is not None:
            proc.stdout.close()

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


class AuthServer(Child):
    """tests/interop/oauth_server.py on a port of its choosing; `issuer` from its READY line."""

    def __init__(self, log_path: Path):
        super().__init__("oauth_server.py", log_path)
        self.issuer = ""

    def start(self, seconds: float = 30) -> None:
        client_id, secret = INTROSPECTION_CLIENT
        proc = self.spawn(
            [sys.executable, "-u", str(AS_SCRIPT), "--port", "0", "--introspection-client", f"{client_id}:{secret}"],
            stdout=subprocess.PIPE,
        )
        lines: queue.Queue[bytes] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout
        threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=seconds).decode().strip()
        except queue.Empty:
            raise CheckFailed(f"no READY line within {seconds:.0f} s: {self.log_tail(10)}") from None
        check(line.startswith("READY "), f"expected 'READY <issuer>', got {line!r}: {self.log_tail(10)}")
        self.issuer = line.split(" ", 1)[1]

    async def stats(self) -> dict[str, Any]:
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.get(f"{self.issuer}/test/stats")
        check(r.status_code == 200, f"AS /test/stats: HTTP {r.status_code}")
        return r.json()

    async def mint(self, **claims: Any) -> str:
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.post(f"{self.issuer}/test/mint", json=claims)
        check(r.status_code == 200, f"AS /test/mint {claims}: HTTP {r.status_code} {r.text[:200]}")
        return r.json()["access_token"]


class Tether(Child):
    """`tether serve --listen 127.0.0.1:<free port> --config <file>`."""

    def __init__(self, name: str, log_path: Path, config_path: Path):
        super().__init__(name, log_path)
        self.config_path = config_path
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def prm_url(self) -> str:
        return f"{self.base}/.well-known/oauth-protected-resource/mcp"

    async def start(self, seconds: float = 30) -> None:
        """On a fresh free port, until its metadata URL answers 200 (or anything else for 10 s:
        the metadata check then says what); a port taken meanwhile (tether exits) gets another
        try."""
        for attempt in range(3):
            self.port = free_port()
            self.spawn(
                [
                    str(TETHER_BIN),
                    "serve",
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    "--config",
                    str(self.config_path),
                    "--log-level",
                    "debug",
                ]
            )
            deadline = time.monotonic() + seconds
            answered: float | None = None  # when it first answered, not 200
            async with httpx2.AsyncClient(timeout=2) as http:
                while True:
                    assert self.proc is not None
                    if self.proc.poll() is not None:
                        why = f"tether exited with status {self.proc.returncode}: {self.log_tail(15)}"
                        if attempt == 2 or "in use" not in why.lower():
                            raise CheckFailed(why)
                        break  # the port was taken meanwhile: another one
                    try:
                        r = await http.get(self.prm_url)
                        if r.status_code == 200:
                            return
                        answered = answered or time.monotonic()
                        if time.monotonic() - answered > 10:
                            return
                    except httpx2.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise CheckFailed(
                            f"tether does not answer at {self.prm_url} after {seconds:.0f} s: {self.log_tail(15)}"
                        )
                    await anyio.sleep(0.1)
            self.kill()


def write_config(path: Path, authorization: dict[str, Any]) -> Path:
    config = {
        "tether": {
            "authorization": {
                **authorization,
                "required_scopes": [REQUIRED_SCOPE],
                "scopes": {
                    "time": {"servers": ["time"]},
                    "echo": {"tools": [ECHO]},
                },
            }
        },
        "mcpServers": {
            "time": {"command": str(TIME_BIN)},
            "everything": {"command": "node", "args": [str(EVERYTHING_JS), "stdio"]},
        },
    }
    path.write_text(json.dumps(config, indent=2))
    return path


# --------------------------------------------------------------------------------
# The SDK's OAuth client


class MemoryStorage:
    """`mcp.client.auth.TokenStorage` in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class HeadlessUserAgent:
    """The SDK's redirect and callback handlers without a browser: GET the authorization URL
    without following redirects (the test AS approves at once and answers 302), and hand the
    code, state and iss of the `Location` back to the SDK."""

    def __init__(self) -> None:
        self.pending: AuthorizationCodeResult | None = None
        self.authorization_urls: list[str] = []

    async def redirect_handler(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as http:
            r = await http.get(authorization_url)
        check(
            r.status_code in (302, 303),
            f"authorization endpoint answered {r.status_code}, not a redirect: {r.text[:300]}",
        )
        location = r.headers.get("location", "")
        check(location.startswith(REDIRECT_URI), f"redirected to {location!r}, not to {REDIRECT_URI}")
        query = parse_qs(urlsplit(location).query)
        if "error" in query:
            raise CheckFailed(f"authorization refused: {query}")
        check("code" in query, f"no code in the redirect {location!r}")
        self.pending = AuthorizationCodeResult(
            code=query["code"][0],
            state=query.get("state", [None])[0],
            iss=query.get("iss", [None])[0],
        )

    async def callback_handler(self) -> AuthorizationCodeResult:
        result, self.pending = self.pending, None
        check(result is not None, "callback without an authorization response")
        assert result is not None
        return result


class PinnedScopeMetadata(OAuthClientMetadata):
    """Client metadata whose `scope` the SDK keeps. mcp 2.3.0's OAuthClientProvider follows the
    MCP spec's scope selection: on a 401 it replaces `client_metadata.scope` with the challenge's
    `scope`, else the PRM's `scopes_supported`, else the AS's, before registering and
    authorizing, so the scope a client is built with is never sent. To ask for a chosen set
    (as a user choosing what to grant would), assignments to `scope` are ignored here."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope":
            return
        super().__setattr__(name, value)


class OAuthClient:
    """One OAuth client of tether's: an OAuthClientProvider with in-memory storage and the
    headless user agent, and the HTTP statuses its connections got."""

    def __init__(self, tether: Tether, scope: str | None):
        self.tether = tether
        self.scope = scope
        self.storage = MemoryStorage()
        self.agent = HeadlessUserAgent()
        metadata_type = PinnedScopeMetadata if scope is not None else OAuthClientMetadata
        self.provider = OAuthClientProvider(
            server_url=tether.mcp_url,
            client_metadata=metadata_type(
                client_name=f"tether-oauth-test ({scope or 'SDK scope choice'})",
                redirect_uris=[REDIRECT_URI],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=scope,
            ),
            storage=self.storage,
            redirect_handler=self.agent.redirect_handler,
            callback_handler=self.agent.callback_handler,
        )
        self.responses: list[tuple[str, str, int]] = []  # (method, url, status), every one

    async def _record(self, response: httpx2.Response) -> None:
        self.responses.append((response.request.method, str(response.request.url), response.status_code))

    @asynccontextmanager
    async def session(self) -> AsyncIterator[ClientSession]:
        async with httpx2.AsyncClient(
            auth=self.provider,
            timeout=httpx2.Timeout(CHECK_TIMEOUT, read=60),
            event_hooks={"response": [self._record]},
        ) as http:
            async with streamable_http_client(self.tether.mcp_url, http_client=http) as (read, write):
                async with ClientSession(
                    read,
                    write,
                    read_timeout_seconds=CHECK_TIMEOUT,
                    client_info=types.Implementation(name="tether-oauth-test", version="1"),
                ) as session:
                    await session.initialize()
                    yield session

    @property
    def client_id(self) -> str | None:
        return self.storage.client_info.client_id if self.storage.client_info else None

    @property
    def granted_scope(self) -> str:
        return (self.storage.tokens.scope or "") if self.storage.tokens else ""


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def tool_names(session: ClientSession, expected: frozenset[str], seconds: float) -> set[str]:
    """tools/list until every expected tool is there (backends start and list late) or the
    time is up; the names of the last listing."""
    deadline = time.monotonic() + seconds
    while True:
        names = {t.name for t in await list_all_tools(session)}
        if expected <= names or time.monotonic() > deadline:
            return names
        await anyio.sleep(0.25)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


# A call of each tool the scopes can grant, and a piece of its answer.
TOOL_CALLS: dict[str, tuple[dict[str, Any], str]] = {
    "time__get_current_time": ({"timezone": "UTC"}, "UTC"),
    "time__convert_time": ({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}, "Asia/Tokyo"),
    ECHO: ({"message": "hello through tether with OAuth"}, "hello through tether with OAuth"),
}


async def call_works(session: ClientSession, name: str) -> str:
    args, expected = TOOL_CALLS[name]
    r = await session.call_tool(name, args)
    text = text_of(r)
    check(not r.is_error, f"{name} returned isError: {text[:300]!r}")
    check(expected in text, f"{name}: {expected!r} not in the answer {text[:300]!r}")
    return text


async def call_refused(client: OAuthClient, session: ClientSession, name: str) -> str:
    """A tool outside the token's scopes: refused like an unknown tool (JSON-RPC -32602, or an
    isError result), over HTTP 200, not as a 401/403 (to which the SDK would answer with a
    re-authorization) or another transport failure."""
    before = len(client.responses)
    try:
        r = await session.call_tool(name, TOOL_CALLS[name][0])
        outcome = f"isError result: {text_of(r)[:120]!r}"
        check(r.is_error, f"{name} outside the token's scopes succeeded: {text_of(r)!r}")
    except MCPError as e:
        outcome = f"JSON-RPC error {e.code}: {e.message[:120]}"
        check(
            e.code == types.INVALID_PARAMS,
            f"{name}: expected the unknown-tool error -32602 (or an isError result), got {outcome}",
        )
    mcp_url = client.tether.mcp_url
    bad = [(m, u, s) for (m, u, s) in client.responses[before:] if m == "POST" and u == mcp_url and s >= 400]
    check(not bad, f"{name}: HTTP errors during the call (a transport failure, not an unknown-tool answer): {bad}")
    return outcome


# --------------------------------------------------------------------------------
# The run


class Run:
    def __init__(self, auth: AuthServer) -> None:
        self.auth = auth
        self.passed: list[str] = []
        self.failed: list[tuple[str, str]] = []

    async def step(self, name: str, fn: Callable[[], Awaitable[str]], timeout: float = CHECK_TIMEOUT) -> bool:
        started = time.monotonic()
        try:
            with anyio.fail_after(timeout):
                detail = await fn()
        except CheckFailed as e:
            return self._fail(name, str(e))
        except TimeoutError:
            return self._fail(name, f"no answer within {timeout:.0f} s")
        except Exception as e:  # an SDK error, an OAuth flow error, ...
            if VERBOSE:
                traceback.print_exc()
            return self._fail(name, describe(e))
        self.passed.append(name)
        print(f"ok   {name} ({time.monotonic() - started:.1f} s){': ' + detail if detail else ''}", flush=True)
        return True

    def _fail(self, name: str, why: str) -> bool:
        self.failed.append((name, why))
        print(f"FAIL {name}: {why}", flush=True)
        return False

    # ---- metadata and the challenge ------------------------------------------------------

    async def prm(self, tether: Tether, url: str) -> str:
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.get(url)
        check(r.status_code == 200, f"GET {url}: HTTP {r.status_code} {r.text[:200]!r}")
        check(
            r.headers.get("content-type", "").split(";")[0].strip() == "application/json",
            f"content-type {r.headers.get('content-type')!r}, not application/json",
        )
        doc = r.json()
        ProtectedResourceMetadata.model_validate(doc)  # the SDK client's own parse
        check(doc.get("resource") == tether.mcp_url, f"resource {doc.get('resource')!r}, expected {tether.mcp_url!r}")
        check(
            doc.get("authorization_servers") == [self.auth.issuer],
            f"authorization_servers {doc.get('authorization_servers')!r}, expected [{self.auth.issuer!r}] "
            "(the SDK compares the AS metadata's issuer to this string exactly)",
        )
        scopes = doc.get("scopes_supported")
        check(isinstance(scopes, list), f"scopes_supported missing: {doc}")
        missing = {REQUIRED_SCOPE, *SCOPE_GRANTS} - set(scopes)
        check(not missing, f"scopes_supported {scopes} lacks {sorted(missing)}")
        check(
            doc.get("bearer_methods_supported") == ["header"],
            f"bearer_methods_supported {doc.get('bearer_methods_supported')!r}, expected ['header']",
        )
        return f"resource {doc['resource']}, scopes {scopes}"

    async def unauthenticated(self, tether: Tether) -> str:
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.post(tether.mcp_url, json=initialize_body(), headers=JSON_ACCEPT)
        check(r.status_code == 401, f"initialize without a token: HTTP {r.status_code}, expected 401: {r.text[:200]!r}")
        header = r.headers.get("www-authenticate")
        params = bearer_challenge(r)
        check(
            params.get("resource_metadata") == tether.prm_url,
            f"resource_metadata {params.get('resource_metadata')!r}, expected {tether.prm_url!r} (header {header!r})",
        )
        scope = params.get("scope")
        check(scope, f"no scope in the challenge: {header!r}")
        assert scope is not None
        check(REQUIRED_SCOPE in scope.split(), f"challenge scope {scope!r} lacks the required {REQUIRED_SCOPE!r}")
        unknown = set(scope.split()) - {REQUIRED_SCOPE, *SCOPE_GRANTS}
        check(not unknown, f"challenge scope {scope!r} names scopes tether does not have: {sorted(unknown)}")
        check(
            "error" not in params,
            f"error={params.get('error')!r} in the challenge to a request without credentials (RFC 6750 §3.1: "
            f"SHOULD NOT): {header!r}",
        )
        return header or ""

    # ---- SDK clients ---------------------------------------------------------------------

    async def sdk_client(
        self,
        tether: Tether,
        client: OAuthClient,
        expected: frozenset[str],
        refused: list[str],
        wait: float = 10,
    ) -> str:
        """Log in, initialize, see exactly `expected`, call each of them, have each of
        `refused` refused; the AS saw the registration and an authorization for tether's
        resource with the scope asked for."""
        async with client.session() as s:
            names = await tool_names(s, expected, wait)
            check(
                names == expected,
                f"tools/list {sorted(names)}, expected exactly {sorted(expected)} for scope {client.granted_scope!r}",
            )
            for name in sorted(expected):
                await call_works(s, name)
            outcomes = [await call_refused(client, s, name) for name in refused]
            if expected:  # the session is still fine after a refusal
                await call_works(s, sorted(expected)[0])
        check(
            len(client.agent.authorization_urls) == 1,
            f"{len(client.agent.authorization_urls)} authorizations, expected 1",
        )
        events = [e for e in (await self.auth.stats())["events"] if e.get("client_id") == client.client_id]
        authorizations = [e for e in events if e["event"] == "authorize"]
        check(
            len(authorizations) == 1,
            f"the AS saw {len(authorizations)} authorizations of client {client.client_id}: {events}",
        )
        sent = authorizations[0]
        check(
            sent.get("resource") == tether.mcp_url,
            f"the SDK sent resource={sent.get('resource')!r} (the token's aud), expected {tether.mcp_url!r}",
        )
        if client.scope is not None:
            check(
                sent.get("scope") == client.scope,
                f"the SDK asked for scope {sent.get('scope')!r}, expected {client.scope!r}",
            )
        refusal = f"; refused {', '.join(refused)}: {'; '.join(outcomes)}" if refused else ""
        return f"scope {client.granted_scope!r}: tools {sorted(names)}{refusal}"

    async def sdk_default_scope(self, tether: Tether) -> str:
        """The SDK left to choose (the challenge's scope): it gets what that grants."""
        client = OAuthClient(tether, None)
        async with client.session() as s:
            granted = client.granted_scope.split()
            expected = frozenset().union(*(SCOPE_GRANTS.get(sc, frozenset()) for sc in granted))
            names = await tool_names(s, expected, 10)
        check(REQUIRED_SCOPE in granted, f"the SDK obtained scope {client.granted_scope!r}, without {REQUIRED_SCOPE!r}")
        check(
            names == expected,
            f"tools/list {sorted(names)}, expected exactly {sorted(expected)} for scope {client.granted_scope!r}",
        )
        return f"the SDK asked for {client.granted_scope!r}; tools {sorted(names)}"

    async def refresh(self, tether: Tether, client: OAuthClient, expected: frozenset[str]) -> str:
        """After `client`'s session: its token expired (client side), a new session refreshes
        it at the AS (no new authorization) and tether takes the refreshed token."""
        check(
            client.storage.tokens is not None and client.storage.tokens.refresh_token,
            "no refresh token from the first login",
        )
        old = client.storage.tokens.access_token if client.storage.tokens else ""
        client.provider.context.token_expiry_time = time.time() - 1
        before = len(client.agent.authorization_urls)
        async with client.session() as s:
            names = await tool_names(s, expected, 5)
            check(names == expected, f"after the refresh: tools/list {sorted(names)}, expected {sorted(expected)}")
            for name in sorted(expected):
                await call_works(s, name)
        check(len(client.agent.authorization_urls) == before, "the SDK authorized again instead of refreshing")
        check(
            client.storage.tokens is not None and client.storage.tokens.access_token != old,
            "the access token did not change",
        )
        grants = [
            e
            for e in (await self.auth.stats())["events"]
            if e["event"] == "token" and e.get("client_id") == client.client_id and e.get("grant") == "refresh_token"
        ]
        check(len(grants) == 1, f"the AS saw {len(grants)} refresh grants of this client, expected 1")
        return f"refreshed token accepted, scope {client.granted_scope!r}"

    # ---- raw HTTP -----------------------------------------------------------------------

    async def raw(
        self, tether: Tether, claims: dict[str, Any] | None, token: str | None, status: int, error: str | None
    ) -> str:
        if token is None:
            token = await self.auth.mint(**{"aud": tether.mcp_url, "scope": "mcp time", **(claims or {})})
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.post(
                tether.mcp_url, json=initialize_body(), headers={**JSON_ACCEPT, "Authorization": f"Bearer {token}"}
            )
            session_id = r.headers.get("mcp-session-id")
            if session_id and r.status_code == 200:  # end the session it opened
                await http.delete(
                    tether.mcp_url, headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": session_id}
                )
        check(
            r.status_code == status,
            f"HTTP {r.status_code}, expected {status}: {r.text[:200]!r} "
            f"(WWW-Authenticate {r.headers.get('www-authenticate')!r})",
        )
        if status == 200:
            body = r.text
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                body = next(
                    (line[5:].strip() for line in body.splitlines() if line.startswith("data:") and line[5:].strip()),
                    "",
                )
            answer = json.loads(body)
            check(
                answer.get("id") == 1 and "protocolVersion" in answer.get("result", {}),
                f"not an initialize result: {body[:300]!r}",
            )
            return f"initialized, protocol {answer['result']['protocolVersion']}"
        header = r.headers.get("www-authenticate")
        params = bearer_challenge(r)
        check(params.get("error") == error, f"error={params.get('error')!r}, expected {error!r}: {header!r}")
        if status == 401:
            check(
                params.get("resource_metadata") == tether.prm_url,
                f"resource_metadata {params.get('resource_metadata')!r}, expected {tether.prm_url!r}: {header!r}",
            )
        if error == "insufficient_scope":
            check(
                REQUIRED_SCOPE in (params.get("scope") or "").split(),
                f"scope {params.get('scope')!r} does not name {REQUIRED_SCOPE!r}: {header!r}",
            )
        return header or ""

    async def status_endpoints(self, tether: Tether) -> str:
        """The operator endpoints: health for any valid token, the rest for the admin scope only."""
        user = await self.auth.mint(aud=tether.mcp_url, scope="mcp time")
        admin = await self.auth.mint(aud=tether.mcp_url, scope=f"mcp {ADMIN_SCOPE}")
        seen = []
        async with httpx2.AsyncClient(timeout=10) as http:
            for path, token, expected in [
                ("/healthz", user, 200),
                ("/status", None, 401),
                ("/status", user, 403),
                ("/status", admin, 200),
            ]:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                r = await http.get(f"{tether.base}{path}", headers=headers)
                check(r.status_code == expected, f"GET {path}: HTTP {r.status_code}, expected {expected}: {r.text[:200]!r}")
                if expected == 403:
                    params = bearer_challenge(r)
                    check(
                        params.get("error") == "insufficient_scope" and params.get("scope") == ADMIN_SCOPE,
                        f"GET {path} without the admin scope: {r.headers.get('www-authenticate')!r}",
                    )
                if expected == 200 and path == "/status":
                    servers = sorted(b.get("server") for b in r.json().get("backends", r.json().get("servers", [])))
                    seen = servers
                    check(servers == ["everything", "time"], f"/status shows {servers}")
        return f"/healthz for any token, /status 401 without one, 403 insufficient_scope without {ADMIN_SCOPE}, 200 with it ({seen})"

    async def raw_cases(self, tether: Tether, suffix: str, introspection: bool = False) -> None:
        """Initialize over raw HTTP with tokens minted by the AS: (name, claims for /test/mint
        or None, a literal token or None, expected status, expected `error`)."""
        other = "http://127.0.0.1:1"
        invalid = (401, "invalid_token")
        cases: list[tuple[str, dict[str, Any] | None, str | None, tuple[int, str | None]]] = [
            ("token for another audience -> 401 invalid_token", {"aud": f"{other}/mcp"}, None, invalid),
            ("token expired 10 minutes ago -> 401 invalid_token", {"exp_offset": -600}, None, invalid),
            (
                "token signed with another key, same kid -> 401 invalid_token",
                {"sign_with_other_key": True},
                None,
                invalid,
            ),
            ("token from another issuer -> 401 invalid_token", {"iss": other}, None, invalid),
            ("unsigned token (alg none) -> 401 invalid_token", {"alg": "none"}, None, invalid),
            ("token without aud -> 401 invalid_token", {"omit": ["aud"]}, None, invalid),
            ("not a JWT -> 401 invalid_token", None, "not-a-jwt", invalid),
            (
                "token without the mcp scope -> 403 insufficient_scope",
                {"scope": "time echo"},
                None,
                (403, "insufficient_scope"),
            ),
            ("token with 'mcp time' -> 200", None, None, (200, None)),
            (
                "token with 'mcp time', aud a list naming tether -> 200",
                {"aud": [f"{other}/mcp", tether.mcp_url]},
                None,
                (200, None),
            ),
        ]
        for name, claims, token, (status, error) in cases:
            await self.step(
                f"raw HTTP: {name}{suffix}",
                lambda c=claims, t=token, s=status, e=error: self.raw(tether, c, t, s, e),
            )


async def main() -> int:
    print(f"oauth: {TETHER_BIN.name} at {TETHER_BIN}", flush=True)
    for path, what in (
        (TETHER_BIN, "tether"),
        (EVERYTHING_JS, "server-everything"),
        (TIME_BIN, "mcp-server-time"),
        (AS_SCRIPT, "oauth_server.py"),
    ):
        if not path.exists():
            print(f"FAIL setup: {what} not found at {path}", flush=True)
            print("oauth: 0 passed, 1 failed")
            return 1
    with tempfile.TemporaryDirectory(prefix="tether-oauth-") as tmp:
        tmpdir = Path(tmp)
        auth = AuthServer(tmpdir / "oauth_server.log")
        tethers: list[Tether] = []
        try:
            return await run_all(tmpdir, auth, tethers)
        finally:
            for child in [*tethers, auth]:
                child.close()


async def run_all(tmpdir: Path, auth: AuthServer, tethers: list[Tether]) -> int:
    run = Run(auth)
    try:
        auth.start()
    except CheckFailed as e:
        print(f"FAIL setup: the authorization server: {e}", flush=True)
        print("oauth: 0 passed, 1 failed")
        return 1
    print(f"oauth: authorization server {auth.issuer}", flush=True)

    # ---- tether validating JWTs with the AS's JWKS ----
    jwks = Tether(
        "tether (JWKS)",
        tmpdir / "tether-jwks.log",
        write_config(tmpdir / "tether-jwks.json", {"issuer": auth.issuer, "admin_scope": ADMIN_SCOPE}),
    )
    tethers.append(jwks)
    if await run.step("tether (JWKS) starts and answers", lambda: start(jwks), 40):
        await run.step(
            "protected resource metadata at /.well-known/oauth-protected-resource/mcp",
            lambda: run.prm(jwks, jwks.prm_url),
        )
        await run.step(
            "protected resource metadata at /.well-known/oauth-protected-resource",
            lambda: run.prm(jwks, f"{jwks.base}/.well-known/oauth-protected-resource"),
        )
        await run.step("initialize without a token -> 401 with a Bearer challenge", lambda: run.unauthenticated(jwks))
        # First the client whose scopes cover both backends: its wait for their tools is the
        # wait for the backends, so the later exact-set checks see both up.
        everything = OAuthClient(jwks, "mcp time echo")
        await run.step(
            "SDK OAuth client, scope 'mcp time echo': time tools and echo",
            lambda: run.sdk_client(jwks, everything, TIME_TOOLS | {ECHO}, [], wait=40),
            60,
        )
        time_client = OAuthClient(jwks, "mcp time")
        ok = await run.step(
            "SDK OAuth client, scope 'mcp time': time tools only, echo refused",
            lambda: run.sdk_client(jwks, time_client, TIME_TOOLS, [ECHO]),
            45,
        )
        if ok:
            await run.step(
                "SDK OAuth client, scope 'mcp time': token refreshed, tether takes it",
                lambda: run.refresh(jwks, time_client, TIME_TOOLS),
            )
        echo_client = OAuthClient(jwks, "mcp echo")
        await run.step(
            "SDK OAuth client, scope 'mcp echo': echo only, time refused",
            lambda: run.sdk_client(jwks, echo_client, frozenset({ECHO}), ["time__get_current_time"]),
            45,
        )
        await run.step(
            "SDK OAuth client, the SDK's own scope choice (tether's challenge)", lambda: run.sdk_default_scope(jwks), 45
        )
        await run.raw_cases(jwks, "")
        await run.step("status endpoints: health for any token, the rest for the admin scope", lambda: run.status_endpoints(jwks))
        await run.step(
            "tether (JWKS) fetched the JWK set and introspected nothing", lambda: key_source(auth, jwks_expected=True)
        )
    jwks.close()

    # ---- tether introspecting tokens at the AS ----
    client_id, secret = INTROSPECTION_CLIENT
    introspecting = Tether(
        "tether (introspection)",
        tmpdir / "tether-introspection.log",
        write_config(
            tmpdir / "tether-introspection.json",
            {
                "issuer": auth.issuer,
                "introspection_endpoint": f"{auth.issuer}/introspect",
                "client_id": client_id,
                "client_secret": secret,
            },
        ),
    )
    tethers.append(introspecting)
    before = (await auth.stats())["counts"]
    if await run.step("tether (introspection) starts and answers", lambda: start(introspecting), 40):
        await run.step(
            "protected resource metadata at /.well-known/oauth-protected-resource/mcp (introspection)",
            lambda: run.prm(introspecting, introspecting.prm_url),
        )
        # Again first the client that waits for both backends.
        intro_everything = OAuthClient(introspecting, "mcp time echo")
        await run.step(
            "SDK OAuth client, scope 'mcp time echo': time tools and echo (introspection)",
            lambda: run.sdk_client(introspecting, intro_everything, TIME_TOOLS | {ECHO}, [], wait=40),
            60,
        )
        intro_time = OAuthClient(introspecting, "mcp time")
        await run.step(
            "SDK OAuth client, scope 'mcp time': time tools only, echo refused (introspection)",
            lambda: run.sdk_client(introspecting, intro_time, TIME_TOOLS, [ECHO]),
            45,
        )
        await run.raw_cases(introspecting, " (introspection)", introspection=True)
        await run.step(
            "tether (introspection) introspected at the AS as its client",
            lambda: key_source(auth, jwks_expected=False, before=before),
        )
    introspecting.close()

    if run.failed or VERBOSE:
        for child in (*tethers, auth):
            print(f"---- {child.name}: {child.log_path.name} (last 60 lines) ----")
            print(child.log_tail(60))
    print()
    for name, why in run.failed:
        print(f"FAILED: {name}: {why}")
    print(f"oauth: checks {time.monotonic() - STARTED:.1f} s")
    print(f"oauth: {len(run.passed)} passed, {len(run.failed)} failed")
    return 1 if run.failed else 0


async def start(tether: Tether) -> str:
    await tether.start()
    return f"listening on {tether.mcp_url}"


async def key_source(auth: AuthServer, jwks_expected: bool, before: dict[str, int] | None = None) -> str:
    stats = await auth.stats()
    counts = stats["counts"]
    before = before or {}
    jwks = counts.get("jwks", 0) - before.get("jwks", 0)
    introspections = counts.get("introspect", 0) - before.get("introspect", 0)
    unauthorized = counts.get("introspect_unauthorized", 0) - before.get("introspect_unauthorized", 0)
    if jwks_expected:
        check(jwks >= 1, "the AS's /jwks was never fetched")
        check(
            introspections == 0 and unauthorized == 0,
            f"{introspections + unauthorized} introspection requests with no introspection configured",
        )
    else:
        check(introspections >= 1, "no introspection request reached the AS")
        check(unauthorized == 0, f"{unauthorized} introspection requests failed client authentication")
        callers = {e.get("client_id") for e in stats["events"] if e["event"] == "introspect"}
        check(
            callers == {INTROSPECTION_CLIENT[0]}, f"introspected as {callers}, expected {{{INTROSPECTION_CLIENT[0]!r}}}"
        )
    return f"{jwks} JWKS fetches, {introspections} introspections"


if __name__ == "__main__":
    sys.exit(anyio.run(main))
