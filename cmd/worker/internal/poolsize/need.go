package poolsize

import (
	"fmt"
	"strings"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/webhook"
)

// River's and the replica's own share of the pool, beside the lanes'.
const (
	// RiverConnections: the fetch of each of the replica's two River
	// queues (its shift queue and the maintenance queue) and the batch
	// completer, which run all the time; the elector and the leader's
	// maintenance services take one statement now and then and wait
	// their turn.
	RiverConnections = 3
	// GateConnections: the renewal of a held gate (the retry pass, the
	// pruner, a lane's sweep), which must not wait behind the work it
	// guards or the gate's lease runs out.
	GateConnections = 1
	// HTTPConnections: /readyz, /metrics' gauges, a console or River UI
	// page, one at a time.
	HTTPConnections = 1
	// ListenerConnections are held outside the pool: the wake-up
	// listener's own connection and River's notifier, which takes a pool
	// connection and hijacks it.
	ListenerConnections = 2
	// CLIConnections caps the pool of every command but run and demo.
	CLIConnections = 2
)

// Need is the pool a replica needs, by part.
type Need struct {
	Parts []Part
	Total int
}

// Part is one user of the pool and the connections it needs.
type Part struct {
	Name string
	N    int
}

// ForReplica is the need of a replica running emailConcurrency email
// batches at once (EMAIL_CONCURRENCY).
func ForReplica(emailConcurrency int) Need {
	parts := []Part{
		{"email lane", outbox.PoolConnections(emailConcurrency)},
		{"webhook lanes", webhook.PoolConnections},
		{"River", RiverConnections},
		{"gates", GateConnections},
		{"HTTP", HTTPConnections},
	}
	need := Need{Parts: parts}
	for _, p := range parts {
		need.Total += p.N
	}
	return need
}

// String is "10 (email lane 2, webhook lanes 3, River 3, gates 1, HTTP 1)".
func (n Need) String() string {
	var b strings.Builder
	for i, p := range n.Parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", p.Name, p.N)
	}
	return fmt.Sprintf("%d (%s)", n.Total, b.String())
}
