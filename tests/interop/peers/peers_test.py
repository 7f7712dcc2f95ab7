"""The peers suite: tether against MCP servers and authorization servers that nobody
here wrote, from the registries. Run by tests/interop/peers.sh, one scenario per
process:

    python peers_test.py keepalive|fastmcp|oidc|refusing

Prints `ok SCENARIO: CHECK...` / `FAIL SCENARIO: CHECK: why` per check, `note ...`
lines with counts for the report, and `SCENARIO: N passed, N failed` last. Logs of
every process are kept under target/interop/peers-run/SCENARIO/ and the failing
run's are printed.

Environment (all optional):
  PEERS_KEEPALIVE_CALLS (50), PEERS_KEEPALIVE_GAP_MIN (4.5), PEERS_KEEPALIVE_GAP_MAX (5.5)
  PEERS_FASTMCP_TOKEN_TTL (15 s), PEERS_FASTMCP_LIFETIMES (3.5): calls across that many
  PEERS_OIDC_TOKEN_TTL (20 s), PEERS_OIDC_SECONDS (45): calls through both tethers
  PEERS_REFUSING_SECONDS (60), PEERS_REFUSING_MAX_TOKEN_REQUESTS (6 per minute: the first, then the backoff's 1, 2, 4, 8, 16 s)
  PEERS_TETHER_LOG (tether's --log-level, default info), PEERS_VERBOSE=1 (print all logs)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx

from common import (
    HERE,
    HOST,
    INTEROP_DIR,
    MOCK_MCP_BIN,
    NODE_DIR,
    TETHER_BIN,
    VENV_PY,
    CheckFailed,
    Child,
    Run,
    browser_program,
    call_once,
    check,
    describe,
    env_float,
    env_int,
    free_port,
    grep_log,
    install_sigterm,
    read_jsonl,
    run_tether_cli_async,
    tether_env,
    tether_session,
    wait_for_tool,
    wait_http,
    write_json,
)

RUN_DIR = INTEROP_DIR / "peers-run"
TETHER_LOG_LEVEL = os.environ.get("PEERS_TETHER_LOG", "info")
LOG_ARGS = ["--log-level", TETHER_LOG_LEVEL]
# Opt-in, not the unpatched peer: see fastmcp_server.py --add-basic-client-id.


def node_script(name: str) -> Path:
    """The .mjs helpers import packages from the peers' node_modules: run a copy there."""
    target = NODE_DIR / name
    shutil.copyfile(HERE / name, target)
    return target


def since(entries: list[dict[str, Any]], t0: float, t1: float | None = None) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("at", 0) >= t0 and (t1 is None or e.get("at", 0) <= t1)]


def token_requests(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("path") == "/token" and e.get("method") == "POST"]


