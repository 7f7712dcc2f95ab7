#!/usr/bin/env python3
"""The conformance suite's client under test: tether, driven over stdio.

`conformance client --command "python3 client_driver.py"` runs this once per
scenario with the scenario server's URL as the last argument. It writes a tether
configuration with that URL as the only (unprefixed) remote backend, the wire
revision the scenario speaks (MCP_CONFORMANCE_PROTOCOL_VERSION) as the backend's
era, and the OAuth settings a user would write for the scenario (pre-registered
client, client credentials, the Client ID Metadata Document URL) from
MCP_CONFORMANCE_CONTEXT; starts `tether serve` on stdio with its own state
directory and a `$BROWSER` that fetches the login URL and follows the redirect
to tether's loopback callback (the suite's authorization servers approve
without a person); then acts as an MCP client of tether: initialize, wait for
the backend's tools, call what the scenario wants called, answer tether's
elicitation requests, and shut tether down with every pipe closed.

Environment: TETHER_BIN (the tether binary; default target/debug/tether),
CONFORMANCE_DRIVER_LOG=DIR (keep tether's log there, one file per scenario).
Only the standard library is used.
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# The Client ID Metadata Document URL the suite's basic-cimd scenario expects.
CIMD_URL = "https://conformance-test.local/client-metadata.json"
# The whole scenario must end well inside the suite's 30 s.
TOOLS_WAIT_S = 20.0
CALL_TIMEOUT_S = 12.0

BROWSER_SCRIPT = """#!/usr/bin/env python3
# Plays the person at the browser: fetches the login URL and follows the
# authorization server's redirect to tether's loopback callback.
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=10).read()
except Exception as e:
    print(f"browser: {e}", file=sys.stderr)
"""


def log(msg):
    print(f"driver: {msg}", file=sys.stderr, flush=True)


def oauth_settings(scenario, context):
    """What a user would put in the backend's `oauth` section for this server."""
    settings = {"client_metadata_url": CIMD_URL}
    if "client_id" in context:
        settings["client_id"] = context["client_id"]
    if "client_secret" in context:
        settings["client_secret"] = context["client_secret"]
    if "issuer" in context:
        settings["issuer"] = context["issuer"]
    if scenario.startswith("auth/client-credentials"):
        settings["grant"] = "client_credentials"
    if "idp_id_token" in context:
        # Enterprise-managed: the person's ID token from the organisation's IdP.
        settings["grant"] = "enterprise_managed"
        settings["id_token"] = context["idp_id_token"]
        settings["idp_client_id"] = context["idp_client_id"]
        settings["idp_token_endpoint"] = context["idp_token_endpoint"]
    if "valid_jwt" in context:
        # Workload identity: the JWT the platform issued this workload.
        settings["grant"] = "jwt_bearer"
        settings["assertion"] = context["valid_jwt"]
    if "private_key_pem" in context:
        settings["private_key"] = context["private_key_pem"]
    if "signing_algorithm" in context:
        settings["signing_alg"] = context["signing_algorithm"]
    return settings


def tether_config(url, scenario, version, context):
    era = "stateless" if version == "2026-07-28" else "handshake"
    entry = {
        "url": url,
        "oauth": oauth_settings(scenario, context),
        "tether": {"prefixed": False, "era": era},
    }
    return {"tether": {"list_changed_debounce_ms": 0}, "mcpServers": {"conformance": entry}}


class Tether:
    """A `tether serve` child on stdio and the JSON-RPC conversation with it."""

    def __init__(self, argv, env, log_path):
        self.log_file = open(log_path, "wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log_file, env=env
        )
        self.next_id = 0
        self.responses = {}
        self.cond = threading.Condition()
        self.notifications = queue.Queue()
        self.handlers = {}
        self.write_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                log(f"not JSON from tether: {line[:200]!r}")
                continue
            if "method" in msg and "id" in msg:
                threading.Thread(target=self._answer, args=(msg,), daemon=True).start()
            elif "method" in msg:
                self.notifications.put(msg)
            else:
                with self.cond:
                    self.responses[msg.get("id")] = msg
                    self.cond.notify_all()
        with self.cond:
            self.responses["closed"] = True
            self.cond.notify_all()

    def _answer(self, msg):
        handler = self.handlers.get(msg["method"])
        if handler is None:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "not supported"}}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": handler(msg.get("params") or {})}
        self.send(reply)

    def send(self, msg):
        data = (json.dumps(msg) + "\n").encode()
        with self.write_lock:
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def request(self, method, params=None, timeout=CALL_TIMEOUT_S):
        self.next_id += 1
        rid = self.next_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        deadline = time.monotonic() + timeout
        with self.cond:
            while rid not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0 or "closed" in self.responses:
                    return {"error": {"message": f"no answer to {method}"}}
                self.cond.wait(left)
            return self.responses.pop(rid)

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def elicitation_defaults(params):
    """Accept an elicitation as a minimal client does: the fields the schema gives
    a default for are left out (tether fills them in, SEP-1034); booleans without
    a default are answered true."""
    schema = params.get("requestedSchema") or {}
    content = {}
    for name, prop in (schema.get("properties") or {}).items():
        if "default" not in prop and prop.get("type") == "boolean":
            content[name] = True
    return {"action": "accept", "content": content}


