package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
	"github.com/postbox/postbox/outbox"
)

// requestPasswordReset is the README's Go example, word for word (a docs
// test, TestReadme_GoExamplesAreCompiled, holds the two equal): it is
// compiled and run here, so the first code a newcomer reads cannot rot.
func requestPasswordReset(ctx context.Context, pool *pgxpool.Pool, userID, address, resetURL string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Your own writes, in the same transaction: the email exists
		// exactly when they do.
		if _, err := tx.Exec(ctx, `UPDATE users SET reset_requested_at = now() WHERE id = $1`, userID); err != nil {
			return err
		}
		_, err := outbox.Enqueue(ctx, tx, outbox.Email{
			Kind:       outbox.KindPasswordReset,
			CustomerID: userID,
			Payload: outbox.Payload{
				To:               address,
				Subject:          "Reset your password",
				PasswordResetURL: resetURL, // removed from the row once sent
			},
		})
		return err // nil commits the user's update and the email together
	})
}

// The README's example: a password-reset email enqueued in the
// transaction of the application's own write, pending until a worker
// sends it.
func ExampleEnqueue_passwordReset() {
	ctx := context.Background()
	// In real code: pgxpool.New(ctx, os.Getenv("DATABASE_URL")), on a
	// database migrated by `worker migrate up`.
	pool := pgtest.ExamplePool()
	defer pool.Close()
	// The application's own table, for the example.
	if _, err := pool.Exec(ctx, `CREATE TABLE users (id text PRIMARY KEY, reset_requested_at timestamptz);
		INSERT INTO users (id) VALUES ('usr_1')`); err != nil {
		panic(err)
	}

	if err := requestPasswordReset(ctx, pool, "usr_1", "Ada Lovelace <ada@example.com>", "https://app.example.com/reset/9f2c"); err != nil {
		panic(err)
	}

	emails, err := outbox.ListByCustomer(ctx, pool, "usr_1", 10)
	if err != nil {
		panic(err)
	}
	for _, e := range emails {
		fmt.Printf("%s %s to %s: %q\n", e.Kind, e.Status, e.To, e.Subject)
	}
	// Output:
	// password_reset pending to Ada Lovelace <ada@example.com>: "Reset your password"
}
