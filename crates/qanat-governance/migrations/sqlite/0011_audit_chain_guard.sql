-- The database itself keeps the audit chain whole: an entry is accepted only if it
-- follows the head (the next sequence number, linked to the head's hash), and its
-- insert advances the head in the same statement. An appender that knows the head
-- (the server's group commit keeps it between batches) appends a batch with one
-- multi-row INSERT; one whose head is stale is refused and reads it again.
CREATE TRIGGER audit_chain_advance BEFORE INSERT ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit chain head moved: the entry does not follow the head')
     WHERE NOT EXISTS (
        SELECT 1 FROM audit_head WHERE id = 1 AND seq = NEW.seq - 1 AND hash = NEW.prev_hash
     );
    UPDATE audit_head SET seq = NEW.seq, hash = NEW.hash WHERE id = 1;
END;
