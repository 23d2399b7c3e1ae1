package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/postbox/postbox/internal/engine/version"
)

func init() {
	register(command{
		Name:    "version",
		Summary: "print the version, VCS revision and Go version",
		Help: "Prints the worker's version: the release stamp a release build sets with " +
			"-ldflags -X (the Dockerfile's VERSION and REVISION build arguments), else the module version and " +
			"VCS revision the Go toolchain recorded. 'worker --version' is the same. Reads no configuration.",
		NoEnv: true,
		Flags: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print JSON")
			return func(_ context.Context, env *Env, _ []string) error {
				info := version.Get()
				if *asJSON {
					return writeJSON(env.Stdout, info)
				}
				_, err := fmt.Fprintf(env.Stdout, "postbox worker %s\n", info)
				return err
			}
		},
	})
}
