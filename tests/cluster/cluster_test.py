"""Three tether replicas behind a real load balancer (haproxy with leastconn and no
affinity, then nginx with consistent hashing on Mcp-Session-Id), driven by clients of
the official Python SDK: handshake-era (2025-11-25, sessions) and stateless
(2026-07-28) ones, 50 calls a second between them. Checks, for each balancer:

- kill -9 of one replica mid-load: only calls in flight on it fail, each within 1 s
  of the kill; nothing fails after; the handshake-era clients keep their sessions;
- a rolling restart (SIGTERM, wait for the exit, start again, wait until ready; one
  replica at a time) under the same load: zero failed calls;
- forged and changed session ids through the balancer: 404.

Usage: cluster_test.py --tether BIN --mock BIN [--seconds N] [--only haproxy|nginx]
Prints one line per check and a summary; exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPLICAS = 3
RATE = 50  # calls a second, over all clients
CLIENTS = 10  # half handshake-era, half stateless
CALL_MS = 100  # each call takes this long at the backend: calls are in flight
KEY = base64.b64encode(bytes(range(32))).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None) -> int:
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=body)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def wait_until(what: str, ok, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.1)
    raise SystemExit(f"cluster: FAILED: {what} within {seconds} s")


@dataclass
class Replica:
    tether: str
    config: Path
    port: int
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [self.tether, "serve", "--listen", f"127.0.0.1:{self.port}", "--config", str(self.config), "--no-control"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
        wait_until(f"replica :{self.port} ready", lambda: http_status(f"http://127.0.0.1:{self.port}/readyz") == 200)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def terminate_and_wait(self, seconds: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=seconds)


@dataclass
class Outcome:
    started: float
    ended: float
    ok: bool
    kind: str
    error: str = ""


@dataclass
class Load:
    url: str
    stop_at: float
    outcomes: list[Outcome] = field(default_factory=list)
    sessions: dict[int, set[str]] = field(default_factory=dict)
    died: list[str] = field(default_factory=list)

    async def client(self, n: int, legacy: bool, start: float) -> None:
        """One client calling until the end; a client whose session dies (the SDK
        gives up a session on a transport error) counts as a failed call."""
        kind = "2025-11-25" if legacy else "2026-07-28"
        began = time.monotonic()
        try:
            await self.calls(n, legacy, kind, start)
        except BaseException as e:  # noqa: BLE001 - an ExceptionGroup from the SDK's task group
            leaf = e
            while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
                leaf = leaf.exceptions[0]
            error = f"client {n} died: {type(leaf).__name__}: {leaf}"[:300]
            self.outcomes.append(Outcome(began - start, time.monotonic() - start, False, kind, error))
            self.died.append(error)
            print(f"      {error} at {time.monotonic() - start:.2f} s", flush=True)

    async def calls(self, n: int, legacy: bool, kind: str, start: float) -> None:
        period = CLIENTS / RATE
        http = create_mcp_http_client()
        seen = self.sessions.setdefault(n, set()) if legacy else set()

        async def note_session(request) -> None:
            # Every session id the client sends: one, unless it initialized again.
            sid = request.headers.get("mcp-session-id")
            if sid:
                seen.add(sid)

        http.event_hooks = {"request": [note_session], "response": []}
        transport = streamable_http_client(self.url, http_client=http)
        async with http, Client(transport, mode="legacy" if legacy else "auto", read_timeout_seconds=30) as c:
            version = c.session.protocol_version
            if version != kind:
                raise SystemExit(f"cluster: FAILED: client {n} speaks {version!r}, expected {kind}")
            await asyncio.sleep(period * n / CLIENTS)
            while time.monotonic() < self.stop_at:
                began = time.monotonic()
                try:
                    r = await c.call_tool("mock__slow", {"ms": CALL_MS})
                    ok = not r.is_error
                    err = "" if ok else str(r.content)[:200]
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    ok, err = False, f"{type(e).__name__}: {e}"[:300]
                self.outcomes.append(Outcome(began - start, time.monotonic() - start, ok, kind, err))
                await asyncio.sleep(max(0.0, period - (time.monotonic() - began)))

    async def run(self, seconds: float, during) -> float:
        start = time.monotonic()
        self.stop_at = start + seconds
        tasks = [asyncio.create_task(self.client(n, n % 2 == 0, start)) for n in range(CLIENTS)]
        await asyncio.to_thread(during, start)
        await asyncio.gather(*tasks)
        return start


def haproxy_config(port: int, replicas: list[Replica]) -> str:
    servers = "\n".join(f"    server t{i} 127.0.0.1:{r.port}" for i, r in enumerate(replicas))
    return f"""global
    log stderr format raw local0 info
defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    option httpclose
frontend mcp
    bind 127.0.0.1:{port}
    default_backend tether
backend tether
    balance leastconn
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1
    http-check expect status 200
    default-server inter 500ms fall 2 rise 2 check
    option redispatch
    option http-buffer-request
    retries 3
    retry-on conn-failure 503
{servers}
"""


def nginx_config(port: int, replicas: list[Replica], prefix: Path) -> str:
    servers = "\n".join(f"        server 127.0.0.1:{r.port} max_fails=1 fail_timeout=2s;" for r in replicas)
    return f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream tether {{
        hash $http_mcp_session_id consistent;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://tether;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 1h;
            proxy_next_upstream error timeout http_503;
        }}
    }}
}}
"""


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        self.lines.append(("ok    " if ok else "FAIL  ") + what)
        print(self.lines[-1], flush=True)
        if not ok:
            self.failures.append(what)


def summarise(outcomes: list[Outcome]) -> str:
    if not outcomes:
        return "no calls"
    took = sorted((o.ended - o.started) * 1000 for o in outcomes)
    span = max(o.ended for o in outcomes) - min(o.started for o in outcomes)
    p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
    return (f"{len(outcomes)} calls in {span:.0f} s ({len(outcomes) / span:.0f}/s), "
            f"p50 {statistics.median(took):.0f} ms, p99 {p99:.0f} ms")


