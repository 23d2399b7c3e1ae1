package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is tried when no URL is configured.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Server is a reachable Postgres. Close stops it if we started it.
type Server struct {
	// URL is a connection string with rights to create databases.
	URL string
	// Source says where URL came from, for logs: an env var name,
	// "localhost", or "throwaway".
	Source  string
	cluster *Cluster
}

// Close stops a throwaway cluster; for other sources it does nothing.
func (s *Server) Close() error {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.Stop()
}

// Find returns the first reachable server in the documented order, starting
// a throwaway cluster as the last resort. An explicitly configured URL that
// does not answer is an error naming its variable: silently running against
// another database would be worse.
func Find(ctx context.Context, logger *slog.Logger, envVars ...string) (*Server, error) {
	for _, name := range envVars {
		if url := os.Getenv(name); url != "" {
			if err := Ping(ctx, url); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return &Server{URL: url, Source: name}, nil
		}
	}
	if err := Ping(ctx, DefaultURL); err == nil {
		return &Server{URL: DefaultURL, Source: "localhost"}, nil
	}
	logger.InfoContext(ctx, "no Postgres answers; starting a throwaway cluster")
	cluster, err := StartCluster(ctx, logger)
	if err != nil {
		return nil, fmt.Errorf("no Postgres at %s and no throwaway cluster: %w", "127.0.0.1:5432", err)
	}
	return &Server{URL: cluster.URL, Source: "throwaway", cluster: cluster}, nil
}

// Ping connects once with a short deadline. The error names the host, so a
// wrong DATABASE_URL diagnoses itself.
func Ping(ctx context.Context, url string) error {
	cfg, err := connConfig(url)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cfg.ConnectTimeout = 5 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	var refused *pgconn.PgError
	switch {
	case errors.As(err, &refused):
		// Postgres answered: the database or role is missing, the password
		// is wrong, it is out of connections. Say what it said, not that
		// it could not be reached.
		return fmt.Errorf("refused by Postgres at %s:%d: %s (SQLSTATE %s)", cfg.Host, cfg.Port,
			refused.Message, refused.Code)
	case err != nil:
		// pgx lists every address it tried on its own line; one line reads
		// better in a boot error.
		return fmt.Errorf("cannot reach Postgres at %s:%d: %s", cfg.Host, cfg.Port,
			strings.Join(strings.Fields(err.Error()), " "))
	}
	return conn.Close(ctx)
}

// Connect opens one connection to url: what every single connection to a
// DATABASE_URL (a ping, an admin statement, a bench's probe) is opened
// with, so the URL a pool accepts is accepted here too.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := connConfig(url)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// connConfig parses url as pgxpool does, so the pool's own parameters
// (pool_max_conns, …) are taken out rather than sent to the server as
// runtime parameters, which Postgres refuses at startup
// ("unrecognized configuration parameter").
func connConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return cfg.ConnConfig, nil
}
