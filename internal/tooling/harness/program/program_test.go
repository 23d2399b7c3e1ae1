package program

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// The harness programs' contract: --help lists every flag and exits 0; a
// bad flag, a stray argument or a usage error exits 2 with the usage; a
// failed run exits 1; none of the refusals runs the program.
func TestMain_HelpUsageAndFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		runErr error
		code   int
		ran    bool
		want   string // in stdout for 0, stderr otherwise
	}{
		{"help", []string{"--help"}, nil, 0, false, "-seed"},
		{"short help", []string{"-h"}, nil, 0, false, "usage: go run ./internal/tooling/cmd/demo"},
		{"unknown flag", []string{"--no-such-flag"}, nil, 2, false, "flag provided but not defined: -no-such-flag"},
		{"stray argument", []string{"extra"}, nil, 2, false, `unexpected argument "extra"`},
		{"usage error", nil, Usagef("--seed 0 and --replay: give one"), 2, true, "usage: go run ./internal/tooling/cmd/demo"},
		{"failed run", nil, errors.New("sink refused"), 1, true, "demo: sink refused"},
		{"success", []string{"--seed", "7"}, nil, 0, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ran := false
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), "demo", tc.args, &stdout, &stderr, func(fs *flag.FlagSet) Run {
				fs.Uint64("seed", 0, "the seed")
				return func(context.Context, io.Writer, io.Writer) error { ran = true; return tc.runErr }
			})
			if code != tc.code || ran != tc.ran {
				t.Fatalf("exit %d (ran %v), want %d (ran %v); stderr: %s", code, ran, tc.code, tc.ran, stderr.String())
			}
			out := stderr.String()
			if tc.code == 0 {
				out = stdout.String()
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