def sealed_id_checks(url: str, report: Report, balancer: str) -> None:
    """A forged and a changed id through the balancer: 404."""
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "check", "version": "1"}}}).encode()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    req = urllib.request.Request(url, data=init, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        sid = r.headers["mcp-session-id"]
    call = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()
    with_id = lambda s: {**headers, "Mcp-Session-Id": s, "MCP-Protocol-Version": "2025-11-25"}  # noqa: E731
    statuses = [http_status(url, "POST", with_id(sid), call) for _ in range(REPLICAS * 2)]
    report.check(statuses == [200] * len(statuses), f"{balancer}: a session id works on every replica: {statuses}")
    changed = sid[:-4] + ("AAAA" if not sid.endswith("AAAA") else "BBBB")
    forged = base64.urlsafe_b64encode(os.urandom(90)).decode().rstrip("=")
    got = [http_status(url, "POST", with_id(s), call) for s in (changed, forged, "0" * 32)]
    report.check(got == [404, 404, 404], f"{balancer}: changed, forged and made-up session ids get 404: {got}")


def stateless_post(port: int, params: dict, rid: int) -> tuple[dict, float]:
    """One stateless 2026-07-28 tools/call straight to a replica: its answer and how long it took."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {**params, "_meta": meta}}).encode()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": params["name"]}
    started = time.monotonic()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        text = e.read().decode()
    took = time.monotonic() - started
    if text.startswith("event:") or text.startswith("id:") or "\ndata:" in text:
        text = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()][-1]
    return json.loads(text), took


def continuation_checks(replicas: list[Replica], report: Report) -> None:
    """A translated input_required (mock's `sample` asks its client to sample) continued
    on the replica that issued it completes; on another replica, or changed, it is
    refused at once with a message that says why."""
    call = {"name": "mock__sample", "arguments": {"prompt": "hi"}}
    answer, _ = stateless_post(replicas[0].port, call, 1)
    result = answer.get("result", {})
    ok = result.get("resultType") == "input_required" and "requestState" in result
    report.check(ok, f"a stateless call of a sampling tool is answered input_required: {str(answer)[:160]}")
    if not ok:
        return
    state = result["requestState"]
    (key,) = result["inputRequests"].keys()
    responses = {key: {"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}}
    retry = {**call, "requestState": state, "inputResponses": responses}
    elsewhere, took = stateless_post(replicas[1].port, retry, 2)
    message = elsewhere.get("error", {}).get("message", "")
    report.check("another tether replica" in message and took < 1.0,
                 f"continued on another replica: refused in {took * 1000:.0f} ms ({message[:90]}...)")
    changed = {**retry, "requestState": state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")}
    tampered, took = stateless_post(replicas[0].port, changed, 3)
    report.check("not one tether issued" in tampered.get("error", {}).get("message", "") and took < 1.0,
                 f"a changed requestState is refused in {took * 1000:.0f} ms: {str(tampered)[:120]}")
    here, took = stateless_post(replicas[0].port, retry, 4)
    text = json.dumps(here.get("result", {}))
    report.check("sampled" in text, f"continued on its own replica: completes in {took * 1000:.0f} ms: {text[:120]}")


def scenario(name: str, balancer: str, args, workdir: Path, report: Report) -> None:
    config = workdir / "tether.json"
    config.write_text(json.dumps({
        "mcpServers": {"mock": {"command": args.mock, "args": []}},
        "tether": {"cluster": {"session_keys": f"1:{KEY}", "drain_delay_ms": 2000, "drain_timeout_ms": 10000}},
    }))
    replicas = [Replica(args.tether, config, free_port(), workdir / f"replica{i}.log") for i in range(REPLICAS)]
    front = free_port()
    lb = None
    try:
        for r in replicas:
            r.start()
        if balancer == "haproxy":
            cfg = workdir / "haproxy.cfg"
            cfg.write_text(haproxy_config(front, replicas))
            lb = subprocess.Popen(["haproxy", "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                                  stderr=open(workdir / "haproxy.log", "ab"))
        else:
            prefix = workdir / "nginx"
            prefix.mkdir(exist_ok=True)
            cfg = prefix / "nginx.conf"
            cfg.write_text(nginx_config(front, replicas, prefix))
            lb = subprocess.Popen(["nginx", "-c", str(cfg), "-p", str(prefix), "-g", "daemon off;"],
                                  stdout=subprocess.DEVNULL, stderr=open(workdir / "nginx.log", "ab"))
        url = f"http://127.0.0.1:{front}/mcp"
        wait_until(f"{balancer} up", lambda: http_status(f"http://127.0.0.1:{front}/readyz") == 200)
        time.sleep(1.5)  # the balancer's first health checks
        if name == "kill":
            sealed_id_checks(url, report, balancer)
            if balancer == "haproxy":
                continuation_checks(replicas, report)
        load = Load(url, 0)
        events: dict[str, float] = {}

        def during(start: float) -> None:
            if name == "kill":
                time.sleep(max(0.0, start + args.seconds / 3 - time.monotonic()))
                events["kill"] = time.monotonic() - start
                replicas[1].kill()
            else:
                time.sleep(max(0.0, start + args.seconds / 6 - time.monotonic()))
                for i, r in enumerate(replicas):
                    t = time.monotonic() - start
                    code = r.terminate_and_wait()
                    events[f"replica {i} drained in"] = time.monotonic() - start - t
                    events[f"replica {i} exit code"] = code
                    r.start()
                    time.sleep(1.5)  # rise 2 at 500 ms, and nginx's fail_timeout

        asyncio.run(load.run(args.seconds, during))
        failed = [o for o in load.outcomes if not o.ok]
        what = f"{balancer} {name}"
        report.lines.append(f"      {what}: {summarise(load.outcomes)}; events {events}")
        print(report.lines[-1], flush=True)
        if name == "kill":
            kill = events["kill"]
            late = [o for o in failed if o.started >= kill or o.ended > kill + 1.0]
            shown = [(round(o.started, 2), round(o.ended - o.started, 3), o.kind, o.error) for o in failed[:5]]
            report.check(not late, f"{what}: {len(failed)} calls failed, all in flight at the kill and answered "
                                   f"within 1 s of it ({shown}); late: {[(o.started, o.error) for o in late[:3]]}")
            after = [o for o in load.outcomes if o.started >= kill + 1.0]
            report.check(len(after) > 0 and all(o.ok for o in after), f"{what}: {len(after)} calls after, none failed")
        else:
            exits = [v for k, v in events.items() if k.endswith("exit code")]
            report.check(exits == [0] * REPLICAS, f"{what}: every replica drained and exited 0: {exits}")
            shown = [(round(o.started, 2), o.kind, o.error) for o in failed[:5]]
            report.check(not failed, f"{what}: zero failed calls ({len(failed)}: {shown})")
        report.check(not load.died, f"{what}: every client's session lived to the end ({load.died})")
        changed = {n: ids for n, ids in load.sessions.items() if len(ids) != 1}
        report.check(len(load.sessions) == CLIENTS // 2 and not changed,
                     f"{what}: every 2025-11-25 client kept its one session id ({len(load.sessions)} seen; changed: {changed})")
    finally:
        if lb:
            lb.terminate()
            lb.wait()
        for r in replicas:
            r.kill()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tether", required=True)
    parser.add_argument("--mock", required=True)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--only", choices=["haproxy", "nginx"])
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    report = Report()
    workdir = Path(tempfile.mkdtemp(prefix="tether-cluster-"))
    try:
        for balancer in ["haproxy", "nginx"]:
            if args.only and balancer != args.only:
                continue
            for name in ["kill", "rolling"]:
                started = time.monotonic()
                scenario(name, balancer, args, workdir, report)
                print(f"      ({balancer} {name} took {time.monotonic() - started:.0f} s)", flush=True)
    finally:
        if report.failures or args.keep:
            print(f"cluster: logs kept in {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if report.failures:
        print(f"cluster: FAILED: {len(report.failures)} check(s)", flush=True)
        return 1
    print("cluster: all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
