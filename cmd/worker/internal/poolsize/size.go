package poolsize

import (
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
)

// MaxConns is pool_max_conns from a DATABASE_URL, when it sets one:
// pgxpool reads and removes it, so its default and a value written out
// cannot be told apart after parsing.
func MaxConns(databaseURL string) (int, bool, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return 0, false, err
	}
	s, ok := cfg.RuntimeParams["pool_max_conns"]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, false, fmt.Errorf("pool_max_conns=%q: must be a whole number of at least 1", s)
	}
	return n, true, nil
}

// Replica is the pool a replica runs with: pool_max_conns when
// databaseURL sets it — never raised — or else the need of a replica
// running emailConcurrency batches. A pool_max_conns below the need is
// refused, naming both.
func Replica(databaseURL string, emailConcurrency int) (size int, need Need, err error) {
	need = ForReplica(emailConcurrency)
	set, ok, err := MaxConns(databaseURL)
	switch {
	case err != nil:
		return 0, need, fmt.Errorf("DATABASE_URL: %w", err)
	case !ok:
		return need.Total, need, nil
	case set < need.Total:
		return 0, need, fmt.Errorf("DATABASE_URL: pool_max_conns=%d is below the %s connections this replica needs: "+
			"raise pool_max_conns, or remove it to use the need, or lower EMAIL_CONCURRENCY", set, need)
	}
	return set, need, nil
}

// CLI is the pool of a command other than run and demo: at most
// CLIConnections, fewer if pool_max_conns says so.
func CLI(databaseURL string) (int, error) {
	set, ok, err := MaxConns(databaseURL)
	if err != nil {
		return 0, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if ok {
		return min(set, CLIConnections), nil
	}
	return CLIConnections, nil
}

// Listeners is the connections a replica holds beside its pool: the
// wake-up listener's and River's notifier's, on DATABASE_URL in session
// mode, on DATABASE_DIRECT_URL in transaction mode, none without one.
func Listeners(p pooling.Config) int {
	if p.Transaction() && p.DirectURL == "" {
		return 0
	}
	return ListenerConnections
}
