package pgserver

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestThrowawayCluster exercises the last-resort path explicitly, whether or
// not another server is running: start a cluster, query it, stop it.
func TestThrowawayCluster(t *testing.T) {
	t.Parallel()
	if _, err := BinDir(); errors.Is(err, ErrNoBinaries) {
		t.Skip("skipping: no Postgres server binaries on this machine (initdb, pg_ctl); install postgresql to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := StartCluster(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		c.Stop()
		t.Fatalf("connect to throwaway cluster: %v", err)
	}
	var one int
	err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	conn.Close(ctx)
	if err != nil || one != 1 {
		t.Errorf("SELECT 1 = %d, %v", one, err)
	}
	if err := c.Restart(ctx); err != nil {
		c.Stop()
		t.Fatalf("Restart: %v", err)
	}
	if err := Ping(ctx, c.URL); err != nil {
		c.Stop()
		t.Fatalf("cluster does not answer on its own port after Restart: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := Ping(ctx, c.URL); err == nil {
		t.Fatal("cluster still answers after Stop")
	}
}

func TestPingNamesHost(t *testing.T) {
	t.Parallel()
	err := Ping(context.Background(), "postgres://u@db.invalid:5432/x?connect_timeout=2")
	if err == nil {
		t.Fatal("Ping of an unresolvable host succeeded")
	}
	if want := "db.invalid"; !strings.Contains(err.Error(), want) {
		t.Fatalf("Ping error %q does not name host %q", err, want)
	}
}

// Postgres that answers with a refusal is reported as what it said — a
// missing database, a missing role — not as unreachable.
func TestPingSaysWhatPostgresSaid(t *testing.T) {
	t.Parallel()
	srv, err := Find(context.Background(), slog.New(slog.DiscardHandler), "DATABASE_URL")
	if err != nil {
		t.Skipf("no Postgres: %v", err)
	}
	defer srv.Close()
	base, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, user, db, want string
	}{
		{"missing database", base.User.Username(), "postbox_no_such_db", `database "postbox_no_such_db" does not exist (SQLSTATE 3D000)`},
		{"missing role", "postbox_no_such_role", "postgres", `"postbox_no_such_role"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := *base
			u.User = url.User(tc.user)
			u.Path = "/" + tc.db
			err := Ping(context.Background(), u.String())
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "cannot reach") {
				t.Fatalf("Ping(%s) = %v, want a refusal naming %s", tc.name, err, tc.want)
			}
		})
	}
}
