package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/testsupport/pgtest"
)

// TestRunPool_TinyPreset builds the worker and the River peer and runs the
// backlog, latency and enqueue pool sections at a tiny size with two
// processes per path. It checks only correctness: every process started
// (a run fails otherwise), no message lost or duplicated, every row of
// the table present. No timing is asserted.
func TestRunPool_TinyPreset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs worker processes")
	}
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	opts := PoolOptions{
		Replicas:        []int{2},
		Concurrency:     4,
		RelayDelay:      time.Millisecond,
		N:               200,
		Rates:           []int{50},
		Duration:        2 * time.Second,
		Sections:        []string{SectionPoolBacklog, SectionPoolLatency, SectionPoolEnqueue},
		EnqueueDuration: time.Second,
		Progress:        testWriter{t, time.Now()},
	}
	rep, err := RunPoolURL(ctx, url, opts)
	if err != nil {
		t.Fatalf("RunPoolURL: %v", err)
	}
	for _, want := range []struct{ section, path, notes string }{
		{titlePoolBacklog, "R=2 postbox worker run", "200 received, 0 duplicates, 0 lost"},
		{titlePoolBacklog, "R=2 River peer, defaults", "200 received, 0 duplicates, 0 lost"},
		{titlePoolBacklog, "R=2 River peer, tuned", "200 received, 0 duplicates, 0 lost"},
		{titlePoolBacklog, "R=2 postbox worker run: share per replica", ""},
		{titlePoolBacklog, "R=2 postbox worker run: peak SMTP connections", ""},
		{titlePoolBacklog, "R=2 ratio postbox / River peer, defaults", ""},
		{titlePoolBacklog, "R=2 ratio postbox / River peer, tuned", ""},
		{titlePoolLatency, "R=2 50 msg/s, postbox, plain SQL INSERT", "100 received, 0 duplicates, 0 lost"},
		{titlePoolLatency, "R=2 50 msg/s, postbox, outbox.Enqueue", "100 received, 0 duplicates, 0 lost"},
		{titlePoolLatency, "R=2 50 msg/s, River peer, defaults", "100 received, 0 duplicates, 0 lost"},
		{titlePoolLatency, "R=2 50 msg/s, River peer, tuned", "100 received, 0 duplicates, 0 lost"},
		{titlePoolEnqueue, "R=2 outbox.Enqueue, wake trigger enabled", "2 worker process(es) running"},
		{titlePoolEnqueue, "R=2 outbox.Enqueue, wake trigger disabled", "2 worker process(es) running"},
		{titlePoolEnqueue, "R=2 wake-up cost: with / without", ""},
	} {
		row, ok := rep.Find(want.section, want.path)
		if !ok {
			t.Errorf("no row %q / %q in the report", want.section, want.path)
			continue
		}
		if row.Figure == "" || !strings.Contains(row.Notes, want.notes) {
			t.Errorf("row %q / %q: figure %q, notes %q; want a figure and %q", want.section, want.path, row.Figure, row.Notes, want.notes)
		}
	}
	if row, _ := rep.Find(titlePoolBacklog, "R=2 postbox worker run: share per replica"); strings.Count(row.Figure, "(") != 2 {
		t.Errorf("shares %q: want one per replica", row.Figure)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "real processes") {
		t.Errorf("printed report lacks the pool run line:\n%s", out.String())
	}
}

func TestPoolOptions_Validate(t *testing.T) {
	o := DefaultPool()
	o.Sections = []string{SectionPoolBacklog, "email"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `"email"`) {
		t.Errorf("Validate accepted an in-process section: %v", err)
	}
	o = DefaultPool()
	o.Replicas = []int{0}
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted 0 replicas")
	}
}
