-- claim: move up to .Limit ready rows to processing under claim token $1 for
-- a lease of $2 microseconds, in one statement. See doc.go and docs/claim.md.
-- .Limit and .Window are literals, not parameters, so that a plan of the
-- claim is the same whether the server makes it for the parameters or not
-- (render.go, claimShapes).
--
-- A row is ready when it is pending, due on the database clock, and the head
-- of its key: no pending or processing row of the same non-empty key comes
-- before it in (sequence, id) order. The readiness condition appears twice.
-- The locking SELECT tests all of it: when a candidate was updated and
-- committed after this statement's snapshot, FOR UPDATE locks the newest
-- version (SKIP LOCKED skips it while it is still locked) and PostgreSQL
-- re-evaluates the SELECT's conditions against that version, so a row that
-- another claimer claimed and committed meanwhile is never claimed twice.
-- The UPDATE repeats the state and due-time conditions. With a unique id
-- (.UniqueID: a unique index on the id alone, as the bundled table's
-- primary key) a repeated head-of-key probe could only agree: the UPDATE
-- reaches the row the SELECT locked, and both probes read the other rows
-- through the same snapshot. On a table whose id is not unique (check
-- notes one) the id join also reaches rows the SELECT never tested, and the
-- UPDATE repeats the probe to keep a second row of a key out.
--
-- With relay.onDead: hold (.Hold), a dead row whose held_at is set also
-- comes before the key's later rows and keeps them waiting, until it is
-- replayed or `queuebox dead release` clears held_at. The head-of-key
-- condition is one shared template, head_of_key.tmpl; the bounded candidate
-- window (.Window) another, claim_window.tmpl.
--
-- .Window renders the windowed claim: it considers only the rows of a
-- window of .Window sequence numbers that starts at the first due pending row
-- at or after $3 whose key is not among the keys $4 (claim_window.tmpl). It
-- answers, beside the rows it claimed, where its window started, where the
-- next one would start, and the keys of the first rows of the window it did
-- not take (windowBlockers): one more row when nothing was claimed, its
-- columns NULL but those three. The engine moves the window past what
-- blocks it when
-- a window's rows cannot be claimed now (keys held by other batches,
-- waiting out a backoff, or held dead), so that no such row keeps the rows
-- behind it waiting (relay/sweep.go).
WITH {{ if .Window }}{{ template "windowCTE" . }},
{{ end }}candidates AS (
    SELECT c.{{ col "id" }}
    FROM {{ .Table }} AS c
    WHERE c.{{ col "state" }} = {{ state "pending" }}
      {{ if has "scheduledAt" }}AND c.{{ col "scheduledAt" }} <= now(){{ end }}
{{- template "headOfKey" (alias "c") }}
{{- template "claimWindow" . }}
    ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
    LIMIT {{ .Limit }}
    FOR UPDATE OF c SKIP LOCKED
){{ if .Window }},
claimed AS (
{{- end }}
UPDATE {{ .Table }} AS o
SET {{ col "state" }} = {{ state "processing" }},
    {{ col "claimToken" }} = $1,
    {{ col "claimedAt" }} = now(),
    -- clock_timestamp(), not now(): now() is the start of the claim's
    -- transaction, before its wait for the claim turn, which would come
    -- off the lease.
    {{ col "leaseExpiresAt" }} = clock_timestamp() + $2::bigint * interval '1 microsecond'
{{- if has "updatedAt" }},
    {{ col "updatedAt" }} = now()
{{- end }}
FROM candidates
-- The repeated state and due-time conditions are written (...) IS TRUE, which
-- means the same in a WHERE clause but is no index condition: the only way to
-- reach o is then the join on id, a primary-key probe per candidate. Without
-- it, on a table whose statistics are missing or stale (new, or just filled),
-- the planner scanned every pending row through the state index and joined
-- it with the candidates row by row: 350 ms instead of 12 ms for 100 rows.
WHERE o.{{ col "id" }} = candidates.{{ col "id" }}
  AND (o.{{ col "state" }} = {{ state "pending" }}) IS TRUE
  {{ if has "scheduledAt" }}AND (o.{{ col "scheduledAt" }} <= now()) IS TRUE{{ end }}
{{- if not .UniqueID }}
{{- template "headOfKey" (alias "o") }}
{{- end }}
RETURNING o.{{ col "id" }}::text,
          o.{{ col "topic" }},
          {{ if has "key" }}o.{{ col "key" }}{{ else }}NULL::text{{ end }},
          o.{{ col "payload" }}::text,
          {{ if has "headers" }}o.{{ col "headers" }}::text{{ else }}NULL::text{{ end }},
          {{ if has "aggregateType" }}o.{{ col "aggregateType" }}{{ else }}NULL::text{{ end }},
          {{ if has "attempt" }}o.{{ col "attempt" }}{{ else }}0{{ end }},
          {{ if not (has "attempt") }}1{{ else if has "maxAttempts" }}o.{{ col "maxAttempts" }}{{ else }}0{{ end }},
          o.{{ col "sequence" }},
          {{ if has "createdAt" }}o.{{ col "createdAt" }}{{ else }}now(){{ end }},
          {{ if has "scheduledAt" }}o.{{ col "scheduledAt" }}{{ else }}now(){{ end }}
{{- if .Window }}
)
SELECT claimed.*, nx.start, nx.next, nx.blockers
FROM (SELECT {{ template "windowStart" . }} AS start,
             {{ template "nextWindow" . }} AS next,
             {{ if has "key" }}{{ template "windowBlockers" . }}{{ else }}NULL::text[]{{ end }} AS blockers) AS nx
LEFT JOIN claimed ON true
{{- end }}
