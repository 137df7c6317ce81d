-- lookup: the id of the message that source $1 received with idempotency
-- key $2 (the answer to a duplicate).
SELECT {{ col "id" }}::text FROM {{ .Table }}
WHERE {{ col "source" }} = $1 AND {{ col "idempotencyKey" }} = $2
