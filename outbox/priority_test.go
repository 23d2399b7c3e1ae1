package outbox

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A row's priority is its own when given, else its kind's — from Go and
// from plain SQL alike, for built-in kinds and for a kind whose priority
// was declared (a template directory's kind.json) — and a claim returns
// it.
func TestPriority_FromGoSQLAndDeclaredKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := DeclareKindPriorities(ctx, pool, map[Kind]Priority{"digest": PriorityLow, "magic_link": 1}); err != nil {
		t.Fatal(err)
	}
	enqueue := func(e Email) string {
		t.Helper()
		var id string
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, err = Enqueue(ctx, tx, e)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	insert := func(sql string) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, sql).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	reset := Payload{To: "ada@example.com", Subject: "Reset", PasswordResetURL: "https://example.com/r"}
	raw := Payload{To: "ada@example.com", Subject: "Hi", Text: "hi"}
	for _, tc := range []struct {
		name string
		id   string
		want Priority
	}{
		{"Go, password_reset", enqueue(Email{Kind: KindPasswordReset, CustomerID: "c", Payload: reset}), PriorityHigh},
		{"Go, raw", enqueue(Email{CustomerID: "c", Payload: raw}), PriorityNormal},
		{"Go, raw with its own", enqueue(Email{CustomerID: "c", Payload: raw, Priority: 7}), 7},
		{"Go, declared kind", enqueue(Email{Kind: "digest", CustomerID: "c", Payload: raw}), PriorityLow},
		{"SQL, member_invite", insert(`INSERT INTO email_outbox (kind, customer_id, payload) VALUES ('member_invite', 'c', '{"to":"a@example.com","subject":"s"}') RETURNING id`), PriorityHigh},
		{"SQL, invoice", insert(`INSERT INTO email_outbox (kind, customer_id, payload) VALUES ('invoice', 'c', '{"to":"a@example.com","subject":"s"}') RETURNING id`), PriorityNormal},
		{"SQL, its own", insert(`INSERT INTO email_outbox (kind, customer_id, payload, priority) VALUES ('password_reset', 'c', '{"to":"a@example.com","subject":"s"}', 9) RETURNING id`), 9},
		{"SQL, declared kind", insert(`INSERT INTO email_outbox (kind, customer_id, payload) VALUES ('magic_link', 'c', '{"to":"a@example.com"}') RETURNING id`), 1},
	} {
		var got Priority
		if err := pool.QueryRow(ctx, `SELECT priority FROM email_outbox WHERE id = $1`, tc.id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: priority %d, want %d", tc.name, got, tc.want)
		}
	}
	// A claim returns each row's priority.
	rows, err := Claim(ctx, pool, 1, fastLeases(0).ClaimLease(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Priority != PriorityHigh || rows[0].Kind != KindPasswordReset {
		t.Errorf("a claim of one row took %+v, want the password reset (priority %d)", rows, PriorityHigh)
	}
}

// A priority out of range is refused by Go with the field named, and by
// DeclareKindPriorities and NewDispatcher with the kind named, writing
// nothing.
func TestPriority_OutOfRangeRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	e := Email{CustomerID: "c", Payload: Payload{To: "ada@example.com", Subject: "Hi", Text: "hi"}, Priority: 10}
	var verr *ValidationError
	if err := e.Validate(); !errors.As(err, &verr) || verr.Field != "priority" {
		t.Errorf("Validate of priority 10: %v, want a ValidationError of field priority", err)
	}
	if err := DeclareKindPriorities(ctx, pool, map[Kind]Priority{"digest": 5, "weekly": 12}); err == nil {
		t.Error("DeclareKindPriorities took priority 12")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM email_kind_priorities WHERE kind IN ('digest', 'weekly')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("a refused declaration wrote %d kinds (%v)", n, err)
	}
	if _, err := NewDispatcher(pool, Config{Sender: newFakeSender(nil), KindPriorities: map[Kind]Priority{"weekly": 0}}); err == nil {
		t.Error("NewDispatcher took a kind priority of 0")
	}
}

// A Dispatcher records its kinds' priorities before its first claim, so
// the plain-SQL rows of those kinds written after take them.
func TestDispatcher_DeclaresKindPriorities(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	d := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.KindPriorities = map[Kind]Priority{"digest": 9} })
	if _, err := d.Drain(ctx, d.RunTimeout(0)); err != nil {
		t.Fatal(err)
	}
	var p Priority
	if err := pool.QueryRow(ctx, `SELECT priority FROM email_kind_priorities WHERE kind = 'digest'`).Scan(&p); err != nil || p != 9 {
		t.Fatalf("email_kind_priorities holds %d for digest (%v), want 9", p, err)
	}
}
