// Command worker runs and operates postbox: `worker run` is a pool replica;
// the other subcommands migrate, inspect and repair the outboxes.
//
// Exit codes: 0 success; 1 the command failed (and `migrate status` when
// migrations are behind); 2 a usage error — an unknown command, flag or
// argument — with the usage on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/postbox/postbox/internal/engine/suggest"
	"github.com/postbox/postbox/outbox"
)

// command is one subcommand, or one subcommand of a group ("migrate up").
// Each lives in a file named for it and registers itself from init. Its
// arguments are parsed before the configuration is loaded, so --help and a
// bad flag answer whatever the environment holds.
type command struct {
	Name    string // "run", or "migrate up" for a subcommand of a group
	Args    string // the synopsis after the name: positional arguments, required flags
	Summary string // one line, for `worker --help`
	Help    string // a paragraph, for `worker <name> --help`
	// Positional are the names of the positional arguments; exactly these
	// many are required.
	Positional []string
	// Required are flags that must be given.
	Required []string
	// Flags defines the command's flags on fs and returns what runs it;
	// the returned function reads the parsed flags. Nil: no flags.
	Flags func(fs *flag.FlagSet) runFunc
	// Run is what runs a command without flags.
	Run runFunc
	// NoEnv: the command needs no configuration (version).
	NoEnv bool
	// JSONLogs: the command logs JSON lines (run, demo), for a collector;
	// the others write sentences for the person who ran them.
	JSONLogs bool
}

// runFunc runs a command with its positional arguments.
type runFunc func(ctx context.Context, env *Env, args []string) error

// group is a command with subcommands of its own (migrate, endpoints…).
type group struct {
	Name    string
	Summary string
	Help    string
}

var (
	commands = map[string]command{}
	groups   = map[string]group{}
	order    []string // command names in registration order
)

func register(c command) {
	if _, dup := commands[c.Name]; dup {
		panic("worker: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
	order = append(order, c.Name)
}

func registerGroup(g group) { groups[g.Name] = g }

// errUsage makes main print the command's usage and exit 2: flags that
// parse but do not make sense together, or a value out of range.
var errUsage = errors.New("usage")

// usagef is a usage error with a message: runMain prints both.
func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

// exitError ends the command with its own exit code; err is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	os.Exit(runMain(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// runMain parses args, then loads the configuration through lookup and
// runs the command; it returns the exit code.
func runMain(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return 0
	case "help":
		return runHelp(args[1:], stdout, stderr)
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "worker: unknown flag %s\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	if _, ok := groups[name]; ok {
		if len(rest) == 0 {
			fmt.Fprintf(stderr, "worker %s: a subcommand is required\n\n", name)
			printGroupHelp(stderr, name)
			return 2
		}
		switch rest[0] {
		case "-h", "-help", "--help", "help":
			printGroupHelp(stdout, name)
			return 0
		}
		if _, ok := commands[name+" "+rest[0]]; !ok {
			var subs []string
			for _, c := range groupMembers(name) {
				subs = append(subs, strings.TrimPrefix(c.Name, name+" "))
			}
			fmt.Fprintf(stderr, "worker %s: unknown subcommand %q%s\nrun 'worker %s --help' for its subcommands\n",
				name, rest[0], suggest.DidYouMean(rest[0], subs), name)
			return 2
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "worker: unknown command %q%s\nrun 'worker --help' for the commands\n", name, suggest.DidYouMean(name, topNames()))
		return 2
	}

	fs, run := cmd.flagSet()
	pos, err := parseFlagsAnywhere(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(stdout, cmd)
		return 0
	}
	if err == nil && len(pos) != len(cmd.Positional) {
		err = positionalError(cmd, pos)
	}
	if err == nil {
		err = idError(cmd, pos)
	}
	if err == nil {
		err = requiredError(cmd, fs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, err)
		printCommandUsage(stderr, cmd)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env := &Env{Stdout: stdout, Stderr: stderr}
	if !cmd.NoEnv {
		if env, err = LoadEnv(lookup, stdout, stderr, cmd.JSONLogs); err != nil {
			fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, err)
			return 1
		}
		defer env.Close()
	}
	err = run(ctx, env, pos)
	var exit *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		if err != errUsage {
			fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, err)
		}
		printCommandUsage(stderr, cmd)
		return 2
	case errors.As(err, &exit):
		fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, exit.err)
		return exit.code
	default:
		fmt.Fprintf(stderr, "worker %s: %v\n", cmd.Name, err)
		return 1
	}
}

// flagSet is the command's flags, quiet: runMain prints errors and help.
func (c command) flagSet() (*flag.FlagSet, runFunc) {
	fs := flag.NewFlagSet("worker "+c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	run := c.Run
	if c.Flags != nil {
		run = c.Flags(fs)
	}
	return fs, run
}

func positionalError(c command, pos []string) error {
	switch {
	case len(pos) > len(c.Positional):
		return fmt.Errorf("unexpected argument %q", pos[len(c.Positional)])
	default:
		return fmt.Errorf("missing argument <%s>", c.Positional[len(pos)])
	}
}

// idError refuses a positional argument named id (or <something>-id) that
// is not a UUID, before the configuration is loaded or Postgres asked: the
// same usage error, exit 2, from every command.
func idError(c command, pos []string) error {
	for i, name := range c.Positional {
		if (name == "id" || strings.HasSuffix(name, "-id")) && !outbox.IsRowID(pos[i]) {
			return fmt.Errorf("<%s> %q is not an id: want a UUID (8-4-4-4-12 hex digits)", name, pos[i])
		}
	}
	return nil
}

func requiredError(c command, fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range c.Required {
		if !set[name] {
			return fmt.Errorf("--%s is required", name)
		}
	}
	return nil
}

// runHelp is `worker help [command [subcommand]]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	name := strings.Join(args, " ")
	if name == "" {
		printUsage(stdout)
		return 0
	}
	if c, ok := commands[name]; ok {
		printCommandHelp(stdout, c)
		return 0
	}
	if _, ok := groups[name]; ok {
		printGroupHelp(stdout, name)
		return 0
	}
	fmt.Fprintf(stderr, "worker help: unknown command %q%s\nrun 'worker --help' for the commands\n", name, suggest.DidYouMean(name, topNames()))
	return 2
}

