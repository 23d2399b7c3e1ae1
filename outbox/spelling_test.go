package outbox

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// TestPayloadKeys_MisspelledKeyFailsNamingTheKey locks exact key spelling:
// encoding/json matches keys case-insensitively (and folds ſ to s, the
// Kelvin sign to k), so a plain-SQL row's "INVITE_URL" used to be rendered
// and sent, while the scrub and the seal, which match exact names, left the
// token stored in plaintext. Now a key that folds to a payload field's name
// without being spelled exactly fails the row permanently at decode, naming
// the key, and nothing reaches the relay. A secret key the Dispatcher
// declares (a kind's kind.json) is held to the same rule as the built-in
// ones. With keys, the failed mark seals the misspelled secret too, so the
// waiting row holds no plaintext token.
func TestPayloadKeys_MisspelledKeyFailsNamingTheKey(t *testing.T) {
	t.Parallel()
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.7 s3cr3t-pdf"))
	for _, tc := range []struct {
		name, kind, key string
		payload         map[string]any
	}{
		{"mixed case reset link", "password_reset", "Password_Reset_URL", map[string]any{
			"to": "ada@example.com", "subject": "Reset", "Password_Reset_URL": "https://app.example.com/reset/s3cr3t-mixed"}},
		{"upper case invite link", "member_invite", "INVITE_URL", map[string]any{
			"to": "ada@example.com", "subject": "Join us", "INVITE_URL": "https://app.example.com/invite/s3cr3t-upper"}},
		{"long s folds to s", "password_reset", "paſsword_reset_url", map[string]any{
			"to": "ada@example.com", "subject": "Reset", "paſsword_reset_url": "https://app.example.com/reset/s3cr3t-longs"}},
		{"Kelvin sign folds to k", "raw", "public_to\u212aen", map[string]any{
			"to": "ada@example.com", "subject": "Hi", "text": "Hello", "public_to\u212aen": "pt_s3cr3t-kelvin"}},
		{"upper case pdf on a raw email", "raw", "PDF", map[string]any{
			"to": "ada@example.com", "subject": "Hi", "text": "Hello", "PDF": pdf}},
		{"exact and misspelled side by side", "member_invite", "Invite_Url", map[string]any{
			"to": "ada@example.com", "subject": "Join us", "invite_url": "https://app.example.com/invite/ok",
			"Invite_Url": "https://app.example.com/invite/s3cr3t-shadow"}},
		{"misspelled non-secret field", "raw", "Subject", map[string]any{
			"to": "ada@example.com", "Subject": "Hi", "text": "Hello"}},
		{"declared secret key in mixed case", "raw", "Download_URL", map[string]any{
			"to": "ada@example.com", "subject": "Hi", "text": "Hello", "Download_URL": "https://shop.example.com/d/s3cr3t-declared"}},
		{"declared secret key with the Kelvin sign", "raw", "magic_lin\u212a", map[string]any{
			"to": "ada@example.com", "subject": "Hi", "text": "Hello", "magic_lin\u212a": "https://app.example.com/m/s3cr3t-kelvin"}},
	} {
		for _, sealed := range []bool{false, true} {
			name := tc.name
			if sealed {
				name += " with keys"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				pool := pgtest.NewPool(t)
				sink, mailer := newSinkMailer(t)
				var ring *KeyRing
				if sealed {
					ring = newTestKeys("k1").ring(t, "k1")
				}

				id := insertRow(t, pool, tc.kind, tc.payload)
				if _, err := newDispatcher(t, pool, mailer, func(c *Config) {
					c.Keys, c.SecretKeys = ring, []string{"download_url", "magic_link"}
				}).runBatch(ctx); err != nil {
					t.Fatal(err)
				}
				if n := sink.Len(); n != 0 {
					t.Errorf("the relay received %d message(s) for a payload with the key %q", n, tc.key)
				}
				st := getRow(t, pool, id)
				if st.Status != "failed" {
					t.Fatalf("row is %s (last_error %q), want failed", st.Status, lastErr(st))
				}
				if !strings.Contains(lastErr(st), `"`+tc.key+`"`) {
					t.Errorf("last_error %q does not name the key %q", lastErr(st), tc.key)
				}
				if sealed && tc.key != "Subject" {
					assertNoPlaintext(t, pool, id, []string{"s3cr3t"})
					assertSealedUnder(t, st.Payload, "k1", tc.key)
				}
			})
		}
	}
}

// An exactly spelled payload, with keys postbox does not know (for a custom
// renderer) and keys that differ from a field by more than case, still
// sends.
func TestPayloadKeys_ExactAndUnknownKeysStillSend(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	p := secretPayload()
	p["plan"], p["invite_urls"], p["Plan"] = "pro", "x", "Pro"
	id := insertRow(t, pool, "raw", p)
	sender := newFakeSender(nil)
	if res, err := newDispatcher(t, pool, sender).runBatch(ctx); err != nil || res.Sent != 1 {
		t.Fatalf("runBatch: %+v, %v; want the row sent (last_error %q)", res, err, lastErr(getRow(t, pool, id)))
	}
}

// The Go API cannot write a misspelled key: what Enqueue stores passes the
// same check the dispatcher applies, sealed or not.
func TestPayloadKeys_EnqueueWritesExactKeys(t *testing.T) {
	t.Parallel()
	for _, keys := range []*KeyRing{nil, newTestKeys("k1").ring(t, "k1")} {
		raw, err := encodePayload(keys, nil, newRowID(), sealedEmail().Payload, DefaultMaxPayloadBytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPayloadKeys(raw, nil); err != nil {
			t.Fatalf("Enqueue's payload (keys %v) fails the key check: %v", keys, err)
		}
	}
}

// The key scanner reads keys through escapes and past values of every
// shape, so a misspelling cannot hide behind an escaped quote or a nested
// value.
func TestPayloadKeys_ScannerSeesEveryKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want string // the key named, or "" for accepted
	}{
		{`{"to":"a","subject":"b"}`, ""},
		{`{"x":"a\"INVITE_URL\":","subject":"b"}`, ""},
		{`{"x":"a\\","INVITE_URL":"u"}`, "INVITE_URL"},
		{`{"x":{"invite_url":1,"y":[1,{"z":"}"}]},"To":"a"}`, "To"},
		{`{"n":12.5e3,"t":true,"f":false,"z":null, "Pdf" : "x"}`, "Pdf"},
		{`{"\u0049NVITE_URL":"u"}`, "INVITE_URL"},
		{`{"to":"a","to":"b"}`, "to"},
		{`{}`, ""},
		{`[1,2]`, ""},
	} {
		err := checkPayloadKeys([]byte(tc.raw), nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkPayloadKeys(%s) = %v, want accepted", tc.raw, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), `"`+tc.want+`"`)):
			t.Errorf("checkPayloadKeys(%s) = %v, want an error naming %q", tc.raw, err, tc.want)
		}
	}
}
