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
-- through the same snapshot (docs/performance.md, lessons 20 and 25). On a
-- table whose id is not unique (check notes one) the id join also reaches
-- rows the SELECT never tested, and the UPDATE repeats the probe to keep a
-- second row of a key out; it costs about a sixth of the claim's time.
--
-- With relay.onDead: hold (.Hold), a dead row whose held_at is set also
-- comes before the key's later rows and keeps them waiting, until it is
-- replayed or `queuebox dead release` clears held_at. The head-of-key
-- condition is one shared template, head_of_key.tmpl; the bounded candidate
-- window (.Window) another, claim_window.tmpl.
--
-- .IdleWindow (dialect.ClaimParams.IdleWindow) renders the claim that takes
-- nothing while a row within .IdleWindow sequence numbers of the first due
-- pending row is processing under an unexpired lease: a batch in flight
-- that explains why the windowed claim found nothing. The condition does
-- not depend on the candidate, so PostgreSQL evaluates it once, before the
-- scan, on the claim's snapshot (a one-time filter: beside such a batch the
-- statement reads the processing index and stops). The engine runs it as
-- the unbounded claim after an empty window. With the table's claim turn
-- (the default) its snapshot includes every claim before it; with
-- relay.claimTurns: replica a claim committed meanwhile can be missed, and
-- the unbounded claim then walks the backlog as it did before the
-- condition existed.
WITH candidates AS (
    SELECT c.{{ col "id" }}
    FROM {{ .Table }} AS c
    WHERE c.{{ col "state" }} = {{ state "pending" }}
      {{ if has "scheduledAt" }}AND c.{{ col "scheduledAt" }} <= now(){{ end }}
{{- template "headOfKey" (alias "c") }}
{{- template "claimWindow" . }}
{{- if .IdleWindow }}
      AND NOT EXISTS (
          SELECT 1
          FROM {{ .Table }} AS f
          WHERE f.{{ col "state" }} = {{ state "processing" }}
            AND f.{{ col "leaseExpiresAt" }} > now()
            AND f.{{ col "sequence" }} < {{ template "windowStart" . }} + {{ .IdleWindow }}::bigint)
{{- end }}
    ORDER BY c.{{ col "sequence" }}, c.{{ col "id" }}
    LIMIT {{ .Limit }}
    FOR UPDATE OF c SKIP LOCKED
)
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
