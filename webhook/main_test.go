package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// loopback admits the test receivers, which httptest binds to loopback.
// Every test that delivers states it explicitly; the SSRF test leaves it
// out to prove the refusal.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// testLogger discards unless POSTBOX_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("POSTBOX_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newDispatcher returns a Dispatcher on pool that may reach loopback, with opts
// applied on top.
// testWindow bounds a test's Drain or DrainRetries: long enough for any
// of them on a busy machine, since each ends once nothing is due.
const testWindow = 30 * time.Second

func newDispatcher(t *testing.T, pool *pgxpool.Pool, edit func(*Config)) *Dispatcher {
	t.Helper()
	opts := Config{Settings: Settings{AllowedCIDRs: loopback}, Logger: testLogger()}
	if edit != nil {
		edit(&opts)
	}
	p, err := NewDispatcher(pool, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// received is one request a receiver got.
type received struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// receiver is a real HTTP server on loopback that records what it gets and
// answers with handle (204 when nil). n is the 1-based request count.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

func newReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{handle: handle}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{Header: r.Header.Clone(), Body: body, At: time.Now()})
		n := len(rc.got)
		rc.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body)) // handlers may read it again
		if rc.handle == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		rc.handle(w, r, n)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// newFailingReceiver is a receiver that answers code until healthy is
// set, then 204.
func newFailingReceiver(t *testing.T, code int) (rc *receiver, healthy *atomic.Bool) {
	t.Helper()
	healthy = new(atomic.Bool)
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if healthy.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(code)
	})
	return rc, healthy
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func createEndpoint(t testing.TB, db DB, url string, eventTypes ...string) Endpoint {
	t.Helper()
	ep, err := CreateEndpoint(context.Background(), db, Settings{}, EndpointParams{URL: url, EventTypes: eventTypes})
	if err != nil {
		t.Fatalf("CreateEndpoint(%s): %v", url, err)
	}
	return ep
}

// provenEndpoint is createEndpoint for an endpoint that has accepted a
// delivery before (proven_at), whose first attempts go out in process
// without the cap a new endpoint's have (bornSQL).
func provenEndpoint(t testing.TB, db DB, url string, eventTypes ...string) Endpoint {
	t.Helper()
	ep := createEndpoint(t, db, url, eventTypes...)
	if _, err := db.Exec(context.Background(), `UPDATE webhook_endpoints SET proven_at = now() WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	return ep
}

// enqueueEvent enqueues ev by the Go API in a transaction of its own,
// committed unless EnqueueEvent refuses it.
func enqueueEvent(t *testing.T, db DB, ev Event) (id string, err error) {
	t.Helper()
	err = pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
		id, err = Enqueuer{}.EnqueueEvent(context.Background(), tx, ev)
		return err
	})
	return id, err
}

// insertOutbox enqueues the way another language would: plain SQL.
func insertOutbox(t *testing.T, db DB, eventType string, payload any) string {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if err := db.QueryRow(context.Background(),
		`INSERT INTO webhook_outbox (event_type, payload) VALUES ($1, $2) RETURNING id`, eventType, string(b)).Scan(&id); err != nil {
		t.Fatalf("insert outbox: %v", err)
	}
	return id
}

// deliveryState is a webhook_deliveries row as tests inspect it.
type deliveryState struct {
	ID          string
	EventID     string
	EndpointID  string
	Status      string
	Attempts    int
	NextRetryAt *time.Time
	LastError   *string
	DeliveredAt *time.Time
}

func deliveries(t *testing.T, db DB, where string, args ...any) []deliveryState {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id, event_id, endpoint_id, status, attempts, next_retry_at, last_error, delivered_at
FROM webhook_deliveries WHERE `+where+` ORDER BY created_at, id`, args...)
	if err != nil {
		t.Fatalf("query deliveries: %v", err)
	}
	defer rows.Close()
	var out []deliveryState
	for rows.Next() {
		var d deliveryState
		if err := rows.Scan(&d.ID, &d.EventID, &d.EndpointID, &d.Status, &d.Attempts, &d.NextRetryAt, &d.LastError, &d.DeliveredAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func oneDelivery(t *testing.T, db DB, where string, args ...any) deliveryState {
	t.Helper()
	ds := deliveries(t, db, where, args...)
	if len(ds) != 1 {
		t.Fatalf("deliveries where %s: got %d rows, want 1", where, len(ds))
	}
	return ds[0]
}

func count(t *testing.T, db DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func dbNow(t *testing.T, db DB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// within reports whether got is in [want-tol, want+tol].
func within(got, want time.Time, tol time.Duration) bool {
	d := got.Sub(want)
	return d >= -tol && d <= tol
}

// counterValue reads a counter from reg by name and label values (in label
// order), without prometheus/testutil (not in go.sum).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i, l := range m.GetLabel() {
				if i >= len(labels) || l.GetValue() != labels[i] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func newBenchServer(tb testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL
}
