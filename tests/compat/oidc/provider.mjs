// OpenID Connect provider for Qanat's compatibility tests, built on the
// `oidc-provider` npm package (see package.json for the pinned version).
//
// Usage: node provider.mjs <port> <state-dir>   (normally via start.sh, which
// installs the npm packages outside the repository first)
//
// Issuer: http://127.0.0.1:<port> (plain http on loopback, test use only).
// Endpoints (also in /.well-known/openid-configuration):
//   /auth  /token  /jwks  /me (userinfo)  /device/auth  /device  /session/end
//   /token/introspection  /token/revocation  /interaction/<uid> (ours)
//
// State directory:
//   users.json    re-read on every use: {"alice": {"password": "pw-alice",
//                 "email": "alice@example.com", "name": "Alice",
//                 "groups": ["ml-admins"], "disabled": false}, ...}.
//                 A missing or disabled user cannot log in, and refresh-token
//                 grants for them fail (invalid_grant). Write it atomically
//                 (temp file + rename) while the provider runs.
//   keys.json     read at start: JWKS of private RSA keys, the first signs
//                 (created with one RSA 2048 key when absent; rotate with
//                 rotate-keys.mjs while the provider is stopped).
//   clients.json  read at start, optional: a JSON array of oidc-provider client
//                 metadata; an extra "access_token_ttl" (seconds) per client is
//                 understood. Default clients:
//                   qanat        confidential, secret "qanat-secret",
//                                client_secret_basic (client_secret_post works
//                                too), authorization_code + refresh_token, PKCE
//                                S256 required, redirect_uris from
//                                OIDC_REDIRECT_URIS (comma separated, default
//                                http://127.0.0.1:8080/ui/login/sso/callback)
//                   qanat-short  like qanat (same secret and redirect URIs), but
//                                its access tokens live 2 seconds
//                   qanat-cli    public (auth method none), device
//                                authorization grant + refresh_token
//
// Tokens: ID token 10 min; access token 5 min (2 s for qanat-short), always a
// JWT (RS256, header typ "at+jwt") with aud = OIDC_AUDIENCE (default "qanat"),
// iss, sub (= username), iat, exp, jti, client_id, scope, preferred_username,
// groups; refresh token 1 day, issued when offline_access is asked; device code
// 10 min. Scopes: openid profile email groups offline_access.
//
// Resource indicators (RFC 8707) must be absolute URIs, so the resource for
// audience X is "urn:X" (or X itself when X already is an absolute URI):
// resource=urn:other gives aud "other". Without a resource parameter the
// audience is OIDC_AUDIENCE. Extra audiences: OIDC_EXTRA_AUDIENCES (comma
// separated, default "other").
//
// /me (userinfo) answers both the provider's own opaque tokens and our JWT
// access tokens (oidc-provider alone refuses tokens that carry an audience).
//
// HTML pages, for browser tests (Selenium):
//
//   Login, GET /interaction/<uid> (any prompt for a login):
//     <form method="post">                      (posts back to the same URL)
//       <input id="username" name="username" type="text">
//       <input id="password" name="password" type="password">
//       <button id="login" type="submit">Sign in</button>
//     </form>
//   A wrong password, an unknown or a disabled user gives the same page again
//   (HTTP 401) with <p id="error">Invalid username or password</p>.
//   Consent is never shown: once logged in, every requested scope, claim and
//   resource is granted and the browser is redirected on (to the client's
//   redirect_uri, or to the device flow's success page).
//
//   Device flow, GET /device (the verification_uri):
//     <form id="op.deviceInputForm" method="post" action="/device">
//       <input type="hidden" name="xsrf" value="...">
//       <input id="user_code" name="user_code" type="text">
//       <input type="hidden" name="confirm" value="yes">
//       <button id="confirm" type="submit">Continue</button>
//     </form>
//   then the login page above (skipped when the browser already has a
//   session), then <h1 id="success">Device signed in</h1>.
//   verification_uri_complete (GET /device?user_code=...) auto-posts with
//   JavaScript to a confirmation page that has the same <button id="confirm">
//   (and <button id="abort">).
//   An unknown, expired or reused code: the input page again with
//   <p id="error">...</p>.
//
//   Logout, GET /session/end: <button id="logout"> signs out, <button id="stay">
//   does not; afterwards <h1 id="signed-out">Signed out</h1> unless the client
//   sent post_logout_redirect_uri (default for qanat/qanat-short:
//   OIDC_POST_LOGOUT_REDIRECT_URIS, comma separated, default
//   http://127.0.0.1:8080/ui/).
//
//   Errors: <h1>Error</h1><p id="error">code</p><p id="error_description">...</p>
//
// Only "oidc provider ready at <issuer>" is written to stdout; request logs
// and oidc-provider's own notices go to stderr.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { loadOrCreateKeys } from './keys.mjs';

