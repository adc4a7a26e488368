-- Objects are stored under names derived from their keys (a keyed hash), so the
-- layout on a backend neither limits nor reveals the keys. This index is how keys
-- are listed and sized; the object itself is found by recomputing its name.
CREATE TABLE stored_objects (
    location     TEXT NOT NULL,
    object_key   TEXT COLLATE "C" NOT NULL,
    size         BIGINT NOT NULL,
    stored_size  BIGINT NOT NULL,
    modified_at  BIGINT NOT NULL,
    PRIMARY KEY (location, object_key)
);

-- Installation-wide storage settings: the data key that names objects, and which
-- locations have been moved from the earlier key-as-path layout.
CREATE TABLE storage_settings (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
