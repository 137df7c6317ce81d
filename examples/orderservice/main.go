// Command orderservice is an example HTTP service that uses package
// producer: POST /orders creates an order and its order.created event in
// one transaction, so the event exists if and only if the order does. The
// relay (queuebox run) delivers the event afterwards.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
//	  go run ./examples/orderservice -listen 127.0.0.1:8080
//	curl -d '{"customer":"ada","totalCents":4200}' http://127.0.0.1:8080/orders
//
// It applies the outbox migrations and creates its orders table at start.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/producer"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	notify := flag.String("notify", "", "PostgreSQL NOTIFY channel the relay listens on (empty: none)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := serve(*listen, *notify, log); err != nil {
		log.Error("orderservice failed", "err", err)
		os.Exit(1)
	}
}

// serve listens on listen and runs the service until SIGINT or SIGTERM.
func serve(listen, notify string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
	if err != nil {
		return err
	}
	return run(ctx, os.Getenv("DATABASE_URL"), notify, ln, log)
}

// run serves on ln until ctx ends.
func run(ctx context.Context, dbURL, notify string, ln net.Listener, log *slog.Logger) error {
	if dbURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return err
	}
	var opts []producer.Option
	if notify != "" {
		opts = append(opts, producer.WithNotify(notify))
	}
	w, err := producer.New(opts...)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(pool, w, log), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("orderservice listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}

// setup applies the outbox migrations and creates the orders table.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := migrations.NewProvider("postgresql", db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("outbox migrations: %w", err)
	}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id          UUID PRIMARY KEY,
		customer    TEXT NOT NULL,
		total_cents BIGINT NOT NULL,
		created_at  TIMESTAMPTZ NOT NULL DEFAULT now())`)
	return err
}

// Order is the request body of POST /orders and the payload of the
// order.created event.
type Order struct {
	ID         string `json:"orderId"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"totalCents"`
}

func newHandler(pool *pgxpool.Pool, w *producer.Writer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(rw http.ResponseWriter, r *http.Request) {
		var o Order
		if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 1<<20)).Decode(&o); err != nil {
			http.Error(rw, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if o.Customer == "" || o.TotalCents <= 0 {
			http.Error(rw, "customer and a positive totalCents are required", http.StatusBadRequest)
			return
		}
		o.ID = uuid.NewString()
		ctx := r.Context()

		// The order and its event: one transaction.
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Error("begin", "err", err)
			http.Error(rw, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`, o.ID, o.Customer, o.TotalCents); err != nil {
			log.Error("insert order", "err", err)
			http.Error(rw, "could not store the order", http.StatusInternalServerError)
			return
		}
		ids, err := w.WritePgx(ctx, tx, producer.Message{
			Topic:         "order.created",
			Key:           o.ID, // events of one order are delivered in order
			AggregateType: "order",
			Payload:       o,
			Headers:       map[string]string{"X-Customer": o.Customer},
		})
		if err != nil {
			log.Error("write event", "err", err)
			http.Error(rw, "could not store the event", http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			log.Error("commit", "err", err)
			http.Error(rw, "could not commit", http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(rw).Encode(map[string]string{"orderId": o.ID, "eventId": ids[0]})
	})
	return mux
}
