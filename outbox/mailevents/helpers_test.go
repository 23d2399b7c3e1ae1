package mailevents

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a database, a Handler on a real HTTP server, and its metrics.
type fixture struct {
	t       *testing.T
	pool    *pgxpool.Pool
	srv     *httptest.Server
	reg     *prometheus.Registry
	metrics *outbox.Metrics
}

func newFixture(t *testing.T, s Settings, sns SNSOptions) *fixture {
	t.Helper()
	f, _ := newFixtureWith(t, s, sns, nil)
	return f
}

// newFixtureWith is newFixture with the Handler, which before, if set,
// may adjust before the server starts (a test's clock).
func newFixtureWith(t *testing.T, s Settings, sns SNSOptions, before func(*Handler)) (*fixture, *Handler) {
	t.Helper()
	pool := pgtest.NewPool(t)
	reg := prometheus.NewRegistry()
	m := outbox.NewMetrics(reg)
	h, err := New(Config{DB: pool, Settings: s, Metrics: m, Registerer: reg, SNS: sns,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{t: t, pool: pool, srv: srv, reg: reg, metrics: m}, h
}

// rowOf is the row the provider's event was stored against, "" for an
// orphan; it fails the test when no such event was stored.
func (f *fixture) rowOf(provider, eventID string) string {
	f.t.Helper()
	var row string
	err := f.pool.QueryRow(testCtx(f.t), `SELECT coalesce(row_id::text, '') FROM email_events
WHERE provider = $1 AND provider_event_id = $2`, provider, eventID).Scan(&row)
	if err != nil {
		f.t.Fatalf("event %s/%s: %v", provider, eventID, err)
	}
	return row
}

// sentRow inserts a dispatched email_outbox row to addr and returns its id.
func (f *fixture) sentRow(addr string) string {
	f.t.Helper()
	var id string
	err := f.pool.QueryRow(testCtx(f.t), `INSERT INTO email_outbox (customer_id, payload, status, dispatched_at)
VALUES ('cus_1', jsonb_build_object('to', $1::text, 'subject', 'Invoice', 'text', 'Hi'), 'dispatched', now())
RETURNING id::text`, addr).Scan(&id)
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// post sends body to the provider's endpoint with the given headers (and
// basic auth when user is set) and returns the status and answer.
func (f *fixture) post(provider string, body []byte, header http.Header, user, pass string) (int, string) {
	f.t.Helper()
	req, err := http.NewRequestWithContext(testCtx(f.t), http.MethodPost, f.srv.URL+"/events/"+provider, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// state is what a request may change: the events and suppressions, and
// the rows' statuses.
type state struct {
	events, orphans, suppressions, dispatched int
}

func (f *fixture) state() state {
	f.t.Helper()
	var s state
	err := f.pool.QueryRow(testCtx(f.t), `SELECT
	(SELECT count(*) FROM email_events), (SELECT count(*) FROM email_events WHERE row_id IS NULL),
	(SELECT count(*) FROM email_suppressions), (SELECT count(*) FROM email_outbox WHERE status = 'dispatched')`).
		Scan(&s.events, &s.orphans, &s.suppressions, &s.dispatched)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) events(rowID string) []outbox.Event {
	f.t.Helper()
	evs, err := outbox.EventsFor(testCtx(f.t), f.pool, rowID)
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

func (f *fixture) suppression(addr string) (outbox.Suppression, bool) {
	f.t.Helper()
	s, ok, err := outbox.CheckSuppression(testCtx(f.t), f.pool, addr)
	if err != nil {
		f.t.Fatal(err)
	}
	return s, ok
}

func (f *fixture) orphanCount(provider string) float64 {
	return f.metric("postbox_email_event_orphans_total", provider)
}

// metric sums the counters of the family whose first labels (in name
// order) have these values.
func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	var total float64
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			match := true
			for i, lp := range m.GetLabel() {
				if i < len(labels) && lp.GetValue() != labels[i] {
					match = false
				}
			}
			if match {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// answerOf decodes a 200's body.
func answerOf(t *testing.T, body string) answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return a
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oversized is a JSON body just over DefaultMaxBodyBytes.
func oversized() []byte {
	return []byte(`{"RecordType":"Bounce","Details":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`)
}
