-- lock claim: lock up to .Limit ready rows with FOR UPDATE SKIP LOCKED, in the
-- batch's transaction, which stays open while the batch is published (lock
-- mode, docs/adopting.md). Nothing is written: a locked row stays pending,
-- and a crash rolls back to exactly what was there.
--
-- A row is ready when it is pending, due, and the head of its key: no
-- pending (or, if the table has that value, processing) row of the same
-- non-empty key comes before it in (sequence, id) order. The head probe is
-- a plain read, so a head that another replica has locked is still pending
-- to it and keeps the key's next row waiting: only heads are claimable, at
-- most one per key, and SKIP LOCKED skips the locked heads themselves. A row
-- that another claimer settled and committed after this statement's
-- snapshot is re-checked against the WHERE clause on its newest version
-- when its lock is taken, and is no longer pending.
--
-- .Window bounds the candidates as in claim.sql (claim_window.tmpl): beside a
-- batch that holds every head near the front, an unbounded claim walked the
-- whole backlog behind them for nothing, at every claim.
--
-- .IdleWindow renders the unbounded claim that takes nothing while another
-- transaction holds the first due pending row locked: another relay's batch
-- at the front of the window, which explains why the windowed claim found
-- nothing (as the processing rows under a lease do in claim.sql). Lock mode
-- writes nothing, so the lock itself is the only trace of that batch: the
-- first due pending row is compared with the first one that FOR KEY SHARE
-- SKIP LOCKED can lock, which skips a row another transaction holds FOR
-- UPDATE. KEY SHARE blocks no relay: a relay writes only rows its own batch
-- holds FOR UPDATE, and its claims skip a row under another's KEY SHARE.
-- (It does make an application's DELETE of that row wait for the batch.)
-- The condition does not depend on the candidate:
-- PostgreSQL evaluates it once, before the scan. When the first due row is
-- free but not a head (its key waits for a retry that is not due), the claim
-- walks the backlog as before, and the engine's backoff bounds it. If the
-- claim finds rows, its transaction keeps that KEY SHARE lock on the first
-- due row until the batch ends: another relay's claim skips that row
-- meanwhile, which delays it only if it becomes a head in that time. The
-- engine leaves .IdleWindow off on an unbounded claim now and then
-- (relay/claim.go, wideScan: every five minutes or so), so that a lock held
-- for ever does not keep the rows beyond the window waiting for ever.
SELECT c.{{ col "id" }}::text,
       c.{{ col "topic" }},
       {{ if has "key" }}c.{{ col "key" }}{{ else }}NULL::text{{ end }},
       c.{{ col "payload" }}::text,
       {{ if has "headers" }}c.{{ col "headers" }}::text{{ else }}NULL::text{{ end }},
       {{ if has "aggregateType" }}c.{{ col "aggregateType" }}::text{{ else }}NULL::text{{ end }},
       {{ if has "attempt" }}c.{{ col "attempt" }}::integer{{ else }}0{{ end }},
       {{ if not (has "attempt") }}1{{ else if has "maxAttempts" }}c.{{ col "maxAttempts" }}::integer{{ else }}0{{ end }},
       c.{{ col "sequence" }}::bigint,
       {{ if has "createdAt" }}c.{{ col "createdAt" }}{{ else }}now(){{ end }},
       {{ if has "scheduledAt" }}c.{{ col "scheduledAt" }}{{ else }}now(){{ end }}
FROM {{ .Table }} AS c
WHERE c.{{ col "state" }} = {{ state "pending" }}
{{- if has "scheduledAt" }}
  AND c.{{ col "scheduledAt" }} <= now()
{{- end }}
{{- template "headOfKey" (alias "c") }}
{{- template "claimWindow" . }}
{{- if .IdleWindow }}
  AND {{ template "windowStart" . }} IS NOT DISTINCT FROM (
          SELECT l.{{ col "sequence" }}
          FROM {{ .Table }} AS l
          WHERE l.{{ col "state" }} = {{ state "pending" }}
            {{ if has "scheduledAt" }}AND l.{{ col "scheduledAt" }} <= now(){{ end }}
          ORDER BY l.{{ col "sequence" }}, l.{{ col "id" }}
          LIMIT 1
          FOR KEY SHARE OF l SKIP LOCKED)
{{- end }}
ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
LIMIT {{ .Limit }}
FOR UPDATE OF c SKIP LOCKED
