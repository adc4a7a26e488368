"""The PyTorch example submitted as Qanat command jobs, on CPU: once as one process and
once as two ranks (DistributedDataParallel over gloo, rendezvous from the MASTER_ADDR,
MASTER_PORT, RANK and WORLD_SIZE Qanat sets). Each run must hold the per-epoch metrics,
the checkpoint and the ONNX export, logged by plain mlflow code.

With QANAT_COMPAT_SLURM set, the two-rank job runs once more on the Slurm executor.

Environment: MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN (an editor of the default
project), QANAT_URL, TORCH_PYTHON (an interpreter with the example's requirements),
QANAT_EXAMPLE (the path of examples/pytorch/train.py).
"""

import os
import time

import requests
from mlflow import MlflowClient
from runner import main, test

EPOCHS = 3


def api(method, path, **kw):
    return requests.request(
        method,
        os.environ["QANAT_URL"] + path,
        headers={"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"]},
        timeout=60,
        **kw,
    )


def run_example(name, ranks, extra=(), executor="local"):
    r = api(
        "POST",
        "/api/v1/projects/default/jobs",
        json={
            "name": name,
            "executor": executor,
            "experiment": "compat-pytorch",
            "ranks": ranks,
            "resources": {"cpus": 1, "memory": "3GiB"},
            "timeout": "10m",
            "command": [os.environ["TORCH_PYTHON"], os.environ["QANAT_EXAMPLE"], "--epochs", str(EPOCHS), *extra],
        },
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["job_id"]
    deadline = time.time() + 600
    while time.time() < deadline:
        j = api("GET", f"/api/v1/projects/default/jobs/{job_id}").json()
        if j["state"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.5)
    if j["state"] != "succeeded":
        logs = [
            api("GET", f"/api/v1/projects/default/jobs/{job_id}/logs", params={"rank": r}).json().get("data", "")
            for r in range(ranks)
        ]
        raise AssertionError(f"{name}: {j['state']}: {j.get('reason')}\n" + "\n".join(l[-2000:] for l in logs))
    return j


def check_run(job, world):
    c = MlflowClient()
    run = c.get_run(job["run_id"])
    assert run.info.status == "FINISHED", run.info
    assert run.data.params["world_size"] == str(world), run.data.params
    acc = c.get_metric_history(job["run_id"], "accuracy")
    assert [m.step for m in acc] == list(range(EPOCHS)), acc
    arts = {a.path for a in c.list_artifacts(job["run_id"], "checkpoints")} | {
        a.path for a in c.list_artifacts(job["run_id"], "onnx")
    }
    assert "checkpoints/last.pt" in arts and "onnx/model.onnx" in arts, arts
    log = api("GET", f"/api/v1/projects/default/jobs/{job['job_id']}/logs").json()["data"]
    assert "exported" in log, log


@test
def the_pytorch_example_trains_as_one_process():
    check_run(run_example("pytorch-1", 1, ["--register-as", "spirals"]), 1)
    versions = MlflowClient().search_model_versions("name='spirals'")
    assert len(versions) == 1, versions


@test
def the_pytorch_example_trains_as_two_ranks_over_gloo():
    job = run_example("pytorch-ddp", 2)
    check_run(job, 2)
    assert job["ranks"] == 2


if os.environ.get("QANAT_COMPAT_SLURM"):

    @test
    def the_same_two_rank_job_trains_on_the_slurm_cluster():
        job = run_example("pytorch-slurm", 2, executor="slurm")
        check_run(job, 2)
        assert job["placement"].startswith("slurm job "), job


if __name__ == "__main__":
    main()
