-- take: wait for the table's claim turn (claim_turn.tmpl) and hold it until
-- the transaction ends. A replay takes it before its UPDATE, so that it sees
-- every claim committed before it (inspect.go, replayBatch).
SELECT pg_advisory_xact_lock({{ template "claimTurnKey" . }})
