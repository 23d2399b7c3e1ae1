// Package gobuild builds the module's programs for the harnesses, which
// run the real binaries rather than the code in-process: the bench's pool
// sections and the soak start `worker run` processes as users do.
package gobuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Build compiles the module's packages (paths relative to the module root,
// such as "./cmd/worker") into dir, one binary per package.
func Build(ctx context.Context, dir string, pkgs ...string) error {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", strings.Join(pkgs, " "), root, err, out)
	}
	return nil
}

// Worker builds ./cmd/worker into dir and returns the binary's path.
func Worker(ctx context.Context, dir string) (string, error) {
	if err := Build(ctx, dir, "./cmd/worker"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "worker"), nil
}

// ModuleRoot finds the postbox module: from the working directory (go run
// and go test run inside it), else from this source file's directory.
func ModuleRoot(ctx context.Context) (string, error) {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		dirs = append(dirs, filepath.Dir(file))
	}
	for _, dir := range dirs {
		cmd := exec.CommandContext(ctx, "go", "env", "GOMOD")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			continue
		}
		gomod := strings.TrimSpace(string(out))
		if gomod == "" || gomod == os.DevNull {
			continue
		}
		data, err := os.ReadFile(gomod)
		if err != nil || !strings.Contains(string(data), "module github.com/postbox/postbox") {
			continue
		}
		return filepath.Dir(gomod), nil
	}
	return "", errors.New("cannot find the postbox module: run from inside it, the harnesses build ./cmd/worker")
}
