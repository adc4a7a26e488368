-- A deleted project is hidden from everyone and keeps its name until `gc` purges it
-- after the retention period; a global admin can restore it until then.
ALTER TABLE projects ADD COLUMN deleted_at BIGINT;
ALTER TABLE projects ADD COLUMN deleted_by TEXT;
