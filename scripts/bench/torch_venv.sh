# Sourced by the benchmark scripts that need PyTorch, onnx or onnxruntime: sets
# TORCH_VENV to the venv of examples/pytorch/requirements.txt (the one the compat
# suites use), cached under $HOME/.cache and keyed by the requirements; creates it once.
TORCH_REQ=examples/pytorch/requirements.txt
source scripts/bench/lib.sh
TORCH_VENV=${QANAT_TORCH_VENV:-$(venv_path torch "$TORCH_REQ")}
ensure_venv "$TORCH_VENV" "$TORCH_REQ"
