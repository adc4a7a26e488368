-- Each run's latest metric values carry the run's project and experiment, so a runs
-- page sorted by a metric reads that experiment's values in order from one index and
-- stops after the page, instead of sorting every run of the experiment (or walking
-- every run of every experiment that logged the key).

ALTER TABLE latest_metrics ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
ALTER TABLE latest_metrics ADD COLUMN experiment_id INTEGER NOT NULL DEFAULT 0;
UPDATE latest_metrics SET
    project_id = COALESCE((SELECT r.project_id FROM runs r WHERE r.run_id = latest_metrics.run_id), ''),
    experiment_id = COALESCE((SELECT r.experiment_id FROM runs r WHERE r.run_id = latest_metrics.run_id), 0);
CREATE INDEX latest_metrics_order ON latest_metrics(project_id, experiment_id, key, value);
