"""The compat suites' runner: `@test` registers a check; `main()` runs every one,
reports each, and exits non-zero if any failed (COMPAT_TRACEBACK=1 prints tracebacks;
COMPAT_ONLY=<text> runs only the tests whose name holds it)."""

import os
import socket
import sys
import traceback

TESTS = []


class as_token:
    """Calls inside the block carry the token in environment variable `var` (the
    MLflow client reads MLFLOW_TRACKING_TOKEN on every request)."""

    def __init__(self, var):
        self.var = var

    def __enter__(self):
        self.saved = os.environ["MLFLOW_TRACKING_TOKEN"]
        os.environ["MLFLOW_TRACKING_TOKEN"] = os.environ[self.var]

    def __exit__(self, *exc):
        os.environ["MLFLOW_TRACKING_TOKEN"] = self.saved


class client_as(as_token):
    """`as_token` that yields an `MlflowClient` (its calls carry the token in `var`)."""

    def __enter__(self):
        super().__enter__()
        from mlflow import MlflowClient

        return MlflowClient()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_job(spec):
    """Submits a job through Qanat's jobs API (QANAT_URL, with the token in
    MLFLOW_TRACKING_TOKEN), waits for it to end, asserts it succeeded (showing its log
    otherwise) and returns the job."""
    import time

    import requests

    url = os.environ["QANAT_URL"]
    h = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    r = requests.post(f"{url}/api/v1/projects/default/jobs", headers=h, json=spec, timeout=30)
    assert r.status_code == 201, r.text
    job_id = r.json()["job_id"]
    for _ in range(1200):
        j = requests.get(f"{url}/api/v1/projects/default/jobs/{job_id}", headers=h, timeout=30).json()
        if j["state"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.5)
    log = requests.get(f"{url}/api/v1/projects/default/jobs/{job_id}/logs", headers=h, timeout=30).json()
    assert j["state"] == "succeeded", f"{j.get('reason')}\n{log.get('data', '')[-3000:]}"
    return j


def test(fn):
    TESTS.append(fn)
    return fn


def main():
    failed = 0
    # COMPAT_ONLY=<text> runs the tests whose name holds it (while debugging one).
    only = os.environ.get("COMPAT_ONLY")
    tests = [fn for fn in TESTS if not only or only in fn.__name__]
    for fn in tests:
        try:
            fn()
            print(f"ok   {fn.__name__}")
        except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}")
            if os.environ.get("COMPAT_TRACEBACK"):
                traceback.print_exc()
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
