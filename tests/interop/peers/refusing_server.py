"""A FastMCP (PyPI `fastmcp`) resource server that refuses every token: its
RemoteAuthProvider names the scenario's authorization server (node-oidc-provider,
which issues tokens fine), and its JWTVerifier checks them with that server's JWKS
and issuer but expects another audience, so every token, however fresh, is answered
401 `WWW-Authenticate: Bearer error="invalid_token"` (a misconfigured audience, as
happens in real deployments).

    refusing_server.py PORT ISSUER REQUEST_LOG
"""

import sys

import uvicorn
from fastmcp import FastMCP
from fastmcp.server.auth import RemoteAuthProvider
from fastmcp.server.auth.providers.jwt import JWTVerifier
from request_log import RequestLog

port, issuer, request_log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
base = f"http://127.0.0.1:{port}"

verifier = JWTVerifier(
    jwks_uri=f"{issuer}/jwks",
    issuer=issuer,
    audience="urn:peers:another-resource",
    algorithm="RS256",
    base_url=base,
)
auth = RemoteAuthProvider(token_verifier=verifier, authorization_servers=[issuer], base_url=base, scopes_supported=["mcp"])
mcp = FastMCP("peers-refusing", auth=auth)


@mcp.tool
def echo(text: str) -> str:
    """Never reached: every token is refused."""
    return text


app = mcp.http_app(path="/mcp")
print(f"refusing FastMCP resource at {base}/mcp, tokens from {issuer}", flush=True)
uvicorn.run(RequestLog(app, request_log), host="127.0.0.1", port=port, log_level="info")
