"""Shared pieces of the peers suite (tests/interop/peers.sh): child processes that are
always killed, free loopback ports, readiness probes, the check runner that prints
`ok ...` / `FAIL ...`, and the official Python SDK's client over stdio to tether.

Every child is started in its own process group; its pid goes to $PEERS_PIDFILE so
that peers.sh can kill what a crashed or timed-out run left behind (by id only).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
INTEROP_DIR = Path(os.environ.get("PEERS_DIR", ROOT / "target" / "interop"))
TETHER_BIN = Path(os.environ.get("TETHER_BIN", ROOT / "target" / "debug" / "tether"))
MOCK_MCP_BIN = Path(os.environ.get("MOCK_MCP_BIN", ROOT / "target" / "debug" / "mock-mcp"))
VENV_PY = Path(os.environ.get("PEERS_PYTHON", sys.executable))
NODE_DIR = Path(os.environ.get("PEERS_NODE_DIR", INTEROP_DIR / "peers-node"))
PIDFILE = os.environ.get("PEERS_PIDFILE")
VERBOSE = os.environ.get("PEERS_VERBOSE") == "1"
HOST = "127.0.0.1"


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def register_pid(pid: int) -> None:
    if PIDFILE:
        with open(PIDFILE, "a") as f:
            f.write(f"{pid}\n")


class CheckFailed(Exception):
    pass


def check(cond: Any, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text[-lines:])


class Child:
    """A long-running child process (a server), its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        log.write(f"---- start: {' '.join(self.argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self.env or {})},
            cwd=self.cwd,
            start_new_session=True,
        )
        log.close()
        register_pid(self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever is left of its group
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


async def wait_http(url: str, child: Child | None, seconds: float = 60.0, ok=lambda r: True) -> httpx.Response:
    """Polls `url` until any HTTP answer that `ok` accepts (a readiness probe, no fixed sleep)."""
    deadline = time.monotonic() + seconds
    last = "no attempt"
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            if child is not None and not child.alive():
                raise CheckFailed(f"{child.name} exited before it answered at {url}")
            try:
                r = await http.get(url)
                if ok(r):
                    return r
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
            await anyio.sleep(0.2)
    raise CheckFailed(f"{url} did not answer within {seconds:.0f} s (last: {last})")


def write_json(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, indent=2))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        for line in path.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def browser_program(tmp: Path, visits: Path) -> Path:
    """A `$BROWSER` for tether: plays the person by fetching the login URL and
    following the authorization server's redirects to tether's loopback callback."""
    script = tmp / "browser.sh"
    script.write_text(
        f'#!/bin/sh\nexec "{VENV_PY}" "{HERE / "browser.py"}" "{visits}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    text = str(e) or type(e).__name__
    err = getattr(e, "error", None)
    if err is not None and getattr(err, "data", None):
        text += f" (data {json.dumps(err.data)[:400]})"
    return f"{type(e).__name__}: {text}"


class Run:
    """Prints one line per check and keeps the logs to show when one fails."""

    def __init__(self, scenario: str):
        self.scenario = scenario
        self.passed: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.logs: list[tuple[str, Path]] = []
        self.notes: list[str] = []

    def add_log(self, name: str, path: Path) -> None:
        self.logs.append((name, path))

    def note(self, text: str) -> None:
        """A fact for the report (printed as `note ...`, not counted)."""
        self.notes.append(text)
        print(f"note {self.scenario}: {text}", flush=True)

    def ok(self, name: str, detail: str = "") -> None:
        self.passed.append(name)
        print(f"ok {self.scenario}: {name}{': ' + detail if detail else ''}", flush=True)

    def fail(self, name: str, why: str) -> None:
        self.failed.append((name, why))
        print(f"FAIL {self.scenario}: {name}: {why}", flush=True)

    def not_run(self, names: list[str], reason: str) -> None:
        """Checks that could not run because an earlier one failed: each counts as failed."""
        for name in names:
            self.fail(name, f"not run: {reason}")

    async def step(self, name: str, fn: Callable[[], Awaitable[str]], timeout: float = 60) -> bool:
        try:
            with anyio.fail_after(timeout):
                detail = await fn()
        except CheckFailed as e:
            self.fail(name, str(e))
            return False
        except TimeoutError:
            self.fail(name, f"did not finish within {timeout:.0f} s")
            return False
        except Exception as e:  # noqa: BLE001 - an SDK error, a JSON-RPC error ...
            self.fail(name, describe(e))
            if VERBOSE:
                traceback.print_exc()
            return False
        self.ok(name, detail or "")
        return True

    def finish(self) -> int:
        if self.failed or VERBOSE:
            for name, path in self.logs:
                print(f"---- {self.scenario}: {name}: {path} (last 60 lines) ----")
                print(tail(path, 60))
                print(f"---- end of {name} ----")
        print(f"{self.scenario}: {len(self.passed)} passed, {len(self.failed)} failed", flush=True)
        return 1 if self.failed else 0


def tether_env(state_dir: Path, browser: Path | None = None) -> dict[str, str]:
    env = {
        "TETHER_STATE_DIR": str(state_dir),
        "XDG_STATE_HOME": str(state_dir / "xdg-state"),
        "XDG_RUNTIME_DIR": str(state_dir / "run"),
        "HOME": str(state_dir / "home"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "NO_COLOR": "1",
    }
    for d in ("xdg-state", "run", "home"):
        (state_dir / d).mkdir(parents=True, exist_ok=True)
    (state_dir / "run").chmod(0o700)
    env["BROWSER"] = str(browser) if browser else "/bin/false"
    return env


def run_tether_cli(args: list[str], env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess:
    """A one-shot `tether ...` command (auth login/status/logout, status)."""
    proc = subprocess.Popen(
        [str(TETHER_BIN), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        start_new_session=True,
    )
    register_pid(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, 124, out, err + f"\n(killed after {timeout:.0f} s)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


async def run_tether_cli_async(args: list[str], env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess:
    return await anyio.to_thread.run_sync(lambda: run_tether_cli(args, env, timeout))


def _children_of(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.add(int(entry))
    return found


@asynccontextmanager
async def tether_session(
    config: Path, env: dict[str, str], log_path: Path, extra_args: list[str] | None = None,
    read_timeout: float = 60,
) -> AsyncIterator[Any]:
    """`tether --config FILE` over stdio, driven by the official Python SDK's
    ClientSession (initialized). tether's stderr goes to `log_path`."""
    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=str(TETHER_BIN),
        args=["--config", str(config), *(extra_args or [])],
        env=env,
    )
    before = _children_of(os.getpid())
    with open(log_path, "a") as errlog:
        errlog.write(f"---- tether --config {config} {' '.join(extra_args or [])}\n")
        errlog.flush()
        async with stdio_client(params, errlog=errlog) as (read, write):
            for pid in _children_of(os.getpid()) - before:
                register_pid(pid)
            async with ClientSession(
                read, write, read_timeout_seconds=read_timeout,
                client_info=types.Implementation(name="peers-test", version="1"),
            ) as session:
                await session.initialize()
                yield session


async def wait_for_tool(session: Any, name: str, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    names: list[str] = []
    while True:
        result = await session.list_tools()
        names = [t.name for t in result.tools]
        if name in names or time.monotonic() > deadline:
            return names
        await anyio.sleep(0.5)


def tool_text(result: Any) -> str:
    parts = []
    for c in getattr(result, "content", []) or []:
        text = getattr(c, "text", None)
        if text is not None:
            parts.append(text)
    return " ".join(parts)


async def call_once(session: Any, tool: str, args: dict[str, Any], timeout: float = 30) -> tuple[bool, str]:
    """One tools/call: (ok, detail). A JSON-RPC error or an isError result is a failure."""
    try:
        with anyio.fail_after(timeout):
            result = await session.call_tool(tool, args)
    except TimeoutError:
        return False, f"no answer within {timeout:.0f} s"
    except Exception as e:  # noqa: BLE001
        return False, describe(e)
    if getattr(result, "is_error", False) or getattr(result, "isError", False):
        return False, f"isError result: {tool_text(result)[:300]}"
    return True, tool_text(result)[:200]


def grep_log(path: Path, *needles: str, limit: int = 8) -> list[str]:
    out = []
    try:
        for line in path.read_text(errors="replace").splitlines():
            if any(n.lower() in line.lower() for n in needles):
                out.append(line.strip()[:400])
    except OSError:
        pass
    return out[-limit:]


def install_sigterm() -> None:
    """SIGTERM (peers.sh's timeout) unwinds like Ctrl-C so every `finally` kills its children."""
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, handler)
