package mailevents

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sesDelay is an SES DeliveryDelay about a message no row is known for:
// it is recorded (as an orphan) only when its signature verifies, which is
// all these tests look at.
func sesDelay(to string) string {
	return `{"eventType":"DeliveryDelay","deliveryDelay":{"delayType":"TransientCommunicationFailure",
"timestamp":"2026-11-30T17:05:00.000Z","delayedRecipients":[{"emailAddress":"` + to + `","status":"4.4.7",
"diagnosticCode":"smtp; 421 4.4.7 try later"}]},` + sesMail("<0102017f-unrelated@email.amazonses.com>", to, "") + `}`
}

// TestSNS_SigningCertificateValidity: the signature check trusts a
// signing certificate only inside its validity window and only as much of
// it as fits the 64 KiB read. x509's CheckSignature looks at the key
// alone, so without the window check an expired (or not yet valid)
// certificate — one Amazon no longer vouches for — would still sign
// events that suppress addresses. Every certificate here is issued for
// the fake's real signing key: only the window, or the size, differs.
func TestSNS_SigningCertificateValidity(t *testing.T) {
	t.Parallel()
	sns := newSNSFake(t)
	f := newFixture(t, Settings{SNSTopicARNs: []string{testTopic}}, sns.options())
	now := time.Now()

	// A PEM response of exactly n bytes: filler lines, then the
	// certificate without its final newline, so the last byte read is the
	// end marker's last dash.
	_, pemBytes := sns.servedCert(t, "for-size", now.Add(-time.Hour), now.Add(time.Hour))
	pemBytes = bytes.TrimSuffix(pemBytes, []byte("\n"))
	sized := func(n int) []byte {
		return []byte(strings.Repeat("x", n-len(pemBytes)-1) + "\n" + string(pemBytes))
	}

	for i, tc := range []struct {
		name string
		url  func() string
		want int
	}{
		{"valid for the hour around now", func() string {
			u, _ := sns.servedCert(t, "valid", now.Add(-time.Hour), now.Add(time.Hour))
			return u
		}, http.StatusOK},
		{"not valid yet (NotBefore in an hour)", func() string {
			u, _ := sns.servedCert(t, "not-yet", now.Add(time.Hour), now.Add(2*time.Hour))
			return u
		}, http.StatusForbidden},
		{"expired (NotAfter an hour ago)", func() string {
			u, _ := sns.servedCert(t, "expired", now.Add(-2*time.Hour), now.Add(-time.Hour))
			return u
		}, http.StatusForbidden},
		{"a certificate response of exactly 64 KiB", func() string {
			return sns.servedBody("64k", sized(64<<10))
		}, http.StatusOK},
		{"a certificate response of 64 KiB + 1: the end marker is cut off", func() string {
			return sns.servedBody("64k-plus-1", sized(64<<10+1))
		}, http.StatusForbidden},
	} {
		m := notification("n-validity-"+string(rune('a'+i)), sesDelay("ada@example.com"))
		m["SigningCertURL"] = tc.url()
		before := f.state()
		code, body := f.post(ProviderSES, sns.sign(t, m, "2"), nil, "", "")
		if code != tc.want {
			t.Errorf("%s: %d %q; want %d", tc.name, code, body, tc.want)
		}
		if code != http.StatusOK && f.state() != before {
			t.Errorf("%s: refused, yet the database changed: %+v → %+v", tc.name, before, f.state())
		}
	}
}

// TestSNS_CachedCertificateExpires: a fetched certificate is cached, but
// only until its NotAfter; past it the verifier fetches again and refuses
// what comes back if that has expired too. Without it, one fetch would
// trust a certificate for as long as the process runs. The verifier's
// clock is moved, not waited for.
func TestSNS_CachedCertificateExpires(t *testing.T) {
	t.Parallel()
	sns := newSNSFake(t)
	start := time.Now()
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	f, _ := newFixtureWith(t, Settings{SNSTopicARNs: []string{testTopic}}, sns.options(), func(h *Handler) {
		h.sns.now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	notAfter := start.Add(time.Hour)
	certURL, _ := sns.servedCert(t, "expiring", start.Add(-time.Hour), notAfter)

	for i, step := range []struct {
		name      string
		at        time.Time
		want      int
		wantGets  int32
		rationale string
	}{
		{"first message", start, http.StatusOK, 1, "fetched"},
		{"second message, same hour", start.Add(30 * time.Minute), http.StatusOK, 1, "served from the cache"},
		{"a minute past NotAfter", notAfter.Add(time.Minute), http.StatusForbidden, 2, "fetched again and refused as expired"},
	} {
		clock.Store(step.at.UnixNano())
		m := notification("n-cache-"+string(rune('a'+i)), sesDelay("ada@example.com"))
		m["SigningCertURL"] = certURL
		code, body := f.post(ProviderSES, sns.sign(t, m, "1"), nil, "", "")
		if code != step.want || sns.servedGets.Load() != step.wantGets {
			t.Fatalf("%s: %d %q, certificate fetched %d times; want %d, %d fetches (%s)",
				step.name, code, body, sns.servedGets.Load(), step.want, step.wantGets, step.rationale)
		}
	}
}
