package outbox

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// A rotation end to end. Rows sealed under the old key still send once a
// new key is active; `worker rekey` (Rekey) moves every pending and failed
// row to the new key — plaintext rows too — in batches, reports what it
// cannot read and leaves it alone, and is a no-op the second time; after
// it, the old key can leave the ring and every row still sends complete.
func TestRekey_RotationOldRowsStillSendRekeyMovesThem(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgtest.NewPool(t)
	keys := newTestKeys("k0", "k1", "k2")
	old, rotated, retired := keys.ring(t, "k1"), keys.ring(t, "k2", "k1"), keys.ring(t, "k2")
	capture := newCaptureRenderer()
	send := func(ring *KeyRing, fn func(context.Context, smtp.Message) error) Tally {
		t.Helper()
		res, err := newDispatcher(t, pool, newFakeSender(fn), func(c *Config) { c.Keys, c.Renderer = ring, capture }).Drain(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	emails := map[string]Email{}
	enqueueAs := func(ring *KeyRing, subject string) string {
		email := sealedEmail()
		email.Payload.Subject = subject
		email.Payload.UpdateURL = "https://pay.example.com/update/s3cr3t-" + subject
		id := enqueueWith(t, pool, ring, email)
		emails[id] = email
		return id
	}

	// A row under k1 sends with the rotated ring.
	early := enqueueAs(old, "early")
	if res := send(rotated, nil); res.Sent != 1 {
		t.Fatalf("row under the old key with the rotated ring: %+v, want sent", res)
	}
	if got, _ := capture.payload(early); secretsOf(got) != secretsOf(emails[early].Payload) {
		t.Errorf("row under the old key sent with secrets %q", secretsOf(got))
	}

	// A failed row under k1, pending rows under k1, a plain-SQL row, and
	// one row under k0, a key no ring here holds.
	failed := enqueueAs(old, "failed")
	if res := send(old, func(context.Context, smtp.Message) error { return &smtp.ReplyError{Code: 550, Text: "no"} }); res.Failed != 1 {
		t.Fatalf("setting up the failed row: %+v", res)
	}
	pending := []string{enqueueAs(old, "p1"), enqueueAs(old, "p2"), enqueueAs(old, "p3")}
	plain := insertRow(t, pool, "raw", secretPayload())
	lost := enqueueAs(keys.ring(t, "k0"), "lost")

	use, err := CountKeyUse(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"k1": 4, "k0": 1}; !maps.Equal(use.Rows, want) || use.Plaintext != 1 {
		t.Fatalf("key use before: %+v, want %v and 1 plaintext", use, want)
	}

	dry, err := Rekey(ctx, pool, rotated, RekeyOptions{BatchSize: 2, DryRun: true})
	if err != nil || dry.Resealed != 5 || dry.FromPlaintext != 1 || dry.Unreadable != 1 {
		t.Fatalf("dry run: %+v, %v; want 5 to reseal (1 from plaintext), 1 unreadable", dry, err)
	}
	if after, _ := CountKeyUse(ctx, pool); !maps.Equal(after.Rows, use.Rows) || after.Plaintext != use.Plaintext {
		t.Fatalf("the dry run wrote: key use %+v → %+v", use, after)
	}

	var progress []RekeyResult
	res, err := Rekey(ctx, pool, rotated, RekeyOptions{BatchSize: 2, Progress: func(r RekeyResult) { progress = append(progress, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resealed != 5 || res.FromPlaintext != 1 || res.Skipped != 0 || res.Unreadable != 1 || res.Batches != 3 {
		t.Fatalf("rekey: %+v; want 5 resealed (1 from plaintext), 1 unreadable, in 3 batches of 2", res)
	}
	if len(progress) != 3 || progress[2].Resealed != 5 || progress[0].Resealed+progress[0].Unreadable != 2 {
		t.Errorf("progress reports %+v, want one per batch with running totals", progress)
	}
	if len(res.UnreadableErrors) != 1 || !strings.Contains(res.UnreadableErrors[0].Error(), lost) ||
		!strings.Contains(res.UnreadableErrors[0].Error(), `key id "k0"`) {
		t.Errorf("unreadable errors %v, want one naming row %s and key k0", res.UnreadableErrors, lost)
	}
	use, err = CountKeyUse(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"k2": 5, "k0": 1}; !maps.Equal(use.Rows, want) || use.Plaintext != 0 {
		t.Fatalf("key use after: %+v, want %v and no plaintext", use, want)
	}
	for _, id := range append([]string{failed, plain}, pending...) {
		st := getRow(t, pool, id)
		assertSealedUnder(t, st.Payload, "k2", scrubbedPayloadKeys...)
		assertNoPlaintext(t, pool, id, append(mapNeedles(secretPayload()), secretNeedles(sealedEmail().Payload)...))
	}
	if st := getRow(t, pool, failed); st.Status != "failed" {
		t.Errorf("rekey changed the failed row's status to %s", st.Status)
	}

	again, err := Rekey(ctx, pool, rotated, RekeyOptions{BatchSize: 2})
	if err != nil || again.Resealed != 0 || again.Unreadable != 1 {
		t.Errorf("second rekey: %+v, %v; want nothing left but the unreadable row", again, err)
	}

	// k1 leaves the ring: everything rekeyed still sends, complete.
	if err := Requeue(ctx, pool, failed, "test"); err != nil {
		t.Fatal(err)
	}
	if res := send(retired, nil); res.Sent != 5 || res.Failed != 1 {
		t.Fatalf("with k1 retired: %+v; want 5 sent, the k0 row failed", res)
	}
	for _, id := range append([]string{failed}, pending...) {
		if got, _ := capture.payload(id); secretsOf(got) != secretsOf(emails[id].Payload) {
			t.Errorf("row %s sent with secrets %q, want %q", id, secretsOf(got), secretsOf(emails[id].Payload))
		}
	}
	if got, _ := capture.payload(plain); got.SetupURL != secretPayload()["setup_url"] || string(got.PDF) != "%PDF-1.7 invoice" {
		t.Errorf("plain-SQL row sent from %+v, want its fields", got)
	}
}

// Rekey's writes are compare-and-set on what its read saw. A row that a
// worker sends, seals with its mark, or an operator requeues between the
// read and the write is left exactly as that writer left it: a sent row is
// never resurrected with sealed fields, a mark's ciphertext is never
// overwritten.
func TestRekey_RowChangedMidRekeyIsLeftAlone(t *testing.T) {
	t.Parallel()
	keys := newTestKeys("k1", "k2")
	fail := func(context.Context, smtp.Message) error { return &smtp.ReplyError{Code: 550, Text: "no"} }
	for _, tc := range []struct {
		name       string
		setup      func(t *testing.T, pool *pgxpool.Pool) string                          // the row, as the rekey reads it
		meanwhile  func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) // between read and write
		wantStatus string
	}{
		{
			name: "dispatched meanwhile",
			setup: func(t *testing.T, pool *pgxpool.Pool) string {
				return enqueueWith(t, pool, keys.ring(t, "k1"), sealedEmail())
			},
			meanwhile: func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) {
				if res, err := newDispatcher(t, pool, newFakeSender(nil), func(c *Config) { c.Keys = keys.ring(t, "k2", "k1") }).runBatch(ctx); err != nil || res.Sent != 1 {
					t.Fatalf("sending the row mid-rekey: %+v, %v", res, err)
				}
			},
			wantStatus: "dispatched",
		},
		{
			name:  "sealed by its failed mark meanwhile",
			setup: func(t *testing.T, pool *pgxpool.Pool) string { return insertRow(t, pool, "raw", secretPayload()) },
			meanwhile: func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) {
				if res, err := newDispatcher(t, pool, newFakeSender(fail), func(c *Config) { c.Keys = keys.ring(t, "k2", "k1") }).runBatch(ctx); err != nil || res.Failed != 1 {
					t.Fatalf("failing the row mid-rekey: %+v, %v", res, err)
				}
			},
			wantStatus: "failed",
		},
		{
			name: "requeued meanwhile",
			setup: func(t *testing.T, pool *pgxpool.Pool) string {
				id := enqueueWith(t, pool, keys.ring(t, "k1"), sealedEmail())
				if res, err := newDispatcher(t, pool, newFakeSender(fail), func(c *Config) { c.Keys = keys.ring(t, "k1") }).runBatch(testCtx(t)); err != nil || res.Failed != 1 {
					t.Fatalf("failing the row: %+v, %v", res, err)
				}
				return id
			},
			meanwhile: func(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) {
				if err := Requeue(ctx, pool, id, "test"); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: "pending",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := pgtest.NewPool(t)
			id := tc.setup(t, pool)
			var afterMeanwhile rowState
			res, err := Rekey(ctx, pool, keys.ring(t, "k2", "k1"), RekeyOptions{afterRead: func(ids []string) {
				if len(ids) != 1 || ids[0] != id {
					t.Fatalf("rekey read %v, want the row %s", ids, id)
				}
				tc.meanwhile(t, ctx, pool, id)
				afterMeanwhile = getRow(t, pool, id)
			}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Skipped != 1 || res.Resealed != 0 {
				t.Errorf("rekey result %+v, want the row skipped", res)
			}
			st := getRow(t, pool, id)
			if st.Status != tc.wantStatus || st.RawPayload != afterMeanwhile.RawPayload {
				t.Fatalf("row after the rekey: %s with payload\n%s\nwant %s, exactly as left mid-rekey:\n%s",
					st.Status, st.RawPayload, tc.wantStatus, afterMeanwhile.RawPayload)
			}
			if tc.wantStatus == "dispatched" {
				for _, k := range scrubbedPayloadKeys {
					if _, ok := st.Payload[k]; ok {
						t.Errorf("the sent row got %q back", k)
					}
				}
			}
		})
	}
}
