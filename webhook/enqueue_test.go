package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func TestEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	t.Run("in the caller's transaction", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		id, err := Enqueuer{}.Enqueue(ctx, tx, "invoice.paid", []byte(`{"invoice":"in_1"}`))
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1`, id); n != 0 {
			t.Fatal("row visible before commit")
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := count(t, pool, `SELECT count(*) FROM webhook_outbox WHERE id = $1 AND status = 'pending' AND payload = '{"invoice":"in_1"}'`, id); n != 1 {
			t.Fatal("row missing after commit")
		}
	})

	for _, tc := range []struct {
		name      string
		e         Enqueuer
		eventType string
		payload   []byte
		wantErr   error
		wantText  string
	}{
		{"invalid JSON", Enqueuer{}, "invoice.paid", []byte(`{"a":`), ErrInvalidPayload, "not valid JSON"},
		{"empty payload", Enqueuer{}, "invoice.paid", nil, ErrInvalidPayload, "not valid JSON"},
		{"over the default limit", Enqueuer{}, "invoice.paid", []byte(`"` + strings.Repeat("x", DefaultMaxPayloadBytes) + `"`), ErrPayloadTooLarge, "over the limit of 262144 bytes (WEBHOOK_MAX_PAYLOAD_BYTES)"},
		{"over a custom limit", Enqueuer{MaxPayloadBytes: 8}, "invoice.paid", []byte(`{"a":"bcdef"}`), ErrPayloadTooLarge, "over the limit of 8 bytes"},
		{"empty event type", Enqueuer{}, "", []byte(`{}`), nil, "event type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tc.e.Enqueue(ctx, tx, tc.eventType, tc.payload)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Enqueue = %v, want %v mentioning %q", err, tc.wantErr, tc.wantText)
			}
		})
	}

	t.Run("package-level Enqueue", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Enqueue(ctx, tx, "customer.created", []byte(`[1,2,3]`)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
