package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbox/postbox/internal/pgserver"
	"github.com/postbox/postbox/internal/smtpsink"
	"github.com/postbox/postbox/migrations"
	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
	"github.com/postbox/postbox/webhook"
)

func init() {
	register(command{
		Name:    "demo",
		Summary: "the whole pipeline on a scratch database, with a local SMTP sink and receivers",
		Help: "Runs postbox end to end in about ten seconds: creates and migrates a scratch database (on " +
			"DATABASE_URL's server, Postgres on 127.0.0.1:5432, or a throwaway cluster it starts), an in-process " +
			"SMTP sink and three webhook receivers (healthy; failing twice, then recovering; answering 410 Gone); " +
			"enqueues invoice emails with PDFs, password resets, invites, a plain-SQL row, a suppressed address " +
			"and webhook events; runs a replica to completion and prints what was delivered, retried and failed, " +
			"and why. River UI and /metrics stay up until Ctrl-C; the database is dropped on exit. Logs go to a " +
			"temp file it names.",
		Flags: func(fs *flag.FlagSet) runFunc {
			exit := fs.Bool("exit", false, "stop as soon as the summary is printed")
			return func(ctx context.Context, env *Env, _ []string) error { return runDemo(ctx, env, *exit) }
		},
	})
}

// demoSchedule compresses the webhook retry schedule from minutes and hours
// to seconds, so the flaky receiver's recovery shows within the demo.
var demoSchedule = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}

// demoWorld is everything the demo stands up around the replica.
type demoWorld struct {
	server    *pgserver.Server
	adminURL  string
	dbName    string
	dbURL     string
	pool      *pgxpool.Pool
	sink      *smtpsink.Sink
	receivers []*demoReceiver // healthy, flaky, gone
	endpoints []webhook.Endpoint
	logPath   string
}

func runDemo(ctx context.Context, env *Env, exitAfterSummary bool) error {
	exit := &exitAfterSummary
	out := env.Stdout
	w, err := setUpDemo(ctx, env)
	if w != nil {
		defer w.tearDown()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "postbox demo: database %s (%s), SMTP sink %s, 3 webhook receivers; logs in %s\n",
		w.dbName, w.server.Source, w.sink.Addr(), w.logPath)

	return runReplica(ctx, env, w.pool, replicaOptions{WebhookSchedule: demoSchedule},
		func(ctx context.Context, rep *replica, addr string) error {
			mix, err := enqueueDemoMix(ctx, w, rep)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "enqueued %d emails and %d webhook events; running the pool…\n", mix.emails, mix.events)
			if err := waitDemoDone(ctx, w.pool, 2*time.Minute); err != nil {
				return err
			}
			if err := printDemoSummary(ctx, out, w, mix); err != nil {
				return err
			}
			if *exit {
				return errDone
			}
			base := "http://" + addr
			fmt.Fprintf(out, "\nConsole   %s/console/\nRiver UI  %s/riverui/\nMetrics   %s/metrics\nStats     DATABASE_URL='%s' go run ./cmd/worker stats\n",
				base, base, base, w.dbURL)
			fmt.Fprintln(out, "\nCtrl-C stops the demo and drops its database.")
			<-ctx.Done()
			return nil
		})
}

// setUpDemo finds Postgres (or starts a throwaway cluster), creates and
// migrates a scratch database, and starts the sink and receivers. env is
// pointed at all of them.
func setUpDemo(ctx context.Context, env *Env) (*demoWorld, error) {
	w := &demoWorld{}
	logFile, err := os.CreateTemp("", "postbox-demo-*.log")
	if err != nil {
		return nil, err
	}
	w.logPath = logFile.Name()
	env.Logger = newLogger(logFile, env.Config.LogLevel)

	if w.server, err = pgserver.Find(ctx, env.Logger, "DATABASE_URL"); err != nil {
		return w, err
	}
	w.adminURL = w.server.URL
	w.dbName = "postbox_demo_" + randomSuffix()
	if w.dbURL, err = pgserver.CreateDatabase(ctx, w.adminURL, w.dbName, ""); err != nil {
		return w, err
	}
	cfg, err := pgxpool.ParseConfig(w.dbURL)
	if err != nil {
		return w, err
	}
	cfg.MaxConns = 20
	if w.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return w, err
	}
	m, err := migrations.New(w.pool, env.Logger)
	if err != nil {
		return w, err
	}
	defer m.Close()
	if err := m.Up(ctx); err != nil {
		return w, err
	}
	if w.sink, err = smtpsink.Start(smtpsink.Options{}); err != nil {
		return w, err
	}
	w.receivers = []*demoReceiver{
		newDemoReceiver("healthy", func(int) int { return http.StatusOK }),
		newDemoReceiver("flaky", func(n int) int {
			if n <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		}),
		newDemoReceiver("gone", func(int) int { return http.StatusGone }),
	}

	c := &env.Config
	c.AppEnv, c.DatabaseURL, c.PollInterval = "development", w.dbURL, 250*time.Millisecond
	c.SMTP = smtp.Config{Host: w.sink.Host(), Port: w.sink.Port(), Mode: smtp.ModeNone,
		From: "billing@postbox.example", AppEnv: "development"}
	c.Webhook.Production = false
	c.Webhook.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if !portFree(c.HTTPAddr) {
		c.HTTPAddr = "127.0.0.1:0"
	}
	return w, nil
}