def summarize_tokens(entries: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for e in token_requests(entries):
        key = f"{e.get('grant_type')}->{e.get('status')}"
        if e.get("error"):
            key += f" {e['error']}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "none"


def errors_of(entries: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in entries:
        if (e.get("status") or 0) >= 400 or e.get("event", "").endswith("error"):
            what = e.get("path") or e.get("event")
            out.append(f"{e.get('method', '')} {what} {e.get('status', '')} {e.get('error', '')} "
                       f"{(e.get('error_description') or '')[:120]}".strip())
    return out


# ---------------------------------------------------------------------------------------
# 1. keep-alive gaps


def spread_gaps(n: int, lo: float, hi: float) -> list[float]:
    if n <= 1:
        return [(lo + hi) / 2] * n
    gaps = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    random.Random(7).shuffle(gaps)
    return gaps


async def keepalive(tmp: Path, run: Run) -> None:
    calls = env_int("PEERS_KEEPALIVE_CALLS", 50)
    lo = env_float("PEERS_KEEPALIVE_GAP_MIN", 4.5)
    hi = env_float("PEERS_KEEPALIVE_GAP_MAX", 5.5)
    gaps = spread_gaps(calls, lo, hi)
    py_port, node_port = free_port(), free_port()
    servers = {
        "py": Child("python MCP server (mcp MCPServer, uvicorn)",
                    [str(VENV_PY), str(HERE / "mcp_py_server.py"), str(py_port)], tmp / "py-server.log"),
        "node": Child("node MCP server (@modelcontextprotocol/sdk, node http)",
                      ["node", str(node_script("node_mcp_server.mjs")), str(node_port)], tmp / "node-server.log"),
    }
    ports = {"py": py_port, "node": node_port}
    try:
        for name, child in servers.items():
            run.add_log(child.name, child.log_path)
            child.start()

        async def ready() -> str:
            for name, child in servers.items():
                await wait_http(f"http://{HOST}:{ports[name]}/mcp", child, 60)
            return f"py on :{py_port}, node on :{node_port}"

        if not await run.step("both servers answer", ready, 90):
            return

        async def loop(name: str) -> str:
            state = tmp / f"state-{name}"
            state.mkdir()
            config = write_json(tmp / f"tether-{name}.json",
                                {"mcpServers": {name: {"url": f"http://{HOST}:{ports[name]}/mcp"}}})
            log = tmp / f"tether-{name}.log"
            run.add_log(f"tether ({name})", log)
            tool = f"{name}__echo"
            failures: list[str] = []
            async with tether_session(config, tether_env(state), log, LOG_ARGS) as s:
                names = await wait_for_tool(s, tool, 30)
                check(tool in names, f"{tool} not listed within 30 s: {names}")
                for i, gap in enumerate(gaps):
                    await anyio.sleep(gap)
                    ok, detail = await call_once(s, tool, {"text": f"call {i}"}, timeout=30)
                    if not ok:
                        failures.append(f"#{i} after {gap:.2f} s: {detail}")
            extra = ""
            if name == "node":
                conns = grep_log(servers["node"].log_path, "connection #", limit=1)
                extra = f"; node saw {conns[-1].split()[1].lstrip('#') if conns else '?'} TCP connections"
            else:
                extra = f"; uvicorn logged {len(grep_log(servers['py'].log_path, 'POST /mcp', limit=10**6))} POST /mcp"
            run.note(f"{name}: {len(failures)} of {calls} calls failed (gaps {lo}-{hi} s){extra}")
            if failures:
                warn = grep_log(log, "WARN", "ERROR", limit=5)
                raise CheckFailed(
                    f"{len(failures)} of {calls} calls failed; first: {' | '.join(failures[:3])}"
                    + (f"; tether log: {' | '.join(warn)}" if warn else "")
                )
            return f"{calls} calls, 0 failed{extra}"

        budget = calls * (hi + 3) + 90
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.step, f"python server (uvicorn keep-alive 5 s): {calls} calls at {lo}-{hi} s gaps, none fails",
                          lambda: loop("py"), budget)
            tg.start_soon(run.step, f"node server (keepAliveTimeout 5 s): {calls} calls at {lo}-{hi} s gaps, none fails",
                          lambda: loop("node"), budget)
    finally:
        for child in servers.values():
            child.stop()


# ---------------------------------------------------------------------------------------
# 2. FastMCP with its built-in authorization server


class FastMCPServer(Child):
    """fastmcp_server.py: FastMCP + InMemoryOAuthProvider, one process (AS and resource)."""

    def __init__(self, tmp: Path, port: int, ttl: int):
        self.port = port
        self.requests = tmp / "fastmcp-requests.jsonl"
        argv = [str(VENV_PY), str(HERE / "fastmcp_server.py"), str(port), str(self.requests), "--token-ttl", str(ttl)]
        super().__init__("FastMCP server + InMemoryOAuthProvider", argv, tmp / "fastmcp-server.log")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/mcp"

    async def start_ready(self) -> None:
        self.start()
        await wait_http(f"http://{HOST}:{self.port}/.well-known/oauth-authorization-server", self, 60,
                        ok=lambda r: r.status_code == 200)

    def entries(self) -> list[dict[str, Any]]:
        return read_jsonl(self.requests)



def visits(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path)


def cli_output(p) -> str:
    return (p.stdout.strip() + " " + p.stderr.strip()).strip().replace("\n", " | ")[-700:]


def codes_of(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in token_requests(entries) if e.get("grant_type") == "authorization_code"]


async def fastmcp(tmp: Path, run: Run) -> None:
    ttl = env_int("PEERS_FASTMCP_TOKEN_TTL", 15)
    lifetimes = env_float("PEERS_FASTMCP_LIFETIMES", 3.5)
    server = FastMCPServer(tmp, free_port(), ttl)
    run.add_log(server.name, server.log_path)
    run.add_log("FastMCP request log", server.requests)
    state = tmp / "state"
    state.mkdir()
    visits_file = tmp / "browser-visits.jsonl"
    run.add_log("browser visits", visits_file)
    env = tether_env(state, browser_program(tmp, visits_file))
    config = write_json(tmp / "tether.json", {"mcpServers": {"fm": {"url": server.url}}})
    log = tmp / "tether.log"
    run.add_log("tether (stdio)", log)
    tool = "fm__echo"
    c_login = "tether auth login fm (BROWSER follows the redirects, no person)"
    c_status = "tether auth status shows the login"
    c_calls = "calls through tether succeed"
    c_life = f"calls across {lifetimes} token lifetimes ({ttl} s): refresh with rotation, no failed call"
    c_restart = "tether restarted with an expired stored token: no failed call, login kept"
    c_forget = "the AS forgets the client (FastMCP restarted): calls recover without a person"
    c_logout = "tether auth logout fm: the login is gone"
    c_revoke = "the logout's revocation requests are accepted by FastMCP's /revoke"
    try:
        if not await run.step(f"FastMCP server starts (access tokens {ttl} s)", lambda: _ready(server), 90):
            run.not_run([c_login, c_status, c_calls, c_life, c_restart, c_forget, c_logout, c_revoke], "the server did not start")
            return

        async def login() -> str:
            p = await run_tether_cli_async(["--config", str(config), *LOG_ARGS, "auth", "login", "fm"], env, 90)
            entries = server.entries()
            regs = [e.get("registration") for e in entries if e.get("path") == "/register"]
            methods = sorted({f"{e.get('auth')} header, client_id in form: {e.get('form_client_id')}"
                              for e in token_requests(entries)})
            run.note(f"login: registration {regs}; token requests {summarize_tokens(entries)}; "
                     f"token requests authenticated with: {methods}")
            check(p.returncode == 0, f"exit {p.returncode}: {cli_output(p)}; AS refusals: {errors_of(entries)[-4:]}")
            return p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "logged in"

        if not await run.step(c_login, login, 120):
            await _note_serving_tether(run, config, env, log, tool, server.entries, visits_file)
            run.not_run([c_status, c_calls, c_life, c_restart, c_forget, c_logout, c_revoke], "the login failed")
            return

        async def status_lists() -> str:
            p = await run_tether_cli_async(["--config", str(config), "auth", "status"], env, 30)
            check(p.returncode == 0 and "fm" in p.stdout, f"exit {p.returncode}: {cli_output(p)}")
            return p.stdout.strip()

        await run.step(c_status, status_lists, 40)

        # --- a serving tether: calls, then several token lifetimes -----------------------
        async with tether_session(config, env, log, LOG_ARGS) as s:
            async def first_calls() -> str:
                names = await wait_for_tool(s, tool, 45)
                check(tool in names, f"{tool} not listed within 45 s: {names}; tether log: {grep_log(log, 'fm', limit=4)}")
                for i in range(3):
                    ok, detail = await call_once(s, tool, {"text": f"first {i}"})
                    check(ok, f"call {i}: {detail}")
                return detail

            calls_ok = await run.step(c_calls, first_calls, 90)
            if not calls_ok:
                run.not_run([c_life, c_restart, c_forget], "no call succeeded")
            else:
                async def across_lifetimes() -> str:
                    t0 = time.time()
                    seconds = ttl * lifetimes
                    before_codes = len(codes_of(server.entries()))
                    before_visits = len(visits(visits_file))
                    failures, n = [], 0
                    while time.time() - t0 < seconds:
                        ok, detail = await call_once(s, tool, {"text": f"steady {n}"})
                        n += 1
                        if not ok:
                            failures.append(f"#{n} at +{time.time() - t0:.0f} s: {detail}")
                        await anyio.sleep(2)
                    window = since(server.entries(), t0)
                    refreshes = [e for e in token_requests(window) if e.get("grant_type") == "refresh_token"]
                    run.note(f"across {lifetimes} lifetimes: {n} calls, {len(failures)} failed; token requests "
                             f"{summarize_tokens(window)}; 401s at /mcp: "
                             f"{sum(1 for e in window if e.get('path') == '/mcp' and e.get('status') == 401)}")
                    check(not failures, f"{len(failures)} of {n} calls failed: {' | '.join(failures[:3])}")
                    want = max(int(lifetimes) - 1, 1)
                    check(len(refreshes) >= want,
                          f"{len(refreshes)} refresh grants in {seconds:.0f} s, expected >= {want}: {summarize_tokens(window)}")
                    check(all(e.get("status") == 200 for e in refreshes), f"refused refreshes: {summarize_tokens(window)}")
                    check(len(codes_of(server.entries())) == before_codes, "tether logged in again (authorization_code grant)")
                    check(len(visits(visits_file)) == before_visits, "the browser was opened again")
                    return f"{n} calls, 0 failed; {len(refreshes)} refreshes, each rotating the refresh token"

                await run.step(c_life, across_lifetimes, ttl * lifetimes + 60)

        if calls_ok:
            # --- restart tether with an expired stored token -----------------------------
            issued = [e for e in token_requests(server.entries()) if e.get("status") == 200]
            if issued:
                wait = issued[-1]["at"] + ttl + 1 - time.time()
                if wait > 0:
                    await anyio.sleep(wait)
            t_restart = time.time()
            codes_before = len(codes_of(server.entries()))
            visits_before = len(visits(visits_file))
            async with tether_session(config, env, log, LOG_ARGS) as s:
                async def restarted() -> str:
                    names = await wait_for_tool(s, tool, 45)
                    check(tool in names, f"{tool} not listed within 45 s: {names}")
                    failures = []
                    for i in range(3):
                        ok, detail = await call_once(s, tool, {"text": f"restart {i}"})
                        if not ok:
                            failures.append(f"#{i}: {detail}")
                    window = since(server.entries(), t_restart)
                    check(not failures,
                          f"{len(failures)} of 3 calls failed: {' | '.join(failures)}; token requests {summarize_tokens(window)}")
                    check(len(codes_of(server.entries())) == codes_before and len(visits(visits_file)) == visits_before,
                          f"logged in again instead of refreshing: {summarize_tokens(window)}")
                    return f"first call answered; token requests since the restart: {summarize_tokens(window)}"

                await run.step(c_restart, restarted, 90)

                # --- the AS forgets the client ---------------------------------------------
                async def forgotten() -> str:
                    server.stop()
                    t0 = time.time()
                    await server.start_ready()
                    deadline = t0 + 90
                    failures, n = [], 0
                    while True:
                        ok, detail = await call_once(s, tool, {"text": f"after forget {n}"})
                        n += 1
                        if ok:
                            break
                        failures.append(f"#{n} at +{time.time() - t0:.0f} s: {detail}")
                        check(time.time() < deadline,
                              f"no call succeeded within 90 s ({n} tried); last: {failures[-1]}; "
                              f"AS refusals: {errors_of(since(server.entries(), t0))[-5:]}")
                        await anyio.sleep(2)
                    window = since(server.entries(), t0)
                    regs = [e for e in window if e.get("path") == "/register"]
                    v = len(visits(visits_file)) - visits_before
                    run.note(f"after the AS forgot the client: {len(failures)} calls failed before one succeeded "
                             f"({time.time() - t0:.0f} s); {len(regs)} new registrations, {v} browser visits; "
                             f"token requests {summarize_tokens(window)}"
                             + (f"; first failure: {failures[0]}" if failures else ""))
                    for _ in range(2):
                        ok, detail = await call_once(s, tool, {"text": "after recovery"})
                        check(ok, f"a call after the recovery failed: {detail}")
                    return f"recovered after {len(failures)} failed calls, {len(regs)} new registration(s), {v} browser visit(s)"

                await run.step(c_forget, forgotten, 150)

        # --- logout ---------------------------------------------------------------------------
        t_logout = time.time()

        async def logout() -> str:
            p = await run_tether_cli_async(["--config", str(config), *LOG_ARGS, "auth", "logout", "fm"], env, 60)
            check(p.returncode == 0, f"exit {p.returncode}: {cli_output(p)}")
            st = await run_tether_cli_async(["--config", str(config), "auth", "status"], env, 30)
            check(st.returncode != 0, f"auth status still reports a login: {cli_output(st)}")
            return f"{p.stdout.strip()} auth status: {st.stdout.strip()}"

        await run.step(c_logout, logout, 90)

        async def revoked() -> str:
            revokes = [e for e in since(server.entries(), t_logout) if e.get("path") == "/revoke"]
            run.note(f"logout: revocation requests (status, hint, auth, client_id in form, error) "
                     f"{[(e.get('status'), e.get('token_type_hint'), e.get('auth'), e.get('form_client_id'), e.get('error_description') or e.get('error')) for e in revokes]}")
            check(revokes, "no revocation request reached FastMCP's /revoke")
            check(all(e.get("status") == 200 for e in revokes),
                  f"FastMCP refused: {[(e.get('status'), e.get('error'), e.get('error_description')) for e in revokes]}")
            return f"{len(revokes)} revocation request(s) answered 200"

        await run.step(c_revoke, revoked, 10)
    finally:
        server.stop()


async def _ready(server: Any) -> str:
    await server.start_ready()
    return f"listening at http://{HOST}:{server.port}"


async def _note_serving_tether(run: Run, config: Path, env: dict[str, str], log: Path, tool: str,
                               entries_fn, visits_file: Path, seconds: float = 15) -> None:
    """After a failed `auth login`: what a serving tether does by itself (it opens the
    browser, i.e. our stand-in person) within `seconds`, for the report."""
    t0 = time.time()
    try:
        async with tether_session(config, env, log, LOG_ARGS) as s:
            await anyio.sleep(seconds)
            ok, detail = await call_once(s, tool, {"text": "x"}, timeout=15)
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"session: {e}"
    window = since(entries_fn(), t0)
    run.note(f"a serving tether for {seconds:.0f} s: call ok={ok} ({detail[:200]}); "
             f"token requests {summarize_tokens(window)}; {len(since(visits(visits_file), t0))} browser visits; "
             f"tether: {' | '.join(grep_log(log, 'WARN', limit=3))}")


# ---------------------------------------------------------------------------------------
# 3. node-oidc-provider in front of a second tether as the resource server


class OidcProvider(Child):
    def __init__(self, tmp: Path, port: int, ttl: int, extra: list[str] | None = None):
        self.port = port
        self.requests = tmp / "oidc-requests.jsonl"
        super().__init__("node-oidc-provider", ["node", str(node_script("oidc_provider.mjs")), str(port),
                                                str(self.requests), "--at-ttl", str(ttl), *(extra or [])],
                         tmp / "oidc-provider.log")

    @property
    def issuer(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def start_ready(self) -> None:
        self.start()
        await wait_http(f"{self.issuer}/.well-known/oauth-authorization-server", self, 60,
                        ok=lambda r: r.status_code == 200)

    def entries(self) -> list[dict[str, Any]]:
        return read_jsonl(self.requests)


STORM = 200  # token requests while waiting for the tools: a refresh loop, stop waiting


async def wait_for_tool_or_storm(s: Any, tool: str, seconds: float, entries_fn, t0: float) -> tuple[list[str], int]:
    deadline = time.monotonic() + seconds
    while True:
        names = [t.name for t in (await s.list_tools()).tools]
        storm = len(token_requests(since(entries_fn(), t0)))
        if tool in names or time.monotonic() > deadline or storm >= STORM:
            return names, storm
        await anyio.sleep(0.5)


async def raw_probe(url: str, authorization: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                            headers={"Authorization": authorization, "Accept": "application/json, text/event-stream"})
        return f"{r.status_code} {r.headers.get('www-authenticate')!r}"


async def oidc(tmp: Path, run: Run) -> None:
    ttl = env_int("PEERS_OIDC_TOKEN_TTL", 20)
    seconds = env_float("PEERS_OIDC_SECONDS", 45)
    op = OidcProvider(tmp, free_port(), ttl)
    run.add_log(op.name, op.log_path)
    run.add_log("oidc-provider request log", op.requests)
    rs_port = free_port()
    resource = f"http://{HOST}:{rs_port}/mcp"
    rs_state = tmp / "state-rs"
    rs_state.mkdir()
    rs_config = write_json(tmp / "tether-rs.json", {
        "tether": {"authorization": {"issuer": op.issuer, "resource": resource, "required_scopes": ["mcp"]}},
        "mcpServers": {"mock": {"command": str(MOCK_MCP_BIN)}},
    })
    rs = Child("tether (resource server)", [str(TETHER_BIN), "serve", "--listen", f"{HOST}:{rs_port}", "--config",
                                            str(rs_config), *LOG_ARGS], tmp / "tether-rs.log", env=tether_env(rs_state))
    run.add_log(rs.name, rs.log_path)
    visits_file = tmp / "browser-visits.jsonl"
    run.add_log("browser visits", visits_file)
    browser = browser_program(tmp, visits_file)
    tool = "rs__mock__echo"
    variants = [("default", None), ("dpop-false", {"dpop": False})]
    try:
        async def start_both() -> str:
            await op.start_ready()
            meta = await _get_json(f"{op.issuer}/.well-known/oauth-authorization-server")
            run.note(f"oidc-provider metadata: dpop_signing_alg_values_supported={meta.get('dpop_signing_alg_values_supported')}, "
                     f"token_endpoint_auth_methods_supported={meta.get('token_endpoint_auth_methods_supported')}")
            rs.start()
            await wait_http(f"http://{HOST}:{rs_port}/.well-known/oauth-protected-resource/mcp", rs, 60,
                            ok=lambda r: r.status_code == 200)
            run.note(f"resource tether, raw probes: 'Bearer x' -> {await raw_probe(resource, 'Bearer not-a-token')}; "
                     f"'DPoP x' -> {await raw_probe(resource, 'DPoP not-a-token')}")
            return f"issuer {op.issuer}, resource {resource}"

        if not await run.step("oidc-provider and the resource tether start", start_both, 120):
            run.not_run([f"{c} [{v}]" for v, _ in variants for c in ("login", "calls")], "setup failed")
            return

        async def client_run(label: str, oauth: dict[str, Any] | None) -> None:
            state = tmp / f"state-{label}"
            state.mkdir()
            env = tether_env(state, browser)
            entry: dict[str, Any] = {"url": resource}
            if oauth is not None:
                entry["oauth"] = oauth
            config = write_json(tmp / f"tether-{label}.json", {"mcpServers": {"rs": entry}})
            log = tmp / f"tether-{label}.log"
            run.add_log(f"tether ({label})", log)
            what = "no dpop setting" if oauth is None else json.dumps(oauth)
            c_login = f"tether auth login rs at oidc-provider, no person [{label}: {what}]"
            c_calls = f"calls through both tethers across {seconds:.0f} s (access tokens {ttl} s), none fails [{label}]"
            t_login = time.time()

            async def login() -> str:
                p = await run_tether_cli_async(["--config", str(config), *LOG_ARGS, "auth", "login", "rs"], env, 90)
                entries = since(op.entries(), t_login)
                regs = [e.get("registration") for e in entries if e.get("path") == "/reg"]
                toks = token_requests(entries)
                run.note(f"{label} login: registration {regs}; token requests {summarize_tokens(entries)}; "
                         f"DPoP proof on them: {[bool(e.get('dpop_proof')) for e in toks]}, "
                         f"token_type {[e.get('token_type') for e in toks]}")
                check(p.returncode == 0, f"exit {p.returncode}: {cli_output(p)}; AS: {errors_of(entries)[-4:]}")
                return p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "logged in"

            if not await run.step(c_login, login, 120):
                run.not_run([c_calls], "the login failed")
                return
            async with tether_session(config, env, log, LOG_ARGS) as s:
                t0 = time.time()

                async def calls() -> str:
                    names, storm = await wait_for_tool_or_storm(s, tool, 45, op.entries, t0)
                    if tool not in names:
                        window = since(op.entries(), t0)
                        run.note(f"{label}: {tool} never listed; in {time.time() - t0:.0f} s oidc-provider served "
                                 f"{len(token_requests(window))} token requests ({summarize_tokens(window)})")
                        check(False, f"{tool} not listed within {time.time() - t0:.0f} s; {storm} token requests at "
                                     f"oidc-provider meanwhile ({summarize_tokens(window)}); tether: "
                                     f"{' | '.join(grep_log(log, 'WARN', 'status_changed', limit=3))}")
                    failures, n = [], 0
                    while True:
                        ok, detail = await call_once(s, tool, {"text": f"{label} {n}"})
                        n += 1
                        if not ok:
                            failures.append(f"#{n} at +{time.time() - t0:.0f} s: {detail}")
                        if time.time() - t0 >= seconds:
                            break
                        await anyio.sleep(3)
                    window = since(op.entries(), t0)
                    run.note(f"{label}: {n} calls over {seconds:.0f} s, {len(failures)} failed; token requests during "
                             f"the calls: {summarize_tokens(window)}; since the login: "
                             f"{summarize_tokens(since(op.entries(), t_login))}")
                    check(not failures, f"{len(failures)} of {n} calls failed: {' | '.join(failures[:3])}")
                    return f"{n} calls, 0 failed; token requests {summarize_tokens(window)}"

                await run.step(c_calls, calls, seconds + 90)

        for label, oauth in variants:
            await client_run(label, oauth)
        total = op.entries()
        run.note(f"oidc-provider served {len(token_requests(total))} token requests in all: {summarize_tokens(total)}; "
                 f"refusals: {errors_of(total)[-4:]}")
    finally:
        rs.stop()
        op.stop()


async def _get_json(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.get(url)
        return r.json()


# ---------------------------------------------------------------------------------------
# 4. a resource that refuses every token


async def refusing(tmp: Path, run: Run) -> None:
    seconds = env_float("PEERS_REFUSING_SECONDS", 60)
    limit = env_int("PEERS_REFUSING_MAX_TOKEN_REQUESTS", 6)
    op = OidcProvider(tmp, free_port(), 3600, ["--no-dpop"])
    run.add_log(op.name, op.log_path)
    run.add_log("oidc-provider request log", op.requests)
    port = free_port()
    rs_requests = tmp / "refusing-requests.jsonl"
    rs = Child("refusing FastMCP resource (JWTVerifier, another audience)",
               [str(VENV_PY), str(HERE / "refusing_server.py"), str(port), op.issuer, str(rs_requests)],
               tmp / "refusing-server.log")
    run.add_log(rs.name, rs.log_path)
    run.add_log("refusing resource request log", rs_requests)
    state = tmp / "state"
    state.mkdir()
    visits_file = tmp / "browser-visits.jsonl"
    run.add_log("browser visits", visits_file)
    env = tether_env(state, browser_program(tmp, visits_file))
    url = f"http://{HOST}:{port}/mcp"
    config = write_json(tmp / "tether.json", {"mcpServers": {"ref": {"url": url}}})
    log = tmp / "tether.log"
    run.add_log("tether (stdio)", log)
    status_port = free_port()
    tool = "ref__echo"
    c_login = "tether auth login ref (oidc-provider issues a token)"
    c_few = f"at most {limit} token requests per minute while the resource refuses every token"
    c_status = "/status and `tether status` name what the backend said (invalid_token)"
    try:
        async def start_both() -> str:
            await op.start_ready()
            rs.start()
            r = await wait_http(f"http://{HOST}:{port}/.well-known/oauth-protected-resource/mcp", rs, 60,
                                ok=lambda r: r.status_code == 200)
            return f"AS {op.issuer}; resource {url}, its metadata names {r.json().get('authorization_servers')}"

        if not await run.step("oidc-provider (bearer tokens) and the refusing FastMCP resource start", start_both, 120):
            run.not_run([c_login, c_few, c_status], "setup failed")
            return

        async def login() -> str:
            p = await run_tether_cli_async(["--config", str(config), *LOG_ARGS, "auth", "login", "ref"], env, 90)
            check(p.returncode == 0, f"exit {p.returncode}: {cli_output(p)}; AS: {errors_of(op.entries())[-4:]}")
            return p.stdout.strip().splitlines()[-1]

        await run.step(c_login, login, 120)

        async with tether_session(config, env, log, [*LOG_ARGS, "--status-listen", f"{HOST}:{status_port}"]) as s:
            t0 = time.time()
            outcomes: dict[str, int] = {}
            n = 0
            while time.time() - t0 < seconds:
                ok, detail = await call_once(s, tool, {"text": f"refused {n}"}, timeout=20)
                n += 1
                key = "ok" if ok else detail[:300]
                outcomes[key] = outcomes.get(key, 0) + 1
                await anyio.sleep(5)
            t1 = time.time()
            window = since(op.entries(), t0, t1)
            toks = token_requests(window)
            regs = [e for e in window if e.get("path") == "/reg"]
            auths = [e for e in window if e.get("path") == "/auth"]
            refused = [e for e in since(read_jsonl(rs_requests), t0, t1) if e.get("path") == "/mcp" and e.get("status") == 401]
            v = len(since(visits(visits_file), t0, t1))
            per_minute = len(toks) * 60 / max(t1 - t0, 1)
            www = sorted({e.get("www_authenticate", "")[:160] for e in refused})
            run.note(f"{t1 - t0:.0f} s against the refusing resource: {len(toks)} token requests ({summarize_tokens(window)}), "
                     f"{len(regs)} registrations, {len(auths)} authorization requests, {v} browser visits, "
                     f"{len(refused)} requests refused at /mcp (WWW-Authenticate {www}); {n} calls: {json.dumps(outcomes)[:600]}")

            async def few_tokens() -> str:
                check(per_minute <= limit,
                      f"{len(toks)} token requests in {t1 - t0:.0f} s ({per_minute:.1f}/min, expected <= {limit}/min): "
                      f"{summarize_tokens(window)}; {len(regs)} registrations, {v} browser visits")
                return f"{len(toks)} token requests in {t1 - t0:.0f} s ({summarize_tokens(window)}), {len(regs)} registrations"

            await run.step(c_few, few_tokens, 10)

            async def status_says() -> str:
                doc = await _get_json(f"http://{HOST}:{status_port}/status")
                rows = [b for b in doc.get("backends", []) if b.get("server") == "ref" or b.get("name") == "ref"]
                check(rows, f"no row for ref in /status: {json.dumps(doc)[:400]}")
                row = rows[0]
                brief = {k: row.get(k) for k in ("status", "last_error", "login_url", "breaker") if k in row}
                p = await run_tether_cli_async(["--config", str(config), "status"], env, 30)
                run.note(f"/status row for ref: {json.dumps(brief)[:500]}; `tether status`: {cli_output(p)[:600]}")
                check("invalid_token" in json.dumps(row).lower(), f"/status does not name invalid_token: {json.dumps(brief)[:500]}")
                check("invalid_token" in p.stdout.lower(), f"`tether status` does not name invalid_token: {cli_output(p)[:500]}")
                return f"status {row.get('status')}, last_error {str(row.get('last_error'))[:200]!r}"

            await run.step(c_status, status_says, 45)
    finally:
        rs.stop()
        op.stop()


SCENARIOS = {"keepalive": keepalive, "fastmcp": fastmcp, "oidc": oidc, "refusing": refusing}


async def main(names: list[str]) -> int:
    status = 0
    for name in names:
        run = Run(name)
        tmp = RUN_DIR / name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        started = time.monotonic()
        try:
            await SCENARIOS[name](tmp, run)
        except CheckFailed as e:
            run.fail("scenario", str(e))
        except Exception as e:  # noqa: BLE001
            run.fail("scenario aborted", describe(e))
        print(f"{name}: took {time.monotonic() - started:.0f} s; logs in {tmp}", flush=True)
        status |= run.finish()
    return status


if __name__ == "__main__":
    install_sigterm()
    names = sys.argv[1:] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
        sys.exit(2)
    sys.exit(anyio.run(main, names))
