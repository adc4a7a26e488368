"""The data side of scripts/bench/drift_vs_evidently.sh.

  drift_evidently.py make DIR ROWS COLS   writes DIR/reference.parquet and DIR/current.parquet
  drift_evidently.py run DIR              times Evidently's DataDriftPreset on them

The tables: COLS float64 columns of ROWS rows. Column i of the reference is normal with
mean i/10 and standard deviation 1 + (i mod 3); the current table draws the same, except
that every other column is shifted by a quarter of its standard deviation (so about half
the columns drift, around the preset's dataset threshold)."""

import json
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make(out, rows, cols):
    rng = np.random.default_rng(19)
    for name, shifted in (("reference", False), ("current", True)):
        arrays, names = [], []
        for i in range(cols):
            sd = 1.0 + (i % 3)
            mean = i / 10 + (0.25 * sd if shifted and i % 2 == 0 else 0.0)
            arrays.append(pa.array(rng.normal(mean, sd, rows)))
            names.append(f"f{i:03d}")
        pq.write_table(pa.table(arrays, names=names), f"{out}/{name}.parquet")


def run(out):
    import pandas as pd
    from evidently import Report
    from evidently.presets import DataDriftPreset

    ref = pd.read_parquet(f"{out}/reference.parquet")
    cur = pd.read_parquet(f"{out}/current.parquet")
    start = time.perf_counter()
    snapshot = Report([DataDriftPreset()]).run(cur, ref)
    result = snapshot.dict()
    seconds = time.perf_counter() - start
    drifted, scores = [], {}
    for metric in result["metrics"]:
        config = metric.get("config", {})
        if not config.get("type", "").endswith("ValueDrift"):
            continue
        column, value, threshold = config["column"], metric["value"], config["threshold"]
        scores[column] = value
        # Tests ("K-S p_value", ...) drift below the threshold, distances at or above.
        is_test = "p_value" in config.get("method", "")
        if (value < threshold) if is_test else (value >= threshold):
            drifted.append(column)
    print(json.dumps({"seconds": round(seconds, 3), "drifted": sorted(drifted), "scores": scores}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        run(sys.argv[2])
