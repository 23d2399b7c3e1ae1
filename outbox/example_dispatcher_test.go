package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// A Dispatcher sends what was enqueued through an SMTP relay and marks
// each row: dispatched rows lose their secret fields (single-use links,
// tokens, the PDF) in the same UPDATE. `worker run` runs dispatchers as
// River jobs (package jobs); Drain is the same work, run until the outbox
// is empty.
func ExampleDispatcher_Drain() {
	ctx := context.Background()
	// In real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), on a
	// database migrated by `worker migrate up`.
	pool := pgtest.ExamplePool()
	defer pool.Close()

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, outbox.Email{
			Kind:      outbox.KindInvoice,
			InvoiceID: "inv_42",
			Payload: outbox.Payload{
				To:            "ada@example.com",
				Subject:       "Your invoice INV-0042",
				InvoiceNumber: "INV-0042",
				UpdateURL:     "https://pay.example.com/update/4f9c",
				PDF:           []byte("%PDF-1.7 …"),
			},
		})
		return err
	})
	if err != nil {
		panic(err)
	}

	// A local relay for the example; in production smtp.ConfigFromEnv
	// names yours.
	sink, err := smtpsink.Start(smtpsink.Options{})
	if err != nil {
		panic(err)
	}
	defer sink.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	mailer, err := smtp.New(smtp.Config{
		Host: sink.Host(),
		Port: sink.Port(),
		Mode: smtp.ModeNone, // plaintext: local development only
		From: "Billing <billing@example.com>",
	}, logger)
	if err != nil {
		panic(err)
	}
	defer mailer.Close()

	d, err := outbox.NewDispatcher(pool, outbox.Config{Sender: mailer, Logger: logger})
	if err != nil {
		panic(err)
	}
	// A batch started within the window runs to completion: the context
	// must leave it RunTimeout(window), or rows are released unstarted.
	const window = 10 * time.Second
	drainCtx, cancel := context.WithTimeout(ctx, d.RunTimeout(window))
	defer cancel()
	tally, err := d.Drain(drainCtx, window)
	if err != nil {
		panic(err)
	}
	fmt.Println("sent:", tally.Sent, "failed:", tally.Failed)
	fmt.Println("relay received:", sink.Len())

	var status string
	var hasURL, hasPDF, hasNumber bool
	if err := pool.QueryRow(ctx, `SELECT status, payload ? 'update_url', payload ? 'pdf', payload ? 'invoice_number'
FROM email_outbox WHERE invoice_id = 'inv_42'`).Scan(&status, &hasURL, &hasPDF, &hasNumber); err != nil {
		panic(err)
	}
	fmt.Println("status:", status)
	fmt.Println("update_url kept:", hasURL, "pdf kept:", hasPDF, "invoice_number kept:", hasNumber)
	// Output:
	// sent: 1 failed: 0
	// relay received: 1
	// status: dispatched
	// update_url kept: false pdf kept: false invoice_number kept: true
}