func (w *demoWorld) tearDown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range w.receivers {
		r.close()
	}
	if w.sink != nil {
		w.sink.Close()
	}
	if w.pool != nil {
		w.pool.Close()
	}
	if w.dbURL != "" {
		_ = pgserver.DropDatabase(ctx, w.adminURL, w.dbName)
	}
	if w.server != nil {
		_ = w.server.Close()
	}
}

// demoMix is what the demo enqueued, for the summary.
type demoMix struct {
	emails, events int
	suppressed     string
	plainSQLRow    string
}

// enqueueDemoMix writes what a SaaS backend would: invoice emails with a
// PDF, password resets, member invites, a plain-SQL row from "another
// service", one email to a suppressed address, and invoice.paid and
// customer.updated events — each in its own application transaction, with
// a kick job so delivery starts at once.
func enqueueDemoMix(ctx context.Context, w *demoWorld, rep *replica) (demoMix, error) {
	mix := demoMix{suppressed: "bounced@customer.example"}
	wcfg := webhook.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for i, r := range w.receivers {
		types := []string(nil)
		if r.name == "flaky" {
			types = []string{"invoice.paid"}
		}
		ep, err := webhook.CreateEndpoint(ctx, w.pool, wcfg, webhook.EndpointParams{URL: r.server.URL + "/hooks/" + r.name, EventTypes: types})
		if err != nil {
			return mix, fmt.Errorf("demo endpoint %d: %w", i, err)
		}
		if err := r.trust(ep.Secret); err != nil {
			return mix, err
		}
		w.endpoints = append(w.endpoints, ep)
	}
	if err := outbox.Suppress(ctx, w.pool, mix.suppressed, "hard bounce: mailbox does not exist"); err != nil {
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
				PDF: demoPDF(num, amount), PDFName: num + ".pdf", AttemptNumber: 1, Trigger: "invoice.finalized",
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
		if err := inTx(ctx, w.pool, func(tx pgx.Tx) error { _, err := emails.Enqueue(ctx, tx, e); return err }); err != nil {
			return mix, err
		}
	}
	// Another service, in another language, enqueues with plain SQL.
	err := w.pool.QueryRow(ctx, `INSERT INTO email_outbox (kind, customer_id, payload)
		VALUES ('raw', 'cus_7', $1) RETURNING id::text`,
		`{"to":"ops@customer.example","subject":"Welcome aboard","text":"Sent by a plain SQL INSERT."}`).Scan(&mix.plainSQLRow)
	if err != nil {
		return mix, err
	}
	mix.emails = len(batch) + 1

	for i := 1; i <= 5; i++ {
		body := fmt.Sprintf(`{"invoice_id":"INV-%04d","amount_paid":%d,"currency":"usd"}`, 1000+i, 4000*i)
		if err := inTx(ctx, w.pool, func(tx pgx.Tx) error { _, err := events.Enqueue(ctx, tx, "invoice.paid", []byte(body)); return err }); err != nil {
			return mix, err
		}
	}
	for i := 1; i <= 3; i++ {
		body := fmt.Sprintf(`{"customer_id":"cus_%d","email":"customer%d@customer.example"}`, i, i)
		if err := inTx(ctx, w.pool, func(tx pgx.Tx) error { _, err := events.Enqueue(ctx, tx, "customer.updated", []byte(body)); return err }); err != nil {
			return mix, err
		}
	}
	mix.events = 8
	return mix, nil
}

// waitDemoDone polls until no outbox row or delivery is pending.
func waitDemoDone(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		var pending int
		err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM email_outbox WHERE status = 'pending') +
			(SELECT count(*) FROM webhook_outbox WHERE status = 'pending') +
			(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')`).Scan(&pending)
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

func portFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}
