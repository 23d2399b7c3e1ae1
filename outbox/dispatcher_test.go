package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/leases"
	"github.com/postbox/postbox/smtp"
)

func TestNewDispatcher_Validates(t *testing.T) {
	t.Parallel()
	broken := leases.Default()
	broken.BatchTimeout = broken.ClaimLease(broken.BatchSize)
	for _, tc := range []struct {
		name string
		db   DB
		cfg  Config
		want string
	}{
		{"no db", nil, Config{Sender: newFakeSender(nil)}, "db is nil"},
		{"no sender", &fakeDB{}, Config{}, "Sender is required"},
		{"broken lease chain", &fakeDB{}, Config{Sender: newFakeSender(nil), Leases: broken}, "BatchTimeout < ClaimLease(BatchSize)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewDispatcher(tc.db, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewDispatcher: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// fakeDB satisfies DB for constructor tests that never reach the database.
type fakeDB struct{ DB }

// The SQL contract: a plain INSERT of (kind, customer_id, payload) is
// enough to get an email sent, and the dispatched mark records it.
func TestDispatch_PlainSQLInsertIsSent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "raw", map[string]any{
		"to": "Ada Lovelace <ada@example.com>", "subject": "Hello", "text": "Plain", "html": "<p>Rich</p>",
	})
	// A previous transient failure left a last_error; success clears it.
	if _, err := pool.Exec(ctx, `UPDATE email_outbox SET last_error = 'earlier 451' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	sender := newFakeSender(nil)
	res, err := newDispatcher(t, pool, sender).runBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 1 || res.Started != 1 || res.Sent != 1 {
		t.Fatalf("result %+v, want one row claimed, started and sent", res)
	}
	msgs := sender.messages()
	if len(msgs) != 1 {
		t.Fatalf("sent %d messages, want 1", len(msgs))
	}
	want := smtp.Message{RowID: id, To: "Ada Lovelace <ada@example.com>", Subject: "Hello", Text: "Plain", HTML: "<p>Rich</p>"}
	if got := msgs[0]; got.RowID != want.RowID || got.To != want.To || got.Subject != want.Subject || got.Text != want.Text || got.HTML != want.HTML {
		t.Errorf("sent %+v, want %+v", got, want)
	}
	st := getRow(t, pool, id)
	if st.Status != "dispatched" || st.DispatchedAt == nil || st.LastError != nil || st.Attempts != 1 {
		t.Errorf("row %+v, want dispatched with dispatched_at, last_error cleared, 1 attempt", st)
	}
}

// Permanent errors — an SMTP 5xx, anything wrapping smtp.ErrPermanent, header
// injection — fail the row after one attempt instead of riding the backoff
// (see docs/design/outbox-transport.md, Redelivery semantics).
func TestDispatch_PermanentErrorFailsAfterOneAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		sendErr   error
		renderer  Renderer
		wantError string
		wantSends int
	}{
		{name: "smtp 5xx", sendErr: &smtp.ReplyError{Code: 550, EnhancedCode: "5.1.1", Text: "mailbox unavailable"},
			wantError: "550", wantSends: 1},
		{name: "wrapped ErrPermanent", sendErr: fmt.Errorf("compose: bad address: %w", smtp.ErrPermanent),
			wantError: "bad address", wantSends: 1},
		{name: "header injection", renderer: RendererFunc(func(_ context.Context, row *Row) (smtp.Message, error) {
			return smtp.Message{Subject: "Hi\r\nBcc: everyone@example.com", Text: "x"}, nil
		}), wantError: "header injection", wantSends: 0},
		{name: "renderer says permanent", renderer: RendererFunc(func(context.Context, *Row) (smtp.Message, error) {
			return smtp.Message{}, fmt.Errorf("template for plan missing: %w", smtp.ErrPermanent)
		}), wantError: "template for plan missing", wantSends: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
			sender := newFakeSender(func(context.Context, smtp.Message) error { return tc.sendErr })
			d := newDispatcher(t, pool, sender, func(c *Config) { c.Renderer = tc.renderer })

			res, err := d.runBatch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st := getRow(t, pool, id)
			if res.Failed != 1 || st.Status != "failed" || st.Attempts != 1 || !strings.Contains(lastErr(st), tc.wantError) {
				t.Fatalf("result %+v, row %s after %d attempts with last_error %q; want failed after 1 attempt, error containing %q",
					res, st.Status, st.Attempts, lastErr(st), tc.wantError)
			}
			if got := sender.callsFor(id); got != tc.wantSends {
				t.Errorf("Send called %d times, want %d", got, tc.wantSends)
			}
			if again, _ := d.runBatch(ctx); again.Claimed != 0 {
				t.Errorf("a failed row was claimed again: %+v", again)
			}
		})
	}
}

// A payload that cannot be decoded (or breaks the Enqueue rules) at send
// time fails at once with the decode error; nothing is sent. The payload
// is written by an UPDATE, as a row from before migration 00028 holds it:
// that migration's trigger refuses a wrong type at insert.
func TestDispatch_DecodeErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		kind    string
		payload string
		want    string
	}{
		{"wrong type", "raw", `{"to": 42, "subject": "s", "text": "t"}`, "cannot unmarshal"},
		{"no recipient", "raw", `{"subject": "s", "text": "t"}`, "payload.to is required"},
		{"two recipients", "raw", `{"to": "a@example.com, b@example.com", "subject": "s", "text": "t"}`, "payload.to"},
		{"no body", "raw", `{"to": "a@example.com", "subject": "s"}`, "payload.text or payload.html is required"},
		{"pdf not base64", "raw", `{"to": "a@example.com", "subject": "s", "text": "t", "pdf": "%%%"}`, "illegal base64"},
		{"invoice without number", "invoice", `{"to": "a@example.com", "subject": "s"}`, "payload.invoice_number"},
		{"reset link not a URL", "password_reset", `{"to": "a@example.com", "subject": "s", "password_reset_url": "javascript:alert(1)"}`, "payload.password_reset_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			var id string
			if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload) VALUES ($1, 'c', '{}')
RETURNING id::text`, tc.kind).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `UPDATE email_outbox SET payload = $2::jsonb WHERE id = $1`, id, tc.payload); err != nil {
				t.Fatal(err)
			}
			sender := newFakeSender(nil)
			if _, err := newDispatcher(t, pool, sender).runBatch(ctx); err != nil {
				t.Fatal(err)
			}
			st := getRow(t, pool, id)
			if st.Status != "failed" || st.Attempts != 1 || !FailedForPayload(lastErr(st)) ||
				!strings.Contains(lastErr(st), tc.want) {
				t.Fatalf("row %s after %d attempts, last_error %q; want failed after 1 with a decode error containing %q",
					st.Status, st.Attempts, lastErr(st), tc.want)
			}
			if sender.callsFor(id) != 0 {
				t.Error("an undecodable row was sent")
			}
		})
	}
}

