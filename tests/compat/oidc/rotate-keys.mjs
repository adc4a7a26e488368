#!/usr/bin/env node
// Usage: node tests/compat/oidc/rotate-keys.mjs <state-dir>
//
// Replaces <state-dir>/keys.json with a single fresh RSA 2048 signing key (new
// kid). The old key is dropped, so tokens signed before the rotation no longer
// verify against the published JWKS. The provider reads keys.json only at
// start: stop it, rotate, start it again.
//
// Prints "<old kid or -> -> <new kid>" on stdout.

import fs from 'node:fs';

import { keysPath, newSigningJwk, writeKeys } from './keys.mjs';

const [stateDir] = process.argv.slice(2);
if (!stateDir) {
  process.stderr.write('usage: rotate-keys.mjs <state-dir>\n');
  process.exit(2);
}
fs.mkdirSync(stateDir, { recursive: true });

let oldKid = '-';
try {
  const old = JSON.parse(fs.readFileSync(keysPath(stateDir), 'utf8'));
  oldKid = old.keys?.[0]?.kid ?? '-';
} catch (err) {
  if (err.code !== 'ENOENT') throw err;
}

const key = newSigningJwk();
writeKeys(stateDir, { keys: [key] });
process.stdout.write(`${oldKid} -> ${key.kid}\n`);
