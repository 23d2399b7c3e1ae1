package webhook

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Sign agrees with the Standard Webhooks reference library, byte for byte,
// and its output verifies there.
func TestSign_MatchesReferenceLibrary(t *testing.T) {
	t.Parallel()
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		body string
	}{
		{"2f4c1a8e-8d6a-4b39-9b0f-0b9e7f1d2c3a", `{"type":"invoice.paid","data":{"n":1}}`},
		{"msg_1", ``},
		{"msg_2", `{"unicode":"€ and \u0000"}`},
	} {
		ts := time.Now()
		got, err := Sign(secret, tc.id, ts, []byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := wh.Sign(tc.id, ts, []byte(tc.body))
		if got != want {
			t.Errorf("Sign(%s) = %s, reference says %s", tc.id, got, want)
		}
		h := http.Header{}
		h.Set(HeaderID, tc.id)
		h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(HeaderSignature, got)
		if err := wh.Verify([]byte(tc.body), h); err != nil {
			t.Errorf("reference Verify: %v", err)
		}
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, _ := NewSecret()
	b, _ := NewSecret()
	if a == b {
		t.Fatal("two secrets are equal")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if !strings.HasPrefix(a, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("NewSecret = whsec_…(%d bytes), %v; want whsec_ + base64 of 32 bytes", len(key), err)
	}
	if err := ValidateSecret(a); err != nil {
		t.Fatal(err)
	}
	if err := ValidateSecret("whsec_c2hvcnQ="); err == nil || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Fatalf("ValidateSecret(short) = %v, want an error that does not echo the secret", err)
	}
}
