# Sourced by the compat suites and the benchmarks: Python venvs cached under
# $HOME/.cache, one per requirements file, made once and again when the file changes.

# venv_path NAME REQUIREMENTS: where the venv of REQUIREMENTS lives, under
# $HOME/.cache and keyed by the file's contents.
venv_path() {
  echo "$HOME/.cache/qanat-$1-venv-$(sha256sum "$2" | cut -c1-12)"
}

# ensure_venv VENV REQUIREMENTS: makes VENV a venv with REQUIREMENTS installed, once;
# again when the file changes (the venv keeps a copy of what it installed).
ensure_venv() {
  local venv=$1 req=$2
  cmp -s "$req" "$venv/.requirements" 2>/dev/null && return 0
  echo "installing $(basename "$req") into $venv (once)..." >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.requirements"
}

# Debian's Chromium and its driver, for the browser suites (the browser a test tool
# would download is not reachable from here); installed once.
ensure_chromium() {
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    echo "installing Debian's chromium and chromium-driver (once)..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null
  fi
}
