"""Feast's local offline store (the file source, dask) building the same point-in-time
training set as scripts/bench/pit_duckdb.py: a Feast repo over the benchmark tables
(scripts/bench/pit_data.py), entity rows as a DataFrame, `get_historical_features`
timed to the finished DataFrame. Prints one JSON line.

usage: pit_feast.py DIR   (run in the Feast venv of tests/compat/feast-requirements.txt)
"""

import glob
import json
import os
import sys
import tempfile
import time
from datetime import timedelta

import pyarrow.parquet as pq
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig
from feast.types import Float64
from feast.value_type import ValueType

d = os.path.abspath(sys.argv[1])
repo = tempfile.mkdtemp(prefix="pit-feast-")
config = RepoConfig(
    project="pit",
    registry=os.path.join(repo, "registry.db"),
    provider="local",
    offline_store={"type": "file"},
    online_store={"type": "sqlite", "path": os.path.join(repo, "online.db")},
    entity_key_serialization_version=3,
)
store = FeatureStore(config=config)
driver = Entity(name="driver", join_keys=["driver_id"], value_type=ValueType.INT64)
views, refs, feature_rows = [], [], 0
for i, path in enumerate(sorted(glob.glob(f"{d}/view_*.parquet"))):
    meta = pq.read_metadata(path)
    feature_rows += meta.num_rows
    cols = [c for c in meta.schema.names if c.startswith("f")]
    v = FeatureView(
        name=f"v{i}",
        entities=[driver],
        ttl=timedelta(days=3650),
        schema=[Field(name=c, dtype=Float64) for c in cols],
        source=FileSource(path=path, timestamp_field="event_timestamp"),
    )
    views.append(v)
    refs += [f"v{i}:{c}" for c in cols]
store.apply([driver, *views])
entity_df = pq.read_table(f"{d}/entities.parquet").to_pandas()
t = time.perf_counter()
out = store.get_historical_features(entity_df=entity_df, features=refs).to_df()
secs = time.perf_counter() - t
import feast

print(json.dumps({"engine": f"feast {feast.__version__} (file offline store)", "seconds": round(secs, 3), "entity_rows": len(out), "feature_rows": feature_rows}))
