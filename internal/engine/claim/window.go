package claim

import (
	"sync"
	"time"
)

// DefaultMargin is how far behind the newest due time it has claimed a
// Window starts its next claim: a row whose transaction took up to this
// long to commit after it began is still in front of the window when it
// becomes visible. Rows of longer transactions are left to the sweep.
const DefaultMargin = time.Second

// Window is where one lane's claims start in its table's claim index.
//
// A claim that scans the claim index from its start visits, before the
// first row it can take, the entry of every row claimed or sent since the
// index was last cleaned. With nothing holding back the oldest snapshot
// those entries are marked dead by the scans that pass them and cost
// little. But while any transaction holds an older snapshot (a report,
// pg_dump, a session idle in transaction) neither VACUUM nor the scans
// can mark them, and every claim walks every entry left since the
// snapshot was taken: 12,000 a claim after a minute at 200 msg/s.
//
// A Window keeps the scan off them. Each claim starts at the window's
// edge, a due time behind which no row is left that the lane could claim;
// after each claim the edge moves to the due time of the first claimable
// row still due (one the claim had no room for, one another transaction
// held locked, one webhook admission held back) or, when there is none,
// to the claim's own now(), and never closer to now than Margin. Every row
// the claims leave behind the edge leaves it for good: a claimed row's
// lease, a retry's back-off, a release's and a requeue's now() are due
// times in front of it, so the row comes back into the window when it is
// due. What can appear behind the edge is a row whose transaction began
// more than Margin before it committed (its due time is its transaction's
// start), or one written with a due time in the past; the sweep (Sweep)
// moves those into the window.
//
// The sweep's own rows are the exception to "in front of the edge": it
// gives them its transaction's now(), and while it walks to them (under a
// held snapshot, through every dead entry behind the edge) the claims keep
// moving the edge to a second behind their now(). A sweep slower than the
// Margin would leave its rows behind the edge again, sweep after sweep. So
// a sweep that moved rows rewinds the edge to their due time once it has
// committed (Rewind), and an Advance computed by a claim that began before
// the rewind — one that could not see the swept rows — is dropped.
//
// A Window is safe for concurrent claims; each only ever moves the edge
// forward, since what each claim found holds whatever the others found
// (unless a rewind came between, see above).
type Window struct {
	Margin time.Duration // zero means DefaultMargin

	mu      sync.Mutex
	low     time.Time // the zero time until the first claim: from the start
	rewinds uint64    // Rewind calls so far: a claim's Start sees a count, its Advance must match it
}

// Low is where the next claim starts.
func (w *Window) Low() time.Time {
	if w == nil {
		return time.Time{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.low
}

// Start is where a claim starts, and the token its Advance passes back.
func (w *Window) Start() (low time.Time, token uint64) {
	if w == nil {
		return time.Time{}, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.low, w.rewinds
}

// Advance records a claim made at the database's now, after which next
// (unless zero) was the due time of the first claimable row still due in
// the window (Table.NextSQL); token is what Start returned when the claim
// began. The edge keeps Margin behind now, for transactions about to
// commit. A claim that began before a Rewind moves nothing. Claim calls
// it; a claim of its own (the webhook retry claim) calls it once it has
// run NextSQL's query.
func (w *Window) Advance(token uint64, now, next time.Time) {
	if w == nil {
		return
	}
	margin := w.Margin
	if margin <= 0 {
		margin = DefaultMargin
	}
	edge := now.Add(-margin)
	if !next.IsZero() && next.Before(edge) {
		edge = next
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if token == w.rewinds && edge.After(w.low) {
		w.low = edge
	}
}

// Rewind moves the edge back to to, if it is in front of it, after a sweep
// committed rows due at to: the next claims start there and find them.
// Claims already under way when it is called cannot move the edge.
func (w *Window) Rewind(to time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rewinds++
	if to.Before(w.low) {
		w.low = to
	}
}
