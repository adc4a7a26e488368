-- NaN joins the key of the metric order index: whether every run of an experiment has
-- a (non-NaN) value of a metric is then a count of this index's entries beside a count
-- of the runs index's, with no row read, so the last page of runs sorted by a metric
-- need not look at every run for one without a value.
DROP INDEX latest_metrics_order;
CREATE INDEX latest_metrics_order ON latest_metrics(project_id, experiment_id, key, is_nan, value);
