#!/usr/bin/env bash
# Start the test OpenID Connect provider (oidc-provider on Node.js).
#
#   tests/compat/oidc/start.sh <port> <state-dir>
#
# Installs the pinned npm packages once (npm ci from package-lock.json) into
# $HOME/.cache/qanat-oidc-node-<first 12 hex of sha256(package-lock.json)>,
# outside the repository, then runs provider.mjs in the foreground (exec, so
# the caller's pid is the provider's). State (users.json, keys.json,
# clients.json) lives in <state-dir>; see provider.mjs for formats, clients,
# pages and environment variables (OIDC_AUDIENCE, OIDC_REDIRECT_URIS, ...).
#
# stdout carries a single line, "oidc provider ready at http://127.0.0.1:<port>",
# once the server listens; everything else (npm, logs) goes to stderr.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <port> <state-dir>" >&2
  exit 2
fi
port=$1
state_dir=$2
if ! [[ $port =~ ^[0-9]+$ ]]; then
  echo "start.sh: port must be a number, got '$port'" >&2
  exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "start.sh: $tool not found on PATH (Node.js >= 20.18 is needed)" >&2
    exit 1
  fi
done
# oidc-provider 9 uses URL.parse and crypto.hash: Node.js 20.18+ or 22+.
if ! node -e '
  const [maj, min] = process.versions.node.split(".").map(Number);
  process.exit(maj > 20 || (maj === 20 && min >= 18) ? 0 : 1);
'; then
  echo "start.sh: Node.js >= 20.18 is needed, found $(node --version)" >&2
  exit 1
fi

sha256_12() {
  node -e '
    const data = require("fs").readFileSync(process.argv[1]);
    process.stdout.write(require("crypto").createHash("sha256").update(data).digest("hex").slice(0, 12));
  ' "$1"
}

cache_root=$HOME/.cache
mkdir -p "$cache_root"
cache=$cache_root/qanat-oidc-node-$(sha256_12 "$here/package-lock.json")

# npm packages: installed into a temporary directory, then renamed into place,
# so that a half-done install is never used and concurrent starts do not clash.
if [[ ! -f $cache/.installed ]]; then
  rm -rf "$cache"
  tmp=$(mktemp -d "$cache.tmp.XXXXXX")
  cp "$here/package.json" "$here/package-lock.json" "$tmp/"
  echo "start.sh: installing npm packages into $cache" >&2
  (cd "$tmp" && npm ci --omit=dev --no-audit --no-fund) >&2
  touch "$tmp/.installed"
  if ! mv -T "$tmp" "$cache" 2>/dev/null; then
    rm -rf "$tmp" # another start won the race
  fi
  [[ -f $cache/.installed ]] || { echo "start.sh: npm install into $cache failed" >&2; exit 1; }
fi

# ESM ignores NODE_PATH: run copies of our scripts from a directory under the
# cache, so that `import 'oidc-provider'` finds $cache/node_modules. The copy
# is keyed by the scripts' content, so edits are picked up.
app_hash=$(cat "$here/provider.mjs" "$here/keys.mjs" | node -e '
  const chunks = [];
  process.stdin.on("data", (c) => chunks.push(c)).on("end", () => process.stdout.write(
    require("crypto").createHash("sha256").update(Buffer.concat(chunks)).digest("hex").slice(0, 12)));
')
app=$cache/app-$app_hash
if [[ ! -f $app/provider.mjs ]]; then
  tmp=$(mktemp -d "$app.tmp.XXXXXX")
  cp "$here/provider.mjs" "$here/keys.mjs" "$tmp/"
  if ! mv -T "$tmp" "$app" 2>/dev/null; then
    rm -rf "$tmp"
  fi
fi

mkdir -p "$state_dir"
state_dir=$(cd "$state_dir" && pwd)

exec node "$app/provider.mjs" "$port" "$state_dir"
