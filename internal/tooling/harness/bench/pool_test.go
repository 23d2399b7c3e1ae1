package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
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
		Sections:        []string{SectionPoolBacklog, SectionPoolLatency, SectionPoolEnqueue, SectionPoolLowRate},
		EnqueueDuration: time.Second,
		LowRates:        []int{20},
		LowRateDuration: time.Second,
		IdleFor:         time.Second,
		Progress:        testWriter{t, time.Now()},
	}
	rep, err := RunPoolURL(ctx, url, opts)
	if err != nil {
		t.Fatalf("RunPoolURL: %v", err)
	}
	checkRows(t, rep, []wantRow{
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
		{titlePoolLowRate, "idle, nothing running (the machine itself)", ""},
		{titlePoolLowRate, "20 msg/s, postbox, plain SQL INSERT", "20 committed over 1s"},
		{titlePoolLowRate, "20 msg/s, River peer, defaults, InsertTx", "20 committed over 1s"},
		{titlePoolLowRate, "idle, postbox, plain SQL INSERT", "worker"},
		{titlePoolLowRate, "idle, River peer, defaults, InsertTx", "riverpeer"},
	})
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
	o = DefaultPool()
	o.WebhookReplicas = []int{1, 17}
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted 17 webhook replicas")
	}
	o = DefaultPool()
	o.WebhookFanouts = []int{0}
	if err := o.Validate(); err == nil {
		t.Error("Validate accepted 0 endpoints per event")
	}
	o = DefaultPool()
	o.BreakerOff = []string{"EMAIL_RATE_LIMIT=1"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "EMAIL_RATE_LIMIT") {
		t.Errorf("Validate accepted a breaker-off setting that is no webhook setting: %v", err)
	}
}

// TestRunPool_WebhookTinyPreset builds the worker and the River peer and
// runs the pool-webhook and pool-webhook-retry sections at a tiny size. It
// checks only correctness: every delivery arrived once, each replica's
// share is counted, every retry got a due time, every row is there. No
// timing is asserted.
func TestRunPool_WebhookTinyPreset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs worker processes")
	}
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	opts := PoolOptions{
		WebhookReplicas:    []int{1, 2},
		WebhookFanouts:     []int{2},
		WebhookEvents:      40,
		WebhookConcurrency: 4,
		ReceiverDelay:      time.Millisecond,
		WebhookLoad:        2 * time.Second,
		Sections:           []string{SectionPoolWebhook, SectionPoolWebhookRetry},
		Progress:           testWriter{t, time.Now()},
	}
	rep, err := RunPoolURL(ctx, url, opts)
	if err != nil {
		t.Fatalf("RunPoolURL: %v", err)
	}
	checkRows(t, rep, []wantRow{
		{titlePoolWebhook, "R=1 postbox worker run, 40 events × 2 endpoint(s)", "80 delivered, 0 duplicates, 0 lost"},
		{titlePoolWebhook, "R=2 postbox worker run, 40 events × 2 endpoint(s)", "80 delivered, 0 duplicates, 0 lost"},
		{titlePoolWebhook, "R=2 River peer, defaults, 40 events × 2 endpoint(s)", "80 delivered, 0 duplicates, 0 lost"},
		{titlePoolWebhook, "R=2 River peer, tuned, 40 events × 2 endpoint(s)", "80 delivered, 0 duplicates, 0 lost"},
		{titlePoolWebhook, "R=2 postbox worker run, 40 events × 2 endpoint(s), receiver 1ms: share per replica", "0 not attributed"},
		{titlePoolWebhook, "R=2 River peer, tuned, 40 events × 2 endpoint(s), receiver 1ms: share per replica", "0 not attributed"},
		{titlePoolWebhook, "ratio postbox R=2 / R=1, 2 endpoint(s) per event", ""},
		{titlePoolWebhook, "R=2 ratio postbox / River peer, defaults, 2 endpoint(s) per event", ""},
		{titlePoolWebhook, "R=1 postbox worker run, CPU: receiver at once", "40 delivered, 0 duplicates, 0 lost"},
		{titlePoolWebhookRetry, "R=2 first attempt fails", "0 without one; all 40 delivered"},
	})
	if row, _ := rep.Find(titlePoolWebhook, "R=2 postbox worker run, 40 events × 2 endpoint(s), receiver 1ms: share per replica"); strings.Count(row.Figure, "(") != 2 {
		t.Errorf("shares %q: want one per replica", row.Figure)
	}
}

