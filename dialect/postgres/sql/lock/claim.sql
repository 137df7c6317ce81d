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
-- .Window bounds the candidates as in claim.sql (claim_window.tmpl): a window
-- of .Window sequence numbers from the first due pending row at or after $1
-- whose key is not among the keys $2. The windowed claim also answers where
-- its window started and where the next would start (one more row when
-- nothing was locked, its columns NULL but those), so that the engine can
-- look past rows that cannot be claimed now.
{{- if .Window }}
WITH {{ template "windowCTE" . }}
SELECT claimed.*, nx.start, nx.next, NULL::text[] AS blockers
FROM (SELECT {{ template "windowStart" . }} AS start,
             {{ template "nextWindow" . }} AS next) AS nx
LEFT JOIN (
{{- end }}
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
ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
LIMIT {{ .Limit }}
FOR UPDATE OF c SKIP LOCKED
{{- if .Window }}
) AS claimed ON true
{{- end }}
