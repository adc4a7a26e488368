"""Optuna's side of the TPE benchmark: TPESampler (defaults: 10 startup trials,
independent sampling, 24 candidates) on the 10-D Rosenbrock function (x_i in
[-2.048, 2.048]) with in-memory storage: the best value after TRIALS trials for seeds
0..SEEDS and their median, then one run of LONG trials timing each ask (the sampler's
work) per window of 100 trials, as crates/qanat-train/examples/tpe_bench.rs does.
usage: tpe_optuna.py TRIALS SEEDS LONG"""

import json
import statistics
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
trials, seeds, long = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dists = {f"x{i}": optuna.distributions.FloatDistribution(-2.048, 2.048) for i in range(10)}


def rosenbrock(p):
    x = [p[f"x{i}"] for i in range(10)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(9))


def run(seed, n, timing=None):
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    spent, windows = 0.0, []
    for t in range(n):
        start = time.perf_counter()
        trial = study.ask(dists)
        spent += time.perf_counter() - start
        study.tell(trial, rosenbrock(trial.params))
        if timing is not None and (t + 1) % 100 == 0:
            windows.append(round(spent / 100 * 1e3, 3))
            spent = 0.0
    return study.best_value, windows


bests = [run(s, trials)[0] for s in range(seeds)]
_, windows = run(99, long, timing=True)
print(json.dumps({"impl": f"optuna {optuna.__version__} tpe", "trials": trials, "best_per_seed": bests,
                  "median_best": statistics.median(bests), "ms_per_suggestion_per_100_trials": windows}))
