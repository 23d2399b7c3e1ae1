package poolsize_test

import (
	"fmt"

	"github.com/postbox/postbox/cmd/worker/internal/poolsize"
	"github.com/postbox/postbox/outbox"
)

// A replica at EMAIL_CONCURRENCY's default needs ten connections, each
// part named; more email batches in flight need more for their marks.
func ExampleForReplica() {
	fmt.Println(poolsize.ForReplica(outbox.DefaultConcurrency))
	fmt.Println(poolsize.ForReplica(100))
	// Output:
	// 10 (email lane 2, webhook lanes 3, River 3, gates 1, HTTP 1)
	// 11 (email lane 3, webhook lanes 3, River 3, gates 1, HTTP 1)
}

// DATABASE_URL's pool_max_conns is honoured above the need and refused
// below it; a command other than run holds at most two connections.
func ExampleReplica() {
	const url = "postgres://postgres@127.0.0.1:5432/postbox"
	for _, u := range []string{url, url + "?pool_max_conns=25", url + "?pool_max_conns=4"} {
		size, _, err := poolsize.Replica(u, outbox.DefaultConcurrency)
		cli, _ := poolsize.CLI(u)
		fmt.Println(size, cli, err)
	}
	// Output:
	// 10 2 <nil>
	// 25 2 <nil>
	// 0 2 DATABASE_URL: pool_max_conns=4 is below the 10 (email lane 2, webhook lanes 3, River 3, gates 1, HTTP 1) connections this replica needs: raise pool_max_conns, or remove it to use the need, or lower EMAIL_CONCURRENCY
}
