"""Qanat jobs driven like a user would: a command job running plain `mlflow` code logs
into Qanat with no configuration of its own, reads its dataset input, and its declared
output lands in its run; its run is linked to the dataset it read.

Environment: MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN (an editor of the default
project), QANAT_URL, QANAT_DATASET (a dataset of the default project with a version 1),
COMPAT_PYTHON (the interpreter with mlflow installed).
"""

import os
import time

import requests
from mlflow import MlflowClient
from runner import main, test

HERE = os.path.dirname(os.path.abspath(__file__))


def api(method, path, **kw):
    r = requests.request(
        method,
        os.environ["QANAT_URL"] + path,
        headers={"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"]},
        timeout=60,
        **kw,
    )
    return r


def wait(job_id, secs=120):
    deadline = time.time() + secs
    while time.time() < deadline:
        j = api("GET", f"/api/v1/projects/default/jobs/{job_id}").json()
        if j["state"] in ("succeeded", "failed", "cancelled"):
            return j
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish: {j}")


@test
def a_command_job_using_mlflow_logs_into_qanat_with_no_configuration():
    ds = os.environ["QANAT_DATASET"]
    r = api(
        "POST",
        "/api/v1/projects/default/jobs",
        json={
            "name": "mlflow-job",
            "experiment": "compat-jobs",
            "command": [os.environ["COMPAT_PYTHON"], os.path.join(HERE, "jobs", "log_to_mlflow.py")],
            "inputs": [f"dataset:{ds}@1"],
            "outputs": ["report.txt"],
            "resources": {"cpus": 1, "memory": "2GiB"},
        },
    )
    assert r.status_code == 201, r.text
    job = wait(r.json()["job_id"])
    log = api("GET", f"/api/v1/projects/default/jobs/{job['job_id']}/logs").json().get("data", "")
    assert job["state"] == "succeeded", f"{job['reason']}\n{log[-3000:]}"
    run = MlflowClient().get_run(job["run_id"])
    assert run.info.status == "FINISHED", run.info
    assert run.data.metrics["rows"] == 1.0, run.data.metrics
    assert run.data.params["input_files"] == "1", run.data.params
    assert run.data.tags["qanat.job_id"] == job["job_id"], run.data.tags
    assert run.data.tags["mlflow.source.type"] == "JOB", run.data.tags
    history = MlflowClient().get_metric_history(job["run_id"], "loss")
    assert [m.step for m in history] == [0, 1, 2], history
    artifacts = [a.path for a in MlflowClient().list_artifacts(job["run_id"])]
    assert "report.txt" in artifacts, artifacts
    lineage = api("GET", "/api/v1/projects/default/lineage", params={"ref": f"run:{job['run_id']}"}).json()
    assert f"dataset:{ds}@1" in str(lineage), lineage


@test
def a_viewer_cannot_submit_and_jobs_are_audited():
    r = requests.post(
        os.environ["QANAT_URL"] + "/api/v1/projects/default/jobs",
        headers={"Authorization": "Bearer " + os.environ["QANAT_VIEWER_TOKEN"]},
        json={"name": "nope", "command": ["true"]},
        timeout=30,
    )
    assert r.status_code == 403, r.text


if __name__ == "__main__":
    main()