// TestRunPool_WebhookScaleTinyPreset runs the pool-webhook-scale section
// at a tiny size: a seeded history, the steady runs with and without a
// held snapshot beside the River peer, and the drains. It checks only
// that every event arrived once and the seeded database was used; no
// timing is asserted.
func TestRunPool_WebhookScaleTinyPreset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs worker processes")
	}
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	opts := PoolOptions{
		WebhookReplicas:    []int{2},
		WebhookConcurrency: 4,
		ReceiverDelay:      time.Millisecond,
		WebhookScaleEvents: 3000,
		ScaleRate:          20,
		ScaleDuration:      2 * time.Second,
		ScaleBacklog:       100,
		Sections:           []string{SectionPoolWebhookScale},
		Progress:           testWriter{t, time.Now()},
	}
	rep, err := RunPoolURL(ctx, url, opts)
	if err != nil {
		t.Fatalf("RunPoolURL: %v", err)
	}
	var wants []wantRow
	for _, db := range []string{"empty database", "3 k delivered events"} {
		for _, held := range []string{"nothing held", "snapshot held"} {
			wants = append(wants, wantRow{titlePoolWebhookScale, "R=2 " + db + ", " + held + ": postbox worker run", "40 committed"})
		}
		wants = append(wants, wantRow{titlePoolWebhookScale, "backlog drain 100, R=2 " + db, "100 events before the processes started"})
	}
	wants = append(wants,
		wantRow{titlePoolWebhookScale, "R=2 empty database, snapshot held: River peer, defaults", "40 committed"},
		wantRow{titlePoolWebhookScale, "ratio: backlog drain, 3 k delivered events / empty database", ""},
		wantRow{titlePoolWebhookScale, "ratio: p99 at 20 events/s, 3 k delivered events / empty database, snapshot held", ""})
	checkRows(t, rep, wants)
	// The seeded runs' deliveries went to the endpoint that holds the
	// seeded history.
	for _, held := range []string{"nothing held", "snapshot held"} {
		if row, _ := rep.Find(titlePoolWebhookScale, "R=2 3 k delivered events, "+held+": postbox worker run"); !strings.Contains(row.Notes, "41 deliveries joined the seeded endpoint's history") {
			t.Errorf("the seeded run (%s) did not join the seeded history: %q", held, row.Notes)
		}
	}
	// Each path reports the dead tuples of the tables it queues in.
	for path, tables := range map[string][]string{
		"R=2 empty database, snapshot held: postbox worker run":   {"webhook_outbox", "webhook_deliveries"},
		"R=2 empty database, snapshot held: River peer, defaults": {"river_job"},
	} {
		row, _ := rep.Find(titlePoolWebhookScale, path)
		for _, table := range tables {
			if !strings.Contains(row.Notes, table+" after the run: ") {
				t.Errorf("%s: the notes do not give %s's dead tuples: %q", path, table, row.Notes)
			}
		}
	}
}

// wantRow is a row a run's report must hold: section, path prefix, and
// text its notes contain.
type wantRow struct{ section, path, notes string }

func checkRows(t *testing.T, rep *Report, wants []wantRow) {
	t.Helper()
	for _, want := range wants {
		row, ok := rep.Find(want.section, want.path)
		if !ok {
			t.Errorf("no row %q / %q in the report", want.section, want.path)
			continue
		}
		if row.Figure == "" || !strings.Contains(row.Notes, want.notes) {
			t.Errorf("row %q / %q: figure %q, notes %q; want a figure and %q", want.section, want.path, row.Figure, row.Notes, want.notes)
		}
	}
}
