-- dead_release: let the later rows of key $1 flow while its dead rows stay
-- dead, by clearing the hold (held_at) of every dead row of the key.
-- updated_at is left alone: it still says when the row died.
{{- if and (has "heldAt") (has "key") }}
UPDATE {{ .Table }}
SET {{ col "heldAt" }} = NULL
WHERE {{ col "key" }} = $1
  AND {{ col "state" }} = {{ state "dead" }}
  AND {{ col "heldAt" }} IS NOT NULL
{{- else }}
-- no held_at (or no key) column: nothing can be held
SELECT 1 WHERE $1::text IS NULL AND false
{{- end }}
