"""DuckDB's ASOF LEFT JOIN over the benchmark tables (scripts/bench/pit_data.py): the
tables are loaded into memory first (not timed), then one query joins every view onto
the entity rows into a new table. Prints one JSON line.

usage: pit_duckdb.py DIR THREADS
"""

import glob
import json
import os
import sys
import time

import duckdb

d, threads = sys.argv[1], int(sys.argv[2])
con = duckdb.connect()
con.execute(f"SET threads = {threads}")
con.execute(f"CREATE TABLE entities AS SELECT * FROM read_parquet('{d}/entities.parquet')")
views = sorted(glob.glob(f"{d}/view_*.parquet"))
select, joins, feature_rows = ["e.*"], [], 0
for i, path in enumerate(views):
    con.execute(f"CREATE TABLE v{i} AS SELECT * FROM read_parquet('{path}')")
    feature_rows += con.execute(f"SELECT count(*) FROM v{i}").fetchone()[0]
    cols = [c for (c,) in con.execute(f"SELECT name FROM pragma_table_info('v{i}')").fetchall() if c.startswith("f")]
    select += [f"v{i}.{c}" for c in cols]
    joins.append(
        f"ASOF LEFT JOIN v{i} ON e.driver_id = v{i}.driver_id AND e.event_timestamp >= v{i}.event_timestamp"
    )
query = f"CREATE TABLE out AS SELECT {', '.join(select)} FROM entities e {' '.join(joins)}"
t = time.perf_counter()
con.execute(query)
secs = time.perf_counter() - t
rows = con.execute("SELECT count(*) FROM out").fetchone()[0]
print(json.dumps({"engine": f"duckdb {duckdb.__version__}", "seconds": round(secs, 3), "entity_rows": rows, "feature_rows": feature_rows, "threads": threads}))
