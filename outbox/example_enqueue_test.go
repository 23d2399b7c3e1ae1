package outbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/outbox"
)

// Enqueue an invoice email in the same transaction as the business change
// that causes it: the email exists exactly when the invoice does.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE invoices SET status = 'finalized' WHERE id = $1`, "inv_42"); err != nil {
			return err
		}
		id, err := outbox.Enqueue(ctx, tx, outbox.Email{
			Kind:       outbox.KindInvoice,
			CustomerID: "cus_7",
			InvoiceID:  "inv_42",
			Payload: outbox.Payload{
				To:            "Ada Lovelace <ada@example.com>",
				Subject:       "Your invoice INV-0042",
				Name:          "Ada",
				InvoiceNumber: "INV-0042",
				AmountDue:     "€120.00",
				UpdateURL:     "https://pay.example.com/update/4f9c", // removed from the row once sent
				PDF:           []byte("%PDF-1.7 …"),
				Trigger:       "invoice.finalized",
			},
		})
		var invalid *outbox.ValidationError
		if errors.As(err, &invalid) {
			return fmt.Errorf("bad email field %s: %w", invalid.Field, err)
		}
		if err != nil {
			return err
		}
		fmt.Println("enqueued", id)
		return nil
	})
	if err != nil {
		panic(err)
	}
}
