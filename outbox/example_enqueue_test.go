package outbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
)

// Enqueue an invoice email in the same transaction as the business change
// that causes it: the email exists exactly when the invoice does.
func ExampleEnqueue() {
	ctx := context.Background()
	// In real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), on a
	// database migrated by `worker migrate up`.
	pool := pgtest.ExamplePool()
	defer pool.Close()
	// The application's own table, for the example.
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, status text NOT NULL)`); err != nil {
		panic(err)
	}

	finalize := func(invoiceID, number string, fail error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO invoices (id, status) VALUES ($1, 'finalized')`, invoiceID); err != nil {
				return err
			}
			_, err := outbox.Enqueue(ctx, tx, outbox.Email{
				Kind:       outbox.KindInvoice,
				CustomerID: "cus_7",
				InvoiceID:  invoiceID,
				Payload: outbox.Payload{
					To:            "Ada Lovelace <ada@example.com>",
					Subject:       "Your invoice " + number,
					Name:          "Ada",
					InvoiceNumber: number,
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
			return fail // whatever else the transaction does may still fail
		})
	}

	if err := finalize("inv_42", "INV-0042", nil); err != nil {
		panic(err)
	}
	err := finalize("inv_43", "INV-0043", errors.New("payment provider unreachable"))
	fmt.Println("inv_43 rolled back:", err)

	for _, invoiceID := range []string{"inv_42", "inv_43"} {
		emails, err := outbox.ListByInvoice(ctx, pool, invoiceID)
		if err != nil {
			panic(err)
		}
		var invoice bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM invoices WHERE id = $1)`, invoiceID).Scan(&invoice); err != nil {
			panic(err)
		}
		fmt.Printf("%s: invoice %t, %d email(s)", invoiceID, invoice, len(emails))
		for _, e := range emails {
			fmt.Printf(", %s %q", e.Status, e.Subject)
		}
		fmt.Println()
	}
	// Output:
	// inv_43 rolled back: payment provider unreachable
	// inv_42: invoice true, 1 email(s), pending "Your invoice INV-0042"
	// inv_43: invoice false, 0 email(s)
}
