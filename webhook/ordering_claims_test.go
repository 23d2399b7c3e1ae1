package webhook

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A delivery born held behind a racing mark is looked at again once its
// birth commits (takeRaced) and taken for a first attempt only if no claim
// has leased it meanwhile: one a hand-on or a turn claim already took (its
// attempt counted, its lease running) is that claimer's, and taking it
// again would send it from two processes.
func TestOrdering_RacedBirthIsTakenOnlyIfNoClaimLeasedIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := provenEndpoint(t, pool, rc.URL)
	for _, tc := range []struct {
		name     string
		key      string
		attempts int // what a claim before the look again counted
		taken    bool
	}{
		{"never claimed", "in_new", 0, true},
		{"leased by a hand-on or a turn claim", "in_leased", 1, false},
	} {
		id := orderedDelivery(t, pool, ep.ID, tc.key, string(StatusPending), tc.attempts, time.Minute)
		if tc.attempts > 0 {
			if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = next_retry_at WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
		}
		d := delivery{id: id, raced: true}
		want := tc.attempts
		if tc.taken {
			want++
		}
		if got := p.takeRaced(ctx, &d); got != tc.taken || d.leased != tc.taken {
			t.Errorf("%s: takeRaced = %v (leased %v), want %v", tc.name, got, d.leased, tc.taken)
		}
		if n := oneDelivery(t, pool, `id = $1`, id).Attempts; n != want {
			t.Errorf("%s: %d attempts after the look again, want %d", tc.name, n, want)
		}
	}
}

// A chain checks, before it sends the delivery its mark handed the key on
// to, that it still may — the lease leaves the attempt its budget and the
// pipeline is not stopping — as every unit does before its first request:
// here the pipeline stops while the head is out, so the next is released,
// not sent.
func TestOrdering_ChainSendsNothingHandedOnOnceStopping(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			p.Stop()
		}
		w.WriteHeader(http.StatusNoContent)
	})
	provenEndpoint(t, pool, rc.URL)
	ids := enqueueOrdered(t, pool, "in_1", 3)
	if sum, err := p.Drain(ctx, testWindow); err != nil {
		t.Logf("drain after the stop: %+v, %v", sum, err)
	}
	if got := receivedOrder(t, rc.requests())["in_1"]; !slices.Equal(got, []int{0}) {
		t.Fatalf("sent %v, want only the head, out when the pipeline stopped", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE event_id = ANY ($1::uuid[]) AND status = 'succeeded'`, ids); n != 1 {
		t.Fatalf("%d deliveries succeeded, want the head's", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE leased_until > now()`); n != 0 {
		t.Fatalf("%d deliveries still leased after the stop: the chain kept what its mark handed on", n)
	}
}
