package ingest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/ingest"
	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/internal/testenv"
)

// BenchmarkIngest posts b.N signed-in (bearer) webhooks from 64 concurrent
// clients to the ingest server, each stored and handed to the outbox (push)
// in PostgreSQL before its 202, and reports requests/s and the p99
// latency. Run: go test -run '^$' -bench Ingest -benchtime 20000x ./inbox/ingest/
func BenchmarkIngest(b *testing.B) {
	const clients = 64
	pg := testenv.InboxPostgres(b, testenv.WithMaxConns(16))
	table, err := inbox.NewTable(pg.Pool, inbox.TableOptions{})
	if err != nil {
		b.Fatal(err)
	}
	table.Batch(2) // as queuebox run on two cores
	defer table.Close()
	idem, _ := intake.NewField("Idempotency-Key", "")
	order, _ := intake.NewField("", "customer")
	h, err := ingest.New(table, []ingest.Source{{Name: "orders", Auth: ingest.Auth{Scheme: ingest.SchemeBearer, Secrets: []string{bearerToken}},
		Rules: intake.Rules{Source: "orders", IdempotencyKey: idem, OrderKey: order, Headers: intake.NewHeaderPolicy()}}}, ingest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	lat := make([][]time.Duration, clients)
	var next, failed atomic.Int64
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				body := fmt.Sprintf(`{"customer":"c-%d","n":%d,"items":[{"sku":"A-1","qty":2}]}`, i%500, i)
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/inbox/orders", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+bearerToken)
				req.Header.Set("Idempotency-Key", run+"-"+fmt.Sprint(i))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failed.Add(1)
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	}
	if n := failed.Load(); n > 0 {
		b.Errorf("%d requests failed", n)
	}
}
