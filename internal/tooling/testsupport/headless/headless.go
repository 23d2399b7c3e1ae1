// Package headless drives Debian's chromium through the DevTools protocol
// (chromedp) for the tests of the server-rendered pages: the console and
// the tenant portal. Locally a test skips when no chromium is installed;
// in CI (CI=true) a missing browser fails it, so it cannot pass by not
// running.
package headless

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium returns the browser to drive, or skips (fails in CI).
func Chromium(t *testing.T) string {
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

// NewTab starts a headless chromium and returns a tab's context, bounded
// by two minutes.
func NewTab(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)),
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

// Do runs steps, failing the test on an error.
func Do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// Text is the text of the element sel selects.
func Text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// HTML is the page's DOM as HTML.
func HTML(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Location is the tab's URL.
func Location(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ScreenshotDir is where browser tests keep their screenshots:
// POSTBOX_SCREENSHOTS_DIR when set (CI keeps it as an artifact),
// docs/screenshots when POSTBOX_SCREENSHOTS=1 (to refresh the docs'
// pictures), else "" (none). repoRoot is the repository root as the
// test's directory reaches it.
func ScreenshotDir(t *testing.T, repoRoot string) string {
	t.Helper()
	dir := os.Getenv("POSTBOX_SCREENSHOTS_DIR")
	if dir == "" && os.Getenv("POSTBOX_SCREENSHOTS") == "1" {
		dir = filepath.Join(repoRoot, "docs", "screenshots")
	}
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Shooter returns a function that saves the tab's full page as
// <dir>/<prefix>-<name>.png, or does nothing when dir is "".
func Shooter(t *testing.T, ctx context.Context, dir, prefix string) func(name string) {
	return func(name string) {
		t.Helper()
		if dir == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, prefix+"-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
