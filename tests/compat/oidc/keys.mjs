// Signing keys of the test OpenID provider (tests/compat/oidc).
//
// keys.json in the state directory is a JWKS holding *private* RSA keys
// ({"keys": [{"kty": "RSA", "kid": ..., "alg": "RS256", "use": "sig", "n", "e",
// "d", "p", "q", "dp", "dq", "qi"}]}). The first key signs ID tokens and JWT
// access tokens; the provider publishes the public halves at /jwks.
//
// Only node: built-ins are used here, so rotate-keys.mjs runs without the npm
// packages installed.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

// RFC 7638 JWK thumbprint of an RSA key, used as its kid: a new key always
// gets a new kid.
function thumbprint(jwk) {
  const canonical = JSON.stringify({ e: jwk.e, kty: jwk.kty, n: jwk.n });
  return crypto.createHash('sha256').update(canonical).digest('base64url');
}

export function newSigningJwk() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = privateKey.export({ format: 'jwk' });
  return { ...jwk, kid: thumbprint(jwk), alg: 'RS256', use: 'sig' };
}

export function keysPath(stateDir) {
  return path.join(stateDir, 'keys.json');
}

// Writes the JWKS atomically (temporary file + rename), readable by the owner only.
export function writeKeys(stateDir, jwks) {
  const target = keysPath(stateDir);
  const tmp = `${target}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, `${JSON.stringify(jwks, null, 2)}\n`, { mode: 0o600 });
  fs.renameSync(tmp, target);
}

// Reads keys.json, creating it with one fresh RSA 2048 key when it is absent.
export function loadOrCreateKeys(stateDir) {
  const file = keysPath(stateDir);
  if (!fs.existsSync(file)) {
    writeKeys(stateDir, { keys: [newSigningJwk()] });
  }
  const jwks = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (!jwks || !Array.isArray(jwks.keys) || jwks.keys.length === 0) {
    throw new Error(`${file}: expected a JWKS object with a non-empty "keys" array`);
  }
  for (const key of jwks.keys) {
    if (key.kty !== 'RSA' || !key.d) {
      throw new Error(`${file}: every key must be a private RSA JWK (kty RSA with "d")`);
    }
  }
  return jwks;
}
