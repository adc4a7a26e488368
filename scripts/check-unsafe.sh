#!/usr/bin/env bash
# The workspace forbids `unsafe` (Cargo.toml's [workspace.lints]); one reviewed module,
# crates/qanat-simd/src/x86.rs, may use it (docs/contributing.md). This check keeps it
# that way: every crate but qanat-simd takes the workspace's lints, and no source file
# outside that module says `unsafe` or allows `unsafe_code`.
set -euo pipefail
cd "$(dirname "$0")/.."
ALLOWED=crates/qanat-simd/src/x86.rs
fail=0
grep -q '^unsafe_code = "forbid"' Cargo.toml || { echo "Cargo.toml: [workspace.lints.rust] must forbid unsafe_code" >&2; fail=1; }
for toml in crates/*/Cargo.toml; do
  [ "$toml" = crates/qanat-simd/Cargo.toml ] && continue
  if ! grep -Pzq '\[lints\]\nworkspace = true' "$toml"; then
    echo "$toml: must take the workspace's lints ([lints] workspace = true)" >&2
    fail=1
  fi
done
# Code, not words: an unsafe block, fn, impl, trait or extern, or a lint allowing one.
hits=$(grep -rn --include='*.rs' -E '^[^/"]*\bunsafe[[:space:]]*(\{|fn\b|impl\b|trait\b|extern\b)|(allow|expect)\([^)]*unsafe_code' crates \
  | grep -v "^$ALLOWED:" || true)
if [ -n "$hits" ]; then
  echo "unsafe outside $ALLOWED:" >&2
  echo "$hits" >&2
  fail=1
fi
# In the module: every unsafe block has a SAFETY comment right above it, in the comment
# lines that end on the line before it or the one before that (clippy's
# undocumented_unsafe_blocks checks the same in qanat-simd; this keeps it if the lint
# table changes).
awk -v f="$ALLOWED" '
  /unsafe \{/ { if (!safety) { print f ":" NR ": unsafe block without a SAFETY comment above it"; bad=1 } }
  /^[[:space:]]*\/\// { if ($0 ~ /SAFETY:/) safety = 1; gap = 0; next }
  { if (++gap > 1) safety = 0 }
  END { exit bad }' "$ALLOWED" >&2 || fail=1
exit $fail
