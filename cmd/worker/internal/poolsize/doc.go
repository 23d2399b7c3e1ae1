// Package poolsize sizes the worker's pgx pools (docs/OPERATIONS.md,
// "Connections").
//
// A replica needs a connection for each thing that must not wait behind
// another: its email lane's claims and marks, its webhook lanes, River's
// fetches and completer, the renewal of a held gate, one HTTP request
// (ForReplica). Its pool is that need unless DATABASE_URL's pool_max_conns
// says otherwise; a pool_max_conns is honoured, never raised, and one below
// the need is refused naming both numbers, since a replica under it would
// stall its own lanes rather than fail. Every other command is a person at
// a terminal and holds at most CLIConnections. Beside its pool a replica
// holds the listeners' connections, when it listens at all (Listeners).
package poolsize
