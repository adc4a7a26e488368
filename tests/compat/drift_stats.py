"""SciPy against Qanat's drift statistics (issue 19), through the binary a user runs:
`qanat monitor compare REF CUR -o json` on random tables written as CSV, each column's
method named with --method. Each statistic must agree with SciPy's within 1e-9:

- ks: `scipy.stats.ks_2samp` (two-sided, method auto: exact at these sizes) — D and the
  p-value;
- chisquare: `scipy.stats.chisquare(f_obs, f_exp)` with f_exp the reference's counts
  scaled to the current sample's size, as Evidently runs it — χ² and the p-value;
- wasserstein: `scipy.stats.wasserstein_distance` over the reference's `np.std`;
- jensenshannon: `scipy.spatial.distance.jensenshannon` of the category shares (nats);
- psi: Σ (c − r)·ln(c/r) over the category shares, a share of 0 replaced by 0.0001
  (or by the smallest share / 1e6 when that is below 0.0001) — the formula
  docs/monitoring.md states, computed here with NumPy."""

import json
import os
import subprocess
import tempfile

import numpy as np
from scipy.spatial.distance import jensenshannon
from scipy.stats import chisquare, ks_2samp, wasserstein_distance

from runner import main, test

Q = os.environ["QANAT_BIN"]
TOL = 1e-9


def write(path, columns):
    names = list(columns)
    rows = len(columns[names[0]])
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        for i in range(rows):
            f.write(",".join(repr(columns[n][i]) if not isinstance(columns[n][i], str)
                             else columns[n][i] for n in names) + "\n")


def compare(reference, current, methods):
    with tempfile.TemporaryDirectory() as d:
        r, c = os.path.join(d, "ref.csv"), os.path.join(d, "cur.csv")
        write(r, reference)
        write(c, current)
        args = [Q, "monitor", "compare", r, c, "-o", "json"]
        for col, m in methods.items():
            args += ["--method", f"{col}={m}"]
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return {c["column"]: c for c in json.loads(out)["by_column"]}


def near(got, want, what):
    assert abs(got - want) <= TOL, f"{what}: qanat {got!r}, scipy {want!r}"


rng = np.random.default_rng(19)


def normal(n, shift=0.0, scale=1.0):
    return [float(x) for x in rng.normal(shift, scale, n)]


@test
def ks_agrees_with_ks_2samp():
    cases = [(200, 300, 0.0), (1000, 1000, 0.15), (37, 5000, 0.5), (800, 60, 0.0)]
    ref = {f"x{i}": normal(m) for i, (m, _, _) in enumerate(cases)}
    cur = {f"x{i}": normal(n, shift) for i, (_, n, shift) in enumerate(cases)}
    # Columns of unequal length: each case is its own pair of files.
    worst = 0.0
    for i in range(len(cases)):
        col = f"x{i}"
        got = compare({col: ref[col]}, {col: cur[col]}, {col: "ks"})[col]
        want = ks_2samp(ref[col], cur[col])
        near(got["test_statistic"], want.statistic, f"{col} D")
        near(got["statistic"], want.pvalue, f"{col} p-value")
        assert got["exact"], got
        worst = max(worst, abs(got["statistic"] - want.pvalue))
    print(f"     ks: {len(cases)} pairs up to 5000 rows, largest p-value gap {worst:.1e}")


@test
def wasserstein_agrees_with_wasserstein_distance():
    ref = {"a": normal(3000, 0, 2), "b": normal(3000, 5, 0.5), "c": [float(x) for x in rng.exponential(1.0, 3000)]}
    cur = {"a": normal(4000, 0.3, 2), "b": normal(4000, 5, 0.7), "c": [float(x) for x in rng.exponential(1.3, 4000)]}
    got = compare(ref, cur, {k: "wasserstein" for k in ref})
    for k in ref:
        want = wasserstein_distance(ref[k], cur[k]) / max(np.std(ref[k]), 0.001)
        near(got[k]["statistic"], want, f"{k} wasserstein/std")
    print("     wasserstein: 3 columns of 3000 and 4000 rows agree")


def categories(n, p):
    return [str(x) for x in rng.choice(["red", "green", "blue", "teal", "gold"], size=n, p=p)]


def counts(values, keys):
    return np.array([sum(1 for v in values if v == k) for k in keys], dtype=float)


@test
def chisquare_jensenshannon_and_psi_agree_on_categories():
    ref = {"k": categories(700, [0.3, 0.3, 0.2, 0.15, 0.05])}
    cur = {"k": categories(900, [0.25, 0.35, 0.2, 0.1, 0.1])}
    keys = sorted(set(ref["k"]) | set(cur["k"]))
    rc, cc = counts(ref["k"], keys), counts(cur["k"], keys)

    got = compare(ref, cur, {"k": "chisquare"})["k"]
    want = chisquare(cc, rc * cc.sum() / rc.sum())
    near(got["test_statistic"], want.statistic, "chi2")
    near(got["statistic"], want.pvalue, "chi2 p-value")

    got = compare(ref, cur, {"k": "jensenshannon"})["k"]
    near(got["statistic"], jensenshannon(rc / rc.sum(), cc / cc.sum()), "jensen-shannon")

    def filled(shares):
        smallest = shares[shares > 0].min()
        shares = shares.copy()
        shares[shares == 0] = smallest / 1e6 if smallest <= 1e-4 else 1e-4
        return shares

    got = compare(ref, cur, {"k": "psi"})["k"]
    r, c = filled(rc / rc.sum()), filled(cc / cc.sum())
    near(got["statistic"], float(np.sum((c - r) * np.log(c / r))), "psi")
    print(f"     chisquare p={want.pvalue:.4g}, jensenshannon, psi agree on 5 categories")


@test
def a_category_the_reference_never_had_is_reported_and_tested():
    ref = {"k": categories(500, [0.5, 0.5, 0, 0, 0])}
    cur = {"k": categories(500, [0.4, 0.4, 0.2, 0, 0])}
    got = compare(ref, cur, {})["k"]
    # Two categories in the reference, a third in the current data: chi-squared (the
    # z-test compares two), and a category expected never but seen is p = 0.
    assert got["method"] == "chisquare", got
    assert got["drifted"] and got["statistic"] == 0.0, got
    assert got["quality"]["unseen"] == ["blue"], got["quality"]
    assert abs(got["quality"]["unseen_share"] - 0.2) < 0.06, got["quality"]
    same = compare(ref, {"k": categories(500, [0.5, 0.5, 0, 0, 0])}, {})["k"]
    assert same["method"] == "z" and not same["drifted"], same


if __name__ == "__main__":
    main()
