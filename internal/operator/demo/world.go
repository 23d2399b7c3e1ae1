package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbox/postbox/internal/operator/backlog"
	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
	"github.com/postbox/postbox/migrations"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// WebhookBackoff compresses the webhook retry schedule from minutes and hours
// to seconds, so the flaky receiver's recovery shows within the demo.
var WebhookBackoff = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}

// World is everything the demo stands up around the replica: a scratch
// database, an SMTP sink and three webhook receivers.
type World struct {
	Server    *pgserver.Server
	adminURL  string
	DBName    string
	DBURL     string
	Pool      *pgxpool.Pool
	Sink      *smtpsink.Sink
	receivers []*receiver // healthy, flaky, gone
	endpoints []webhook.Endpoint
}

// Setup finds Postgres (or starts a throwaway cluster), creates and
// migrates a scratch database, and starts the sink and receivers. On an
// error the World returned holds what was started, for Teardown.
func Setup(ctx context.Context, logger *slog.Logger) (*World, error) {
	w := &World{}
	var err error
	if w.Server, err = pgserver.Find(ctx, logger, "DATABASE_URL"); err != nil {
		return w, err
	}
	w.adminURL = w.Server.URL
	w.DBName = "postbox_demo_" + randomSuffix()
	if w.DBURL, err = pgserver.CreateDatabase(ctx, w.adminURL, w.DBName, ""); err != nil {
		return w, err
	}
	cfg, err := pgxpool.ParseConfig(w.DBURL)
	if err != nil {
		return w, err
	}
	cfg.MaxConns = 20
	if w.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return w, err
	}
	m, err := migrations.New(w.Pool, logger)
	if err != nil {
		return w, err
	}
	defer m.Close()
	if err := m.Up(ctx); err != nil {
		return w, err
	}
	if w.Sink, err = smtpsink.Start(smtpsink.Options{}); err != nil {
		return w, err
	}
	w.receivers = []*receiver{
		newReceiver("healthy", func(int) int { return http.StatusOK }),
		newReceiver("flaky", func(n int) int {
			if n <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		}),
		newReceiver("gone", func(int) int { return http.StatusGone }),
	}
	return w, nil
}

// AllowedCIDRs is where the demo's receivers listen: the webhook client's
// SSRF guard must let loopback through for them.
var AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// Teardown stops what Setup started; its error is the database drop's.
func (w *World) Teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range w.receivers {
		r.close()
	}
	if w.Sink != nil {
		w.Sink.Close()
	}
	if w.Pool != nil {
		w.Pool.Close()
	}
	var err error
	if w.DBURL != "" {
		err = pgserver.DropDatabase(ctx, w.adminURL, w.DBName)
	}
	if w.Server != nil {
		_ = w.Server.Close()
	}
	return err
}

// Mix is what the demo enqueued, for the summary.
type Mix struct {
	Emails, Events int
	suppressed     string
	plainSQLRow    string
	receiptRow     string // kind receipt, from the demo's template directory
}

