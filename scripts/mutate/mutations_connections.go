package main

// The connection budget: a replica's pool is pool_max_conns when
// DATABASE_URL sets it, else its need; below the need the boot stops; the
// first connection does not pass pool_max_conns to Postgres.
func init() {
	register(
		Mutation{
			Name:    "connections: a pool_max_conns below the need is run with",
			File:    "cmd/worker/internal/poolsize/size.go",
			Find:    "case set < need.Total:",
			Replace: "case false:",
			Pkg:     "./cmd/worker/internal/poolsize/",
			Test:    "TestReplicaAndCLI",
		},
		Mutation{
			Name:    "connections: a single connection passes pool_max_conns to Postgres",
			File:    "internal/operator/devserver/pgserver/find.go",
			Find:    "\tcfg, err := pgxpool.ParseConfig(url)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\treturn cfg.ConnConfig, nil",
			Replace: "\t_ = pgxpool.ParseConfig // the pool's parsing, unused\n\treturn pgx.ParseConfig(url)",
			Pkg:     "./cmd/worker/",
			Test:    "TestRun_HoldsNoMoreConnectionsThanItsPool",
		},
		Mutation{
			Name:    "connections: a command's pool is not capped",
			File:    "cmd/worker/internal/poolsize/size.go",
			Find:    "return min(set, CLIConnections), nil",
			Replace: "return set, nil",
			Pkg:     "./cmd/worker/internal/poolsize/",
			Test:    "TestReplicaAndCLI",
		},
	)
}
