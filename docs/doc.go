// Package docs holds postbox's documentation pages. It has no code: its
// test checks that the commands the pages give still name programs, flags,
// subcommands and tests that exist, so a page cannot send a reader to a
// command that runs nothing and prints ok.
package docs
