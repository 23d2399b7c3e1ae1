package mailevents

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// padded is prefix + filler + suffix, exactly n bytes long.
func padded(prefix, suffix string, n int) []byte {
	return []byte(prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix)
}

// TestBodyLimit_Shipped1MiB pins the shipped body cap, 1 MiB (doc.go,
// OPERATIONS.md), as the literal 1<<20: the other tests size their
// oversized bodies from DefaultMaxBodyBytes, so they keep passing whatever
// it says. A bounce with its content runs to a few hundred kilobytes, so a
// lower cap loses real events; a higher one lets any caller make the
// handler buffer more. A body of exactly 1 MiB is read and answered as the
// provider's format (200, or 400 for SES, which it is not); one byte more
// is 413 before any parsing or signature check, on every endpoint, and
// writes nothing.
func TestBodyLimit_Shipped1MiB(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Settings{PostmarkUsername: "pm", PostmarkPassword: "pw", SNSTopicARNs: []string{testTopic},
		GenericSecret: genericSecret}, SNSOptions{})
	for _, tc := range []struct {
		name, provider string
		size           int
		body           func(n int) []byte
		signed         bool
		want           int
	}{
		{"postmark, exactly 1 MiB", ProviderPostmark, 1 << 20, func(n int) []byte {
			return padded(`{"RecordType":"Open","Pad":"`, `"}`, n) // an Open: 200, nothing recorded
		}, false, http.StatusOK},
		{"postmark, 1 MiB + 1", ProviderPostmark, 1<<20 + 1, func(n int) []byte {
			return padded(`{"RecordType":"Open","Pad":"`, `"}`, n)
		}, false, http.StatusRequestEntityTooLarge},
		{"generic, exactly 1 MiB", ProviderGeneric, 1 << 20, func(n int) []byte {
			return padded(`{"type":"delivered","recipient":"ada@example.com","detail":"`, `"}`, n)
		}, true, http.StatusOK},
		{"generic, 1 MiB + 1", ProviderGeneric, 1<<20 + 1, func(n int) []byte {
			return padded(`{"type":"delivered","recipient":"ada@example.com","detail":"`, `"}`, n)
		}, true, http.StatusRequestEntityTooLarge},
		{"ses, exactly 1 MiB", ProviderSES, 1 << 20, func(n int) []byte {
			return padded(`{"Type":"Notification","Pad":"`, `"}`, n) // read whole, then refused as no SNS message
		}, false, http.StatusBadRequest},
		{"ses, 1 MiB + 1", ProviderSES, 1<<20 + 1, func(n int) []byte {
			return padded(`{"Type":"Notification","Pad":"`, `"}`, n)
		}, false, http.StatusRequestEntityTooLarge},
	} {
		body := tc.body(tc.size)
		if len(body) != tc.size {
			t.Fatalf("%s: built %d bytes, not %d", tc.name, len(body), tc.size)
		}
		var header http.Header
		if tc.signed {
			header = signed(t, genericSecret, "msg_"+strings.ReplaceAll(tc.name, " ", "_"), time.Now(), body)
		}
		before := f.state()
		code, answer := f.post(tc.provider, body, header, "pm", "pw")
		if code != tc.want {
			t.Errorf("%s: %d %.200q; want %d", tc.name, code, answer, tc.want)
		}
		if code == http.StatusRequestEntityTooLarge && f.state() != before {
			t.Errorf("%s: 413, yet the database changed", tc.name)
		}
	}
}

// TestStoredTextLimits pins what an event keeps of a large payload: the
// first 4096 bytes as raw_excerpt and 1024 of the detail (the email_events
// CHECKs, migration 00007), as literals. A cap raised past the CHECKs
// fails every insert, which other tests see; a cap lowered keeps less of
// what an operator traces a bounce by, and only this test sees that.
func TestStoredTextLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Settings{GenericSecret: genericSecret}, SNSOptions{})
	row := f.sentRow("ada@example.com")
	body := []byte(`{"type":"deferred","row_id":"` + row + `","recipient":"ada@example.com","detail":"` +
		strings.Repeat("d", 8000) + `"}`)
	if code, answer := f.post(ProviderGeneric, body, signed(t, genericSecret, "msg_long", time.Now(), body), "", ""); code != http.StatusOK {
		t.Fatalf("%d %q", code, answer)
	}
	evs := f.events(row)
	if len(evs) != 1 {
		t.Fatalf("events %+v", evs)
	}
	for _, tc := range []struct {
		field string
		got   int
		want  int
	}{
		{"raw_excerpt", len(evs[0].RawExcerpt), 4096},
		{"detail", len(evs[0].Detail), 1024},
	} {
		if tc.got != tc.want {
			t.Errorf("%s kept %d bytes of an 8000-byte value; want %d", tc.field, tc.got, tc.want)
		}
	}
}

// TestShippedDefaults pins the defaults a Config of zeros gets, as
// literals: each is documented (OPERATIONS.md: the certificate fetch's
// "10 s deadline"), and a test that sets its own value never notices the
// default change. A longer record timeout holds a provider's connection
// (and a pool connection) longer on a stuck database; a longer fetch
// deadline does the same on a slow SNS.
func TestShippedDefaults(t *testing.T) {
	t.Parallel()
	_, h := newFixtureWith(t, Settings{}, SNSOptions{}, nil)
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"MaxBodyBytes", h.cfg.MaxBodyBytes, int64(1 << 20)},
		{"RecordTimeout", h.cfg.RecordTimeout, 10 * time.Second},
		{"SNS FetchTimeout", h.sns.opts.FetchTimeout, 10 * time.Second},
		{"SNS client timeout", h.sns.client.Timeout, 10 * time.Second},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v; want %v", tc.name, tc.got, tc.want)
		}
	}
}
