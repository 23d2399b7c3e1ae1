package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"
)

func init() {
	register(command{
		Name:    "healthcheck",
		Summary: "exit 0 when this host's worker is ready (container healthchecks)",
		Help: "Asks the worker on this host (HTTP_ADDR, with 0.0.0.0 or an empty host read as 127.0.0.1) for " +
			"/readyz — the database answers and migrations are current — or, with --live, for /healthz — the " +
			"process answers — and exits 0 on 200 OK, 1 otherwise. It exists because the container image has " +
			"no shell or curl.",
		Flags: func(fs *flag.FlagSet) runFunc {
			live := fs.Bool("live", false, "probe /healthz (liveness) instead of /readyz (readiness)")
			timeout := positiveDuration(fs, "timeout", 3*time.Second, "give up after this `duration`")
			return func(ctx context.Context, env *Env, _ []string) error {
				path := "/readyz"
				if *live {
					path = "/healthz"
				}
				return runHealthcheck(ctx, env, path, *timeout)
			}
		},
	})
}

// runHealthcheck exists because the container image has no shell or curl.
func runHealthcheck(ctx context.Context, env *Env, path string, timeout time.Duration) error {
	host, port, err := net.SplitHostPort(env.Config.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: %w", err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", path, resp.Status)
	}
	return nil
}
