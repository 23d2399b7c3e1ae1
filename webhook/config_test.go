package webhook

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/envtest"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := envtest.Lookup
	for _, tc := range []struct {
		name    string
		lookup  func(string) (string, bool)
		check   func(Settings) bool
		wantErr string
	}{
		{"defaults", env(), func(c Settings) bool {
			return c.OutboxRetention == 7*24*time.Hour && c.MaxPayloadBytes == 256<<10 && !c.Production &&
				c.AllowedCIDRs == nil && c.Concurrency == DefaultConcurrency && c.UserAgent == DefaultUserAgent
		}, ""},
		{"cidrs", env(EnvAllowedCIDRs, " 127.0.0.0/8, ::1 ,10.1.2.3/16"), func(c Settings) bool {
			return slices.Equal(c.AllowedCIDRs, []netip.Prefix{
				netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.1.0.0/16")})
		}, ""},
		{"retention in days", env(EnvOutboxRetention, "30d"), func(c Settings) bool { return c.OutboxRetention == 30*24*time.Hour }, ""},
		{"retention as duration", env(EnvOutboxRetention, "36h"), func(c Settings) bool { return c.OutboxRetention == 36*time.Hour }, ""},
		{"payload limit", env(EnvMaxPayloadBytes, "1024"), func(c Settings) bool { return c.MaxPayloadBytes == 1024 }, ""},
		{"production", env(EnvAppEnv, "production"), func(c Settings) bool { return c.Production }, ""},
		{"bad cidr", env(EnvAllowedCIDRs, "127.0.0.0/33"), nil, EnvAllowedCIDRs},
		{"bad retention", env(EnvOutboxRetention, "a week"), nil, EnvOutboxRetention},
		{"zero retention", env(EnvOutboxRetention, "0s"), nil, EnvOutboxRetention},
		{"bad payload limit", env(EnvMaxPayloadBytes, "-1"), nil, EnvMaxPayloadBytes},
		{"payload limit above the constraint's", env(EnvMaxPayloadBytes, "262145"), nil, EnvMaxPayloadBytes + "=262145: must be in 1..262144"},
		{"bad concurrency", env(EnvConcurrency, "many"), nil, EnvConcurrency},
		{"user agent", env(EnvUserAgent, "acme-hooks/2 (+https://acme.example)"), func(c Settings) bool { return c.UserAgent == "acme-hooks/2 (+https://acme.example)" }, ""},
		{"user agent with a CR LF", env(EnvUserAgent, "acme\r\nX-Injected: 1"), nil, EnvUserAgent + `="acme\r\nX-Injected: 1": must be a header value without control characters`},
		{"user agent with a LF", env(EnvUserAgent, "acme\nX: 1"), nil, EnvUserAgent},
		{"user agent with a NUL", env(EnvUserAgent, "acme\x00"), nil, EnvUserAgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := SettingsFromEnv(tc.lookup)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("SettingsFromEnv: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("SettingsFromEnv error = %v, want it to name %s", err, tc.wantErr)
			case tc.check != nil && !tc.check(c):
				t.Fatalf("SettingsFromEnv = %+v", c)
			}
		})
	}
}

// TestNewDispatcherRefusesBadUserAgent: a library caller's Settings are
// held to what WEBHOOK_USER_AGENT is, before any delivery is attempted.
func TestNewDispatcherRefusesBadUserAgent(t *testing.T) {
	t.Parallel()
	_, err := NewDispatcher(nil, Config{Settings: Settings{UserAgent: "acme\r\nX-Injected: 1"}})
	if err == nil || !strings.Contains(err.Error(), "UserAgent") {
		t.Fatalf("NewDispatcher = %v, want an error naming UserAgent", err)
	}
}
