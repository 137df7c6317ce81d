-- queue: take the table's claim turn, waiting if need be, and answer true
-- when it had to queue for it: the try failed, another claim held the turn
-- (turn.go, turnClaim; relay/share.go). CASE evaluates the waiting lock only
-- when the try fails.
SELECT CASE WHEN pg_try_advisory_xact_lock({{ template "claimTurnKey" . }}) THEN false
            ELSE pg_advisory_xact_lock({{ template "claimTurnKey" . }}) IS NOT NULL END