def wait_for_tools(tether, wanted, started):
    """tools/list until the backend's tools are there (tether connects and logs in
    in the background) or the wait is over; returns the last list."""
    tools = []
    while True:
        answer = tether.request("tools/list", {})
        tools = (answer.get("result") or {}).get("tools") or []
        names = {t["name"] for t in tools}
        if tools and (wanted is None or wanted <= names):
            return tools
        if time.monotonic() - started > TOOLS_WAIT_S:
            log(f"tools still missing after {TOOLS_WAIT_S} s: have {sorted(names)}")
            return tools
        try:
            tether.notifications.get(timeout=0.5)
        except queue.Empty:
            pass


def call(tether, name, arguments):
    answer = tether.request("tools/call", {"name": name, "arguments": arguments})
    result = answer.get("result")
    if result is None or result.get("isError"):
        log(f"tools/call {name}: {json.dumps(answer)[:300]}")
    return answer


def exercise(tether, scenario, context, started):
    """What the scenario needs its client to do."""
    if scenario == "tools_call":
        wait_for_tools(tether, {"add_numbers"}, started)
        call(tether, "add_numbers", {"a": 2, "b": 3})
    elif scenario == "elicitation-sep1034-client-defaults":
        wait_for_tools(tether, {"test_client_elicitation_defaults"}, started)
        call(tether, "test_client_elicitation_defaults", {})
    elif scenario == "sse-retry":
        wait_for_tools(tether, {"test_reconnection"}, started)
        call(tether, "test_reconnection", {})
    elif scenario == "sep-2322-client-request-state":
        names = ["test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_unrelated", "test_mrtr_no_result_type"]
        wait_for_tools(tether, set(names), started)
        for name in names:
            call(tether, name, {})
    elif scenario == "http-standard-headers":
        tools = wait_for_tools(tether, {"test_headers"}, started)
        for tool in tools:
            call(tether, tool["name"], {})
        resources = (tether.request("resources/list", {}).get("result") or {}).get("resources") or []
        for resource in resources:
            tether.request("resources/read", {"uri": resource["uri"]})
        prompts = (tether.request("prompts/list", {}).get("result") or {}).get("prompts") or []
        for prompt in prompts:
            tether.request("prompts/get", {"name": prompt["name"], "arguments": {}})
    elif scenario == "http-custom-headers":
        calls = context.get("toolCalls") or []
        wait_for_tools(tether, {c["name"] for c in calls}, started)
        for c in calls:
            call(tether, c["name"], c.get("arguments") or {})
    elif scenario == "http-invalid-tool-headers":
        tools = wait_for_tools(tether, {"valid_tool"}, started)
        for tool in tools:
            call(tether, tool["name"], {"region": "us-west1"})
    elif scenario == "json-schema-2020-12-preservation":
        tools = wait_for_tools(tether, {"json_schema_2020_12_tool", "json_schema_echo"}, started)
        focal = next((t for t in tools if t["name"] == "json_schema_2020_12_tool"), None)
        if focal is not None:
            call(tether, "json_schema_echo", {"schema": focal["inputSchema"]})
    elif scenario.startswith("auth/"):
        tools = wait_for_tools(tether, {"test-tool"}, started)
        if any(t["name"] == "test-tool" for t in tools):
            call(tether, "test-tool", {})
    else:
        # initialize, request-metadata, json-schema-ref-no-deref and anything new:
        # connecting and listing is the whole job.
        wait_for_tools(tether, None, started)


def main():
    started = time.monotonic()
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    here = os.path.dirname(os.path.abspath(__file__))
    tether_bin = os.environ.get("TETHER_BIN") or os.path.join(here, "..", "..", "target", "debug", "tether")

    work = tempfile.mkdtemp(prefix="tether-conformance-client.")
    try:
        config_path = os.path.join(work, "config.json")
        with open(config_path, "w") as f:
            json.dump(tether_config(url, scenario, version, context), f, indent=2)
        browser = os.path.join(work, "browser.py")
        with open(browser, "w") as f:
            f.write(BROWSER_SCRIPT)
        os.chmod(browser, 0o755)
        env = dict(os.environ)
        env.update({"BROWSER": browser, "TETHER_STATE_DIR": os.path.join(work, "state")})
        log_path = os.path.join(work, "tether.log")
        tether = Tether(
            [tether_bin, "serve", "--config", config_path, "--log-level", "debug"], env, log_path
        )
        tether.handlers["elicitation/create"] = elicitation_defaults
        tether.handlers["roots/list"] = lambda params: {"roots": []}
        tether.handlers["ping"] = lambda params: {}
        try:
            init = tether.request(
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {"form": {}, "url": {}}, "roots": {}},
                    "clientInfo": {"name": "tether-conformance-driver", "version": "1.0.0"},
                },
            )
            if "result" not in init:
                log(f"initialize failed: {init}")
            else:
                tether.notify("notifications/initialized")
                exercise(tether, scenario, context, started)
        finally:
            tether.close()
        keep = os.environ.get("CONFORMANCE_DRIVER_LOG")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(log_path, os.path.join(keep, scenario.replace("/", "_") + ".log"))
        log(f"done in {time.monotonic() - started:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
