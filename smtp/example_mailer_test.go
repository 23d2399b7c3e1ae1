package smtp_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/smtp"
)

func ExampleMailer_Send() {
	// A local relay for the example; in production SMTP_HOST names yours.
	sink, err := smtpsink.Start(smtpsink.Options{})
	if err != nil {
		panic(err)
	}
	defer sink.Close()
	env := map[string]string{
		"SMTP_HOST": sink.Host(),
		"SMTP_PORT": strconv.Itoa(sink.Port()),
		"SMTP_TLS":  "none", // plaintext: local development only
		"SMTP_FROM": "Billing <billing@example.com>",
	}

	// In production: smtp.ConfigFromEnv(os.LookupEnv).
	cfg, err := smtp.ConfigFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		panic(err) // names the bad variable, e.g. SMTP_TLS="ssl": must be starttls, tls or none
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	mailer, err := smtp.New(cfg, logger) // logs mode, host, port and whether AUTH is configured
	if err != nil {
		panic(err)
	}
	defer mailer.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = mailer.Send(ctx, smtp.Message{
		RowID:   "0b7e9f2c-5d1a-4c39-9b1e-2f6a8d4c7e10", // becomes <RowID@example.com>
		To:      "Ada Lovelace <ada@example.org>",
		Subject: "Your invoice INV-42",
		Text:    "Hello Ada, your invoice is attached.",
		HTML:    "<p>Hello Ada, your invoice is attached.</p>",
		PDF:     []byte("%PDF-1.4 ..."),
		PDFName: "INV-42.pdf",
	})
	switch {
	case errors.Is(err, smtp.ErrPermanent):
		fmt.Println("failed for good:", err) // mark the row failed
	case err != nil:
		fmt.Println("retry later:", err) // leave the row pending
	default:
		fmt.Println("accepted by the relay:", sink.CountByRowID()["0b7e9f2c-5d1a-4c39-9b1e-2f6a8d4c7e10"])
	}
	// Output: accepted by the relay: 1
}
