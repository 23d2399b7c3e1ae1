package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

func init() {
	register(command{
		Name:  "healthcheck",
		Usage: "— exit 0 when this host's worker answers /healthz (for container healthchecks)",
		Run:   runHealthcheck,
	})
}

// runHealthcheck exists because the container image has no shell or curl.
func runHealthcheck(ctx context.Context, env *Env, _ []string) error {
	host, port, err := net.SplitHostPort(env.Config.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: %w", err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return nil
}
