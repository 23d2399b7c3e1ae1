package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestRun_TinyPreset runs every section at a tiny size against a test
// database. It checks the correctness counts each path verifies (rows
// dispatched, messages received, no duplicates) and that the table holds a
// row per figure; it asserts no timing.
func TestRun_TinyPreset(t *testing.T) {
	opts := Quick()
	opts.N = 50
	opts.Rates = []int{100}
	opts.Duration = 500 * time.Millisecond
	opts.Events = 10
	opts.Endpoints = 2
	opts.PoolSize = 8
	opts.PeerWorkers = 20
	opts.Explain = true
	opts.explainRows = 500
	opts.Progress = testWriter{t, time.Now()}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunURL(ctx, pgtest.URL(t), opts)
	if err != nil {
		t.Fatalf("RunURL: %v", err)
	}
	for _, want := range []struct{ section, path string }{
		{"email drain", "postbox Dispatcher.Drain"},
		{"email drain", "postbox Dispatcher.Drain, sealed"},
		{"email drain", "River peer"},
		{"email drain", "ratio postbox / River peer"},
		{"enqueue", "outbox.Enqueue"},
		{"enqueue", "outbox.Enqueue, sealed"},
		{"enqueue", "River InsertTx"},
		{"enqueue", "outbox.Enqueue, wake-up trigger disabled"},
		{"latency commit→DATA", "100 msg/s, in-process lane"},
		{"webhook fan-out", "Pipeline.Drain"},
		{"ceiling", "UPDATE"},
		{"ceiling", "smtp.Mailer.Send"},
	} {
		row, ok := rep.Find(want.section, want.path)
		if !ok {
			t.Errorf("no row %q / %q in the report", want.section, want.path)
			continue
		}
		if row.Figure == "" {
			t.Errorf("row %q / %q has no figure", want.section, want.path)
		}
	}
	for _, path := range []string{"postbox Dispatcher.Drain", "River peer"} {
		row, _ := rep.Find("email drain", path)
		if !strings.Contains(row.Notes, "50 received, 0 duplicates") {
			t.Errorf("%s: notes %q do not confirm 50 messages without duplicates", path, row.Notes)
		}
	}
	if row, _ := rep.Find("webhook fan-out", "Pipeline.Drain"); !strings.Contains(row.Notes, "20 deliveries succeeded, receivers got 20, 0 duplicates") {
		t.Errorf("webhook notes %q do not confirm 20 deliveries without duplicates", row.Notes)
	}
	if len(rep.Explains) != 3 {
		t.Errorf("got %d plans, want the claim of a batch, the claim of Drain's slots and the dispatched mark", len(rep.Explains))
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SECTION", "machine:", "PostgreSQL", "Update on email_outbox"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds, 50, 95, 99, 100)
	want := []time.Duration{50 * time.Millisecond, 95 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("p%v = %v, want %v", []float64{50, 95, 99, 100}[i], got[i], want[i])
		}
	}
	if p := percentiles(nil, 50); p[0] != 0 {
		t.Errorf("percentile of nothing = %v, want 0", p[0])
	}
}

func TestOptions_Validate(t *testing.T) {
	o := Default()
	o.Sections = []string{"email", "nonsense"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("Validate accepted an unknown section: %v", err)
	}
	if got := DeriveClients(32); got != 30 {
		t.Errorf("DeriveClients(32) = %d, want 30", got)
	}
	if got := DeriveClients(1); got != 1 {
		t.Errorf("DeriveClients(1) = %d, want 1", got)
	}
}

func TestMedianRows(t *testing.T) {
	rows := []Row{
		{Section: "s", Path: "a", Figure: "10", Value: 10},
		{Section: "s", Path: "b", Figure: "1", Value: 1},
		{Section: "s", Path: "a", Figure: "30", Value: 30},
		{Section: "s", Path: "b", Figure: "2", Value: 2},
		{Section: "s", Path: "a", Figure: "20", Value: 20, Notes: "n"},
		{Section: "s", Path: "b", Figure: "3", Value: 3},
	}
	got := medianRows(rows, 3)
	if len(got) != 2 || got[0].Path != "a" || got[1].Path != "b" {
		t.Fatalf("medianRows = %+v, want one row for a then b", got)
	}
	if got[0].Value != 20 || got[0].Notes != "median of 3 trials (10, 30, 20); n" {
		t.Errorf("a: %+v, want the 20 trial with every figure in its notes", got[0])
	}
	if got[1].Value != 2 {
		t.Errorf("b: %+v, want the median trial 2", got[1])
	}
}

// testWriter sends progress lines to the test log, with the time since the
// test started, so a slow section shows in -v output.
type testWriter struct {
	t     *testing.T
	start time.Time
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%5.2fs %s", time.Since(w.start).Seconds(), strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
