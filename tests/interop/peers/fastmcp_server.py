"""A FastMCP (PyPI `fastmcp`) server with FastMCP's own built-in authorization server,
InMemoryOAuthProvider (dynamic registration, auto-approving /authorize, refresh
tokens rotated at every refresh, revocation), served by uvicorn at /mcp.

    fastmcp_server.py PORT REQUEST_LOG [--token-ttl SECONDS] [--add-basic-client-id]

--token-ttl: the access tokens' lifetime. InMemoryOAuthProvider takes it from its
  module's DEFAULT_ACCESS_TOKEN_EXPIRY_SECONDS (read at each token it issues); that
  constant is set here, nothing else of the provider is changed.
--add-basic-client-id: opt-in, not the suite's default: the request log wrapper adds
  the client_id of an HTTP Basic header to the /token and /revoke form (FastMCP's
  authenticator reads client_id from the form only), to exercise the checks behind
  that refusal. See request_log.py.

REQUEST_LOG gets one JSON line per HTTP request (request_log.py).
"""

import argparse

import uvicorn
from fastmcp import FastMCP
from fastmcp.server.auth.providers import in_memory
from fastmcp.server.auth.providers.in_memory import InMemoryOAuthProvider
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from request_log import RequestLog

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("request_log")
parser.add_argument("--token-ttl", type=int, default=3600)
args = parser.parse_args()

base = f"http://127.0.0.1:{args.port}"
in_memory.DEFAULT_ACCESS_TOKEN_EXPIRY_SECONDS = args.token_ttl

provider = InMemoryOAuthProvider(
    base_url=base,
    client_registration_options=ClientRegistrationOptions(enabled=True),
    revocation_options=RevocationOptions(enabled=True),
)

mcp = FastMCP("peers-fastmcp", auth=provider)
calls = {"n": 0}


@mcp.tool
def echo(text: str) -> str:
    """Echoes the text back, with a call counter."""
    calls["n"] += 1
    return f"fastmcp echo #{calls['n']}: {text}"


app = mcp.http_app(path="/mcp")
print(f"fastmcp server at {base}/mcp, token ttl {args.token_ttl} s", flush=True)
uvicorn.run(RequestLog(app, args.request_log), host="127.0.0.1", port=args.port,
            log_level="info")
