package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/operator/portaltoken"
)

// API_KEYS holds hashes: an entry that is not one is refused, naming the
// entry but never quoting its value.
func TestParseKeys(t *testing.T) {
	t.Parallel()
	key, entry, err := NewKey("billing")
	if err != nil || !strings.HasPrefix(key, KeyPrefix) || !strings.HasPrefix(entry, "billing:sha256:") {
		t.Fatalf("NewKey: %q %q %v", key, entry, err)
	}
	_, other, _ := NewKey("ops")
	for _, tc := range []struct {
		name, value, wantErr string
		want                 int
	}{
		{"one", entry, "", 1},
		{"two, for a rotation", entry + ", " + other, "", 2},
		{"a key instead of its hash", "billing:" + key, `entry "billing"`, 0},
		{"a bare key", key, "entry 1", 0},
		{"a short hash", "billing:sha256:abcd", `entry "billing"`, 0},
		{"md5", "billing:md5:" + strings.Repeat("a", 32), `entry "billing"`, 0},
		{"a name twice", entry + "," + entry, "used twice", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys, err := ParseKeys(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), key) {
					t.Errorf("the error quotes the key")
				}
				return
			}
			if err != nil || len(keys) != tc.want {
				t.Fatalf("%d keys, %v; want %d", len(keys), err, tc.want)
			}
		})
	}
}

// Who may call what: an application key, a tenant token, the two at each
// other's routes, the hash of a key, an expired or foreign token, and an
// address that keeps failing.
func TestAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acme := f.tenantToken(t, "acme")
	sum := sha256.Sum256([]byte(f.appKey))
	expired, _ := portaltoken.Sign(f.portalKey, portaltoken.PurposeSession, portaltoken.Claims{Tenant: "acme", Nonce: "n", Expires: time.Now().Add(-time.Second).Unix()})
	foreign, _ := portaltoken.Sign([]byte(strings.Repeat("x", 40)), portaltoken.PurposeSession, portaltoken.Claims{Tenant: "acme", Nonce: "n", Expires: time.Now().Add(time.Hour).Unix()})
	link, _ := portaltoken.Sign(f.portalKey, portaltoken.PurposeLink, portaltoken.Claims{Tenant: "acme", Nonce: "n", Expires: time.Now().Add(time.Hour).Unix()})
	for _, tc := range []struct {
		name, method, path, bearer string
		want                       int
	}{
		{"no credential", http.MethodGet, "/endpoints", "", 401},
		{"an application key at its route", http.MethodGet, "/stories/" + f.Acme.ID, f.appKey, 200},
		{"the key's hash, as if it were the key", http.MethodGet, "/stories/" + f.Acme.ID, hex.EncodeToString(sum[:]), 401},
		{"the key's API_KEYS entry", http.MethodGet, "/stories/" + f.Acme.ID, "billing:sha256:" + hex.EncodeToString(sum[:]), 401},
		{"a tenant token at an application route", http.MethodGet, "/stories/" + f.Acme.ID, acme, 403},
		{"a tenant token at its route", http.MethodGet, "/endpoints", acme, 200},
		{"an application key at a tenant token's route", http.MethodGet, "/endpoints", f.appKey, 403},
		{"an application key as the tenant", http.MethodGet, "/tenants/acme/endpoints", f.appKey, 200},
		{"a tenant token as another tenant", http.MethodGet, "/tenants/acme/endpoints", acme, 403},
		{"an expired token", http.MethodGet, "/endpoints", expired, 401},
		{"a token of another key", http.MethodGet, "/endpoints", foreign, 401},
		{"a portal link's token", http.MethodGet, "/endpoints", link, 401},
	} {
		if code, body := f.call(t, tc.method, Prefix+tc.path, tc.bearer, nil); code != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, code, tc.want, body)
		}
	}
	// An address that keeps failing is slowed down; a valid key from it
	// is not.
	var code int
	for range authFailuresPerMinute + 1 {
		code, _ = f.call(t, http.MethodGet, Prefix+"/endpoints", "pbk_guess", nil)
	}
	if code != http.StatusTooManyRequests {
		t.Errorf("failure %d from one address: %d, want 429", authFailuresPerMinute+1, code)
	}
	if code, body := f.call(t, http.MethodGet, Prefix+"/endpoints", acme, nil); code != http.StatusOK {
		t.Errorf("a valid token from that address: %d %s", code, body)
	}
	// Rotating PORTAL_SIGNING_KEY ends the tokens of the old key, as it
	// ends portal sessions.
	rotated, err := New(Config{DB: f.Pool, Settings: Settings{Keys: f.keys}, PortalKeys: [][]byte{[]byte(strings.Repeat("n", 40)), f.portalKey}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, Prefix+"/endpoints", nil)
	req.Header.Set("Authorization", "Bearer "+acme)
	w := httptest.NewRecorder()
	rotated.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("a token of the rotated-out key: %d, want 401", w.Code)
	}
	for _, secret := range []string{f.appKey, acme} {
		if strings.Contains(f.logs.String(), secret) {
			t.Errorf("the log shows a credential")
		}
	}
}

// One key (or tenant) over API_RATE_LIMIT is answered 429 with
// Retry-After; another key is not held back.
func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f := newFixture(t, func(c *Config) {
		c.Settings.RateLimit = 1
		c.Now = func() time.Time { return now }
	})
	acme := f.tenantToken(t, "acme") // burst 3: the mint takes one of the key's
	codes := []int{}
	for range 4 {
		code, _ := f.call(t, http.MethodGet, Prefix+"/stories/"+f.Acme.ID, f.appKey, nil)
		codes = append(codes, code)
	}
	if codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Errorf("the key's requests past its burst: %v, want the last 429", codes)
	}
	if code, _ := f.call(t, http.MethodGet, Prefix+"/endpoints", acme, nil); code != http.StatusOK {
		t.Errorf("the tenant's own pace was spent by the key's requests: %d", code)
	}
}
