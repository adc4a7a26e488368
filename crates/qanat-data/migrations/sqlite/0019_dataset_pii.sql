-- Columns a dataset declares to hold personal data, besides its schema's `pii: true`
-- ones (a JSON array of names): pseudonymized for readers without the project's PII
-- permission, and not flagged as undeclared when a push finds personal data in them.
ALTER TABLE datasets ADD COLUMN pii_columns TEXT NOT NULL DEFAULT '[]';
