package outbox

import (
	"errors"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// The pre-send re-check as shipped: a Dispatcher from NewDispatcher
// re-reads a batch's view of the suppression list once it is a second old
// (SuppressionMaxAge), so an address suppressed since the claim is not
// sent to; a view read just now (here: in the future, so no machine is too
// slow for it) is used as it is. Tests elsewhere set the bound to 0 or an
// hour, which said nothing about the shipped one.
func TestSuppressionRecheck_ShippedBoundIsOneSecond(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	d := newDispatcher(t, pool, newFakeSender(nil))
	if d.suppressionMaxAge != time.Second {
		t.Fatalf("shipped re-check bound %s, want 1s", d.suppressionMaxAge)
	}
	if err := Suppress(ctx, pool, "ada@example.com", "complained"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		readAgo    time.Duration
		suppressed bool
	}{
		{"read 1.5 s ago: re-read, and the suppression since the claim holds", 1500 * time.Millisecond, true},
		{"read just now: used as read, before the suppression", -time.Hour, false},
	} {
		v := &suppressionView{addrs: []string{"ada@example.com"},
			s: suppressions{loaded: true, at: time.Now().Add(-tc.readAgo), reasons: map[string]string{}}}
		err := v.recheck(ctx, pool, "ada@example.com", d.suppressionMaxAge, d.suppressionBudget)
		if got := errors.Is(err, smtp.ErrPermanent); got != tc.suppressed {
			t.Errorf("%s: re-check = %v, want suppressed %v", tc.name, err, tc.suppressed)
		}
	}
}
