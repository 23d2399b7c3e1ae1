package main

import (
	"bytes"
	"strings"
	"testing"
)

// worker portal link refuses what could not make a working link, naming
// it, and never prints the key.
func TestPortalLink_RefusesBadInput(t *testing.T) {
	t.Parallel()
	const key = "portal-key-0123456789-0123456789-0123456789"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"the portal is off", map[string]string{}, []string{"acme"}, 1, "PORTAL_SIGNING_KEY is not set"},
		{"a ttl of a week", map[string]string{"PORTAL_SIGNING_KEY": key}, []string{"acme", "--ttl", "168h"}, 2, "--ttl 168h0m0s"},
		{"a base that is no address", map[string]string{"PORTAL_SIGNING_KEY": key}, []string{"acme", "--base", "hooks.example.com"}, 2, "--base"},
		{"a tenant with a control character", map[string]string{"PORTAL_SIGNING_KEY": key}, []string{"ac\x01me"}, 1, "control characters"},
		{"a link", map[string]string{"PORTAL_SIGNING_KEY": key}, []string{"acme", "--base", "https://hooks.example.com/"}, 0, "https://hooks.example.com/portal/open?token=v1."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"LOG_LEVEL": "error"}
			for k, v := range tc.env {
				env[k] = v
			}
			var out, errOut bytes.Buffer
			code := runMain(append([]string{"portal", "link"}, tc.args...), func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &out, &errOut)
			if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d saying %q", code, out.String(), errOut.String(), tc.code, tc.want)
			}
			if strings.Contains(out.String()+errOut.String(), key) {
				t.Errorf("the output shows the key")
			}
		})
	}
}