// oidc-provider prints notices with console.info/console.log; stdout is kept
// for the ready line only, so send them to stderr before loading it.
console.log = console.error.bind(console);
console.info = console.error.bind(console);

const { default: Provider, errors, interactionPolicy } = await import('oidc-provider');

const [portArg, stateDirArg] = process.argv.slice(2);
if (!portArg || !stateDirArg || !/^\d+$/.test(portArg)) {
  process.stderr.write('usage: provider.mjs <port> <state-dir>\n');
  process.exit(2);
}
const PORT = Number(portArg);
const STATE_DIR = path.resolve(stateDirArg);
fs.mkdirSync(STATE_DIR, { recursive: true });
const ISSUER = `http://127.0.0.1:${PORT}`;

const log = (...args) => console.error(`[oidc ${new Date().toISOString()}]`, ...args);

// ---------------------------------------------------------------- audiences

const AUDIENCE = process.env.OIDC_AUDIENCE || 'qanat';
const EXTRA_AUDIENCES = (process.env.OIDC_EXTRA_AUDIENCES ?? 'other')
  .split(',').map((s) => s.trim()).filter(Boolean);
const AUDIENCES = [AUDIENCE, ...EXTRA_AUDIENCES.filter((a) => a !== AUDIENCE)];

const isAbsoluteUri = (value) => URL.parse(value) !== null;
const resourceFor = (aud) => (isAbsoluteUri(aud) ? aud : `urn:${aud}`);
const audienceOf = (resource) => AUDIENCES.find((aud) => resource === resourceFor(aud));
const DEFAULT_RESOURCE = resourceFor(AUDIENCE);

// ---------------------------------------------------------- scopes & claims

// Claims released per scope (ID token and userinfo). preferred_username comes
// with openid so that it is always there.
const SCOPE_CLAIMS = {
  openid: ['sub', 'preferred_username'],
  profile: ['name', 'preferred_username'],
  email: ['email', 'email_verified'],
  groups: ['groups'],
};
const SCOPES = ['openid', 'offline_access', 'profile', 'email', 'groups'];
// Scopes the resource server (the JWT access token's audience) accepts; they
// end up in the access token's "scope" claim.
const RESOURCE_SCOPE = 'openid profile email groups offline_access';

// -------------------------------------------------------------------- users

async function readUsers() {
  const file = path.join(STATE_DIR, 'users.json');
  // A test may be rewriting the file: retry a parse error a few times.
  for (let attempt = 0; ; attempt += 1) {
    let text;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      if (err.code === 'ENOENT') return {};
      throw err;
    }
    try {
      const users = JSON.parse(text);
      return users && typeof users === 'object' && !Array.isArray(users) ? users : {};
    } catch (err) {
      if (attempt >= 4) throw new Error(`${file}: ${err.message}`);
      await sleep(25);
    }
  }
}

// The user record, or undefined when missing or disabled.
async function findUser(username) {
  if (typeof username !== 'string' || !username) return undefined;
  const users = await readUsers();
  if (!Object.hasOwn(users, username)) return undefined;
  const user = users[username];
  if (!user || typeof user !== 'object' || user.disabled === true) return undefined;
  return user;
}

function userClaims(username, user) {
  const claims = {
    sub: username,
    preferred_username: username,
    name: typeof user.name === 'string' ? user.name : username,
    groups: Array.isArray(user.groups) ? user.groups.map(String) : [],
  };
  if (typeof user.email === 'string') {
    claims.email = user.email;
    claims.email_verified = user.email_verified ?? true;
  }
  return claims;
}