// synopsis is "worker migrate down [--all]"-style: the name, then Args,
// then [flags] when the command has flags Args does not spell out.
func (c command) synopsis() string {
	s := "worker " + c.Name
	if c.Args != "" {
		s += " " + c.Args
	}
	if c.Flags != nil && !strings.Contains(c.Args, "[") {
		s += " [flags]"
	}
	return s
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `worker runs and operates postbox: it delivers email and webhooks from the
Postgres outbox tables.

usage: worker <command> [arguments]

commands:
`)
	for _, name := range topNames() {
		if g, ok := groups[name]; ok {
			fmt.Fprintf(w, "  %-20s %s\n", name, g.Summary)
			for _, sub := range groupMembers(name) {
				fmt.Fprintf(w, "    %-18s %s\n", strings.TrimPrefix(sub.Name, name+" "), sub.Summary)
			}
			continue
		}
		fmt.Fprintf(w, "  %-20s %s\n", name, commands[name].Summary)
	}
	fmt.Fprint(w, `
Run 'worker <command> --help' for a command's flags and arguments.
'worker --version' prints the version. Configuration comes from the
environment (docs/OPERATIONS.md, "Configuration"); the *_FILE variants of
DATABASE_URL, SMTP_PASSWORD and RIVERUI_PASSWORD read the value from a file.

Exit codes: 0 success, 1 failure (migrate status: migrations behind),
2 usage error.
`)
}

func printGroupHelp(w io.Writer, name string) {
	g := groups[name]
	fmt.Fprintf(w, "usage: worker %s <subcommand> [arguments]\n\n%s\n\nsubcommands:\n", name, wrap(g.Help))
	for _, sub := range groupMembers(name) {
		fmt.Fprintf(w, "  %s\n      %s\n", sub.synopsis(), sub.Summary)
	}
	fmt.Fprintf(w, "\nRun 'worker %s <subcommand> --help' for its flags.\n", name)
}

// printCommandUsage is the short form, for a usage error on stderr.
func printCommandUsage(w io.Writer, c command) {
	fmt.Fprintf(w, "usage: %s\n", c.synopsis())
	fs, _ := c.flagSet()
	printFlags(w, fs)
	fmt.Fprintf(w, "Run 'worker %s --help' for more.\n", c.Name)
}

func printCommandHelp(w io.Writer, c command) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n\n", c.synopsis(), wrap(c.Help))
	fs, _ := c.flagSet()
	printFlags(w, fs)
}

// printFlags lists every flag with its meaning and non-zero default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "flags:")
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		head := "--" + f.Name
		if kind != "" {
			head += " " + kind
		}
		if def := f.DefValue; def != "" && def != "0" && def != "0s" && def != "false" && def != "-1ns" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		indent := strings.Repeat(" ", 22)
		text := strings.ReplaceAll(wrapWidth(usage, 78-22), "\n", "\n"+indent)
		if len(head) <= 18 {
			fmt.Fprintf(w, "  %-20s%s\n", head, text)
		} else {
			fmt.Fprintf(w, "  %s\n%s%s\n", head, indent, text)
		}
	})
	fmt.Fprintf(w, "  %-20s%s\n", "-h, --help", "print this help and exit")
}

// wrap folds a paragraph at 78 columns.
func wrap(s string) string { return wrapWidth(s, 78) }

func wrapWidth(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(s) {
		if n > 0 && n+1+len([]rune(word)) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len([]rune(word))
	}
	return b.String()
}

// topNames is every top-level command and group, in the order a newcomer
// meets them.
func topNames() []string {
	order := []string{"run", "demo", "migrate", "show", "stats", "failed", "requeue", "cancel", "replay", "ordering", "endpoints",
		"rekey", "healthcheck", "version"}
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, n := range order {
		if _, ok := commands[n]; ok {
			add(n)
		} else if _, ok := groups[n]; ok {
			add(n)
		}
	}
	var rest []string
	for n := range commands {
		top, _, _ := strings.Cut(n, " ")
		if !seen[top] {
			rest = append(rest, top)
		}
	}
	slices.Sort(rest)
	for _, n := range rest {
		add(n)
	}
	return out
}

// groupMembers is a group's subcommands in the order they registered.
func groupMembers(name string) []command {
	var out []command
	for _, n := range order {
		if strings.HasPrefix(n, name+" ") {
			out = append(out, commands[n])
		}
	}
	return out
}

// parseFlagsAnywhere parses flags before, between and after positional
// arguments (the flag package stops at the first positional), so both
// `disable <id> --reason x` and `disable --reason x <id>` work. After
// "--" everything is positional.
func parseFlagsAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagSpelling finds a flag as the flag package's errors spell it (-limit).
var flagSpelling = regexp.MustCompile(`(^|: | for flag |unknown flag )-([A-Za-z][A-Za-z0-9-]*)`)

// flagError is a parse error of the flag package with its flags spelled as
// help spells them (--limit), and "unknown flag --x; did you mean --y?"
// for one fs does not define.
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
		return fmt.Errorf("unknown flag --%s%s", name, suggest.DidYouMean("--"+name, names))
	}
	return errors.New(flagSpelling.ReplaceAllString(msg, "${1}--${2}"))
}
