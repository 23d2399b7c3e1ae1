package outbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

// testCtx bounds every test's work, so a regression that blocks fails the
// test instead of hanging the suite. The bound leaves more than one default
// PerRowBudget (60 s): the dispatcher starts no row with less.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fakeSender records every Send; fn, if set, decides its result.
type fakeSender struct {
	mu    sync.Mutex
	calls map[string]int // row id → Send calls
	sent  []smtp.Message // messages fn accepted (or all, without fn)
	fn    func(ctx context.Context, msg smtp.Message) error
}

func newFakeSender(fn func(ctx context.Context, msg smtp.Message) error) *fakeSender {
	return &fakeSender{calls: map[string]int{}, fn: fn}
}

func (s *fakeSender) Send(ctx context.Context, msg smtp.Message) error {
	s.mu.Lock()
	s.calls[msg.RowID]++
	s.mu.Unlock()
	var err error
	if s.fn != nil {
		err = s.fn(ctx, msg)
	}
	if err == nil {
		s.mu.Lock()
		s.sent = append(s.sent, msg)
		s.mu.Unlock()
	}
	return err
}

func (s *fakeSender) callsFor(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

func (s *fakeSender) messages() []smtp.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]smtp.Message(nil), s.sent...)
}

// newDispatcher builds a Dispatcher logging to the test's output.
func newDispatcher(t *testing.T, db DB, sender Sender, modify ...func(*Config)) *Dispatcher {
	t.Helper()
	cfg := Config{
		Sender: sender,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	for _, m := range modify {
		m(&cfg)
	}
	d, err := NewDispatcher(db, cfg)
	if err != nil {
		t.Fatalf("NewDispatcher: %v", err)
	}
	return d
}

// rawPayload is a minimal valid raw payload.
// newSinkMailer starts an in-process SMTP sink and a Mailer that sends to
// it without TLS, both closed when the test ends.
func newSinkMailer(t *testing.T) (*smtpsink.Sink, *smtp.Mailer) {
	t.Helper()
	return newSinkMailerWith(t, smtpsink.Options{})
}

// newSinkMailerWith is newSinkMailer with the sink's faults, hangs and
// refusals set by opts.
func newSinkMailerWith(t *testing.T, opts smtpsink.Options) (*smtpsink.Sink, *smtp.Mailer) {
	t.Helper()
	sink, err := smtpsink.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	mailer, err := smtp.New(smtp.Config{Host: sink.Host(), Port: sink.Port(), Mode: smtp.ModeNone, From: "billing@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mailer.Close() })
	return sink, mailer
}

func rawPayload(to string) map[string]any {
	return map[string]any{"to": to, "subject": "Hello", "text": "Hello there."}
}

// insertRow writes a row the way another language would: plain SQL.
func insertRow(t *testing.T, db DB, kind string, payload any) string {
	t.Helper()
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if err := db.QueryRow(testCtx(t), `INSERT INTO email_outbox (kind, customer_id, payload)
VALUES ($1, 'cus_test', $2) RETURNING id::text`, kind, body).Scan(&id); err != nil {
		t.Fatalf("insert row: %v", err)
	}
	return id
}

// insertRows writes n raw rows, each due a millisecond after the previous
// one, and returns their ids oldest first. The due times are as recent as
// an application's commits would make them: a due time further in the past
// than the claim window's margin is the sweep's to find (claim.Window).
func insertRows(t *testing.T, db DB, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = insertRow(t, db, "raw", rawPayload("ada@example.com"))
		if _, err := db.Exec(testCtx(t), `UPDATE email_outbox SET next_attempt_at = now() - make_interval(secs => $2)
WHERE id = $1`, ids[i], float64(n-i)/1000); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// rowState is a row as the tests inspect it.
type rowState struct {
	Status       string
	Attempts     int
	DueIn        time.Duration // next_attempt_at − now(), by the database clock
	LastError    *string
	DispatchedAt *time.Time
	Payload      map[string]any
	RawPayload   string
}

func getRow(t *testing.T, db DB, id string) rowState {
	t.Helper()
	var r rowState
	var dueIn float64
	err := db.QueryRow(testCtx(t), `SELECT status, attempts, extract(epoch FROM next_attempt_at - now())::float8,
	last_error, dispatched_at, payload::text FROM email_outbox WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &dueIn, &r.LastError, &r.DispatchedAt, &r.RawPayload)
	if err != nil {
		t.Fatalf("read row %s: %v", id, err)
	}
	r.DueIn = time.Duration(dueIn * float64(time.Second))
	if err := json.Unmarshal([]byte(r.RawPayload), &r.Payload); err != nil {
		t.Fatal(err)
	}
	return r
}

func lastErr(r rowState) string {
	if r.LastError == nil {
		return ""
	}
	return *r.LastError
}

// fastLeases are valid lease figures small enough for a test to wait out.
func fastLeases(perRow time.Duration) leases.Config {
	c := leases.Default()
	c.PerRowBudget = perRow
	c.BatchTimeout = time.Duration(c.BatchSize) * perRow
	c.LeaseSlack = perRow
	return c
}

// logRecorder is a slog.Handler that keeps every record, with the
// attributes added through Logger.With, so tests can assert what was
// logged.
type logRecorder struct {
	mu      *sync.Mutex
	records *[]loggedRecord
	attrs   []slog.Attr
}

type loggedRecord struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

func newLogRecorder() logRecorder {
	return logRecorder{mu: &sync.Mutex{}, records: &[]loggedRecord{}}
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.records = append(*h.records, rec)
	h.mu.Unlock()
	return nil
}

func (h logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)
	return h
}

func (h logRecorder) WithGroup(string) slog.Handler { return h }

// find returns the records at level whose message contains msg.
func (h logRecorder) find(level slog.Level, msg string) []loggedRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedRecord
	for _, r := range *h.records {
		if r.Level == level && strings.Contains(r.Message, msg) {
			out = append(out, r)
		}
	}
	return out
}
