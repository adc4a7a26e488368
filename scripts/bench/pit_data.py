"""Synthetic tables for the point-in-time join benchmark: entity rows (driver_id,
event_timestamp) and feature views (driver_id, event_timestamp, f<view>_<i> float64),
in Parquet. Deterministic for a seed.

With PIT_CREATED=1 each view also has a `created` column (its event time plus up to an
hour), and one row in ten repeats another row's driver and event time with a later or
earlier created time and other values: a join must take the newest created of a tie.

usage: pit_data.py DIR ENTITY_ROWS VIEW_ROWS[,VIEW_ROWS...] FEATURES[,FEATURES...] [KEYS]
"""

import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out, n_entities = sys.argv[1], int(sys.argv[2])
view_rows = [int(x) for x in sys.argv[3].split(",")]
features = [int(x) for x in sys.argv[4].split(",")]
keys = int(sys.argv[5]) if len(sys.argv) > 5 else 100_000
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
start = np.datetime64("2026-01-01T00:00:00", "us").astype(np.int64)
year = 365 * 86_400 * 1_000_000


def times(n):
    return pa.array(start + rng.integers(0, year, n), type=pa.timestamp("us", tz="UTC"))


pq.write_table(
    pa.table({"driver_id": rng.integers(0, keys, n_entities), "event_timestamp": times(n_entities)}),
    f"{out}/entities.parquet",
)
created = os.environ.get("PIT_CREATED") == "1"
for v, (rows, nf) in enumerate(zip(view_rows, features)):
    cols = {"driver_id": rng.integers(0, keys, rows), "event_timestamp": times(rows)}
    if created:
        ids = cols["driver_id"]
        ts = cols["event_timestamp"].to_numpy().astype("datetime64[us]").astype(np.int64)
        tie = rng.choice(rows, rows // 10, replace=False)
        src = rng.integers(0, rows, rows // 10)
        ids[tie], ts[tie] = ids[src], ts[src]
        cols["event_timestamp"] = pa.array(ts, type=pa.timestamp("us", tz="UTC"))
        cols["created"] = pa.array(ts + rng.integers(0, 3_600_000_000, rows), type=pa.timestamp("us", tz="UTC"))
    for i in range(nf):
        cols[f"f{v}_{i}"] = rng.random(rows)
    pq.write_table(pa.table(cols), f"{out}/view_{v}.parquet")
