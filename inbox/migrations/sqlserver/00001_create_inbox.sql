-- The inbox: one row per message a consumer group has applied. Times are
-- UTC from the database clock (SYSUTCDATETIME()). The primary key is
-- NONCLUSTERED: two NVARCHAR(255) columns take up to 1020 bytes, above the
-- 900-byte limit of a clustered key but within the 1700 bytes of a
-- nonclustered one (SQL Server 2016+). The table is clustered on
-- (consumer_group, processed_at), the order Purge deletes in.
--
-- Written for SQL Server 2016+ and checked for syntax only: no SQL Server
-- was available where it was written (see docs/consuming.md).

-- +goose Up
CREATE TABLE queuebox_inbox (
    consumer_group NVARCHAR(255) NOT NULL,
    message_id     NVARCHAR(255) NOT NULL,
    processed_at   DATETIME2     NOT NULL CONSTRAINT queuebox_inbox_processed_df DEFAULT SYSUTCDATETIME(),
    CONSTRAINT queuebox_inbox_pkey PRIMARY KEY NONCLUSTERED (consumer_group, message_id)
);

CREATE CLUSTERED INDEX queuebox_inbox_processed_idx ON queuebox_inbox (consumer_group, processed_at);

-- +goose Down
DROP TABLE queuebox_inbox;
