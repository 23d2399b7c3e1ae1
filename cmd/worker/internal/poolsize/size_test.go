package poolsize

import (
	"strings"
	"testing"

	"github.com/postbox/postbox/cmd/worker/internal/pooling"
	"github.com/postbox/postbox/outbox"
)

// The pool a replica runs with is its need unless DATABASE_URL's
// pool_max_conns says otherwise; that is honoured, never raised, and a
// value below the need is refused naming both. Commands other than run
// use at most two connections.
func TestReplicaAndCLI(t *testing.T) {
	t.Parallel()
	const base = "postgres://postgres@127.0.0.1:5432/postbox"
	for _, tc := range []struct {
		name      string
		url       string
		emails    int    // EMAIL_CONCURRENCY; outbox's default when 0
		replica   int    // pool size; 0 when refused
		refused   string // part of the refusal
		cli       int
		needTotal int
	}{
		{name: "defaults", url: base, replica: 10, cli: 2, needTotal: 10},
		{name: "EMAIL_CONCURRENCY=100", url: base, emails: 100, replica: 11, cli: 2, needTotal: 11},
		{name: "pool_max_conns above the need", url: base + "?pool_max_conns=25", replica: 25, cli: 2, needTotal: 10},
		{name: "pool_max_conns at the need", url: base + "?pool_max_conns=10", replica: 10, cli: 2, needTotal: 10},
		{name: "pool_max_conns below the need", url: base + "?pool_max_conns=4", cli: 2, needTotal: 10,
			refused: "pool_max_conns=4 is below the 10 (email lane 2, webhook lanes 3, River 3, gates 1, HTTP 1) connections"},
		{name: "a command under pool_max_conns=1", url: base + "?pool_max_conns=1", cli: 1, needTotal: 10,
			refused: "pool_max_conns=1 is below the 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			emails := tc.emails
			if emails == 0 {
				emails = outbox.DefaultConcurrency
			}
			size, need, err := Replica(tc.url, emails)
			switch {
			case tc.refused != "":
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Errorf("Replica = %d, %v; want refused with %q", size, err, tc.refused)
				}
			case err != nil || size != tc.replica:
				t.Errorf("Replica = %d, %v; want %d", size, err, tc.replica)
			}
			if need.Total != tc.needTotal {
				t.Errorf("need %s; want %d", need, tc.needTotal)
			}
			if cli, err := CLI(tc.url); err != nil || cli != tc.cli {
				t.Errorf("CLI = %d, %v; want %d", cli, err, tc.cli)
			}
		})
	}
}

// A pool_max_conns that is not a whole number of at least one is refused,
// by the replica and by a command alike.
func TestMaxConnsRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "-3", "ten"} {
		url := "postgres://postgres@127.0.0.1:5432/postbox?pool_max_conns=" + v
		want := `DATABASE_URL: pool_max_conns="` + v + `": must be a whole number of at least 1`
		if _, _, err := Replica(url, outbox.DefaultConcurrency); err == nil || err.Error() != want {
			t.Errorf("Replica with pool_max_conns=%s: %v, want %q", v, err, want)
		}
		if _, err := CLI(url); err == nil || err.Error() != want {
			t.Errorf("CLI with pool_max_conns=%s: %v, want %q", v, err, want)
		}
	}
}

// A replica listens beside its pool on DATABASE_URL in session mode and
// on DATABASE_DIRECT_URL in transaction mode; through a pooler without
// one it holds no listener and polls.
func TestListeners(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    pooling.Config
		want int
	}{
		{"session", pooling.Config{Mode: pooling.Session}, ListenerConnections},
		{"transaction with a direct URL", pooling.Config{Mode: pooling.Transaction, DirectURL: "postgres://db/app"}, ListenerConnections},
		{"transaction without one", pooling.Config{Mode: pooling.Transaction}, 0},
	} {
		if got := Listeners(tc.p); got != tc.want {
			t.Errorf("%s: Listeners = %d, want %d", tc.name, got, tc.want)
		}
	}
}
