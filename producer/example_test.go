package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/producer"
)

// Write an order and its event in one transaction. (Not run: it needs a
// database with the outbox table.)
func ExampleWriter_WritePgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	w, err := producer.New(producer.WithNotify("queuebox"))
	if err != nil {
		panic(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total_cents) VALUES ($1, $2)`, "o-1", 4200); err != nil {
		panic(err)
	}
	ids, err := w.WritePgx(ctx, tx,
		producer.Message{Topic: "order.created", Key: "o-1", Payload: map[string]any{"orderId": "o-1", "totalCents": 4200}},
		producer.Message{Topic: "order.reminder", Key: "o-1", Payload: json.RawMessage(`{"orderId":"o-1"}`), Delay: 24 * time.Hour},
	)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
	fmt.Println("event ids:", ids)
}

// Every invalid message is reported before the database is touched, as a
// *ValidationError naming the message and the field.
func ExampleValidationError() {
	w, _ := producer.New()
	_, err := w.WriteSQL(context.Background(), nil,
		producer.Message{Topic: "order.created", Payload: json.RawMessage(`{"orderId":`)},
		producer.Message{Topic: "", Payload: 1},
	)
	var ve *producer.ValidationError
	if errors.As(err, &ve) {
		fmt.Printf("first problem: message %d, field %s: %s\n", ve.Index, ve.Field, ve.Reason)
	}
	fmt.Println(err)
	// Output:
	// first problem: message 0, field payload: is not valid JSON
	// producer: message 0: payload: is not valid JSON
	// producer: message 1: topic: is required
}

// The relay's table mapping (database.outboxTable, columns, states) is
// reused as is; the statement shows where each field goes.
func ExampleWithTable() {
	w, err := producer.New(
		producer.WithDialect(producer.SQLServer),
		producer.WithTable("sales.events", map[string]string{dialect.ColPayload: "body"}, nil),
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(firstLine(w.Statement(false)))
	// Output:
	// INSERT INTO [sales].[events] ([id], [topic], [key], [body], [headers], [aggregate_type], [state], [scheduled_at])
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}
