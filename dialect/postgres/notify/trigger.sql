-- notify_trigger: the opt-in wake-on-commit trigger (relay.notify with
-- createTrigger: true). It is not one of the bundled migrations: relays
-- that poll never pay for it. A statement-level AFTER INSERT trigger sends
-- one NOTIFY per inserting statement; PostgreSQL delivers it at COMMIT (and
-- folds identical notifications of one transaction into one), so a relay
-- that LISTENs claims the rows as soon as they are visible. Installed by
-- Dialect.EnsureNotifyTrigger, idempotently, under an advisory lock so that
-- replicas starting together do not race on the DDL.
CREATE OR REPLACE FUNCTION {{ .Function }}() RETURNS trigger
LANGUAGE plpgsql AS $qb$
BEGIN
    PERFORM pg_notify({{ .Channel }}, '');
    RETURN NULL;
END
$qb$