function claimsForScopes(allClaims, scopes) {
  const out = { sub: allClaims.sub };
  for (const scope of scopes) {
    for (const claim of SCOPE_CLAIMS[scope] ?? []) {
      if (allClaims[claim] !== undefined) out[claim] = allClaims[claim];
    }
  }
  return out;
}

// ------------------------------------------------------------------ clients

function defaultClients() {
  const list = (value, fallback) => (value ?? fallback).split(',').map((s) => s.trim()).filter(Boolean);
  const redirectUris = list(process.env.OIDC_REDIRECT_URIS, 'http://127.0.0.1:8080/ui/login/sso/callback');
  const postLogout = list(process.env.OIDC_POST_LOGOUT_REDIRECT_URIS, 'http://127.0.0.1:8080/ui/');
  const confidential = {
    client_secret: 'qanat-secret',
    redirect_uris: redirectUris,
    post_logout_redirect_uris: postLogout,
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  };
  return [
    { client_id: 'qanat', client_name: 'Qanat', ...confidential },
    { client_id: 'qanat-short', client_name: 'Qanat (short-lived tokens)', ...confidential, access_token_ttl: 2 },
    {
      client_id: 'qanat-cli',
      client_name: 'Qanat CLI',
      token_endpoint_auth_method: 'none',
      grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
      response_types: [],
      redirect_uris: [],
    },
  ];
}

function loadClients() {
  const file = path.join(STATE_DIR, 'clients.json');
  let clients = defaultClients();
  if (fs.existsSync(file)) {
    clients = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (!Array.isArray(clients)) throw new Error(`${file}: expected a JSON array of clients`);
  }
  const accessTokenTtl = new Map();
  const metadata = clients.map(({ access_token_ttl: ttl, ...client }) => {
    if (ttl !== undefined) accessTokenTtl.set(client.client_id, Number(ttl));
    return client;
  });
  return { metadata, accessTokenTtl };
}

const { metadata: CLIENTS, accessTokenTtl: ACCESS_TOKEN_TTL } = loadClients();
const JWKS = loadOrCreateKeys(STATE_DIR);

// --------------------------------------------------------------------- HTML

const esc = (value) => String(value ?? '').replace(/[&<>"']/g, (c) => ({
  '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
}[c]));

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:sans-serif;max-width:24em;margin:3em auto}label,input,button{display:block;margin:.4em 0}#error{color:#b00}</style>
</head>
<body>
${body}
</body>
</html>
`;
}

function loginPage(clientId, error, username) {
  return page('Sign in', `<h1>Sign in</h1>
<p>to <strong id="client">${esc(clientId)}</strong></p>
${error ? `<p id="error" role="alert">${esc(error)}</p>` : ''}
<form method="post" autocomplete="off">
<label for="username">Username</label>
<input id="username" name="username" type="text" value="${esc(username)}" autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password">
<button id="login" type="submit">Sign in</button>
</form>`);
}

function errorPage(error, description) {
  return page('Error', `<h1>Error</h1>
<p id="error">${esc(error)}</p>
<p id="error_description">${esc(description)}</p>`);
}

// oidc-provider hands us its own <form> (with the xsrf token); add ids and a
// submit button inside it. Fails loudly if a package upgrade changes the form.
function patchForm(form, replacements) {
  let out = form;
  for (const [from, to] of replacements) {
    if (!out.includes(from)) throw new Error(`unexpected oidc-provider form markup (no ${from})`);
    out = out.replace(from, to);
  }
  return out;
}

async function userCodeInputSource(ctx, form, out, err) {
  let message = '';
  if (err && (err.userCode || err.name === 'NoCodeError')) {
    message = 'The code you entered is incorrect, expired or already used. Try again.';
  } else if (err && err.name === 'AbortedError') {
    message = 'The sign-in request was aborted.';
  } else if (err) {
    message = 'There was an error processing your request.';
  }
  const patched = patchForm(form, [
    ['name="user_code"', 'id="user_code" name="user_code"'],
    ['</form>', '<input type="hidden" name="confirm" value="yes"/>\n<button id="confirm" type="submit">Continue</button>\n</form>'],
  ]);
  ctx.type = 'html';
  ctx.body = page('Device sign-in', `<h1>Device sign-in</h1>
