"""A small OAuth 2.1 authorization server for tests: the AS that tests/interop/oauth_test.py
puts in front of `tether` as a protected resource. Built on the official MCP Python SDK's own
authorization-server routes (`mcp.server.auth.routes.create_auth_routes`: RFC 8414 metadata,
/authorize, /token, RFC 7591 /register, RFC 7009 /revoke) with a provider that:

- auto-approves: /authorize redirects straight back to the redirect_uri with a code (and the
  RFC 9207 `iss`), no consent screen, granting exactly the scopes requested;
- registers any client dynamically, and takes pre-registered confidential clients for token
  introspection (`--introspection-client ID:SECRET`, repeatable);
- requires PKCE S256 (the SDK's handlers check it), issues rotating refresh tokens;
- mints access tokens as RS256 JWTs (RFC 9068 `typ: at+jwt`, header `kid`) with the claims
  iss (the issuer exactly as published in the metadata), sub, aud (the RFC 8707 `resource`
  the client sent at /authorize; absent when it sent none), scope (space-separated), client_id,
  iat, exp (+1 h) and jti.

Besides the SDK's routes it serves:
  GET  /jwks                     the signing key as a JWK set (`jwks_uri` in the metadata)
  POST /introspect               RFC 7662, client_secret_basic (or client_secret_post):
                                 {active, scope, aud, iss, sub, exp, iat, client_id, token_type}
                                 for a token this AS signed, unexpired, with its issuer;
                                 {active: false} for anything else
  GET  /.well-known/openid-configuration   the same metadata document
and, for tests only:
  POST /test/mint   JSON {aud, scope, exp_offset, sign_with_other_key, iss, sub, client_id,
                    alg, omit} -> {"access_token": ...}: an arbitrary token for the negative
                    cases. Defaults: aud absent, scope "mcp", exp_offset 3600 (seconds from
                    now; negative = already expired), the real key, this issuer, sub
                    "test-user", client_id "test-mint". `sign_with_other_key` signs with a
                    second RSA key under the same `kid`; `alg: "none"` makes an unsigned
                    token; `omit` is a list of claim names to leave out.
  GET  /test/stats  counters and an event log ({"counts": {...}, "events": [...]}) so a test
                    can tell that a resource server fetched the JWKS or introspected.

The issuer is `http://127.0.0.1:<port>` with no trailing slash, everywhere: the metadata's
`issuer`, every token's `iss`, the RFC 9207 `iss` parameter, and the `READY` line.

    python oauth_server.py --port P [--introspection-client tether:secret] [--scopes mcp time]

`--port 0` picks a free port. Once listening it prints `READY <issuer>` on stdout, then serves
until killed (uvicorn's request log goes to stderr). Needs the venv that tests/interop/run.sh
installs: mcp (which brings starlette, uvicorn, pydantic), PyJWT and cryptography (both
dependencies of mcp 2.3.0).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import hmac
import json
import secrets
import socket
import threading
import time
import uuid
from typing import Any
from urllib.parse import unquote

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

ACCESS_TOKEN_SECONDS = 3600
CODE_SECONDS = 300
KID = "tether-test-key-1"
SUBJECT = "test-user"
METADATA_PATH = "/.well-known/oauth-authorization-server"

# Keep an issuer without a path as written (no trailing slash), as the SDK's metadata models do.
_ISSUER_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class GrantingClient(OAuthClientInformationFull):
    """A registered client as the provider hands it to the SDK's handlers: auto-approval grants
    whatever scope it asks for at /authorize, registered or not."""

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        if requested_scope is None:
            return None
        return requested_scope.split()


class Keys:
    """The signing key (published in /jwks) and a second key for forged tokens, both RSA 2048
    under the same kid."""

    def __init__(self) -> None:
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public = self.private.public_key()

    def jwks(self) -> dict[str, Any]:
        jwk = RSAAlgorithm.to_jwk(self.public, as_dict=True)
        jwk.pop("key_ops", None)  # RFC 7517 §4.3: `use` or `key_ops`, not both
        jwk.update({"kid": KID, "alg": "RS256", "use": "sig"})
        return {"keys": [jwk]}


class Provider:
    """`mcp.server.auth.provider.OAuthAuthorizationServerProvider`, in memory, auto-approving."""

    def __init__(self, issuer: str, keys: Keys) -> None:
        self.issuer = issuer
        self.keys = keys
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []

    def record(self, kind: str, **details: Any) -> None:
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.events.append({"event": kind, "time": time.time(), **details})
            del self.events[:-500]

    # -- tokens ----------------------------------------------------------------------
    def mint(
        self,
        *,
        scopes: list[str] | str | None,
        aud: str | list[str] | None,
        client_id: str,
        sub: str = SUBJECT,
        exp_offset: int = ACCESS_TOKEN_SECONDS,
        iss: str | None = None,
        other_key: bool = False,
        alg: str = "RS256",
        omit: list[str] | None = None,
    ) -> str:
        now = int(time.time())
        scope = scopes if isinstance(scopes, str) or scopes is None else " ".join(scopes)
        claims: dict[str, Any] = {
            "iss": self.issuer if iss is None else iss,
            "sub": sub,
            "aud": aud,
            "scope": scope,
            "client_id": client_id,
            "iat": now,
            "exp": now + exp_offset,
            "jti": uuid.uuid4().hex,
        }
        for name in omit or []:
            claims.pop(name, None)
        claims = {k: v for k, v in claims.items() if v is not None}
        if alg == "none":
            header = {"alg": "none", "typ": "at+jwt", "kid": KID}
            parts = [json.dumps(header).encode(), json.dumps(claims).encode()]
            return ".".join(_b64url(p) for p in parts) + "."
        if alg != "RS256":
            raise ValueError(f"unsupported alg {alg!r} (RS256 or none)")
        key = self.keys.other if other_key else self.keys.private
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID, "typ": "at+jwt"})

    def verify(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this AS signed with its own key and issuer, unexpired; else None.
        The audience is not checked here: that is the resource server's job."""
        try:
            return jwt.decode(
                token,
                self.keys.public,
                algorithms=["RS256"],
                issuer=self.issuer,
                options={"verify_aud": False, "require": ["exp", "iss"]},
            )
        except jwt.PyJWTError:
            return None

    def _issue(
        self, client: OAuthClientInformationFull, scopes: list[str], resource: str | None, subject: str | None
    ) -> OAuthToken:
        access = self.mint(scopes=scopes, aud=resource, client_id=client.client_id, sub=subject or SUBJECT)
        refresh = secrets.token_urlsafe(32)
        with self.lock:
            self.refresh_tokens[refresh] = RefreshToken(
                token=refresh,
                client_id=client.client_id,
                scopes=scopes,
                resource=resource,
                subject=subject or SUBJECT,
            )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=ACCESS_TOKEN_SECONDS,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    # -- the provider protocol ---------------------------------------------------------
    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        client = self.clients.get(client_id)
        return None if client is None else GrantingClient.model_validate(client.model_dump())

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        self.record("register", client_id=client_info.client_id, scope=client_info.scope)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        scopes = params.scopes if params.scopes is not None else (client.scope or "").split()
        code = secrets.token_urlsafe(32)
        with self.lock:
            self.codes[code] = AuthorizationCode(
                code=code,
                scopes=scopes,
                expires_at=time.time() + CODE_SECONDS,
                client_id=client.client_id,
                code_challenge=params.code_challenge,
                redirect_uri=params.redirect_uri,
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
                resource=params.resource,
                subject=SUBJECT,
            )
        self.record("authorize", client_id=client.client_id, scope=" ".join(scopes), resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=self.issuer)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        with self.lock:
            if self.codes.pop(authorization_code.code, None) is None:
                raise TokenError(error="invalid_grant", error_description="authorization code already used")
        token = self._issue(client, authorization_code.scopes, authorization_code.resource, authorization_code.subject)
        self.record(
            "token",
            grant="authorization_code",
            client_id=client.client_id,
            scope=token.scope,
            resource=authorization_code.resource,
        )
        return token

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        with self.lock:  # rotate: the old refresh token is spent
            if self.refresh_tokens.pop(refresh_token.token, None) is None:
                raise TokenError(error="invalid_grant", error_description="refresh token already used")
        token = self._issue(client, scopes, refresh_token.resource, refresh_token.subject)
        self.record(
            "token",
            grant="refresh_token",
            client_id=client.client_id,
            scope=token.scope,
            resource=refresh_token.resource,
        )
        return token

    async def load_access_token(self, token: str) -> AccessToken | None:
        claims = self.verify(token)
        if claims is None:
            return None
        aud = claims.get("aud")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=aud if isinstance(aud, str) else None,
            subject=claims.get("sub"),
            claims=claims,
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        if isinstance(token, RefreshToken):
            with self.lock:
                self.refresh_tokens.pop(token.token, None)

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull, params: Any) -> OAuthToken:
        raise TokenError(error="unsupported_grant_type", error_description="not supported by this test server")


