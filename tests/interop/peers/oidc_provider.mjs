// node-oidc-provider (npm `oidc-provider`) as the authorization server of the oidc
// scenario: DPoP on (features.dPoP, ES256 offered), open dynamic registration,
// resource indicators (the access token for a resource is a JWT signed RS256 with
// `aud` = the resource, scope `mcp`), refresh tokens (rotated at every use),
// revocation and introspection. No person: the interaction URL finishes the login
// (account "peers-user") and the consent (every requested scope) at once and
// redirects back.
//
//   node oidc_provider.mjs PORT REQUEST_LOG [--at-ttl SECONDS] [--dpop-nonce] [--no-dpop]
//
// --no-dpop turns features.dPoP off (the refusing scenario wants bearer tokens).
//
// Run from a copy beside the peers' node_modules (peers_test.py copies it there).
// REQUEST_LOG gets one JSON line per request (method, path, status, grant_type,
// whether a DPoP proof came, the token_type issued, the `error` of a refusal) and
// one per grant.error / server_error event. Tokens are never written.
import http from "node:http";
import fs from "node:fs";
import crypto from "node:crypto";
import Provider, { errors } from "oidc-provider";
import { generateKeyPair, exportJWK } from "jose";

const port = Number(process.argv[2]);
const logPath = process.argv[3];
const argv = process.argv.slice(4);
const atTtl = argv.includes("--at-ttl") ? Number(argv[argv.indexOf("--at-ttl") + 1]) : 60;
const dpopNonce = argv.includes("--dpop-nonce");
const dpop = !argv.includes("--no-dpop");
const issuer = `http://127.0.0.1:${port}`;

function record(entry) {
  fs.appendFileSync(logPath, JSON.stringify({ at: Date.now() / 1000, ...entry }) + "\n");
}

const { privateKey } = await generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: "peers-rs256", alg: "RS256", use: "sig" };

const configuration = {
  jwks: { keys: [jwk] },
  findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  scopes: ["openid", "offline_access", "mcp"],
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    dPoP: !dpop
      ? { enabled: false }
      : dpopNonce
        ? { enabled: true, nonceSecret: crypto.randomBytes(32), requireNonce: () => true }
        : { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => oneOf ?? undefined,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resourceIndicator) => {
        if (!resourceIndicator.startsWith("http://127.0.0.1:")) throw new errors.InvalidTarget();
        return {
          scope: "mcp",
          audience: resourceIndicator,
          accessTokenTTL: atTtl,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "RS256" } },
        };
      },
    },
  },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: () => true,
  ttl: {
    AccessToken: atTtl,
    AuthorizationCode: 60,
    RefreshToken: 24 * 3600,
    Grant: 24 * 3600,
    Session: 24 * 3600,
    Interaction: 600,
    IdToken: 3600,
  },
  interactions: { url: async (ctx, interaction) => `/interaction/${interaction.uid}` },
  renderError: async (ctx, out, error) => {
    ctx.type = "application/json";
    ctx.body = JSON.stringify(out);
    record({ event: "render_error", error: out.error, error_description: out.error_description });
  },
};

const provider = new Provider(issuer, configuration);
provider.proxy = false;

provider.use(async (ctx, next) => {
  await next();
  const entry = { method: ctx.method, path: ctx.path, status: ctx.status };
  const auth = ctx.get("authorization");
  entry.auth = auth ? auth.split(" ")[0] : null;
  if (ctx.get("dpop")) entry.dpop_proof = true;
  const params = ctx.oidc?.params;
  if (params?.grant_type) entry.grant_type = params.grant_type;
  if (params?.resource) entry.resource = params.resource;
  if (params?.scope) entry.scope = params.scope;
  if (ctx.path === "/reg" && ctx.method === "POST") {
    const b = ctx.body && typeof ctx.body === "object" ? ctx.body : {};
    entry.registration = {
      token_endpoint_auth_method: b.token_endpoint_auth_method,
      grant_types: b.grant_types,
      redirect_uris: b.redirect_uris,
      application_type: b.application_type,
      dpop_bound_access_tokens: b.dpop_bound_access_tokens,
    };
  }
  if (ctx.body && typeof ctx.body === "object" && !Buffer.isBuffer(ctx.body)) {
    if (ctx.body.error) {
      entry.error = ctx.body.error;
      entry.error_description = ctx.body.error_description;
    }
    if (ctx.body.token_type) entry.token_type = ctx.body.token_type;
    if ("refresh_token" in ctx.body) entry.refresh_token_issued = true;
  }
  const www = ctx.response.get("www-authenticate");
  if (www) entry.www_authenticate = www.slice(0, 300);
  if (ctx.response.get("dpop-nonce")) entry.dpop_nonce_sent = true;
  record(entry);
});

for (const event of ["grant.error", "server_error", "registration_create.error", "revocation.error", "introspection.error"]) {
  provider.on(event, (ctx, err) => {
    record({ event, error: err?.error || err?.name, error_description: err?.error_description || String(err?.message).slice(0, 200) });
  });
}
provider.on("grant.success", (ctx) => record({ event: "grant.success", grant_type: ctx.oidc?.params?.grant_type }));

// The person: log in as peers-user and consent to whatever was asked, at once.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  record({ event: "interaction", prompt: prompt.name, scope: params.scope, resource: params.resource });
  if (prompt.name === "login") {
    return provider.interactionFinished(req, res, { login: { accountId: "peers-user" } }, { mergeWithLastSubmission: false });
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const d = prompt.details;
  if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(" "));
  if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
  if (d.missingResourceScopes) {
    for (const [indicator, scopes] of Object.entries(d.missingResourceScopes)) {
      grant.addResourceScope(indicator, scopes.join(" "));
    }
  }
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
const server = http.createServer(async (req, res) => {
  if (req.url.startsWith("/interaction/")) {
    try {
      await interaction(req, res);
    } catch (e) {
      record({ event: "interaction_error", error: String(e).slice(0, 300) });
      if (!res.headersSent) res.writeHead(400, { "content-type": "text/plain" }).end(String(e));
    }
    return;
  }
  callback(req, res);
});
server.listen(port, "127.0.0.1", () => {
  console.log(`oidc-provider at ${issuer} (access tokens ${atTtl} s, DPoP ${dpop}, DPoP nonce ${dpopNonce})`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
