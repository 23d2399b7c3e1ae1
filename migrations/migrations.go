package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var embedded embed.FS

// SQL is the postbox migrations as goose reads them, for tools that need to
// know the schema (the test harness names its template after them).
var SQL = mustSub(embedded, "sql")

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// RiverTarget is the newest River schema version this binary knows.
func RiverTarget() int {
	m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		panic(err)
	}
	all := m.AllVersions()
	return all[len(all)-1].Version
}

// VersionTable is goose's bookkeeping table for the postbox schema, named so
// it cannot collide with an application's own goose table.
const VersionTable = "postbox_schema_version"

// Versions is where one schema is and where this binary wants it.
type Versions struct {
	Current int64
	Target  int64
}

// Behind reports whether migrations are pending.
func (v Versions) Behind() bool { return v.Current < v.Target }

// State is the migration state of both schemas a worker needs.
type State struct {
	Postbox Versions
	River   Versions
}

// Current reports whether the database is ready for this binary.
func (s State) Current() bool { return !s.Postbox.Behind() && !s.River.Behind() }

// ErrBehind is returned by RequireCurrent while migrations are pending.
var ErrBehind = errors.New("database migrations are behind: run `worker migrate up`")

// Migrator applies both schemas to one database.
type Migrator struct {
	pool   *pgxpool.Pool
	db     *sql.DB
	goose  *goose.Provider
	river  *rivermigrate.Migrator[pgx.Tx]
	logger *slog.Logger
}

// New builds a Migrator over pool. Close releases its database/sql handle
// (the pool itself stays the caller's).
func New(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	db := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, db, SQL,
		goose.WithTableName(VersionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("load postbox migrations: %w", err)
	}
	river, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: riverMigrateLogger(logger)})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("load River migrations: %w", err)
	}
	return &Migrator{pool: pool, db: db, goose: provider, river: river, logger: logger}, nil
}

// Close releases the database/sql handle.
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration, postbox's then River's. Running it
// twice is a no-op.
func (m *Migrator) Up(ctx context.Context) error {
	results, err := m.goose.Up(ctx)
	if err != nil {
		return fmt.Errorf("postbox migrations up: %w", err)
	}
	for _, r := range results {
		m.logger.InfoContext(ctx, "migration applied", "schema", "postbox", "version", r.Source.Version, "duration", r.Duration)
	}
	res, err := m.river.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("river migrations up: %w", err)
	}
	for _, v := range res.Versions {
		m.logger.InfoContext(ctx, "migration applied", "schema", "river", "version", v.Version, "duration", v.Duration)
	}
	return nil
}

// Down rolls postbox's schema back one version, or with all set removes
// both schemas entirely (postbox first, then River).
func (m *Migrator) Down(ctx context.Context, all bool) error {
	if !all {
		r, err := m.goose.Down(ctx)
		if err != nil {
			return fmt.Errorf("postbox migrations down: %w", err)
		}
		m.logger.InfoContext(ctx, "migration rolled back", "schema", "postbox", "version", r.Source.Version)
		return nil
	}
	results, err := m.goose.DownTo(ctx, 0)
	if err != nil {
		return fmt.Errorf("postbox migrations down to 0: %w", err)
	}
	for _, r := range results {
		m.logger.InfoContext(ctx, "migration rolled back", "schema", "postbox", "version", r.Source.Version)
	}
	existing, err := m.river.ExistingVersions(ctx)
	if err != nil || len(existing) == 0 {
		return err
	}
	if _, err := m.river.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
		return fmt.Errorf("river migrations down: %w", err)
	}
	m.logger.InfoContext(ctx, "migration rolled back", "schema", "river", "version", 0)
	return nil
}

// State reads both schemas' versions.
func (m *Migrator) State(ctx context.Context) (State, error) {
	var s State
	var err error
	s.Postbox.Current, s.Postbox.Target, err = m.goose.GetVersions(ctx)
	if err != nil {
		return s, fmt.Errorf("read postbox schema version: %w", err)
	}
	existing, err := m.river.ExistingVersions(ctx)
	if err != nil {
		return s, fmt.Errorf("read River schema version: %w", err)
	}
	if len(existing) > 0 {
		s.River.Current = int64(existing[len(existing)-1].Version)
	}
	s.River.Target = int64(RiverTarget())
	return s, nil
}

// RequireCurrent returns ErrBehind (wrapped with the figures) unless both
// schemas are at this binary's target.
func (m *Migrator) RequireCurrent(ctx context.Context) error {
	s, err := m.State(ctx)
	if err != nil {
		return err
	}
	if !s.Current() {
		return fmt.Errorf("%w (postbox %d/%d, River %d/%d)", ErrBehind,
			s.Postbox.Current, s.Postbox.Target, s.River.Current, s.River.Target)
	}
	return nil
}
