package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/webhook"
)

// TestVerify checks Verify against postbox's own signing and the reference
// Standard Webhooks library, and that the reference agrees on every case.
func TestVerify(t *testing.T) {
	t.Parallel()
	secretA, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	secretB, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	const id = "0190f1e2-7c3a-7d4b-9e5f-0123456789ab"
	body := []byte(`{"type":"invoice.paid","timestamp":"2026-01-02T03:04:05Z","data":{"n":1}}`)
	now := time.Now() // the reference library reads the real clock, so the cases are relative to it

	sign := func(secret string, ts time.Time, b []byte) string {
		s, err := webhook.Sign(secret, id, ts, b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ref, err := standardwebhooks.NewWebhook(secretA)
	if err != nil {
		t.Fatal(err)
	}
	refSig, err := ref.Sign(id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(id string, ts time.Time, sig string) http.Header {
		h := http.Header{}
		if id != "" {
			h.Set(webhook.HeaderID, id)
		}
		if !ts.IsZero() {
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		}
		if sig != "" {
			h.Set(webhook.HeaderSignature, sig)
		}
		return h
	}
	rotated := sign(secretB, now, body) + " " + sign(secretA, now, body)
	old, future := now.Add(-10*time.Minute), now.Add(10*time.Minute)

	tests := []struct {
		name   string
		secret string
		header http.Header
		body   []byte
		want   error // nil: accepted
	}{
		{"reference signs", secretA, hdr(id, now, refSig), body, nil},
		{"postbox signs", secretA, hdr(id, now, sign(secretA, now, body)), body, nil},
		{"rotation, new secret", secretB, hdr(id, now, rotated), body, nil},
		{"rotation, old secret", secretA, hdr(id, now, rotated), body, nil},
		{"malformed entry before a match", secretA, hdr(id, now, "v1 garbage v2,xyz "+sign(secretA, now, body)), body, nil},
		{"tampered body", secretA, hdr(id, now, sign(secretA, now, body)), []byte(string(body) + " "), webhook.ErrNoMatchingSignature},
		{"tampered id", secretA, hdr(id+"x", now, sign(secretA, now, body)), body, webhook.ErrNoMatchingSignature},
		{"wrong secret", secretB, hdr(id, now, sign(secretA, now, body)), body, webhook.ErrNoMatchingSignature},
		{"stale timestamp", secretA, hdr(id, old, sign(secretA, old, body)), body, webhook.ErrTimestampTooOld},
		{"future timestamp", secretA, hdr(id, future, sign(secretA, future, body)), body, webhook.ErrTimestampTooNew},
		{"missing id", secretA, hdr("", now, sign(secretA, now, body)), body, webhook.ErrMissingHeader},
		{"missing timestamp", secretA, hdr(id, time.Time{}, sign(secretA, now, body)), body, webhook.ErrMissingHeader},
		{"missing signature", secretA, hdr(id, now, ""), body, webhook.ErrMissingHeader},
		{"malformed signature list", secretA, hdr(id, now, "v1, ,v1 v1,!!!"), body, webhook.ErrNoMatchingSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := webhook.Verify(tt.secret, tt.header, tt.body)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err != nil {
				for _, s := range []string{secretA, secretB, sign(tt.secret, now, tt.body)} {
					if strings.Contains(err.Error(), s) {
						t.Fatalf("error %q leaks a secret or the expected signature", err)
					}
				}
			}
			refV, err2 := standardwebhooks.NewWebhook(tt.secret)
			if err2 != nil {
				t.Fatal(err2)
			}
			if refErr := refV.Verify(tt.body, tt.header); (refErr == nil) != (err == nil) {
				t.Fatalf("reference library disagrees: reference %v, Verify %v", refErr, err)
			}
		})
	}
}

// TestVerifier_Tolerance checks the tolerance and the injected clock.
func TestVerifier_Tolerance(t *testing.T) {
	t.Parallel()
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	body := []byte(`{}`)
	sig, err := webhook.Sign(secret, "evt", sent, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, "evt")
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(sent.Unix(), 10))
	h.Set(webhook.HeaderSignature, sig)
	tests := []struct {
		name      string
		skew      time.Duration
		tolerance time.Duration
		want      error
	}{
		{"on time", 0, 0, nil},
		{"just inside default, late", 5 * time.Minute, 0, nil},
		{"just inside default, early", -5 * time.Minute, 0, nil},
		{"past default", 5*time.Minute + time.Second, 0, webhook.ErrTimestampTooOld},
		{"before default", -5*time.Minute - time.Second, 0, webhook.ErrTimestampTooNew},
		{"custom tolerance", 20 * time.Minute, 30 * time.Minute, nil},
		{"custom tolerance exceeded", 31 * time.Minute, 30 * time.Minute, webhook.ErrTimestampTooOld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := webhook.Verifier{Secret: secret, Tolerance: tt.tolerance, Now: func() time.Time { return sent.Add(tt.skew) }}
			if err := v.Verify(h, body); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
	bad := h.Clone() // the parallel subtests above still read h
	bad.Set(webhook.HeaderTimestamp, "soon")
	if err := (webhook.Verifier{Secret: secret}).Verify(bad, body); !errors.Is(err, webhook.ErrBadTimestamp) {
		t.Fatalf("Verify with a non-numeric timestamp = %v, want ErrBadTimestamp", err)
	}
}

// TestVerify_Misconfigured checks that a receiver's own mistakes are
// refused with an error naming them, never repeating the secret.
func TestVerify_Misconfigured(t *testing.T) {
	t.Parallel()
	good, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, "evt")
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	h.Set(webhook.HeaderSignature, "v1,AAAA")
	tests := []struct {
		name string
		v    webhook.Verifier
		want string // in the error
	}{
		{"no whsec_ prefix", webhook.Verifier{Secret: strings.TrimPrefix(good, "whsec_")}, `must start with "whsec_"`},
		{"not base64", webhook.Verifier{Secret: "whsec_not*base64*at*all"}, "not standard base64"},
		{"key too short", webhook.Verifier{Secret: "whsec_c2hvcnQ="}, "5 bytes, must be 24 to 64"},
		{"negative tolerance", webhook.Verifier{Secret: good, Tolerance: -time.Second}, "tolerance -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.v.Verify(h, []byte(`{}`))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want an error containing %q", err, tt.want)
			}
			if tt.want != "tolerance -1s is negative" && !errors.Is(err, webhook.ErrInvalidSecret) {
				t.Fatalf("Verify = %v, want ErrInvalidSecret", err)
			}
			if s := strings.TrimPrefix(tt.v.Secret, "whsec_"); s != "" && strings.Contains(err.Error(), s) {
				t.Fatalf("error %q repeats the secret", err)
			}
		})
	}
}
