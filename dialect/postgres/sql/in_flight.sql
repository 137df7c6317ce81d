-- in_flight: 1 when some relay has a batch in flight on the table (a row in
-- the processing state under an unexpired lease, on the database clock),
-- else 0 (dialect.InFlightReporter). The engine asks it before an unbounded
-- claim would walk the backlog (relay/claim.go). It reads the processing
-- rows only, newest claim first: after a long drain without a vacuum the
-- oldest end of the processing index holds the entries of rows long since
-- delivered, while the newest claims are the ones still held.
SELECT count(*)::int
FROM (
    SELECT 1
    FROM {{ .Table }} AS p
    WHERE p.{{ col "state" }} = {{ state "processing" }}
      AND p.{{ col "leaseExpiresAt" }} > now()
    ORDER BY p.{{ col "claimedAt" }} DESC
    LIMIT 1
) AS held
