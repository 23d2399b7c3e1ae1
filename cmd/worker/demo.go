package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/internal/operator/demo"
	"github.com/postbox/postbox/outbox/templatedir"
	"github.com/postbox/postbox/smtp"
)

func init() {
	register(command{
		Name:     "demo",
		JSONLogs: true,
		Summary:  "the whole pipeline on a scratch database, with a local SMTP sink and receivers",
		Help: "Runs postbox end to end in about ten seconds: creates and migrates a scratch database (on " +
			"DATABASE_URL's server, Postgres on 127.0.0.1:5432, or a throwaway cluster it starts), an in-process " +
			"SMTP sink and three webhook receivers (healthy; failing twice, then recovering; answering 410 Gone); " +
			"enqueues invoice emails with PDFs, password resets, invites, a plain-SQL row, a receipt of a kind from " +
			"a template directory (internal/operator/demo/templates), a suppressed address " +
			"and webhook events; runs a replica to completion and prints what was delivered, retried and failed, " +
			"and why. River UI and /metrics stay up until Ctrl-C; the database is dropped on exit. Logs go to a " +
			"temp file it names.",
		Flags: func(fs *flag.FlagSet) runFunc {
			exit := fs.Bool("exit", false, "stop as soon as the summary is printed")
			return func(ctx context.Context, env *Env, _ []string) error { return runDemo(ctx, env, *exit) }
		},
	})
}

func runDemo(ctx context.Context, env *Env, exitAfterSummary bool) error {
	exit := &exitAfterSummary
	out := env.Stdout
	logFile, err := os.CreateTemp("", "postbox-demo-*.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	env.Logger = newLogger(logFile, env.Config.LogLevel)
	w, err := demo.Setup(ctx, env.Logger)
	defer func() {
		if w.DBName == "" {
			_ = w.Teardown()
			return
		}
		if err := w.Teardown(); err != nil {
			fmt.Fprintf(env.Stderr, "postbox demo: database %s was not dropped: %v\n", w.DBName, err)
			return
		}
		fmt.Fprintf(out, "postbox demo stopped; database %s dropped.\n", w.DBName)
	}()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "postbox demo: database %s (%s), SMTP sink %s, 3 webhook receivers; logs in %s\n",
		w.DBName, w.Server.Source, w.Sink.Addr(), logFile.Name())

	c := &env.Config
	c.AppEnv, c.DatabaseURL, c.PollInterval = "development", w.DBURL, 250*time.Millisecond
	// The demo's database is one it made on a server it found, never
	// behind the pooler DATABASE_URL may name.
	c.Pooling = pooling.Config{Mode: pooling.Session, ExecMode: w.Pool.Config().ConnConfig.DefaultQueryExecMode}
	c.SMTP = smtp.Config{Host: w.Sink.Host(), Port: w.Sink.Port(), Mode: smtp.ModeNone,
		From: "billing@postbox.example", AppEnv: "development"}
	c.Webhook.Production = false
	c.Webhook.AllowedCIDRs = demo.AllowedCIDRs
	if !portFree(c.HTTPAddr) {
		c.HTTPAddr = "127.0.0.1:0"
	}

	templates, err := templatedir.LoadFS(demo.Templates, "internal/operator/demo/templates")
	if err != nil {
		return err
	}
	return runReplica(ctx, env, w.Pool, replicaOptions{WebhookBackoff: demo.WebhookBackoff, Templates: templates},
		func(ctx context.Context, rep *replica, addr string) error {
			mix, err := w.EnqueueMix(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "enqueued %d emails and %d webhook events; running the pool…\n", mix.Emails, mix.Events)
			if err := demo.WaitDone(ctx, w.Pool, 2*time.Minute); err != nil {
				return err
			}
			if err := w.PrintSummary(ctx, out, mix); err != nil {
				return err
			}
			if *exit {
				return errDone
			}
			base := "http://" + addr
			fmt.Fprintf(out, "\nConsole   %s/console/\nRiver UI  %s/riverui/\nMetrics   %s/metrics\nStats     DATABASE_URL='%s' go run ./cmd/worker stats\n",
				base, base, base, w.DBURL)
			fmt.Fprintln(out, "\nCtrl-C stops the demo and drops its database.")
			<-ctx.Done()
			return nil
		})
}

func portFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}
