package portalsite

import (
	"strings"
	"testing"
)

// Each bad PORTAL_* value is refused at boot with an error naming the
// variable; good ones shape the pages' CSP.
func TestSettingsFromEnv(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("k", 32)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
		wantCSP string
	}{
		{"none: no portal", map[string]string{}, "", ""},
		{"a key", map[string]string{"PORTAL_SIGNING_KEY": key}, "", "frame-ancestors 'none'"},
		{"a key and an old one", map[string]string{"PORTAL_SIGNING_KEY": key + ", " + strings.Repeat("o", 40)}, "", "frame-ancestors 'none'"},
		{"a short key", map[string]string{"PORTAL_SIGNING_KEY": "short"}, "PORTAL_SIGNING_KEY", ""},
		{"a short old key", map[string]string{"PORTAL_SIGNING_KEY": key + ",short"}, "key 2 of 2", ""},
		{"framed by the app", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_FRAME_ANCESTORS": "https://app.example.com 'self'"}, "", "frame-ancestors https://app.example.com 'self'"},
		{"a path is no origin", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_FRAME_ANCESTORS": "https://app.example.com/x"}, "PORTAL_FRAME_ANCESTORS", ""},
		{"a wildcard is no origin", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_FRAME_ANCESTORS": "*"}, "PORTAL_FRAME_ANCESTORS", ""},
		{"CSS through the colour", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_BRAND_COLOR": "red;}body{display:none"}, "PORTAL_BRAND_COLOR", ""},
		{"a colour", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_BRAND_COLOR": "#0a7cff"}, "", "img-src data:;"},
		{"a logo", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_LOGO_URL": "https://cdn.example.com/logo.png"}, "", "img-src data: https://cdn.example.com;"},
		{"a plain-http logo", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_LOGO_URL": "http://cdn.example.com/logo.png"}, "PORTAL_LOGO_URL", ""},
		{"a session of a week", map[string]string{"PORTAL_SIGNING_KEY": key, "PORTAL_SESSION_TTL": "168h"}, "PORTAL_SESSION_TTL", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := SettingsFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), key) {
					t.Errorf("the error shows the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCSP == "" {
				if len(s.Keys) != 0 {
					t.Errorf("keys without PORTAL_SIGNING_KEY")
				}
				return
			}
			csp, err := s.csp()
			if err != nil || !strings.Contains(csp, tc.wantCSP) {
				t.Errorf("CSP %q, %v; want it to hold %q", csp, err, tc.wantCSP)
			}
		})
	}
}
