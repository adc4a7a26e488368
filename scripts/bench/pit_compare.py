"""Whether two training sets hold the same values: every feature column's null count
and sum (rows matched by driver and event time). Prints one JSON line.

usage: pit_compare.py QANAT_DIR_OR_FILE DUCKDB.parquet
"""

import glob
import json
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def load(p):
    files = sorted(glob.glob(os.path.join(p, "**", "*.parquet"), recursive=True)) if os.path.isdir(p) else [p]
    t = pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
    # Qanat may name a feature `view__feature`; compare by the feature's own name.
    t = t.rename_columns([c.split("__")[-1].split(":")[-1] for c in t.column_names])
    return t.sort_by([("driver_id", "ascending"), ("event_timestamp", "ascending")])


a, b = load(sys.argv[1]), load(sys.argv[2])
diffs = []
for c in sorted(set(b.column_names) - {"driver_id", "event_timestamp"}):
    if c not in a.column_names:
        diffs.append(f"{c}: missing in qanat's")
        continue
    x, y = a[c], b[c]
    if x.null_count != y.null_count:
        diffs.append(f"{c}: nulls {x.null_count} vs {y.null_count}")
        continue
    sx, sy = pc.sum(x).as_py() or 0.0, pc.sum(y).as_py() or 0.0
    if abs(sx - sy) > 1e-6 * max(1.0, abs(sy)):
        diffs.append(f"{c}: sum {sx} vs {sy}")
print(json.dumps({"rows": [a.num_rows, b.num_rows], "same": a.num_rows == b.num_rows and not diffs, "differences": diffs[:5]}))
