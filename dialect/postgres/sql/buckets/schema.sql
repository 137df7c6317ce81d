-- buckets schema: the two tables of bucket mode, beside the outbox table
-- (buckets.go). .BucketTable has one row per bucket: the member that owns
-- it and the epoch of that ownership, which grows by one each time the
-- bucket changes hands. .MemberTable has one row per relay: its membership
-- ends at expires_at unless the relay renews it. Created if missing, and
-- filled with the buckets the table lacks.
CREATE TABLE IF NOT EXISTS {{ .MemberTable }} (
    member      uuid        PRIMARY KEY,
    name        text        NOT NULL DEFAULT '',
    joined_at   timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {{ .BucketTable }} (
    bucket      integer     PRIMARY KEY CHECK (bucket >= 0),
    member      uuid,
    epoch       bigint      NOT NULL DEFAULT 0,
    acquired_at timestamptz
);
INSERT INTO {{ .BucketTable }} (bucket)
SELECT g FROM generate_series(0, {{ bucketCount }} - 1) AS g
ON CONFLICT (bucket) DO NOTHING;
