-- A deleted dataset is hidden and keeps its name until `gc` purges it (versions,
-- manifests, and the chunks no other version uses) after the retention period; a
-- project admin can restore it until then.
ALTER TABLE datasets ADD COLUMN deleted_at BIGINT;
ALTER TABLE datasets ADD COLUMN deleted_by TEXT;