// EnqueueMix writes what a SaaS backend would: invoice emails with a
// PDF, password resets, member invites, a plain-SQL row from "another
// service", one email to a suppressed address, and invoice.paid and
// customer.updated events — each in its own application transaction.
func (w *World) EnqueueMix(ctx context.Context) (Mix, error) {
	mix := Mix{suppressed: "bounced@customer.example"}
	wcfg := webhook.Settings{AllowedCIDRs: AllowedCIDRs}
	for i, r := range w.receivers {
		types := []string(nil)
		if r.name == "flaky" {
			types = []string{"invoice.paid"}
		}
		ep, err := webhook.CreateEndpoint(ctx, w.Pool, wcfg, webhook.EndpointParams{URL: r.server.URL + "/hooks/" + r.name, EventTypes: types})
		if err != nil {
			return mix, fmt.Errorf("demo endpoint %d: %w", i, err)
		}
		if err := r.trust(ep.Secret); err != nil {
			return mix, err
		}
		w.endpoints = append(w.endpoints, ep)
	}
	if err := outbox.Suppress(ctx, w.Pool, mix.suppressed, "hard bounce: mailbox does not exist"); err != nil {
		return mix, err
	}

	emails := &outbox.Enqueuer{}
	events := webhook.Enqueuer{}
	var batch []outbox.Email
	for i := 1; i <= 6; i++ {
		num, amount := fmt.Sprintf("INV-%04d", 1000+i), fmt.Sprintf("$%d.00", 40*i)
		to := fmt.Sprintf("customer%d@customer.example", i)
		if i == 6 {
			to = mix.suppressed
		}
		batch = append(batch, outbox.Email{Kind: outbox.KindInvoice, CustomerID: fmt.Sprintf("cus_%d", i), InvoiceID: num,
			Payload: outbox.Payload{To: to, Subject: "Your invoice " + num, InvoiceNumber: num, AmountDue: amount,
				DueDate: "2026-12-31", Name: fmt.Sprintf("Customer %d", i), OrgName: "Acme Billing",
				PDF: invoicePDF(num, amount), PDFName: num + ".pdf", AttemptNumber: 1, Trigger: "invoice.finalized",
				PublicToken: "pt_" + randomSuffix(), UpdateURL: "https://billing.example/pay/" + num}})
	}
	for i := 1; i <= 4; i++ {
		batch = append(batch, outbox.Email{Kind: outbox.KindPasswordReset, CustomerID: fmt.Sprintf("cus_%d", i),
			Payload: outbox.Payload{To: fmt.Sprintf("user%d@customer.example", i), Subject: "Reset your password",
				Name: fmt.Sprintf("User %d", i), PasswordResetURL: "https://app.example/reset?token=" + randomSuffix()}})
	}
	for i := 1; i <= 3; i++ {
		batch = append(batch, outbox.Email{Kind: outbox.KindMemberInvite, CustomerID: "cus_1",
			Payload: outbox.Payload{To: fmt.Sprintf("teammate%d@customer.example", i), Subject: "You are invited to Acme Billing",
				OrgName: "Acme Billing", InviteURL: "https://app.example/invite/" + randomSuffix(),
				SetupURL: "https://app.example/setup/" + randomSuffix()}})
	}
	for _, e := range batch {
		if err := inTx(ctx, w.Pool, func(tx pgx.Tx) error { _, err := emails.Enqueue(ctx, tx, e); return err }); err != nil {
			return mix, err
		}
	}
	// Another service, in another language, enqueues with plain SQL.
	err := w.Pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
		VALUES ('raw', 'cus_7', $1) RETURNING id::text`,
		`{"to":"ops@customer.example","subject":"Welcome aboard","text":"Sent by a plain SQL INSERT."}`).Scan(&mix.plainSQLRow)
	if err != nil {
		return mix, err
	}
	// A kind of the application's own, rendered from the worker's template
	// directory (Templates): the row carries data, not a subject or body.
	err = w.Pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
		VALUES ('receipt', 'cus_2', $1) RETURNING id::text`,
		`{"to":"customer2@customer.example","name":"Customer 2","org_name":"Acme Billing","order_id":"ORD-1002",`+
			`"lines":[{"item":"Team plan","amount":"$80.00"},{"item":"Extra seat","amount":"$10.00"}],"total":"$90.00"}`).Scan(&mix.receiptRow)
	if err != nil {
		return mix, err
	}
	mix.Emails = len(batch) + 2

	for i := 1; i <= 5; i++ {
		body := fmt.Sprintf(`{"invoice_id":"INV-%04d","amount_paid":%d,"currency":"usd"}`, 1000+i, 4000*i)
		if err := inTx(ctx, w.Pool, func(tx pgx.Tx) error { _, err := events.Enqueue(ctx, tx, "invoice.paid", []byte(body)); return err }); err != nil {
			return mix, err
		}
	}
	for i := 1; i <= 3; i++ {
		body := fmt.Sprintf(`{"customer_id":"cus_%d","email":"customer%d@customer.example"}`, i, i)
		if err := inTx(ctx, w.Pool, func(tx pgx.Tx) error { _, err := events.Enqueue(ctx, tx, "customer.updated", []byte(body)); return err }); err != nil {
			return mix, err
		}
	}
	mix.Events = 8
	return mix, nil
}

// WaitDone polls until no outbox row or delivery is pending, as the
// operator's figures count them (backlog.ReadFigures).
func WaitDone(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		var pending int64
		figs, err := backlog.ReadFigures(ctx, pool)
		for _, f := range figs {
			pending += f.Pending
		}
		if err == nil && pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo did not finish within %s (%d rows still pending)", limit, pending)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, fn)
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
