// Command worker runs and operates postbox: `worker run` is a pool replica;
// the other subcommands migrate, inspect and repair the outboxes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. Each lives in a file named for it and
// registers itself from init.
type command struct {
	Name  string
	Usage string // one line: arguments and what it does
	Run   func(ctx context.Context, env *Env, args []string) error
}

var commands = map[string]command{}

func register(c command) { commands[c.Name] = c }

// errUsage makes main print the command's usage line.
var errUsage = errors.New("usage")

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "worker: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	env, err := LoadEnv(os.LookupEnv, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, err)
		return 1
	}
	defer env.Close()
	if err := cmd.Run(ctx, env, args[1:]); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "usage: worker %s %s\n", cmd.Name, cmd.Usage)
			return 2
		}
		fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, err)
		return 1
	}
	return 0
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: worker <command> [arguments]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].Usage)
	}
	fmt.Fprintln(w, "\nConfiguration comes from the environment; see README.md.")
}
