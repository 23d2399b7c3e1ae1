package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// A row whose history retention has dropped says so on its page; a
// webhook event searched for and not found says events were deleted.
func TestPages_SayWhenRetentionDroppedHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.pool.Exec(context.Background(), `INSERT INTO postbox_history_dropped (history, dropped_before, retention) VALUES
		('email_attempts', now() + interval '1 day', '30 days'),
		('webhook_events', now() - interval '90 days', '90 days')`); err != nil {
		t.Fatal(err)
	}
	b := f.browser(t, "")
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/console/email/" + f.sentID, http.StatusOK, "History: attempts before "},
		{"/console/event/0194f3a2-0000-7000-8000-000000000000", http.StatusNotFound, "deleted by retention (WEBHOOK_HISTORY_RETENTION=90d)"},
	} {
		code, body := b.get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d; want %d with %q:\n%s", tc.path, code, tc.code, tc.want, body)
		}
	}
}
