package pgserver

import (
	"context"
	"errors"
	"log/slog"
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