# ---- the extra endpoints ---------------------------------------------------------------------


def _client_credentials(request: Request, form: Any) -> tuple[str | None, str | None]:
    """client_secret_basic (RFC 6749 §2.3.1: both parts form-urlencoded), else client_secret_post."""
    header = request.headers.get("Authorization", "")
    if header[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None, None
        if ":" not in decoded:
            return None, None
        client_id, secret = decoded.split(":", 1)
        return unquote(client_id.replace("+", " ")), unquote(secret.replace("+", " "))
    client_id, secret = form.get("client_id"), form.get("client_secret")
    return (client_id if isinstance(client_id, str) else None), (secret if isinstance(secret, str) else None)


def build_app(provider: Provider, issuer: str, scopes_supported: list[str] | None) -> Starlette:
    issuer_url = _ISSUER_URL.validate_python(issuer)
    registration = ClientRegistrationOptions(enabled=True, valid_scopes=scopes_supported)
    revocation = RevocationOptions(enabled=True)
    routes = [
        r for r in create_auth_routes(provider, issuer_url, None, registration, revocation) if r.path != METADATA_PATH
    ]

    metadata = build_metadata(issuer_url, None, registration, revocation).model_dump(mode="json", exclude_none=True)
    metadata.update(
        {
            "issuer": issuer,  # exactly the READY line's, whatever the URL model would render
            "jwks_uri": f"{issuer}/jwks",
            "introspection_endpoint": f"{issuer}/introspect",
            "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "authorization_response_iss_parameter_supported": True,
        }
    )
    if metadata["issuer"] != str(_ISSUER_URL.validate_python(metadata["issuer"])):
        raise SystemExit(f"issuer {issuer!r} does not round-trip through the SDK's URL model")

    async def metadata_handler(request: Request) -> Response:
        provider.record("metadata", path=request.url.path)
        return JSONResponse(metadata, headers={"Cache-Control": "no-store"})

    async def jwks_handler(request: Request) -> Response:
        provider.record("jwks")
        return JSONResponse(provider.keys.jwks(), headers={"Cache-Control": "no-store"})

    async def introspect_handler(request: Request) -> Response:
        form = await request.form()
        client_id, secret = _client_credentials(request, form)
        client = provider.clients.get(client_id or "")
        if (
            client is None
            or not client.client_secret
            or secret is None
            or not hmac.compare_digest(client.client_secret.encode(), secret.encode())
        ):
            provider.record("introspect_unauthorized", client_id=client_id)
            return JSONResponse(
                {"error": "invalid_client", "error_description": "client authentication failed"},
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="introspection"', "Cache-Control": "no-store"},
            )
        token = form.get("token")
        if not isinstance(token, str) or not token:
            return JSONResponse({"error": "invalid_request", "error_description": "token is required"}, status_code=400)
        claims = provider.verify(token)
        provider.record("introspect", client_id=client_id, active=claims is not None)
        if claims is None:
            return JSONResponse({"active": False}, headers={"Cache-Control": "no-store"})
        answer = {"active": True, "token_type": "Bearer"}
        for name in ("scope", "aud", "iss", "sub", "exp", "iat", "client_id"):
            if name in claims:
                answer[name] = claims[name]
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})

    async def mint_handler(request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
            token = provider.mint(
                scopes=body.get("scope", "mcp"),
                aud=body.get("aud"),
                client_id=body.get("client_id", "test-mint"),
                sub=body.get("sub", SUBJECT),
                exp_offset=int(body.get("exp_offset", ACCESS_TOKEN_SECONDS)),
                iss=body.get("iss"),
                other_key=bool(body.get("sign_with_other_key", False)),
                alg=body.get("alg", "RS256"),
                omit=body.get("omit"),
            )
        except (ValueError, TypeError) as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        provider.record("mint")
        return JSONResponse({"access_token": token, "token_type": "Bearer"})

    async def stats_handler(request: Request) -> Response:
        with provider.lock:
            return JSONResponse({"counts": dict(provider.counts), "events": list(provider.events)})

    routes += [
        Route(METADATA_PATH, metadata_handler, methods=["GET"]),
        Route("/.well-known/openid-configuration", metadata_handler, methods=["GET"]),
        Route("/jwks", jwks_handler, methods=["GET"]),
        Route("/introspect", introspect_handler, methods=["POST"]),
        Route("/test/mint", mint_handler, methods=["POST"]),
        Route("/test/stats", stats_handler, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument(
        "--introspection-client",
        action="append",
        default=[],
        metavar="ID:SECRET",
        help="a pre-registered confidential client allowed to introspect (repeatable)",
    )
    parser.add_argument(
        "--scopes",
        nargs="*",
        default=None,
        help="scopes_supported in the metadata, and the only scopes registration accepts (default: any)",
    )
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    issuer = f"http://127.0.0.1:{sock.getsockname()[1]}"

    provider = Provider(issuer, Keys())
    for spec in args.introspection_client:
        client_id, sep, secret = spec.partition(":")
        if not sep or not client_id or not secret:
            parser.error(f"--introspection-client {spec!r}: expected ID:SECRET")
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            token_endpoint_auth_method="client_secret_basic",
            grant_types=["client_credentials"],
        )
    app = build_app(provider, issuer, args.scopes)

    # uvicorn logs requests to stdout by default: keep stdout for the READY line alone.
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config = uvicorn.Config(app, log_level="info", access_log=True, lifespan="off", log_config=log_config)
    server = uvicorn.Server(config)
    # The socket already listens, so a client connecting after this line is queued, not refused.
    print(f"READY {issuer}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
