package outbox

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/smtp"
)

// The cost of encryption, measured with and without a key ring on the same
// emails: a password reset (one link) and an invoice with two links and a
// 100 KiB PDF. Compare the plain and sealed lines of each:
//
//	go test -run '^$' -bench 'Enqueue|Send|Payload' -count 6 ./outbox/ | benchstat -col /keys -
//
// BenchmarkEnqueue and BenchmarkSend include Postgres (one committed
// transaction per enqueue; claim, marks and scrub per send, with a sender
// that returns at once, so the crypto's share is as large as it can get);
// the Payload benchmarks are the crypto path alone.

type benchEmail struct {
	name  string
	email Email
}

func benchEmails() []benchEmail {
	return []benchEmail{
		{"reset", Email{Kind: KindPasswordReset, CustomerID: "cus_bench", Payload: Payload{
			To: "ada@example.com", Subject: "Reset your password", Name: "Ada",
			PasswordResetURL: "https://app.example.com/reset/9b1c7f2e4a8d4e0f9c3b6a1d2e5f7a8b",
		}}},
		{"invoice-100KiB", Email{Kind: KindInvoice, CustomerID: "cus_bench", InvoiceID: "inv_bench", Payload: Payload{
			To: "ada@example.com", Subject: "Your invoice INV-42", Name: "Ada", InvoiceNumber: "INV-42",
			AmountDue: "€120.00", Trigger: "invoice.finalized",
			UpdateURL: "https://pay.example.com/update/4f9c1b7e", SetupURL: "https://pay.example.com/setup/77a0c3d1",
			PublicToken: "pt_0c9f3a7d2b", PDF: benchPDF(100 << 10),
		}}},
	}
}

// benchPDF is n bytes shaped like a real PDF's: its content streams are
// compressed, so to Postgres's TOAST compression they look random. A PDF
// of repeated bytes would be stored compressed to almost nothing in
// plaintext and not when sealed, and measure TOAST instead of encryption.
func benchPDF(n int) []byte {
	pdf := []byte("%PDF-1.7\n")
	rng := rand.New(rand.NewPCG(1, 2))
	for len(pdf) < n {
		pdf = binary.LittleEndian.AppendUint64(pdf, rng.Uint64())
	}
	return pdf[:n]
}

type benchKeys struct {
	name string
	keys *KeyRing
}

func benchRings(b *testing.B) []benchKeys {
	return []benchKeys{{"keys=plain", nil}, {"keys=sealed", newTestKeys("k1").ring(b, "k1")}}
}

// BenchmarkEnqueue: one Enqueue in its own committed transaction.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	for _, e := range benchEmails() {
		for _, k := range benchRings(b) {
			b.Run(e.name+"/"+k.name, func(b *testing.B) {
				enq := &Enqueuer{Keys: k.keys}
				for b.Loop() {
					tx, err := pool.Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := enq.Enqueue(ctx, tx, e.email); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSend: Drain sends b.N rows enqueued beforehand (claim, open,
// render, send, dispatched mark with scrub); ns/op is per row.
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	for _, e := range benchEmails() {
		for _, k := range benchRings(b) {
			b.Run(e.name+"/"+k.name, func(b *testing.B) {
				pool := pgtest.NewPool(b)
				enq := &Enqueuer{Keys: k.keys}
				for left := b.N; left > 0; {
					tx, err := pool.Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < 500 && left > 0; i, left = i+1, left-1 {
						if _, err := enq.Enqueue(ctx, tx, e.email); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
				d, err := NewDispatcher(pool, Config{
					Sender: SenderFunc(func(context.Context, smtp.Message) error { return nil }),
					Keys:   k.keys,
					Logger: slog.New(slog.DiscardHandler),
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				res, err := d.Drain(ctx, time.Hour)
				if err != nil || res.Sent != b.N {
					b.Fatalf("drain: %+v, %v; want %d sent", res, err, b.N)
				}
			})
		}
	}
}

// BenchmarkEncodePayload: what Enqueue does to a payload before the INSERT.
func BenchmarkEncodePayload(b *testing.B) {
	for _, e := range benchEmails() {
		for _, k := range benchRings(b) {
			b.Run(e.name+"/"+k.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := encodePayload(k.keys, nil, "0b5c2a9e-8d3f-4f7a-9c1e-2b6d8e4f1a3c", e.email.Payload, DefaultMaxPayloadBytes); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecodePayload: what the dispatcher does to a claimed row's
// payload before rendering (open, then decode).
func BenchmarkDecodePayload(b *testing.B) {
	const id = "0b5c2a9e-8d3f-4f7a-9c1e-2b6d8e4f1a3c"
	for _, e := range benchEmails() {
		for _, k := range benchRings(b) {
			b.Run(e.name+"/"+k.name, func(b *testing.B) {
				stored, err := encodePayload(k.keys, nil, id, e.email.Payload, DefaultMaxPayloadBytes)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					row := Row{ID: id, Kind: e.email.Kind, RawPayload: stored}
					row.decode(k.keys, nil)
					if row.decodeErr != nil {
						b.Fatal(row.decodeErr)
					}
				}
			})
		}
	}
}
