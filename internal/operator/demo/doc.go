// Package demo is the world `worker demo` runs a replica in: a scratch
// database on whatever Postgres it finds (or a throwaway cluster), an
// in-process SMTP sink and three webhook receivers (healthy; failing twice,
// then recovering; answering 410 Gone), the mix of rows a SaaS backend
// writes, and the summary read back from the same places an operator looks.
// cmd/worker wires it to a replica; this package holds its SQL.
package demo
