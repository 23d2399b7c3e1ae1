package console

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/postbox/postbox/internal/tooling/testsupport/headless"
)

// The browser tests drive Debian's chromium (testsupport/headless) against
// the real handler and a real database.

// An operator searches an invoice, requeues its failed email, opens an
// event and replays it, and sees each row change on the page.
func TestBrowserSearchRequeueReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := headless.NewTab(t)
	shots := headless.ScreenshotDir(t, filepath.Join("..", "..", ".."))
	shot := headless.Shooter(t, ctx, shots, "console")
	if shots != "" {
		f.sampleSomeHistory(t)
	}

	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+"/console/"), chromedp.WaitVisible(chromedp.ID("outboxes")))
	shot("home")

	// Search the invoice: its timeline, the failed row sealed, the sent one scrubbed.
	headless.Do(t, ctx, chromedp.SendKeys(chromedp.ID("q"), "INV-1042"), chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("timeline")))
	if loc := headless.Location(t, ctx); !strings.HasSuffix(loc, "/console/invoice/INV-1042") {
		t.Fatalf("search INV-1042 landed on %s", loc)
	}
	card := "#email-" + f.failedID
	if got := headless.Text(t, ctx, card+" .status"); got != "failed" {
		t.Fatalf("failed row shows %q", got)
	}
	if got := headless.Text(t, ctx, card+" .secrets"); !strings.Contains(got, "update_url sealed") || !strings.Contains(got, "pdf sealed") {
		t.Fatalf("failed row's secrets: %q", got)
	}
	if got := headless.Text(t, ctx, "#email-"+f.sentID+" .secrets"); !strings.Contains(got, "pdf scrubbed") {
		t.Fatalf("sent row's secrets: %q", got)
	}
	shot("invoice")

	// Requeue it: a confirmation step, then the row is pending.
	headless.Do(t, ctx, chromedp.Click(chromedp.ID("requeue-"+f.failedID)), chromedp.WaitVisible(chromedp.ID("confirm")))
	shot("confirm")
	headless.Do(t, ctx, chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := headless.Text(t, ctx, "#flash"); !strings.Contains(got, "requeued") {
		t.Fatalf("after requeue the page says %q", got)
	}
	if got := headless.Text(t, ctx, card+" .status"); got != "pending" {
		t.Fatalf("after requeue the row shows %q, want pending", got)
	}
	if s := f.status(t, "email_outbox", f.failedID); s != "pending" {
		t.Fatalf("after requeue the row is %s in the database", s)
	}

	// Open the event: both deliveries with their attempts.
	headless.Do(t, ctx, chromedp.SendKeys(chromedp.ID("q"), f.eventID), chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("event")))
	if got := headless.Text(t, ctx, "#delivery-"+f.badDelivery+" .attempts"); !strings.Contains(got, "internal error at the receiver") ||
		!strings.Contains(got, "502") {
		t.Fatalf("failed delivery's attempts: %q", got)
	}
	shot("event")
	if n := f.count(t, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, f.eventID); n != 0 {
		t.Fatalf("%d replays before the click", n)
	}

	// Replay it: a clone appears in the family, delivered.
	headless.Do(t, ctx, chromedp.Click(chromedp.ID("replay-event")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("replays")))
	if got := headless.Text(t, ctx, "#flash"); !strings.Contains(got, "replayed as") {
		t.Fatalf("after replay the page says %q", got)
	}
	var clone string
	if err := f.pool.QueryRow(ctx, `SELECT id FROM webhook_events WHERE replay_of = $1`, f.eventID).Scan(&clone); err != nil {
		t.Fatalf("no clone after the replay: %v", err)
	}
	if got := headless.Text(t, ctx, "#replays"); !strings.Contains(got, clone) || !strings.Contains(got, "succeeded") {
		t.Fatalf("replays table: %q, want clone %s with a succeeded delivery", got, clone)
	}

	// The endpoint, and the failed rows.
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+"/console/endpoint/"+f.badEP.ID), chromedp.WaitVisible(chromedp.ID("health")))
	shot("endpoint")
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+"/console/failed"), chromedp.WaitVisible(chromedp.ID("failed-deliveries")))
	shot("failed")
	headless.Do(t, ctx, chromedp.Navigate(f.server.URL+"/console/customer/cus_42"), chromedp.WaitVisible(chromedp.ID("timeline")))
	shot("customer")

	// A bad search says what was searched.
	headless.Do(t, ctx, chromedp.SendKeys(chromedp.ID("q"), "INV-404"), chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("problem")))
	if got := headless.Text(t, ctx, "#problem"); !strings.Contains(got, `nothing matches "INV-404"`) {
		t.Fatalf("unknown invoice: %q", got)
	}
}

// No page the browser renders holds a secret value: every page the crawl
// reaches is loaded in chromium and its DOM searched.
func TestBrowserNoSecretOnAnyPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := headless.NewTab(t)
	pages := crawl(t, f.browser(t, ""), f.seeds())
	for path := range pages {
		headless.Do(t, ctx, chromedp.Navigate(f.server.URL+path))
		dom := headless.HTML(t, ctx)
		if !strings.Contains(dom, "postbox console") {
			t.Fatalf("%s did not render the console:\n%s", path, dom)
		}
		for _, s := range f.secrets {
			if strings.Contains(dom, s) || strings.Contains(dom, url.QueryEscape(s)) {
				t.Errorf("%s shows the secret %q", path, s)
			}
		}
	}
	t.Logf("%d pages rendered, none with a secret", len(pages))
}

// sampleSomeHistory gives the home page's chart real samples: rows
// become due a few at a time while the console samples.
func (f *fixture) sampleSomeHistory(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for i := range 12 {
		n := []int{3, 6, 10, 14, 12, 9, 20, 25, 18, 8, 4, 2}[i]
		if _, err := f.pool.Exec(ctx, `DELETE FROM email_outbox WHERE customer_id = 'cus_load'`); err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO email_outbox (customer_id, payload, next_attempt_at)
			SELECT 'cus_load', '{"to":"load@example.com","subject":"s","text":"t"}', now() - (g * interval '1 second')
			FROM generate_series(1, %d) g`, n)); err != nil {
			t.Fatal(err)
		}
		f.console.sample(ctx)
		time.Sleep(250 * time.Millisecond) // simulates: time passing between the console's samples, so the chart's points are apart
	}
}
