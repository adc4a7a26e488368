-- A token may be narrowed to inference (the Open Inference Protocol's REST and gRPC
-- endpoints), for the services that call deployed models, and may carry a rate
-- limit in requests per second, enforced by every server that accepts it.
ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'all';
ALTER TABLE tokens ADD COLUMN rate_limit INTEGER;
