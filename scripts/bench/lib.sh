# Sourced by the benchmark scripts: the peers' venvs and the qanat binary they time.

# venv_path NAME REQUIREMENTS: where the venv of REQUIREMENTS lives, under
# $HOME/.cache and keyed by the file's contents.
venv_path() {
  echo "$HOME/.cache/qanat-$1-venv-$(sha256sum "$2" | cut -c1-12)"
}

# bench_venv VENV REQUIREMENTS: makes VENV a venv with REQUIREMENTS installed, once;
# again when the file changes (the venv keeps a copy of what it installed).
bench_venv() {
  local venv=$1 req=$2
  cmp -s "$req" "$venv/.requirements" 2>/dev/null && return 0
  echo "installing $(basename "$req") into $venv (once)..." >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.requirements"
}

# qanat_bin ROOT: sets Q to $QANAT_BIN when it is set, else to a release build of the
# checkout at ROOT (built here, into $CARGO_TARGET_DIR).
qanat_bin() {
  if [ -n "${QANAT_BIN:-}" ]; then
    Q=$QANAT_BIN
    return 0
  fi
  echo "building qanat (release)..." >&2
  (cd "$1" && cargo build --release --locked -p qanat --quiet)
  Q=$CARGO_TARGET_DIR/release/qanat
}
