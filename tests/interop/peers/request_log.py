"""An ASGI wrapper for the peers' Python servers: one JSON line per HTTP request in a
log file (method, path, status; for the OAuth endpoints the grant_type, whether
client_id / client_secret came in the form, the Authorization scheme, never a value,
and the `error` of a refusal; for refusals the WWW-Authenticate header; for /token
answers the token_type and whether a refresh token came). Tokens and secrets are
never written.
"""

import json
import time
from urllib.parse import parse_qs

OAUTH_PATHS = {"/token", "/register", "/revoke", "/authorize"}


class RequestLog:
    """ASGI wrapper: records each request (see the module's doc); the app sees the
    request unchanged (the body is read here and replayed)."""

    def __init__(self, inner, path):
        self.inner = inner
        self.path = path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        path = scope["path"]
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in scope["headers"]}
        entry = {"at": time.time(), "method": scope["method"], "path": path}
        auth = headers.get("authorization", "")
        entry["auth"] = auth.split(" ", 1)[0] if auth else None
        if "dpop" in headers:
            entry["dpop_proof"] = True
        replay = receive
        if path in OAUTH_PATHS and scope["method"] == "POST":
            chunks, more = [], True
            while more:
                message = await receive()
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if "json" in headers.get("content-type", ""):
                try:
                    doc = json.loads(body or b"{}")
                    entry["registration"] = {
                        k: doc.get(k) for k in ("token_endpoint_auth_method", "grant_types", "redirect_uris", "scope")
                    }
                except ValueError:
                    pass
            else:
                form = parse_qs(body.decode("utf-8", "replace"))
                entry["grant_type"] = (form.get("grant_type") or [None])[0]
                entry["form_client_id"] = "client_id" in form
                entry["form_client_secret"] = "client_secret" in form
                entry["form_resource"] = (form.get("resource") or [None])[0]
                entry["token_type_hint"] = (form.get("token_type_hint") or [None])[0]
            sent = {"done": False}

            async def replay():
                if not sent["done"]:
                    sent["done"] = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

        status = {}
        body_out = []

        async def spy(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                for k, v in message.get("headers", []):
                    if k.decode().lower() == "www-authenticate":
                        status["www"] = v.decode("latin-1")[:300]
                    if k.decode().lower() == "location" and path == "/authorize":
                        status["location"] = v.decode("latin-1").split("?", 1)[0]
            elif message["type"] == "http.response.body" and path in OAUTH_PATHS:
                if sum(len(b) for b in body_out) < 2000:
                    body_out.append(message.get("body", b""))
            await send(message)

        try:
            await self.inner(scope, replay, spy)
        finally:
            entry["status"] = status.get("code")
            if "www" in status:
                entry["www_authenticate"] = status["www"]
            if "location" in status:
                entry["location"] = status["location"]
            if body_out and (status.get("code") or 0) >= 400:
                try:
                    doc = json.loads(b"".join(body_out))
                    entry["error"] = doc.get("error")
                    entry["error_description"] = (doc.get("error_description") or "")[:200]
                except ValueError:
                    entry["error_body"] = b"".join(body_out)[:200].decode("utf-8", "replace")
            if path == "/token" and (status.get("code") or 0) == 200:
                try:
                    doc = json.loads(b"".join(body_out))
                    entry["token_type"] = doc.get("token_type")
                    entry["expires_in"] = doc.get("expires_in")
                    entry["refresh_token_issued"] = bool(doc.get("refresh_token"))
                except ValueError:
                    pass
            with open(self.path, "a") as f:
                f.write(json.dumps(entry) + "\n")


