package outbox

import (
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// A declared secret key follows one rule in Go and in SQL: every field of
// Payload — kept after sending, or one of the six — is refused by
// ValidateSecretKey and by migration 00017's CHECK alike, so a key plain
// SQL could declare is one DeclareSecretKeys would, and the reverse.
func TestValidateSecretKey_SameRuleAsTheTable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		key  string
		want string // "" for accepted
	}{
		{"magic_link", ""},
		{"download_url2", ""},
		{"Magic_link", "is not a plain identifier"},
		{"magic-link", "is not a plain identifier"},
		{"", "is not a plain identifier"},
		{"k" + strings.Repeat("x", 64), "is not a plain identifier"},
	} {
		err := ValidateSecretKey(tc.key)
		_, dbErr := pool.Exec(ctx, `INSERT INTO email_secret_keys (key) VALUES ($1)`, tc.key)
		if tc.want == "" {
			if err != nil || dbErr != nil {
				t.Errorf("%q: ValidateSecretKey = %v, table = %v; want both to accept it", tc.key, err, dbErr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !claim.IsCheckViolation(dbErr, "email_secret_keys_key_format") {
			t.Errorf("%q: ValidateSecretKey = %v, table = %v; want both to refuse it (%q)", tc.key, err, dbErr, tc.want)
		}
	}
	for _, field := range payloadFieldNames {
		err := ValidateSecretKey(field)
		_, dbErr := pool.Exec(ctx, `INSERT INTO email_secret_keys (key) VALUES ($1)`, field)
		if err == nil || !claim.IsCheckViolation(dbErr, "email_secret_keys_key_format") {
			t.Errorf("Payload field %q: ValidateSecretKey = %v, table = %v; want both to refuse it", field, err, dbErr)
		}
	}
	// Declaring is idempotent and refuses a bad key before writing any.
	if err := DeclareSecretKeys(ctx, pool, []string{"magic_link", "otp_code"}); err != nil {
		t.Fatal(err)
	}
	if err := DeclareSecretKeys(ctx, pool, []string{"z_code", "to"}); err == nil || !strings.Contains(err.Error(), `"to"`) {
		t.Fatalf("DeclareSecretKeys with a Payload field = %v; want it refused naming the key", err)
	}
	var keys string
	if err := pool.QueryRow(ctx, `SELECT string_agg(key, ',' ORDER BY key) FROM email_secret_keys`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != "download_url2,magic_link,otp_code" {
		t.Fatalf("email_secret_keys = %s; want download_url2,magic_link,otp_code", keys)
	}
}

// A declared key is re-sealed by Rekey as the six are: a plain-SQL row's
// plaintext value and a value sealed under an old key both end up under
// the active key, and Enqueue's envelope still opens for the send.
func TestRekey_DeclaredKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	if err := DeclareSecretKeys(ctx, pool, []string{"magic_link"}); err != nil {
		t.Fatal(err)
	}
	keys := newTestKeys("k1", "k2")
	old, rotated := keys.ring(t, "k1"), keys.ring(t, "k2", "k1")
	plain := insertRow(t, pool, "raw", map[string]any{"to": "ada@example.com", "subject": "s", "text": "t", "magic_link": "https://x/s3cr3t-plain"})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := (&Enqueuer{Keys: old, SecretKeys: []string{"magic_link"}}).Enqueue(ctx, tx, Email{CustomerID: "cus_1", Payload: Payload{
		To: "ada@example.com", Subject: "s", Text: "t", Data: map[string]any{"magic_link": "https://x/s3cr3t-go"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	assertSealedUnder(t, getRow(t, pool, sealed).Payload, "k1", "magic_link")

	res, err := Rekey(ctx, pool, rotated, RekeyOptions{})
	if err != nil || res.Resealed != 2 || res.FromPlaintext != 1 {
		t.Fatalf("Rekey = %+v, %v; want both rows re-sealed, one from plaintext", res, err)
	}
	for _, id := range []string{plain, sealed} {
		assertSealedUnder(t, getRow(t, pool, id).Payload, "k2", "magic_link")
		assertNoPlaintext(t, pool, id, []string{"s3cr3t"})
	}
	capture := newCaptureRenderer()
	d := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.Keys, c.Renderer = rotated, capture })
	if res, err := d.runBatch(ctx); err != nil || res.Sent != 2 {
		t.Fatalf("runBatch = %+v, %v; want both sent", res, err)
	}
	for id, want := range map[string]string{plain: "https://x/s3cr3t-plain", sealed: "https://x/s3cr3t-go"} {
		if p, _ := capture.payload(id); p.Data["magic_link"] != want {
			t.Errorf("row %s rendered with magic_link %v; want %q opened", id, p.Data["magic_link"], want)
		}
	}
}
