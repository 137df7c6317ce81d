// Package producer writes outbox rows inside the caller's own database
// transaction: the business change and the message it announces commit (or
// roll back) together, and the relay delivers the message afterwards.
//
// A Writer is built once from the dialect (PostgreSQL or SQL Server) and the
// table mapping, the same dialect.Mapping the relay uses, and is safe for
// concurrent use:
//
//	w, err := producer.New(producer.WithNotify("queuebox"))
//	...
//	tx, _ := pool.Begin(ctx)
//	// ... the business change on tx ...
//	ids, err := w.WritePgx(ctx, tx, producer.Message{Topic: "order.created", Key: orderID, Payload: order})
//	...
//	tx.Commit(ctx)
//
// # The id invariant
//
// Every message gets its id at write time: a UUIDv7 (time-ordered, so the
// primary key index stays compact) unless the caller supplies one. The id
// is returned, is stored in the row, and is the message identity the relay
// sends on every protocol (Nats-Msg-Id, X-Message-Id, message_id) on every
// delivery attempt. A consumer that deduplicates on it (package inbox)
// therefore applies each message exactly once even though the relay
// delivers at least once.
//
// # One statement for many messages
//
// All messages of a Write travel as one JSON array parameter and are
// inserted by one INSERT ... SELECT (jsonb_to_recordset on PostgreSQL,
// OPENJSON on SQL Server): one round trip for any number of messages, no
// bind-parameter limits, and the same statement through pgx and through
// database/sql. The rows get their sequence numbers in call order. The one
// exception: a Write that mixes messages with and without MaxAttempts is
// split into runs of consecutive messages that agree, one statement per
// run, so that rows without MaxAttempts keep the table's default.
//
// # Validation
//
// Every message is checked before the database is touched; each problem is
// a *ValidationError naming the message index and the field.
package producer
