package story

import (
	"context"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// worker show's fix for a row that failed for its payload is a corrected
// row, not a requeue (which sends the same payload and fails the same
// way), and the console offers no requeue of it; a row that failed at the
// relay keeps the requeue.
func TestFind_FailedForItsPayloadFixIsACorrectedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	for _, tc := range []struct {
		lastError, want, notWant string
		requeueable              bool
	}{
		{"decode payload: json: cannot unmarshal array into Go struct field Payload.to of type string", "send a corrected row", "worker requeue email", false},
		{"decode payload: outbox: invalid email: payload.invoice_number is required for an invoice email", "send a corrected row", "worker requeue email", false},
		{"550 5.1.1 no such user", "worker requeue email", "corrected row", true},
	} {
		var id string
		if err := db.QueryRow(ctx, `INSERT INTO email_outbox (payload, status, attempts, last_error) VALUES ('{}', 'failed', 1, $1) RETURNING id`,
			tc.lastError).Scan(&id); err != nil {
			t.Fatal(err)
		}
		s, err := Find(ctx, db, id, KindEmail)
		if err != nil {
			t.Fatal(err)
		}
		if fix := s.Emails[0].Fix; !strings.Contains(fix, tc.want) || strings.Contains(fix, tc.notWant) {
			t.Errorf("failed with %q: fix %q; want it to say %q, not %q", tc.lastError, fix, tc.want, tc.notWant)
		}
		if got := s.Emails[0].Requeueable; got != tc.requeueable {
			t.Errorf("failed with %q: requeueable %v, want %v", tc.lastError, got, tc.requeueable)
		}
	}
}
