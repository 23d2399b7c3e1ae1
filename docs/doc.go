// Package docs holds postbox's documentation pages. It has no code: its
// tests check that the commands the pages give still name programs, flags,
// subcommands and tests that exist, so a page cannot send a reader to a
// command that runs nothing and prints ok; that the README's Go example is
// compiled code; and they run the README's quick start word for word.
package docs