// The suppression step consults email_suppressions (case-insensitively); a
// suppressed recipient fails at once with the reason, and the rest of the
// batch is sent.
func TestDispatch_SuppressedRecipientFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	if err := Suppress(ctx, pool, "Bounced@Example.com", "hard bounce 2026-10-01"); err != nil {
		t.Fatal(err)
	}
	suppressed := insertRow(t, pool, "raw", rawPayload("Bounce Me <BOUNCED@example.COM>"))
	fine := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	sender := newFakeSender(nil)
	res, err := newDispatcher(t, pool, sender).runBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 1 || res.Sent != 1 {
		t.Errorf("result %+v, want one failed and one sent", res)
	}
	st := getRow(t, pool, suppressed)
	if st.Status != "failed" || st.Attempts != 1 || !strings.Contains(lastErr(st), "suppressed: hard bounce 2026-10-01") {
		t.Errorf("suppressed row: %s after %d attempts, last_error %q; want failed at once with the reason", st.Status, st.Attempts, lastErr(st))
	}
	if sender.callsFor(suppressed) != 0 || sender.callsFor(fine) != 1 {
		t.Error("the suppressed recipient was mailed, or the other one was not")
	}
}

// A transient failure keeps the row pending, due after its backoff slot;
// the claim (not the mark) counts each attempt; when the 15 slots — about
// 72 hours in all — run out, the row fails with the last error.
func TestDispatch_TransientBackoffThenFailedWhenSlotsRunOut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	sender := newFakeSender(func(context.Context, smtp.Message) error {
		return &smtp.ReplyError{Code: 451, EnhancedCode: "4.3.0", Text: "local error in processing"}
	})
	d := newDispatcher(t, pool, sender)

	var waited time.Duration
	for attempt := 1; attempt <= len(leases.EmailBackoff); attempt++ {
		res, err := d.runBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := getRow(t, pool, id)
		if res.Retried != 1 || st.Status != "pending" || st.Attempts != attempt || !strings.Contains(lastErr(st), "451") {
			t.Fatalf("attempt %d: result %+v, row %s with %d attempts and last_error %q; want pending, retried, attempts %d",
				attempt, res, st.Status, st.Attempts, lastErr(st), attempt)
		}
		slot := leases.EmailBackoff[attempt-1]
		if lo, hi := slot*9/10-2*time.Second, slot*11/10; st.DueIn < lo || st.DueIn > hi {
			t.Fatalf("attempt %d: due in %s, want slot %s ±10%%", attempt, st.DueIn, slot)
		}
		waited += st.DueIn
		// Time passes: the slot is over.
		if _, err := pool.Exec(ctx, `UPDATE email_outbox SET next_attempt_at = now() WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	if waited < 64*time.Hour || waited > 80*time.Hour {
		t.Errorf("the 15 backoff waits total %s, want about 72h", waited)
	}

	res, err := d.runBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := getRow(t, pool, id)
	wantAttempts := len(leases.EmailBackoff) + 1
	if res.Failed != 1 || st.Status != "failed" || st.Attempts != wantAttempts ||
		!strings.Contains(lastErr(st), fmt.Sprintf("gave up after %d attempts", wantAttempts)) || !strings.Contains(lastErr(st), "451") {
		t.Fatalf("after the slots ran out: result %+v, row %s with %d attempts, last_error %q; want failed after %d",
			res, st.Status, st.Attempts, lastErr(st), wantAttempts)
	}
	if sender.callsFor(id) != wantAttempts {
		t.Errorf("sent %d times, want %d", sender.callsFor(id), wantAttempts)
	}
}

// The backoff schedule itself: 15 slots summing to about 72 hours.
func TestBackoff_FifteenSlotsAbout72Hours(t *testing.T) {
	t.Parallel()
	if n := len(leases.EmailBackoff); n != 15 {
		t.Fatalf("EmailBackoff has %d slots, want 15", n)
	}
	if total := leases.EmailBackoff.Total(); total < 70*time.Hour || total > 74*time.Hour {
		t.Fatalf("EmailBackoff totals %s, want about 72h", total)
	}
	if _, ok := leases.EmailBackoff.Next(16); ok {
		t.Fatal("a 16th slot exists")
	}
}

// A refused STARTTLS or forbidden plaintext is a relay or configuration
// problem: transient (fixing it resumes delivery without an operator), and
// logged at error level every time.
func TestDispatch_TLSConfigErrorsAreTransientAndLoggedAsErrors(t *testing.T) {
	t.Parallel()
	for _, sentinel := range []error{smtp.ErrSTARTTLSRefused, smtp.ErrPlaintextForbidden} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			id := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
			logs := newLogRecorder()
			sender := newFakeSender(func(context.Context, smtp.Message) error { return fmt.Errorf("relay.example.com: %w", sentinel) })
			d := newDispatcher(t, pool, sender, func(c *Config) { c.Logger = slog.New(logs) })
			if _, err := d.runBatch(ctx); err != nil {
				t.Fatal(err)
			}
			st := getRow(t, pool, id)
			if st.Status != "pending" || st.DueIn <= 0 {
				t.Errorf("row %s due in %s, want pending with a backoff", st.Status, st.DueIn)
			}
			lines := logs.find(slog.LevelError, "will retry")
			if len(lines) != 1 || lines[0].Attrs["row_id"] != id || !strings.Contains(lines[0].Attrs["error"], sentinel.Error()) {
				t.Errorf("error-level log lines %+v, want one naming the row and the TLS problem", lines)
			}
		})
	}
}

// A panic anywhere in a drain — the sender or renderer, the payload
// decode (on the claim's goroutines), the mark bookkeeping (on the batch's
// goroutine), the group commit (on a mark writer's goroutine) — is that
// row's failure, recorded with the panic value and counted in the Tally
// (so the shift's River job reports it), and the process survives. Each
// site is on a goroutine River does not guard. A panic in the batch's own
// loop ends the batch: the rows after the victim are released, due at
// once. A panic in a mark's bookkeeping (on the mark's goroutine) records
// that row as a transient failure. A panicked group commit is a failed
// mark, and marks are retried: the row is recorded by the retry.
func TestDrain_PanicAtEverySiteIsRecordedAndCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		site string
		// victim is the victim row's status afterwards: "pending" means
		// retried later, with the panic value in last_error.
		victim string
		// sent is how many rows the drain sent: a batch whose loop
		// panicked releases the rows after the victim.
		sent int
	}{
		{"sender", "pending", 2}, {"renderer", "pending", 2}, {"decode", "pending", 2}, {"record", "pending", 2},
		{"batch", "pending", 1}, {"markgroup", "dispatched", 3},
	} {
		t.Run(tc.site, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			ids := insertRows(t, pool, 3)
			victim := ids[1]
			boom := tc.site + " exploded"
			sender := newFakeSender(func(_ context.Context, msg smtp.Message) error {
				if tc.site == "sender" && msg.RowID == victim {
					panic(boom)
				}
				return nil
			})
			renderer := RendererFunc(func(ctx context.Context, row *Row) (smtp.Message, error) {
				if tc.site == "renderer" && row.ID == victim {
					panic(boom)
				}
				return DefaultRenderer().Render(ctx, row)
			})
			// One slot: the three rows are one batch, as under a backlog.
			d := newDispatcher(t, pool, sender, func(c *Config) { c.Renderer = renderer; c.Concurrency = 1 })
			var once sync.Once
			switch tc.site {
			case "decode":
				d.hooks.decode = func(r *Row) {
					if r.ID == victim {
						panic(boom)
					}
				}
			case "batch":
				d.hooks.beforeRow = func(r *Row) {
					if r.ID == victim {
						once.Do(func() { panic(boom) })
					}
				}
			case "record":
				d.hooks.record = func(r *Row, _ *Result) {
					if r.ID == victim {
						once.Do(func() { panic(boom) })
					}
				}
			case "markgroup":
				d.marks.Hook = func(group []*claim.Mark) {
					for _, c := range group {
						if c.ID == victim {
							once.Do(func() { panic(boom) })
						}
					}
				}
			}
			res, err := d.Drain(ctx, time.Minute)
			wantPanics := 1
			if tc.site == "markgroup" {
				wantPanics = 0 // a mark error, retried
			}
			if err != nil || res.Panics != wantPanics || res.Sent != tc.sent ||
				(wantPanics > 0 && !strings.Contains(strings.Join(res.Errors, "; "), "panic: "+boom)) {
				t.Errorf("Drain = %+v, %v; want %d sent and %d panic recorded with its value", res, err, tc.sent, wantPanics)
			}
			for i, id := range ids {
				st := getRow(t, pool, id)
				switch {
				case id == victim && st.Status != tc.victim:
					t.Errorf("panicking row: %s, want %s", st.Status, tc.victim)
				case id == victim && tc.victim == "pending" &&
					(st.Attempts != 1 || st.DueIn <= 0 || !strings.Contains(lastErr(st), "panic: "+boom)):
					t.Errorf("panicking row: %d attempts, due in %s, last_error %q; want retried later, with the panic value",
						st.Attempts, st.DueIn, lastErr(st))
				case id != victim && i < 1+tc.sent && st.Status != "dispatched":
					t.Errorf("row %s beside the panic: %s, want dispatched", id, st.Status)
				case id != victim && i >= 1+tc.sent && (st.Status != "pending" || st.DueIn > 0):
					t.Errorf("row %s after the panic: %s due in %s, want released (pending, due now)", id, st.Status, st.DueIn)
				}
			}
		})
	}
}

// A row starts only while a full PerRowBudget remains in the batch; the
// claimed rows that cannot start are released at once (due now, still
// pending) instead of waiting out the lease, so the next claim takes them
// immediately.
func TestDispatch_UnstartedRowsReleased(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ids := insertRows(t, pool, 5)
	cfg := fastLeases(2 * time.Second) // PerRowBudget 2 s, lease 12 s

	// The batch gets a budget and a half: the first row starts with a full
	// budget however slow the claim was (up to half a budget), and its send
	// takes the batch until half a budget is left, too little for the rest.
	batch, cancel := context.WithTimeout(ctx, cfg.PerRowBudget*3/2)
	defer cancel()
	end, _ := batch.Deadline()
	var sends atomic.Int32
	sender := newFakeSender(func(context.Context, smtp.Message) error {
		if sends.Add(1) == 1 {
			time.Sleep(time.Until(end.Add(-cfg.PerRowBudget / 2))) // simulates: a send that takes the batch until half a budget is left
		}
		return nil
	})
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Leases = cfg })
	res, err := d.runBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 5 || res.Started != 1 || res.Sent != 1 || res.Released != 4 {
		t.Fatalf("result %+v, want 5 claimed, 1 started and sent, 4 released", res)
	}
	var released []string
	for _, id := range ids {
		st := getRow(t, pool, id)
		if sender.callsFor(id) == 1 {
			continue
		}
		released = append(released, id)
		if st.Status != "pending" || st.DueIn > 0 || st.Attempts != 1 {
			t.Errorf("released row %s: %s, due in %s, %d attempts; want pending, due now, the claim's attempt kept",
				id, st.Status, st.DueIn, st.Attempts)
		}
	}
	rows, err := Claim(ctx, pool, 10, cfg.ClaimLease(10))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowIDs(rows), sorted(released); !equalIDs(got, want) {
		t.Errorf("next claim took %v, want the released rows %v at once", got, want)
	}
}

// Stop (graceful shutdown) lets the started row finish and mark, releases
// the batch's other rows, and claims nothing more.
func TestDispatch_StopReleasesUnstartedRows(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ids := insertRows(t, pool, 5)
	var d *Dispatcher
	sender := newFakeSender(func(ctx context.Context, msg smtp.Message) error {
		d.Stop() // shutdown is asked for while the first row is being sent
		return ctx.Err()
	})
	d = newDispatcher(t, pool, sender)
	res, err := d.runBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Started != 1 || res.Sent != 1 || res.Released != 4 {
		t.Fatalf("result %+v, want the in-flight row sent and the other 4 released", res)
	}
	if st := getRow(t, pool, ids[0]); st.Status != "dispatched" || sender.callsFor(ids[0]) != 1 {
		t.Errorf("in-flight row (the oldest): %s, sent %d times; want dispatched once", st.Status, sender.callsFor(ids[0]))
	}
	for _, id := range ids[1:] {
		if st := getRow(t, pool, id); st.Status != "pending" || st.DueIn > 0 {
			t.Errorf("unstarted row %s: %s due in %s, want pending and due now", id, st.Status, st.DueIn)
		}
	}
	drained, err := d.Drain(ctx, time.Second)
	if err != nil || drained.Claimed != 0 {
		t.Errorf("Drain after Stop: %+v, %v; want nothing claimed", drained, err)
	}
}

// Drain claims batch after batch until no due row is left, with at most
// Concurrency batches in flight, and sends every row exactly once.
func TestDrain_BoundedConcurrencyDeliversAll(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	const rows, concurrency = 42, 3
	ids := insertRows(t, pool, rows)
	var inFlight, maxInFlight atomic.Int32
	sender := newFakeSender(func(context.Context, smtp.Message) error {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // simulates: a send of a few milliseconds, so batches overlap
		inFlight.Add(-1)
		return nil
	})
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Concurrency = concurrency })
	res, err := d.Drain(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != rows || res.Claimed != rows {
		t.Errorf("drain result %+v, want all %d rows claimed and sent", res, rows)
	}
	if m := maxInFlight.Load(); m > concurrency || m < 2 {
		t.Errorf("at most %d sends were in flight at once, want 2..%d", m, concurrency)
	}
	for _, id := range ids {
		if n := sender.callsFor(id); n != 1 {
			t.Errorf("row %s sent %d times", id, n)
		}
	}
}

// Drain starts no batch after its window ends; the batch in flight at that
// moment finishes, and the rows after it stay untouched for the next tick.
func TestDrain_StopsWhenWindowEnds(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ids := insertRows(t, pool, 3*leases.BatchSize)
	// The window is long enough for the first claim on a busy machine; the
	// first batch's sends outlast it, so no second batch may start.
	const window = 2 * time.Second
	start := time.Now()
	sender := newFakeSender(func(context.Context, smtp.Message) error {
		time.Sleep(time.Until(start.Add(window + 50*time.Millisecond))) // simulates: sends that outlast the drain's window
		return nil
	})
	d := newDispatcher(t, pool, sender, func(c *Config) { c.Concurrency = 1 })
	res, err := d.Drain(ctx, window)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claims != 1 || res.Sent != leases.BatchSize {
		t.Errorf("drain result %+v, want exactly the first batch (%d rows) sent", res, leases.BatchSize)
	}
	for _, id := range ids[leases.BatchSize:] {
		if st := getRow(t, pool, id); st.Status != "pending" || st.Attempts != 0 {
			t.Errorf("row %s after the window: %s with %d attempts, want untouched", id, st.Status, st.Attempts)
		}
	}
}

// AfterSend, the post-send report, sees each started row's recorded
// outcome after its mark, on a context bounded by BounceReportBudget.
func TestDispatch_AfterSendReportsEveryOutcome(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	ok := insertRow(t, pool, "raw", rawPayload("ok@example.com"))
	perm := insertRow(t, pool, "raw", rawPayload("perm@example.com"))
	temp := insertRow(t, pool, "raw", rawPayload("temp@example.com"))
	sender := newFakeSender(func(_ context.Context, msg smtp.Message) error {
		switch msg.RowID {
		case perm:
			return &smtp.ReplyError{Code: 554, Text: "rejected"}
		case temp:
			return &smtp.ReplyError{Code: 452, Text: "mailbox full"}
		}
		return nil
	})
	var mu sync.Mutex
	got := map[string]Result{}
	d := newDispatcher(t, pool, sender, func(c *Config) {
		c.AfterSend = func(ctx context.Context, r Result) {
			if deadline, has := ctx.Deadline(); !has || time.Until(deadline) > leases.BounceReportBudget {
				t.Errorf("AfterSend context deadline %v, want within %s", deadline, leases.BounceReportBudget)
			}
			if st := getRow(t, pool, r.RowID); st.Status == "pending" && r.Outcome != OutcomeRetry {
				t.Errorf("AfterSend for %s ran before its mark", r.RowID)
			}
			mu.Lock()
			got[r.RowID] = r
			mu.Unlock()
			if r.RowID == ok {
				panic("a broken report must not matter")
			}
		}
	})
	if _, err := d.runBatch(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]Outcome{ok: OutcomeSent, perm: OutcomeFailed, temp: OutcomeRetry} {
		r, seen := got[id]
		if !seen || r.Outcome != want || r.Mark != nil || r.Attempt != 1 {
			t.Errorf("AfterSend for %s: %+v (seen %v), want outcome %s recorded", id, r, seen, want)
		}
	}
	if r := got[temp]; r.RetryIn < time.Minute*9/10 || r.Err == nil {
		t.Errorf("transient result %+v, want the error and the first backoff slot", r)
	}
}

func equalIDs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
