package outbox

import (
	"context"
	"encoding/base64"
	"maps"
	"slices"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// secretPayload carries every scrubbed key and the keys that must survive.
func secretPayload() map[string]any {
	return map[string]any{
		"to":                 "ada@example.com",
		"subject":            "Your invoice",
		"text":               "See attached.",
		"invoice_number":     "INV-0042",
		"attempt_number":     2,
		"trigger":            "invoice.finalized",
		"plan":               "pro", // a key postbox does not know
		"setup_url":          "https://pay.example.com/setup/s3cr3t",
		"update_url":         "https://pay.example.com/update/s3cr3t",
		"password_reset_url": "https://app.example.com/reset/s3cr3t",
		"invite_url":         "https://app.example.com/invite/s3cr3t",
		"public_token":       "pt_s3cr3t",
		"pdf":                base64.StdEncoding.EncodeToString([]byte("%PDF-1.7 invoice")),
	}
}

// The mark that sets a row dispatched or skipped removes exactly the six
// secret-bearing keys in the same UPDATE and keeps every other key (see
// docs/design/outbox-transport.md, Scrub of secret keys).
func TestScrub_SentAndSkippedRowsLoseExactlyTheSixKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		renderer Renderer
		status   string
	}{
		{"dispatched", nil, "dispatched"},
		{"skipped", RendererFunc(func(context.Context, *Row) (smtp.Message, error) {
			return smtp.Message{}, ErrSkip
		}), "skipped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			id := insertRow(t, pool, "raw", secretPayload())
			before := getRow(t, pool, id).Payload
			d := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.Renderer = tc.renderer })
			if _, err := d.runBatch(ctx); err != nil {
				t.Fatal(err)
			}
			st := getRow(t, pool, id)
			if st.Status != tc.status {
				t.Fatalf("row is %s, want %s", st.Status, tc.status)
			}
			want := maps.Clone(before)
			for _, k := range []string{"setup_url", "update_url", "password_reset_url", "invite_url", "public_token", "pdf"} {
				delete(want, k)
			}
			if got, wantKeys := slices.Sorted(maps.Keys(st.Payload)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, wantKeys) {
				t.Fatalf("payload keys after %s: %v, want %v", tc.status, got, wantKeys)
			}
			for _, k := range []string{"to", "invoice_number", "attempt_number", "trigger", "plan", "subject", "text"} {
				if st.Payload[k] != before[k] {
					t.Errorf("payload[%q] = %v after %s, want %v kept", k, st.Payload[k], tc.status, before[k])
				}
			}
		})
	}
}

// Pending and failed rows keep their whole payload: a retry needs it, and
// so does an operator's requeue of a failed row.
func TestScrub_FailedAndRetryingRowsKeepWholePayload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		status string
	}{
		{"failed", &smtp.ReplyError{Code: 550, Text: "no such user"}, "failed"},
		{"retrying", &smtp.ReplyError{Code: 451, Text: "later"}, "pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			id := insertRow(t, pool, "raw", secretPayload())
			before := getRow(t, pool, id)
			d := newDispatcher(t, pool, newFakeSender(func(context.Context, smtp.Message) error { return tc.err }))
			if _, err := d.runBatch(ctx); err != nil {
				t.Fatal(err)
			}
			st := getRow(t, pool, id)
			if st.Status != tc.status || st.RawPayload != before.RawPayload {
				t.Fatalf("row %s with payload %s, want %s with the payload untouched: %s", st.Status, st.RawPayload, tc.status, before.RawPayload)
			}
		})
	}
}

// A scrubbed row names the secret keys its mark removed, and no others: a
// raw email that never carried a link or a PDF lists none, one with only a
// PDF lists the PDF. A row scrubbed before postbox recorded it (written
// here by plain SQL) lists all six, since any may have been there.
func TestScrub_RowNamesOnlyTheKeysItLost(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	plain := insertRow(t, pool, "raw", rawPayload("ada@example.com"))
	withPDF := rawPayload("grace@example.com")
	withPDF["pdf"] = "JVBERi0xLjc="
	pdf := insertRow(t, pool, "raw", withPDF)
	if res, err := newDispatcher(t, pool, newFakeSender(nil)).runBatch(ctx); err != nil || res.Sent != 2 {
		t.Fatalf("sending: %+v, %v", res, err)
	}
	var old string
	if err := pool.QueryRow(ctx, `INSERT INTO email_outbox (customer_id, payload, status, attempts, dispatched_at)
		VALUES ('cus_old', '{"to":"lin@example.com","subject":"s","text":"t"}', 'dispatched', 1, now()) RETURNING id`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		want []string
	}{{plain, nil}, {pdf, []string{"pdf"}}, {old, scrubbedPayloadKeys}} {
		rec, err := Get(ctx, pool, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range rec.SecretFields() {
			if f.State != SecretScrubbed {
				t.Errorf("row %s: %s is %s, want scrubbed", tc.id, f.Key, f.State)
			}
			got = append(got, f.Key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("row %s lists %v as scrubbed, want %v", tc.id, got, tc.want)
		}
	}
}
