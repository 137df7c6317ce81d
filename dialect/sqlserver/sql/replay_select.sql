-- replay_select: one page of at most @n ids of rows a replay would move, in
-- (sequence, id) order so that batches follow per-key order, starting after
-- the row (@after_seq, @after_id) that ended the previous page (@after_seq
-- NULL: the first page): rows stored as @state (the dead or sent state),
-- with id in the JSON array @ids, topic LIKE @topic_like (a superset of a
-- router pattern, escape \; the dialect filters the page exactly in Go),
-- key @key, updated at or after @since and before @until, and at or after
-- @since_ago_s s + @since_ago_ms ms and before @until_ago_s s +
-- @until_ago_ms ms before SYSUTCDATETIME() on the database clock; a NULL
-- selector matches all. A plain read: it locks nothing, and the replay statement
-- re-checks the state of every id it moves. OPTION (RECOMPILE): the
-- optional selectors are folded away for each call's parameters.
SELECT TOP (@n)
       LOWER(CONVERT(NVARCHAR(36), r.{{ col "id" }})),
       r.{{ col "topic" }},
       r.{{ col "sequence" }}
FROM {{ .Table }} AS r
{{- template "replayFilter" . }}
  AND (@after_seq IS NULL
       OR r.{{ col "sequence" }} > @after_seq
       OR (r.{{ col "sequence" }} = @after_seq AND r.{{ col "id" }} > CONVERT(UNIQUEIDENTIFIER, @after_id)))
ORDER BY r.{{ col "sequence" }}, r.{{ col "id" }}
OPTION (RECOMPILE);
