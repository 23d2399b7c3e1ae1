package console

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The browser tests drive Debian's chromium through the DevTools protocol
// against the real handler and a real database. Locally they skip when no
// chromium is installed; in CI (CI=true) a missing browser fails them, so
// they cannot pass by not running.

// chromium returns the browser to drive, or skips (fails in CI).
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM_BIN"), "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium: CI must run the browser tests (.ci/run installs Debian's chromium; CHROMIUM_BIN names another)")
	}
	t.Skip("no chromium at /usr/bin/chromium (apt-get install chromium, or set CHROMIUM_BIN): browser tests skipped")
	return ""
}

// newTab starts a headless chromium and returns a tab's context.
func newTab(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root, where chromium's sandbox refuses to start
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func html(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An operator searches an invoice, requeues its failed email, opens an
// event and replays it, and sees each row change on the page.
func TestBrowserSearchRequeueReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := newTab(t)
	shots := screenshotDir(t)
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, "console-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if shots != "" {
		f.sampleSomeHistory(t)
	}

	do(t, ctx, chromedp.Navigate(f.server.URL+"/console/"), chromedp.WaitVisible(chromedp.ID("outboxes")))
	shot("home")

	// Search the invoice: its timeline, the failed row sealed, the sent one scrubbed.
	do(t, ctx, chromedp.SendKeys(chromedp.ID("q"), "INV-1042"), chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("timeline")))
	if loc := location(t, ctx); !strings.HasSuffix(loc, "/console/invoice/INV-1042") {
		t.Fatalf("search INV-1042 landed on %s", loc)
	}
	card := "#email-" + f.failedID
	if got := text(t, ctx, card+" .status"); got != "failed" {
		t.Fatalf("failed row shows %q", got)
	}
	if got := text(t, ctx, card+" .secrets"); !strings.Contains(got, "update_url sealed") || !strings.Contains(got, "pdf sealed") {
		t.Fatalf("failed row's secrets: %q", got)
	}
	if got := text(t, ctx, "#email-"+f.sentID+" .secrets"); !strings.Contains(got, "pdf scrubbed") {
		t.Fatalf("sent row's secrets: %q", got)
	}
	shot("invoice")

	// Requeue it: a confirmation step, then the row is pending.
	do(t, ctx, chromedp.Click(chromedp.ID("requeue-"+f.failedID)), chromedp.WaitVisible(chromedp.ID("confirm")))
	shot("confirm")
	do(t, ctx, chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := text(t, ctx, "#flash"); !strings.Contains(got, "requeued") {
		t.Fatalf("after requeue the page says %q", got)
	}
	if got := text(t, ctx, card+" .status"); got != "pending" {
		t.Fatalf("after requeue the row shows %q, want pending", got)
	}
	if s := f.status(t, "email_outbox", f.failedID); s != "pending" {
		t.Fatalf("after requeue the row is %s in the database", s)
	}

	// Open the event: both deliveries with their attempts.
	do(t, ctx, chromedp.SendKeys(chromedp.ID("q"), f.eventID), chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("event")))
	if got := text(t, ctx, "#delivery-"+f.badDelivery+" .attempts"); !strings.Contains(got, "internal error at the receiver") ||
		!strings.Contains(got, "502") {
		t.Fatalf("failed delivery's attempts: %q", got)
	}
	shot("event")
	if n := f.count(t, `SELECT count(*) FROM webhook_events WHERE replay_of = $1`, f.eventID); n != 0 {
		t.Fatalf("%d replays before the click", n)
	}

	// Replay it: a clone appears in the family, delivered.
	do(t, ctx, chromedp.Click(chromedp.ID("replay-event")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("replays")))
	if got := text(t, ctx, "#flash"); !strings.Contains(got, "replayed as") {
		t.Fatalf("after replay the page says %q", got)
	}
	var clone string
	if err := f.pool.QueryRow(ctx, `SELECT id FROM webhook_events WHERE replay_of = $1`, f.eventID).Scan(&clone); err != nil {
		t.Fatalf("no clone after the replay: %v", err)
	}
	if got := text(t, ctx, "#replays"); !strings.Contains(got, clone) || !strings.Contains(got, "succeeded") {
		t.Fatalf("replays table: %q, want clone %s with a succeeded delivery", got, clone)
	}

	// The endpoint, and the failed rows.
	do(t, ctx, chromedp.Navigate(f.server.URL+"/console/endpoint/"+f.badEP.ID), chromedp.WaitVisible(chromedp.ID("health")))
	shot("endpoint")
	do(t, ctx, chromedp.Navigate(f.server.URL+"/console/failed"), chromedp.WaitVisible(chromedp.ID("failed-deliveries")))
	shot("failed")
	do(t, ctx, chromedp.Navigate(f.server.URL+"/console/customer/cus_42"), chromedp.WaitVisible(chromedp.ID("timeline")))
	shot("customer")

	// A bad search says what was searched.
	do(t, ctx, chromedp.SendKeys(chromedp.ID("q"), "INV-404"), chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("problem")))
	if got := text(t, ctx, "#problem"); !strings.Contains(got, `nothing matches "INV-404"`) {
		t.Fatalf("unknown invoice: %q", got)
	}
}

// No page the browser renders holds a secret value: every page the crawl
// reaches is loaded in chromium and its DOM searched.
func TestBrowserNoSecretOnAnyPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := newTab(t)
	pages := crawl(t, f.browser(t, ""), f.seeds())
	for path := range pages {
		do(t, ctx, chromedp.Navigate(f.server.URL+path))
		dom := html(t, ctx)
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

// screenshotDir is where the browser test writes its screenshots:
// docs/screenshots when POSTBOX_SCREENSHOTS=1, else nowhere.
func screenshotDir(t *testing.T) string {
	if os.Getenv("POSTBOX_SCREENSHOTS") != "1" {
		return ""
	}
	dir := filepath.Join("..", "..", "..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
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
