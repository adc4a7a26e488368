"""DuckDB doing what `qanat features training-set` does, end to end: read the entity
rows and the views from Parquet, keep the newest `created` of each (driver, event
time), ASOF-join each view onto the entity rows, null a view's features when its row is
older than the ttl, and write the result to Parquet. Timed from the first read to the
written file. Prints one JSON line.

usage: pit_duckdb_e2e.py DIR THREADS TTL_SECONDS OUT.parquet
"""

import glob
import json
import sys
import time

import duckdb

d, threads, ttl, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
con = duckdb.connect()
con.execute(f"SET threads = {threads}")
views = sorted(glob.glob(f"{d}/view_*.parquet"))
ctes, select, joins = [], ["e.driver_id", "e.event_timestamp"], []
for i, path in enumerate(views):
    cols = [c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE SELECT * FROM read_parquet('{path}'))").fetchall()
            if c.startswith("f")]
    ctes.append(
        f"v{i} AS (SELECT * FROM read_parquet('{path}') QUALIFY row_number() OVER "
        f"(PARTITION BY driver_id, event_timestamp ORDER BY created DESC) = 1)"
    )
    select += [
        f"CASE WHEN v{i}.event_timestamp >= e.event_timestamp - INTERVAL {ttl} SECOND THEN v{i}.{c} END AS {c}"
        for c in cols
    ]
    joins.append(f"ASOF LEFT JOIN v{i} ON e.driver_id = v{i}.driver_id AND e.event_timestamp >= v{i}.event_timestamp")
query = (
    f"COPY (WITH {', '.join(ctes)} SELECT {', '.join(select)} FROM read_parquet('{d}/entities.parquet') e "
    f"{' '.join(joins)}) TO '{out}' (FORMAT parquet)"
)
t = time.perf_counter()
con.execute(query)
secs = time.perf_counter() - t
rows = con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]
print(json.dumps({"engine": f"duckdb {duckdb.__version__}", "seconds": round(secs, 3), "entity_rows": rows, "threads": threads}))
