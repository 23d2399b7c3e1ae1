// Package program is the command line the harness programs (bench, soak)
// share: --help exits 0 and lists every flag, a bad flag or a stray
// argument exits 2 with the usage, a failed run exits 1.
package program

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrUsage marks flags that parse but do not make sense: Main prints the
// usage and exits 2.
var ErrUsage = errors.New("usage")

// Usagef is a usage error with a message.
func Usagef(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrUsage)
}

// Run is what a program does once its flags are parsed.
type Run func(ctx context.Context, stdout, stderr io.Writer) error

// Main parses args with the flags define declares, runs what define
// returns and gives the exit code. name is the program's folder under
// internal/tooling/cmd, for the usage line.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer, define func(fs *flag.FlagSet) Run) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./internal/tooling/cmd/%s [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	run := define(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, fs.Arg(0))
		fs.Usage()
		return 2
	}
	if err := run(ctx, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if errors.Is(err, ErrUsage) {
			fs.Usage()
			return 2
		}
		return 1
	}
	return 0
}
