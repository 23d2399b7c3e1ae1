// Command riverpeer is the River peer of `go run ./internal/tooling/cmd/bench --pool`: one River
// job per message, run as its own process beside the `worker run`
// replicas. The bench builds and starts it; it is not part of the product.
// Configuration is by environment (see bench.PeerProcessFromEnv; PEER_RATE
// caps the messages a process sends a second, as River itself cannot); it
// runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/postbox/postbox/internal/tooling/harness/bench"
)

func main() {
	p, err := bench.PeerProcessFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := bench.RunPeerProcess(ctx, p, logger); err != nil {
		fmt.Fprintln(os.Stderr, "riverpeer:", err)
		os.Exit(1)
	}
}