${message ? `<p id="error" role="alert">${esc(message)}</p>` : '<p>Enter the code shown on your device.</p>'}
${patched}`);
}

async function userCodeConfirmSource(ctx, form, client, deviceInfo, userCode) {
  const patched = patchForm(form, [
    ['</form>', '<button id="confirm" type="submit">Continue</button>\n<button id="abort" type="submit" name="abort" value="yes">Abort</button>\n</form>'],
  ]);
  ctx.type = 'html';
  ctx.body = page('Confirm device', `<h1>Confirm device</h1>
<p><strong id="client">${esc(client.clientName || client.clientId)}</strong> asks to sign in with the code
<code id="user_code_display">${esc(userCode)}</code>.</p>
${patched}`);
}

async function successSource(ctx) {
  ctx.type = 'html';
  ctx.body = page('Device signed in', `<h1 id="success">Device signed in</h1>
<p>You can close this page and return to your device.</p>`);
}

async function logoutSource(ctx, form) {
  ctx.type = 'html';
  ctx.body = page('Sign out', `<h1>Sign out?</h1>
${form}
<button id="logout" type="submit" form="op.logoutForm" name="logout" value="yes">Sign out</button>
<button id="stay" type="submit" form="op.logoutForm">Stay signed in</button>`);
}

async function postLogoutSuccessSource(ctx) {
  ctx.type = 'html';
  ctx.body = page('Signed out', '<h1 id="signed-out">Signed out</h1>');
}

async function renderError(ctx, out, error) {
  ctx.type = 'html';
  ctx.body = errorPage(out.error, out.error_description);
}

// ----------------------------------------------------------------- provider

// A browser session whose account has since been disabled or removed: ask for
// a login again. (oidc-provider would otherwise go on without an account and
// fail with a server_error in the consent checks.)
const { Check } = interactionPolicy;
const policy = interactionPolicy.base();
policy.get('login').checks.push(new Check(
  'account_unavailable',
  'the account of the session is missing or disabled',
  (ctx) => (ctx.oidc.session.accountId && !ctx.oidc.account ? Check.REQUEST_PROMPT : Check.NO_NEED_TO_PROMPT),
));

const provider = new Provider(ISSUER, {
  clients: CLIENTS,
  jwks: JWKS,
  findAccount: async (ctx, sub) => {
    const user = await findUser(sub);
    if (!user) return undefined; // refused: login, refresh, userinfo, ...
    return {
      accountId: sub,
      async claims() {
        return userClaims(sub, (await findUser(sub)) ?? user);
      },
    };
  },
  responseTypes: ['code', 'none'],
  scopes: SCOPES,
  claims: {
    acr: null, auth_time: null, iss: null, sid: null, ...SCOPE_CLAIMS,
  },
  // Put the scope-requested claims into ID tokens of the code and device flows
  // too (the default keeps them for userinfo only).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
  extraTokenClaims: async (ctx, token) => {
    if (token.kind !== 'AccessToken' || !token.accountId) return undefined;
    const user = await findUser(token.accountId);
    if (!user) return undefined;
    const { preferred_username: preferredUsername, groups } = userClaims(token.accountId, user);
    return { preferred_username: preferredUsername, groups };
  },
  ttl: {
    AccessToken: (ctx, token, client) => ACCESS_TOKEN_TTL.get(client?.clientId) ?? 5 * 60,
    AuthorizationCode: 60,
    ClientCredentials: 5 * 60,
    DeviceCode: 10 * 60,
    IdToken: 10 * 60,
    RefreshToken: 24 * 60 * 60,
    Interaction: 60 * 60,
    Session: 24 * 60 * 60,
    Grant: 2 * 24 * 60 * 60, // outlives the refresh tokens issued under it
    BackchannelAuthenticationRequest: 10 * 60,
    PreAuthorizedCode: 10 * 60,
  },
  interactions: { policy },
  clientBasedCORS: () => true,
  renderError,
  features: {
    devInteractions: { enabled: false },
    deviceFlow: {
      enabled: true,
      userCodeInputSource,
      userCodeConfirmSource,
      successSource,
    },
    introspection: {
      enabled: true,
      allowedPolicy: async (ctx, client) => client.clientAuthMethod !== 'none',
    },
    revocation: {
      enabled: true,
      allowedPolicy: async (ctx, client, token) => token.clientId === client.clientId,
    },
    rpInitiatedLogout: { enabled: true, logoutSource, postLogoutSuccessSource },
    resourceIndicators: {
      enabled: true,
      // No resource parameter: the token is for OIDC_AUDIENCE.
      defaultResource: async (ctx, client, oneOf) => {
        if (oneOf) return oneOf.includes(DEFAULT_RESOURCE) ? DEFAULT_RESOURCE : oneOf[0];
        return DEFAULT_RESOURCE;
      },
      // At the token endpoint, use the resource granted at authorization even
      // when openid was asked (the default would issue an opaque token for
      // userinfo instead of a JWT).
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resource) => {
        const audience = audienceOf(resource);
        if (!audience) throw new errors.InvalidTarget(`unknown resource indicator (known: ${AUDIENCES.map(resourceFor).join(', ')})`);
        return {
          scope: RESOURCE_SCOPE,
          audience,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});

// offline_access without prompt=consent: OpenID Connect Core (11) says the OP
// must ignore it, and oidc-provider drops it from authorization requests (the
// device flow keeps it), so no refresh token would be issued. Real IdPs
// (Keycloak, Entra ID, Okta) do issue one, so, like them, add prompt=consent
// to such authorization requests; our consent is automatic anyway.
// OIDC_STRICT_OFFLINE_ACCESS=1 keeps the spec behaviour. (GET /auth only; a
// form-posted or pushed authorization request must send prompt=consent.)
const AUTHORIZATION_PATH = provider.pathFor('authorization');
const STRICT_OFFLINE_ACCESS = process.env.OIDC_STRICT_OFFLINE_ACCESS === '1';
provider.use(async (ctx, next) => {
  if (!STRICT_OFFLINE_ACCESS && ctx.method === 'GET' && ctx.path === AUTHORIZATION_PATH) {
    const { scope, prompt } = ctx.query;
    if (typeof scope === 'string' && (prompt === undefined || typeof prompt === 'string')) {
      const prompts = (prompt ?? '').split(' ').filter(Boolean);
      if (scope.split(' ').includes('offline_access') && !prompts.includes('consent') && !prompts.includes('none')) {
        ctx.query = { ...ctx.query, prompt: [...prompts, 'consent'].join(' ') };
      }
    }
  }
  await next();
});

for (const event of ['server_error', 'authorization.error', 'grant.error', 'userinfo.error',
  'code_verification.error', 'end_session.error', 'introspection.error', 'revocation.error',
  'device_authorization.error', 'discovery.error', 'jwks.error', 'check_session.error']) {
  provider.on(event, (ctx, err) => log(`${event}: ${err.name}: ${err.message}`
    + `${err.error_description ? ` (${err.error_description})` : ''}${err.error_detail ? ` [${err.error_detail}]` : ''}`));
}

// ------------------------------------------------------------- interactions

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 64 * 1024) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function sendHtml(res, status, html) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  res.end(html);
}

// Grant everything the consent prompt reports as missing.
async function grantConsent(details) {
  const { prompt: { details: missing }, params, session } = details;
  let grant;
  if (details.grantId) grant = await provider.Grant.find(details.grantId);
  if (!grant) grant = new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  return grant.save();
}

async function handleInteraction(req, res, uid) {
  let details;
  try {
    details = await provider.interactionDetails(req, res);
  } catch (err) {
    return sendHtml(res, 400, errorPage('invalid_request', `interaction not found or expired (${err.error_description || err.message})`));
  }
  if (details.uid !== uid) {
    return sendHtml(res, 400, errorPage('invalid_request', 'interaction mismatch'));
  }
  const { prompt, params } = details;

  if (prompt.name === 'login') {
    if (req.method === 'GET') return sendHtml(res, 200, loginPage(params.client_id, '', ''));
    if (req.method !== 'POST') return sendHtml(res, 405, errorPage('invalid_request', 'method not allowed'));
    const form = await readForm(req);
    const username = form.get('username') ?? '';
    const password = form.get('password') ?? '';
    const user = await findUser(username);
    if (!user || typeof user.password !== 'string' || user.password !== password) {
      log(`login refused for ${JSON.stringify(username)}`);
      return sendHtml(res, 401, loginPage(params.client_id, 'Invalid username or password', username));
    }
    log(`login ok for ${JSON.stringify(username)} (client ${params.client_id})`);
    return provider.interactionFinished(req, res, { login: { accountId: username } }, { mergeWithLastSubmission: false });
  }

  if (prompt.name === 'consent') {
    const grantId = await grantConsent(details);
    return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  }

  return sendHtml(res, 400, errorPage('invalid_request', `unsupported prompt ${prompt.name}`));
}

// --------------------------------------------------------- JWT at userinfo

const PUBLIC_KEYS = new Map(JWKS.keys.map((jwk) => {
  const { kty, n, e } = jwk;
  return [jwk.kid, crypto.createPublicKey({ key: { kty, n, e }, format: 'jwk' })];
}));

function bearerError(res, description) {
  res.statusCode = 401;
  res.setHeader('WWW-Authenticate', `Bearer error="invalid_token", error_description="${description}"`);
  res.setHeader('Content-Type', 'application/json');
  res.setHeader('Cache-Control', 'no-store');
  res.end(JSON.stringify({ error: 'invalid_token', error_description: description }));
}

// Userinfo for our JWT access tokens: signature, iss, exp, a known audience and
// the openid scope are checked, then the claims of the granted scopes are
// returned from the current users.json.
async function jwtUserinfo(req, res, token) {
  const [h, p, s] = token.split('.');
  let header;
  let payload;
  try {
    header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8'));
    payload = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'));
  } catch {
    return bearerError(res, 'malformed token');
  }
  const key = PUBLIC_KEYS.get(header.kid);
  if (header.alg !== 'RS256' || !key
    || !crypto.verify('RSA-SHA256', Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url'))) {
    return bearerError(res, 'invalid token signature');
  }
  const now = Math.floor(Date.now() / 1000);
  const audiences = Array.isArray(payload.aud) ? payload.aud : [payload.aud];
  if (payload.iss !== ISSUER) return bearerError(res, 'invalid token issuer');
  if (typeof payload.exp !== 'number' || payload.exp <= now) return bearerError(res, 'invalid token provided');
  if (!audiences.some((aud) => AUDIENCES.includes(aud))) return bearerError(res, 'invalid token audience');
  const scopes = String(payload.scope ?? '').split(' ');
  if (!scopes.includes('openid')) {
    res.statusCode = 403;
    res.setHeader('WWW-Authenticate', 'Bearer error="insufficient_scope", scope="openid"');
    return res.end();
  }
  const user = await findUser(payload.sub);
  if (!user) return bearerError(res, 'invalid token provided');
  res.statusCode = 200;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  return res.end(JSON.stringify(claimsForScopes(userClaims(payload.sub, user), scopes)));
}

// ------------------------------------------------------------------- server

const providerCallback = provider.callback();
const USERINFO_PATH = provider.pathFor('userinfo');

const server = http.createServer(async (req, res) => {
  const started = Date.now();
  const url = new URL(req.url, ISSUER);
  res.on('finish', () => log(`${req.method} ${url.pathname} ${res.statusCode} ${Date.now() - started}ms`));
  try {
    const interaction = url.pathname.match(/^\/interaction\/([A-Za-z0-9_-]+)\/?$/);
    if (interaction) return await handleInteraction(req, res, interaction[1]);
    if (url.pathname === USERINFO_PATH) {
      const m = /^Bearer\s+([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/i.exec(req.headers.authorization ?? '');
      if (m) return await jwtUserinfo(req, res, m[1]);
    }
    return providerCallback(req, res);
  } catch (err) {
    log(`error on ${req.method} ${url.pathname}: ${err.stack || err}`);
    if (!res.headersSent) return sendHtml(res, 500, errorPage('server_error', 'internal error, see the provider log'));
    return res.end();
  }
});

const shutdown = (signal) => {
  log(`${signal}: shutting down`);
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
};
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

server.on('error', (err) => {
  log(`cannot listen on 127.0.0.1:${PORT}: ${err.message}`);
  process.exit(1);
});
server.listen(PORT, '127.0.0.1', () => {
  log(`keys: ${JWKS.keys.map((k) => k.kid).join(', ')}; clients: ${CLIENTS.map((c) => c.client_id).join(', ')}; audiences: ${AUDIENCES.join(', ')}`);
  process.stdout.write(`oidc provider ready at ${ISSUER}\n`);
});
