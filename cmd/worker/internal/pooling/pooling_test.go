package pooling

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DATABASE_POOL_MODE and DATABASE_DIRECT_URL decide the exec mode of
// DATABASE_URL's connections, and every bad value is refused naming its
// variable without quoting a password.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	const (
		pooler = "postgres://app:pooler-s3cret@pgbouncer:6432/app"
		direct = "postgres://app:direct-s3cret@db:5432/app"
	)
	for _, tc := range []struct {
		name        string
		databaseURL string // pooler when empty
		env         map[string]string
		mode        Mode
		exec        pgx.QueryExecMode
		fromURL     bool
		direct      string
		refused     string
	}{
		{name: "defaults: a session each", mode: Session, exec: pgx.QueryExecModeCacheStatement},
		{name: "transaction pooler without a direct URL", env: map[string]string{EnvPoolMode: "transaction"},
			mode: Transaction, exec: pgx.QueryExecModeCacheDescribe},
		{name: "transaction pooler with a direct URL", env: map[string]string{EnvPoolMode: "transaction", EnvDirectURL: direct},
			mode: Transaction, exec: pgx.QueryExecModeCacheDescribe, direct: direct},
		{name: "exec mode through a transaction pooler", databaseURL: pooler + "?default_query_exec_mode=exec",
			env: map[string]string{EnvPoolMode: "transaction"}, refused: "default_query_exec_mode=exec types parameters by their Go type"},
		{name: "the simple protocol through a transaction pooler", databaseURL: pooler + "?default_query_exec_mode=simple_protocol",
			env: map[string]string{EnvPoolMode: "transaction"}, refused: "default_query_exec_mode=simple_protocol types parameters by their Go type"},
		{name: "the URL's prepared statements are honoured (PgBouncer 1.21 keeps them)", databaseURL: pooler + "?default_query_exec_mode=cache_statement",
			env: map[string]string{EnvPoolMode: "transaction"}, mode: Transaction, exec: pgx.QueryExecModeCacheStatement, fromURL: true},
		{name: "the URL's cache_describe is its own", databaseURL: pooler + "?default_query_exec_mode=cache_describe",
			env: map[string]string{EnvPoolMode: "transaction"}, mode: Transaction, exec: pgx.QueryExecModeCacheDescribe, fromURL: true},
		{name: "session mode keeps the URL's exec mode", databaseURL: pooler + "?default_query_exec_mode=simple_protocol",
			mode: Session, exec: pgx.QueryExecModeSimpleProtocol, fromURL: true},
		{name: "unknown pool mode", env: map[string]string{EnvPoolMode: "pgbouncer"}, refused: `DATABASE_POOL_MODE="pgbouncer": must be session`},
		{name: "statement pooling", env: map[string]string{EnvPoolMode: "statement"}, refused: "DATABASE_POOL_MODE=statement"},
		{name: "a direct URL that does not parse",
			env:     map[string]string{EnvPoolMode: "transaction", EnvDirectURL: "postgres://app:direct-s3cret@db:port/app"},
			refused: "DATABASE_DIRECT_URL: "},
		{name: "a direct URL in session mode", env: map[string]string{EnvDirectURL: direct},
			refused: "DATABASE_DIRECT_URL is set but DATABASE_POOL_MODE is session"},
		{name: "describe and execute apart through a transaction pooler", databaseURL: pooler + "?default_query_exec_mode=describe_exec",
			env: map[string]string{EnvPoolMode: "transaction"}, refused: "default_query_exec_mode=describe_exec is unsafe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			get := func(name, def string) string {
				if v := tc.env[name]; v != "" {
					return v
				}
				return def
			}
			url := tc.databaseURL
			if url == "" {
				url = pooler
			}
			p, err := FromEnv(get, url)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("FromEnv error = %v, want it to contain %q", err, tc.refused)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("the error quotes a password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Mode != tc.mode || p.Transaction() != (tc.mode == Transaction) || p.DirectURL != tc.direct {
				t.Errorf("mode %s (transaction: %v), direct URL %q; want %s, %q", p.Mode, p.Transaction(), p.DirectURL, tc.mode, tc.direct)
			}
			if p.ExecMode != tc.exec || p.ExecModeFromURL != tc.fromURL {
				t.Errorf("exec mode %s (from the URL: %v), want %s (%v)", ExecModeName(p.ExecMode), p.ExecModeFromURL, ExecModeName(tc.exec), tc.fromURL)
			}
		})
	}
}

// ExecModeName spells each mode as default_query_exec_mode does, so a
// refusal or the boot log names the key's value an operator would write.
func TestExecModeName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		cfg, err := pgx.ParseConfig("postgres://db/app?default_query_exec_mode=" + name)
		if err != nil {
			t.Fatal(err)
		}
		if got := ExecModeName(cfg.DefaultQueryExecMode); got != name {
			t.Errorf("ExecModeName of %s = %q", name, got)
		}
	}
}
