"""Writes the request bodies of serving_vs_mlserver.sh, one JSON body a line, for the
same ROWS rows of the breast cancer table (ROWS rows per request: 1 by default):
  qanat.jsonl     Open Inference Protocol, one FP64 tensor a feature column
  mlserver.jsonl  the same, with MLServer's `pd` content type (a DataFrame request)
  mlflow.jsonl    `mlflow models serve`'s dataframe_split
usage: serving_bodies.py CSV OUT_DIR [ROWS] [COUNT]"""
import csv
import json
import random
import sys

path, out = sys.argv[1], sys.argv[2]
rows_per = int(sys.argv[3]) if len(sys.argv) > 3 else 1
count = int(sys.argv[4]) if len(sys.argv) > 4 else 200
with open(path) as f:
    table = list(csv.DictReader(f))
features = [c for c in table[0] if c != "diagnosis"]
random.seed(7)
with open(f"{out}/qanat.jsonl", "w") as q, open(f"{out}/mlserver.jsonl", "w") as m, open(
    f"{out}/mlflow.jsonl", "w"
) as f:
    for _ in range(count):
        rows = random.sample(table, rows_per)
        inputs = [
            {"name": c, "datatype": "FP64", "shape": [rows_per, 1],
             "data": [float(r[c]) for r in rows]}
            for c in features
        ]
        q.write(json.dumps({"inputs": inputs, "outputs": [{"name": "probability"}]}) + "\n")
        m.write(json.dumps({"parameters": {"content_type": "pd"},
                            "inputs": [dict(i, shape=[rows_per]) for i in inputs]}) + "\n")
        f.write(json.dumps({"dataframe_split": {
            "columns": features, "data": [[float(r[c]) for c in features] for r in rows]}}) + "\n")
