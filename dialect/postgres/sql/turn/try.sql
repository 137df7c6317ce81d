-- try: take the table's claim turn if it is free, without waiting; false
-- when another claim holds it. A poll (dialect.ClaimParams.Poll) skips then.
SELECT pg_try_advisory_xact_lock({{ template "claimTurnKey" . }})
