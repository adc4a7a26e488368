-- Which server acts on a monitor: the watcher of one server at a time cuts its
-- windows, fires its alerts and moves their actions along (canary, promotion,
-- rollback); another takes over when the lease runs out (its holder stopped).

ALTER TABLE monitors ADD COLUMN lease_holder TEXT;
ALTER TABLE monitors ADD COLUMN lease_until BIGINT;
