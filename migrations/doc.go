// Package migrations owns the postbox schema: the SQL files under sql/
// (embedded, applied by goose) for the outbox tables, and River's own tables
// through rivermigrate, so one command brings a database fully up to date.
//
// The table and column names are a public contract (see DESIGN.md): other
// languages enqueue with plain INSERTs, so columns may be added but never
// renamed.
package migrations
