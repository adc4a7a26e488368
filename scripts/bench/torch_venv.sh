# Sourced by the benchmark scripts that need PyTorch, onnx or onnxruntime: sets
# TORCH_VENV to the venv of examples/pytorch/requirements.txt (the one the compat
# suites use), cached under $HOME/.cache and keyed by the requirements; creates it once.
TORCH_REQ=examples/pytorch/requirements.txt
TORCH_VENV=${QANAT_TORCH_VENV:-$HOME/.cache/qanat-torch-venv-$(sha256sum "$TORCH_REQ" | cut -c1-12)}
if ! cmp -s "$TORCH_REQ" "$TORCH_VENV/.requirements" 2>/dev/null; then
  rm -rf "$TORCH_VENV" && python3 -m venv "$TORCH_VENV"
  "$TORCH_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$TORCH_REQ"
  cp "$TORCH_REQ" "$TORCH_VENV/.requirements"
fi
