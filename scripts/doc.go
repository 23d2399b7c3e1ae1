// Package scripts holds no code: its directory carries the repository's
// shell scripts, and its Go tests run them, so a script that CI relies on
// is known to fail when it should.
package scripts
