"""Run as a Qanat command job: plain MLflow code with no configuration of its own.
Reads the dataset version Qanat materialized under $QANAT_INPUTS, logs to the job's
run, writes a declared output."""

import csv
import glob
import os

import mlflow

files = sorted(glob.glob(os.path.join(os.environ["QANAT_INPUTS"], "iris-train", "*.csv")))
rows = sum(1 for f in files for _ in csv.DictReader(open(f)))
with mlflow.start_run() as run:
    mlflow.log_param("input_files", len(files))
    mlflow.log_metric("rows", rows)
    for step in range(3):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
with open("report.txt", "w") as f:
    f.write(f"rows={rows}\n")
print(f"logged {rows} rows to run {run.info.run_id}")
