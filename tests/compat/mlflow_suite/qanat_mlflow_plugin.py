"""A pytest plugin that runs MLflow's own live-server tests against Qanat.

MLflow's tests start a tracking server per test: `ServerThread(app, port)` (uvicorn in a
thread) or `_init_server(...)` (a subprocess), both in
`tests/tracking/integration_test_utils.py`. This plugin replaces both with a fresh Qanat
server per test (`qanat init`, then `qanat server` on a free port, in a temporary home)
and adds that server's admin token to every HTTP request sent to it: the MLflow client
reads `MLFLOW_TRACKING_TOKEN`, and the tests' own raw `requests` calls and the
`RestStore(lambda: MlflowHostCreds(url))` they build carry no token, so the plugin adds
it at the `requests` layer, for Qanat's URLs only.

Nothing of MLflow's is copied or edited: `scripts/mlflow-suite.sh` runs pytest in an
MLflow source checkout with `-p qanat_mlflow_plugin`. `QANAT_BIN` names the binary.
"""

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile

import pytest
import requests

QANAT_BIN = os.environ.get("QANAT_BIN", "qanat")

# Where Qanat differs from MLflow on purpose (docs/tracking.md, "Differences from
# MLflow, on purpose"): these tests are marked as expected failures, strictly, so a
# change that makes one pass is noticed. QANAT_SUITE_RAW=1 runs everything unmarked.
_USER = "a run's user_id is the authenticated caller, not what the client claims"
_LOCATION = "experiments/create refuses a client-chosen artifact_location: bytes go to Qanat's storage"
_SOURCE = "a model version's source must be in Qanat's storage (no local paths, file://, s3://, http://)"
DESIGN_DIFFERENCES = {
    "test_create_run_all_args": _USER,
    "test_create_run_defaults": _USER,
    "test_create_get_search_experiment": _LOCATION,
    "test_artifacts": _LOCATION,
    "test_create_model_version_with_path_source": _SOURCE,
    "test_create_model_version_with_non_local_source": _SOURCE,
    "test_create_model_version_with_file_uri": _SOURCE,
    "test_create_model_version_with_validation_regex": _SOURCE,
    "test_search_logged_models": "search_logged_models(datasets=...) is refused, not ignored",
}

# MLflow's GenAI surface, which Qanat does not serve (traces and spans, assessments,
# evaluation datasets, scorers, prompt-lab, the AI gateway and its secrets and
# endpoints, issues, GraphQL): skipped with that reason, unless QANAT_SUITE_RAW=1.
GENAI = re.compile(
    r"trace|span|graphql|promptlab|gateway|assessment|evaluation_dataset|"
    r"dataset_to_experiments|dataset_from_experiments|experiments_at_once|"
    r"idempotent_(add|remove)_experiments|add_remove_experiments|dataset_experiment_association|"
    r"scorer|online_scoring|secret|endpoint|model_definition|providers|^test_list_models$|"
    r"provider_config|issue"
)

# Server URL -> admin token, for every Qanat this plugin started.
_TOKENS: dict[str, str] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QanatServer:
    """A fresh Qanat server for one test, usable where MLflow uses `ServerThread`."""

    def __init__(self, app=None, port=None):
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = None
        self.proc = None

    def __enter__(self) -> str:
        self.dir = tempfile.mkdtemp(prefix="qanat-mlflow-")
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": self.dir,
            "QANAT_HOME": os.path.join(self.dir, "home"),
            "QANAT_CREDENTIALS": os.path.join(self.dir, "credentials.json"),
            "QANAT_SERVER_BIND": f"127.0.0.1:{self.port}",
            "QANAT_LOG_LEVEL": "warn",
        }
        out = subprocess.run(
            [QANAT_BIN, "init", "--output", "json"],
            env=env,
            capture_output=True,
            check=True,
        )
        token = json.loads(out.stdout)["token"]
        log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(
            [QANAT_BIN, "server"], env=env, stdout=subprocess.PIPE, stderr=log
        )
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            raise RuntimeError(f"qanat server did not start: {line!r}; see {self.dir}/server.log")
        _TOKENS[self.url] = token
        os.environ["MLFLOW_TRACKING_TOKEN"] = token
        # MLflow's fixtures give the server and the test process one store (the
        # test's `db_uri`, which its conftest makes the process-wide tracking URI), so
        # the CLI and fluent calls a test makes reach what the server serves. With
        # Qanat the server is the store: the process-wide URI points at it.
        import mlflow

        self.previous_uri = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(self.url)
        return self.url

    def __exit__(self, *exc):
        if getattr(self, "previous_uri", None) is not None:
            import mlflow

            mlflow.set_tracking_uri(self.previous_uri)
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        _TOKENS.pop(self.url, None)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return None

    # ServerThread's thread-like surface, for tests that call it directly.
    def start(self):
        self.__enter__()

    def shutdown(self):
        self.__exit__(None, None, None)


@contextlib.contextmanager
def _init_server(backend_uri=None, root_artifact_uri=None, extra_env=None, app=None, server_type=None):
    with QanatServer() as url:
        yield url


_original_request = requests.Session.request


def _request_with_token(self, method, url, *args, **kwargs):
    for base, token in _TOKENS.items():
        if str(url).startswith(base):
            headers = dict(kwargs.get("headers") or {})
            if not any(k.lower() == "authorization" for k in headers):
                headers["Authorization"] = f"Bearer {token}"
            kwargs["headers"] = headers
            break
    return _original_request(self, method, url, *args, **kwargs)


def pytest_configure(config):
    requests.Session.request = _request_with_token
    import tests.tracking.integration_test_utils as utils

    utils.ServerThread = QanatServer
    utils._init_server = _init_server


_MARKED = {"design": 0, "genai": 0}


def pytest_collection_modifyitems(session, config, items):
    raw = os.environ.get("QANAT_SUITE_RAW") == "1"
    for item in items:
        name = item.name.split("[")[0]
        if raw or "[file" in item.name:
            pass  # the file-store variants skip themselves
        elif name in DESIGN_DIFFERENCES:
            item.add_marker(pytest.mark.xfail(reason=DESIGN_DIFFERENCES[name], strict=True))
            _MARKED["design"] += 1
        elif item.fspath.basename == "test_rest_tracking.py" and GENAI.search(name):
            item.add_marker(pytest.mark.skip(reason="MLflow's GenAI surface is not served by Qanat"))
            _MARKED["genai"] += 1
    # The test modules imported the names before this plugin could replace them in
    # some orders; point each module's own binding at the replacements too.
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        if getattr(module, "ServerThread", None) not in (None, QanatServer):
            module.ServerThread = QanatServer
        if getattr(module, "_init_server", None) not in (None, _init_server):
            module._init_server = _init_server


@pytest.fixture(autouse=True)
def _no_leftover_token(monkeypatch):
    # Each test's server sets its own token; none leaks into the next test.
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    yield


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        f"qanat: {_MARKED['design']} tests of documented design differences marked xfail, "
        f"{_MARKED['genai']} GenAI tests skipped (QANAT_SUITE_RAW=1 runs them unmarked)"
    )
