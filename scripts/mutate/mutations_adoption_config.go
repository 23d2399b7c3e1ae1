package main

// What a team meets on its first day: malformed settings refused at boot
// (a non-finite number, a header value with a control character, a lease
// slack too short for a webhook mark) and the table of accepted values
// proved against the code; a transaction pooler taken for a session
// refused; the boot line and the first send's error saying where mail goes
// and which setting to change.
func init() {
	register(
		Mutation{
			Name:    "config: NaN falls inside a number setting's interval",
			File:    "cmd/worker/internal/setting/number.go",
			Find:    "\treturn above && below\n",
			Replace: "\treturn !(x < r.Lo || x > r.Hi || (r.LoOpen && x == r.Lo) || (r.HiOpen && x == r.Hi)) || above && below\n",
			Pkg:     "./cmd/worker/internal/setting/",
			Test:    "TestNumber",
		},
		Mutation{
			Name:    "config: a WEBHOOK_USER_AGENT with a CR LF boots",
			File:    "webhook/config.go",
			Find:    "\tif !httpguts.ValidHeaderFieldValue(s) {\n",
			Replace: "\tif !httpguts.ValidHeaderFieldValue(s) && s == \"\" {\n",
			Pkg:     "./webhook/",
			Test:    "TestConfigFromEnv",
		},
		Mutation{
			Name:    "config: an OTLP header value with an encoded CR LF boots",
			File:    "cmd/worker/internal/telemetry/otlpenv.go",
			Find:    "\t\tif !httpguts.ValidHeaderFieldValue(v) {\n",
			Replace: "\t\tif !httpguts.ValidHeaderFieldValue(v) && v == \"\" {\n",
			Pkg:     "./cmd/worker/internal/telemetry/",
			Test:    "TestFromEnv",
		},
		Mutation{
			Name:    "config: a LEASE_SLACK too short for a webhook mark passes LoadConfig",
			File:    "cmd/worker/env.go",
			Find:    "\t\terr = c.Leases.ValidateAttempts()\n",
			Replace: "\t\t_ = c.Leases.ValidateAttempts()\n",
			Pkg:     "./cmd/worker/",
			Test:    "TestLoadConfigNamesBadVariable",
		},
		Mutation{
			Name:    "config: EMAIL_CONCURRENCY's bound moves away from the accepted-values table",
			File:    "cmd/worker/env.go",
			Find:    "const maxEmailConcurrency = 1000\n",
			Replace: "const maxEmailConcurrency = 1001\n",
			Pkg:     "./cmd/worker/",
			Test:    "TestConfigRangesMatchBoot",
		},
		Mutation{
			Name:    "config: OTEL_EXPORTER_OTLP_TIMEOUT has no cap",
			File:    "cmd/worker/internal/telemetry/config.go",
			Find:    "if err != nil || ms <= 0 || ms > maxExportTimeoutMS {",
			Replace: "if err != nil || ms <= 0 {",
			Pkg:     "./cmd/worker/",
			Test:    "TestConfigRangesMatchBoot",
		},
		Mutation{
			Name:    "pgbouncer: a transaction pooler found in session mode boots anyway",
			File:    "cmd/worker/sessionprobe.go",
			Find:    "\tcase moved:\n\t\treturn errTransactionPooler\n",
			Replace: "\tcase moved:\n\t\treturn nil\n",
			Pkg:     "./cmd/worker/",
			Test:    "TestSessionProbe",
		},
		Mutation{
			Name:    "pgbouncer: the session probe takes a backend it still holds for moved (Postgres refused)",
			File:    "cmd/worker/sessionprobe.go",
			Find:    "\treturn again != first, nil\n",
			Replace: "\treturn again != first || held != first, nil\n",
			Pkg:     "./cmd/worker/",
			Test:    "TestSessionProbe",
		},
		Mutation{
			Name:    "pgbouncer: the session probe prepares its statement, which the pooler's other backend lacks",
			File:    "internal/engine/pgsession/backend.go",
			Find:    "db.QueryRow(ctx, backendSQL, pgx.QueryExecModeSimpleProtocol)",
			Replace: "db.QueryRow(ctx, backendSQL, pgx.QueryExecModeCacheStatement)",
			Pkg:     "./cmd/worker/",
			Test:    "TestSessionProbe",
		},
		Mutation{
			Name:    "pgbouncer: worker run does not probe DATABASE_URL in session mode",
			File:    "cmd/worker/run.go",
			Find:    "\tif err := checkSessionPooling(ctx, env.Logger, env.Config.Pooling, pool); err != nil {\n",
			Replace: "\tif err := error(nil); err != nil {\n",
			Pkg:     "./cmd/worker/",
			Test:    "TestRun_RefusesTransactionPoolerInSessionMode",
		},
		Mutation{
			Name:    "smtp: the boot line does not say where mail goes",
			File:    "smtp/mailer.go",
			Find:    "m.log.Info(\"smtp transport: mail goes to \"+m.addr+\", \"+c.Mode.describe()+\", \"+authWord(c.Username != \"\"),",
			Replace: "m.log.Info(\"smtp transport\",",
			Pkg:     "./smtp/",
			Test:    "TestBootLineSaysWhereMailGoes",
		},
		Mutation{
			Name:    "smtp: a refused STARTTLS does not name SMTP_TLS",
			File:    "smtp/errors.go",
			Find:    "errors.New(\"STARTTLS required but not available (SMTP_TLS=starttls; \" +\n\t\"SMTP_TLS=tls for a relay on implicit TLS, SMTP_TLS=none for a local sink without TLS, outside production)\")",
			Replace: "errors.New(\"STARTTLS required but not available\")",
			Pkg:     "./smtp/",
			Test:    "TestStrictSTARTTLS_NoAdvertisement",
		},
		Mutation{
			Name:    "smtp: a send that finds no relay does not name SMTP_HOST and SMTP_PORT",
			File:    "smtp/classify.go",
			Find:    "\tif st == stageDial {\n",
			Replace: "\tif st == stageDial && m == nil {\n",
			Pkg:     "./smtp/",
			Test:    "TestDialErrorNamesTheSettings",
		},
		Mutation{
			Name:    "worker run: no warning when the relay is left at its defaults",
			File:    "cmd/worker/run.go",
			Find:    "if v, ok := env.lookup(name); ok && strings.TrimSpace(v) != \"\" {",
			Replace: "if v, ok := env.lookup(name); ok && strings.TrimSpace(v) != \"\" || !ok {",
			Pkg:     "./cmd/worker/",
			Test:    "TestWarnDefaultRelay",
		},
	)
}
