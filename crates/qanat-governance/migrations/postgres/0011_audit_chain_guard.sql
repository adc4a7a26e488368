-- The database itself keeps the audit chain whole: an entry is accepted only if it
-- follows the head (the next sequence number, linked to the head's hash), and its
-- insert advances the head in the same statement. The head's row lock orders
-- concurrent appenders; one that waited finds the head moved and is refused, and reads
-- it again (the server's group commit keeps the head between batches, so a batch is
-- one multi-row INSERT).
CREATE FUNCTION audit_chain_advance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE audit_head SET seq = NEW.seq, hash = NEW.hash
     WHERE id = 1 AND seq = NEW.seq - 1 AND hash = NEW.prev_hash;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'audit chain head moved: the entry does not follow the head'
            USING ERRCODE = '40001';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_chain_advance BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_chain_advance();
