// Package pgtest gives every test that touches SQL its own freshly migrated
// database in milliseconds, so tests and packages run in parallel.
//
// The first test in a process builds (or finds) a template database migrated
// to this binary's schema, named by a hash of the migrations; each test then
// clones it with CREATE DATABASE … TEMPLATE and drops the clone at cleanup.
// Builders race safely: each builds under a private name and renames it into
// place, and the loser drops its copy.
//
// Testable examples, which have no *testing.T, take theirs from ExamplePool
// (or ExampleURL, or ExampleEmptyURL for one to migrate); Main drops them
// once the examples have run.
//
// Packages that use it call Main from TestMain, so a throwaway cluster
// started for the process is stopped when the process ends.
package pgtest
