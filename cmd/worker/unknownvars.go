package main

import (
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/postbox/postbox/internal/engine/suggest"
)

// variablePrefixes start postbox's variables. A variable that is set with
// one of them but not read is a typo (EMAIL_CONCURENCY) or a leftover, and
// would otherwise be ignored without a word. HTTP_, LOG_ and DATABASE_ are
// left out: other programs' variables (HTTP_PROXY) share them.
var variablePrefixes = []string{"SMTP_", "EMAIL_", "WEBHOOK_", "OUTBOX_", "RIVERUI_", "POSTMARK_", "SES_",
	"EVENTS_", "SOFT_BOUNCE_", "OPS_", "LEASE_", "RETRY_", "POLL_", "SHUTDOWN_"}

// knownVariables is every variable LoadConfig reads, recorded by running it
// once on an empty environment, so the list cannot drift from the code.
var knownVariables = sync.OnceValue(func() []string {
	var read []string
	_, _ = LoadConfig(func(k string) (string, bool) { read = append(read, k); return "", false })
	slices.Sort(read)
	return slices.Compact(read)
})

// unknownVariable is a set variable no one reads, with the known one it
// most likely meant ("" when none is close).
type unknownVariable struct {
	Name, Nearest string
}

// unknownVariables picks, from the names of the set variables, those
// postbox does not read but that look like its own: they have one of its
// prefixes, or are a typo away from one of its names (SMPT_HOST).
func unknownVariables(names []string) []unknownVariable {
	known := knownVariables()
	var out []unknownVariable
	for _, n := range names {
		if slices.Contains(known, n) {
			continue
		}
		// OpenTelemetry's namespace: the SDK and the exporters read
		// OTEL_* names of their own (OTEL_BSP_SCHEDULE_DELAY,
		// OTEL_EXPORTER_OTLP_INSECURE…), a typo away from the ones
		// LoadConfig reads, and other signals' (OTEL_METRICS_EXPORTER)
		// may share the environment.
		if strings.HasPrefix(n, "OTEL_") {
			continue
		}
		near := suggest.Nearest(n, known)
		if near == "" && !slices.ContainsFunc(variablePrefixes, func(p string) bool { return strings.HasPrefix(n, p) }) {
			continue
		}
		out = append(out, unknownVariable{Name: n, Nearest: near})
	}
	slices.SortFunc(out, func(a, b unknownVariable) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// setVariables is the names in the process environment that lookup also
// sees: in production lookup is os.LookupEnv and that is all of them; a
// test's own lookup sees only what it set.
func setVariables(lookup func(string) (string, bool)) []string {
	if lookup == nil {
		return nil // an Env not made by LoadEnv read no variables
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := lookup(name); ok {
			out = append(out, name)
		}
	}
	return out
}
