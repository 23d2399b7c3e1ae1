package main

// A transaction pooler in front of Postgres (DATABASE_POOL_MODE=transaction):
// no named prepared statements through it, no LISTEN through it — the
// wake-up listener and River's notifier on DATABASE_DIRECT_URL, or River
// polling without one — migrations on the direct URL, and a direct URL
// that reaches another database refused.
func init() {
	register(
		Mutation{
			Name:    "pgbouncer: transaction mode keeps pgx's prepared statements",
			File:    "cmd/worker/internal/pooling/pooling.go",
			Find:    "\t\tp.ExecMode = pgx.QueryExecModeCacheDescribe\n",
			Replace: "\t\tp.ExecMode = pgx.QueryExecModeCacheStatement\n",
			Pkg:     "./cmd/worker/internal/pooling/",
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "pgbouncer: the replica's pool ignores the exec mode transaction mode chose",
			File:    "cmd/worker/env.go",
			Find:    "\tcfg.ConnConfig.DefaultQueryExecMode = e.Config.Pooling.ExecMode\n",
			Replace: "",
			Pkg:     "./cmd/worker/",
			Test:    "TestRun_BehindPgBouncerTransactionPooling",
		},
		Mutation{
			Name:    "pgbouncer: River LISTENs through the pooler when there is no direct URL (PollOnly unset)",
			File:    "cmd/worker/direct.go",
			Find:    "driver: riverpgxv5.New(pool), pollOnly: true, fetchPoll: jobs.PollOnlyFetch}",
			Replace: "driver: riverpgxv5.New(pool), fetchPoll: jobs.PollOnlyFetch}",
			Pkg:     "./cmd/worker/",
			Test:    "TestPoolingFromEnv",
		},
		Mutation{
			Name:    "pgbouncer: the wake-up listener connects through the pooler, not DATABASE_DIRECT_URL",
			File:    "cmd/worker/direct.go",
			Find:    "waker:  jobs.NewWakerOn(cfg.ConnConfig, wakeLog),",
			Replace: "waker:  jobs.NewWaker(pool, wakeLog),",
			Pkg:     "./cmd/worker/",
			Test:    "TestRun_BehindPgBouncer_PlainInsertWakesTheReplica",
		},
		Mutation{
			Name:    "pgbouncer: River's notifier takes its connection through the pooler, not DATABASE_DIRECT_URL",
			File:    "cmd/worker/direct.go",
			Find:    "driver: directNotifier{Driver: riverpgxv5.New(pool), notifier: riverpgxv5.New(direct)},",
			Replace: "driver: riverpgxv5.New(pool),",
			Pkg:     "./cmd/worker/",
			Test:    "TestRun_BehindPgBouncer_PlainInsertWakesTheReplica",
		},
		Mutation{
			Name:    "pgbouncer: migrate runs through the pooler despite DATABASE_DIRECT_URL",
			File:    "cmd/worker/direct.go",
			Find:    "if direct == \"\" || e.pool != nil {",
			Replace: "if true {",
			Pkg:     "./cmd/worker/",
			Test:    "TestCommands_BehindPgBouncer",
		},
		Mutation{
			Name:    "pgbouncer: a DATABASE_DIRECT_URL that reaches another database is accepted",
			File:    "cmd/worker/direct.go",
			Find:    "if viaPool != viaDirect {",
			Replace: "if false {",
			Pkg:     "./cmd/worker/",
			Test:    "TestCommands_BehindPgBouncer",
		},
	)
}
