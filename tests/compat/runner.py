"""The compat suites' runner: `@test` registers a check; `main()` runs every one,
reports each, and exits non-zero if any failed (COMPAT_TRACEBACK=1 prints tracebacks)."""

import os
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


def test(fn):
    TESTS.append(fn)
    return fn


def main():
    failed = 0
    for fn in TESTS:
        try:
            fn()
            print(f"ok   {fn.__name__}")
        except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}")
            if os.environ.get("COMPAT_TRACEBACK"):
                traceback.print_exc()
    print(f"{len(TESTS) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
