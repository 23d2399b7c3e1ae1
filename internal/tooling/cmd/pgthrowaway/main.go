// Command pgthrowaway starts a throwaway Postgres cluster, prints its URL on
// a line of its own, and stops it on SIGINT/SIGTERM. CI uses it to share
// one cluster across test processes on a machine where none is running.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/postbox/postbox/internal/operator/devserver/pgserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := pgserver.StartCluster(ctx, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgthrowaway:", err)
		os.Exit(1)
	}
	fmt.Println(c.URL)
	<-ctx.Done()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgthrowaway: stop:", err)
		os.Exit(1)
	}
}
