"""Submits N trivial jobs to Qanat (its REST API, one keep-alive connection) and N to
Slurm (`sbatch --wrap true`), each after the other, and reports for both: throughput
(jobs from the first submit to the last end) and submit-to-start latency (p50, p99),
from each system's own records. Slurm records times to the second; Qanat to the
microsecond. Standard library only."""

import argparse
import http.client
import json
import statistics
import subprocess
import time
from datetime import datetime
from urllib.parse import urlparse


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def qanat(n, url, token, project, cpus, every=0.0):
    """`every` > 0: one submit every `every` seconds instead of as fast as possible."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    hdr = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    spec = json.dumps({"name": "t", "command": ["true"], "resources": {"cpus": cpus, "memory": "16MiB"}})
    ids = []
    t0 = time.time()
    for i in range(n):
        if every:
            time.sleep(max(0.0, t0 + i * every - time.time()))
        conn.request("POST", f"/api/v1/projects/{project}/jobs", spec, hdr)
        r = conn.getresponse()
        body = r.read()
        assert r.status == 201, body
        ids.append(json.loads(body)["job_id"])
    submitted = time.time() - t0
    while True:
        conn.request("GET", f"/api/v1/projects/{project}/quota", headers=hdr)
        q = json.loads(conn.getresponse().read())
        if q["running_jobs"] == 0 and q["queued_jobs"] == 0:
            break
        time.sleep(0.2)
    lat, first_sub, last_end, ok = [], None, 0.0, 0
    # The list answers at most 1000 jobs, newest first: the project holds only these.
    conn.request("GET", f"/api/v1/projects/{project}/jobs?limit=1000", headers=hdr)
    jobs = json.loads(conn.getresponse().read())["jobs"]
    failed = {}
    for j in jobs:
        if j["state"] == "succeeded":
            ok += 1
        else:
            why = f"{j['state']} (exit {j.get('exit_code')}): {j.get('reason') or ''}"[:160]
            failed[why] = failed.get(why, 0) + 1
        s, st, en = ts(j["submitted_at"]), ts(j["started_at"]), ts(j["finished_at"])
        lat.append(st - s)
        first_sub = s if first_sub is None else min(first_sub, s)
        last_end = max(last_end, en)
    return {
        "jobs": len(jobs),
        "succeeded": ok,
        "submit_s": submitted,
        "span_s": last_end - first_sub,
        "lat": lat,
        "failed": failed,
    }


def slurm(n, every=0.0):
    t0 = time.time()
    ids = []
    for i in range(n):
        if every:
            time.sleep(max(0.0, t0 + i * every - time.time()))
        out = subprocess.run(
            ["sbatch", "--parsable", "--wrap", "true", "-o", "/dev/null", "--cpus-per-task=1", "--mem=16M"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        ids.append(out.split(";")[0])
    submitted = time.time() - t0
    while subprocess.run(["squeue", "-h", "-j", ",".join(ids[-50:])], capture_output=True, text=True).stdout.strip() or \
            subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
        time.sleep(0.5)
    lat, first_sub, last_end, ok = [], None, 0.0, 0
    wanted = set(ids)
    # Finished jobs stay in slurmctld's memory for MinJobAge (3600 s in the one-node
    # cluster's config): no accounting database is needed.
    text = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True).stdout
    fmt = "%Y-%m-%dT%H:%M:%S"
    for line in text.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("JobId") not in wanted:
            continue
        s = datetime.strptime(f["SubmitTime"], fmt).timestamp()
        st = datetime.strptime(f["StartTime"], fmt).timestamp()
        en = datetime.strptime(f["EndTime"], fmt).timestamp()
        ok += f["JobState"] == "COMPLETED"
        lat.append(st - s)
        first_sub = s if first_sub is None else min(first_sub, s)
        last_end = max(last_end, en)
    assert lat, "scontrol knows none of the jobs: raise MinJobAge"
    return {"jobs": len(lat), "succeeded": ok, "submit_s": submitted, "span_s": max(last_end - first_sub, 1.0), "lat": lat}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--project", default="bench")
    ap.add_argument("--overhead-project", default="bench2")
    ap.add_argument("--slurm-n", type=int, help="jobs for Slurm (default --n; 0 skips Slurm): Slurm drains about one a second here")
    ap.add_argument("--paced", type=int, default=100,
                    help="then this many 1-cpu jobs, one every --every seconds, through both (0: skip)")
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--paced-project", default="bench3")
    a = ap.parse_args()
    assert 1 <= a.n <= 1000, "--n: 1 to 1000 (the job list answers 1000 at most)"
    # The same request as sbatch's default (one core each): the queue builds up on both.
    q = qanat(a.n, a.url, a.token, a.project, 1)
    # A hundredth of a core each: nothing waits for a core, so submit-to-start is the
    # scheduler's own overhead (Slurm cannot hand out less than a core).
    q2 = qanat(a.n, a.url, a.token, a.overhead_project, 0.01)
    slurm_n = a.n if a.slurm_n is None else a.slurm_n
    runs = [("qanat, 1 cpu per job", q), ("qanat, 0.01 cpu per job", q2)]
    if slurm_n:
        t0 = time.time()
        s = slurm(slurm_n)
        print(f"slurm: {slurm_n} jobs took {time.time() - t0:.0f} s from the first sbatch to the queue drained")
        runs.append(("slurm (sbatch --wrap true)", s))
    if a.paced:
        # One core each, paced so that a core is free at every submit: submit-to-start
        # is each scheduler's own latency for a job that asks for a whole core.
        runs.append((f"qanat, 1 cpu, 1 per {a.every:g} s", qanat(a.paced, a.url, a.token, a.paced_project, 1, a.every)))
        if slurm_n:
            runs.append((f"slurm, 1 cpu, 1 per {a.every:g} s", slurm(a.paced, a.every)))
    rows = []
    for name, r in runs:
        thr = r["jobs"] / r["span_s"]
        rows.append((name, r, thr))
        print(f"{name:28} {r['succeeded']}/{r['jobs']} ok  submit {r['submit_s']:.1f}s  "
              f"span {r['span_s']:.1f}s  {thr:.1f} jobs/s  submit->start p50 {pct(r['lat'], 50) * 1000:.0f} ms  "
              f"p99 {pct(r['lat'], 99) * 1000:.0f} ms")
    if slurm_n:
        print(f"throughput ratio qanat/slurm, same requests: {rows[0][2] / rows[2][2]:.1f}x")
    # Jobs that did not succeed, by state and reason, from Qanat's own records.
    for name, r in runs:
        if r.get("failed"):
            print(f"{name}: not succeeded: {r['failed']}")


if __name__ == "__main__":
    main()
