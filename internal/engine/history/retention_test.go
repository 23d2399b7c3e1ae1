package history_test

import (
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/engine/history"
)

func TestRetentionFromEnv(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    history.Retention
		wantErr string
	}{
		{"defaults: webhook 90 days, email for ever", nil, history.Retention{Webhook: 90 * day}, ""},
		{"days", map[string]string{"EMAIL_HISTORY_RETENTION": "365d", "WEBHOOK_HISTORY_RETENTION": "30d"},
			history.Retention{Email: 365 * day, Webhook: 30 * day}, ""},
		{"a Go duration", map[string]string{"EMAIL_HISTORY_RETENTION": "720h"}, history.Retention{Email: 30 * day, Webhook: 90 * day}, ""},
		{"forever", map[string]string{"WEBHOOK_HISTORY_RETENTION": "forever"}, history.Retention{}, ""},
		{"shorter than a week", map[string]string{"EMAIL_HISTORY_RETENTION": "6d"}, history.Retention{},
			`EMAIL_HISTORY_RETENTION="6d": must be at least 7d`},
		{"not a duration", map[string]string{"WEBHOOK_HISTORY_RETENTION": "ninety"}, history.Retention{},
			`WEBHOOK_HISTORY_RETENTION="ninety": must be a positive duration`},
		{"negative", map[string]string{"WEBHOOK_HISTORY_RETENTION": "-90d"}, history.Retention{},
			`WEBHOOK_HISTORY_RETENTION="-90d"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := history.RetentionFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
