package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// River's and the replica's own share of the pool, beside the lanes'.
const (
	// riverConnections: the fetch of each of the replica's two River
	// queues (its shift queue and the maintenance queue) and the batch
	// completer, which run all the time; the elector and the leader's
	// maintenance services take one statement now and then and wait
	// their turn.
	riverConnections = 3
	// gateConnections: the renewal of a held gate (the retry pass, the
	// pruner, a lane's sweep), which must not wait behind the work it
	// guards or the gate's lease runs out.
	gateConnections = 1
	// httpConnections: /readyz, /metrics' gauges, a console or River UI
	// page, one at a time.
	httpConnections = 1
	// listenerConnections are held outside the pool: the wake-up
	// listener's own connection and River's notifier, which takes a pool
	// connection and hijacks it.
	listenerConnections = 2
	// cliConnections caps the pool of every command but run and demo.
	cliConnections = 2
)

// connectionNeed is the pool a replica configured as cfg needs, by part.
type connectionNeed struct {
	parts []connectionPart
	total int
}

type connectionPart struct {
	name string
	n    int
}

func replicaNeed(cfg Config) connectionNeed {
	parts := []connectionPart{
		{"email lane", outbox.PoolConnections(cfg.EmailConcurrency)},
		{"webhook lanes", webhook.PoolConnections},
		{"River", riverConnections},
		{"gates", gateConnections},
		{"HTTP", httpConnections},
	}
	need := connectionNeed{parts: parts}
	for _, p := range parts {
		need.total += p.n
	}
	return need
}

// String is "10 (email lane 2, webhook lanes 3, River 3, gates 1, HTTP 1)".
func (n connectionNeed) String() string {
	var b strings.Builder
	for i, p := range n.parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", p.name, p.n)
	}
	return fmt.Sprintf("%d (%s)", n.total, b.String())
}

// poolMaxConns is pool_max_conns from a DATABASE_URL, when it sets one:
// pgxpool reads and removes it, so its default and a value written out
// cannot be told apart after parsing.
func poolMaxConns(databaseURL string) (int, bool, error) {
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

// replicaPoolSize is the pool a replica runs with: pool_max_conns when
// DATABASE_URL sets it — never raised — or else the need. A pool_max_conns
// below the need is refused, naming both.
func replicaPoolSize(cfg Config) (size int, need connectionNeed, err error) {
	need = replicaNeed(cfg)
	set, ok, err := poolMaxConns(cfg.DatabaseURL)
	switch {
	case err != nil:
		return 0, need, fmt.Errorf("DATABASE_URL: %w", err)
	case !ok:
		return need.total, need, nil
	case set < need.total:
		return 0, need, fmt.Errorf("DATABASE_URL: pool_max_conns=%d is below the %s connections this replica needs: "+
			"raise pool_max_conns, or remove it to use the need, or lower EMAIL_CONCURRENCY", set, need)
	}
	return set, need, nil
}

// cliPoolSize is the pool of a command other than run and demo: at most
// cliConnections, fewer if pool_max_conns says so.
func cliPoolSize(cfg Config) (int, error) {
	set, ok, err := poolMaxConns(cfg.DatabaseURL)
	if err != nil {
		return 0, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if ok {
		return min(set, cliConnections), nil
	}
	return cliConnections, nil
}
