-- How many days a project keeps dataset versions that are neither their dataset's
-- latest nor tagged (NULL: until deleted by hand); gc enforces it.
ALTER TABLE projects ADD COLUMN dataset_version_days BIGINT;
