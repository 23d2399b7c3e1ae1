package main

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestConfigReferenceMatchesCode checks the configuration table of
// docs/OPERATIONS.md against the code: every variable LoadConfig reads is
// documented, and every documented variable is read. The list comes from recording what
// LoadConfig asks for, so a new variable cannot slip in undocumented.
func TestConfigReferenceMatchesCode(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	if _, err := LoadConfig(func(k string) (string, bool) { read[k] = true; return "", false }); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \\|")
	name := regexp.MustCompile("`([A-Z_]+)`")
	for _, m := range row.FindAllStringSubmatch(string(page), -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			documented[n[1]] = true
		}
	}
	for _, n := range sorted(read) {
		if !documented[n] {
			t.Errorf("%s is read by the worker but missing from docs/OPERATIONS.md's configuration table", n)
		}
	}
	for _, n := range sorted(documented) {
		if !read[n] {
			t.Errorf("%s is documented in docs/OPERATIONS.md but the worker never reads it", n)
		}
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// settingRange is what boot accepts of one number or duration setting:
// an interval, and what else it must satisfy (and), with the other
// settings a value at either bound needs to pass that (with). A hi of ""
// is unbounded.
type settingRange struct {
	name           string
	kind           rangeKind
	lo, hi         string
	loOpen, hiOpen bool
	and            string
	with           []string
}

type rangeKind int

const (
	integerRange rangeKind = iota
	numberRange
	durationRange
)

// settingRanges is the table of docs/OPERATIONS.md, "Accepted values",
// which TestConfigRangesMatchBoot renders and compares with the page, and
// proves against LoadConfig bound by bound.
var settingRanges = []settingRange{
	{name: "SHUTDOWN_TIMEOUT", kind: durationRange, lo: "0s", loOpen: true},
	{name: "POLL_INTERVAL", kind: durationRange, lo: "0s", loOpen: true},
	{name: "RETRY_BACKOFF_SCALE", kind: numberRange, lo: "0", hi: "1", loOpen: true, and: "only `1` with `APP_ENV=production`"},
	{name: "SMTP_PORT", kind: integerRange, lo: "1", hi: "65535"},
	{name: "EMAIL_CONCURRENCY", kind: integerRange, lo: "1", hi: "1000"},
	{name: "EMAIL_RATE_LIMIT", kind: numberRange, lo: "0", hi: "10000", and: "`0`: no limit"},
	{name: "EMAIL_BATCH_SIZE", kind: integerRange, lo: "1", hi: "1000",
		and:  "`EMAIL_BATCH_SIZE` × 60s ≤ `EMAIL_BATCH_TIMEOUT` < `EMAIL_BATCH_SIZE` × 60s + `LEASE_SLACK` (60 s: an email's budget)",
		with: []string{"EMAIL_BATCH_TIMEOUT", "16h40m", "LEASE_SLACK", "24h"}},
	{name: "EMAIL_BATCH_TIMEOUT", kind: durationRange, lo: "60s", hi: "24h", loOpen: true, and: "the rule of `EMAIL_BATCH_SIZE`",
		with: []string{"EMAIL_BATCH_SIZE", "1", "LEASE_SLACK", "24h"}},
	{name: "LEASE_SLACK", kind: durationRange, lo: "5s", hi: "24h", loOpen: true, and: "more than a webhook mark's 5 s; the rule of `EMAIL_BATCH_SIZE`"},
	{name: "WEBHOOK_BIRTH_LEASE", kind: durationRange, lo: "18s", hi: "24h", loOpen: true, and: "more than a webhook attempt's 13 s and its mark's 5 s"},
	{name: "WEBHOOK_RETRY_BATCH", kind: integerRange, lo: "1", hi: "1000"},
	{name: "WEBHOOK_MAX_PAYLOAD_BYTES", kind: integerRange, lo: "1", hi: "262144"},
	{name: "WEBHOOK_CONCURRENCY", kind: integerRange, lo: "1"},
	{name: "WEBHOOK_BREAKER_FAILURE_RATE", kind: integerRange, lo: "1", hi: "100"},
	{name: "WEBHOOK_BREAKER_MIN_REQUESTS", kind: integerRange, lo: "1", hi: "1000000"},
	{name: "WEBHOOK_BREAKER_WINDOW", kind: durationRange, lo: "1s", hi: "24h"},
	{name: "WEBHOOK_BREAKER_PROBES", kind: integerRange, lo: "1", hi: "1000"},
	{name: "WEBHOOK_BREAKER_COOLDOWN", kind: durationRange, lo: "0s", loOpen: true, and: "at most `WEBHOOK_BREAKER_MAX_COOLDOWN`"},
	{name: "WEBHOOK_BREAKER_MAX_COOLDOWN", kind: durationRange, lo: "0s", loOpen: true, and: "at least `WEBHOOK_BREAKER_COOLDOWN`",
		with: []string{"WEBHOOK_BREAKER_COOLDOWN", "1ns"}},
	{name: "WEBHOOK_DISABLE_AFTER", kind: durationRange, lo: "0s", loOpen: true},
	{name: "WEBHOOK_OUTBOX_RETENTION", kind: durationRange, lo: "0s", loOpen: true},
	{name: "WEBHOOK_HISTORY_RETENTION", kind: durationRange, lo: "168h", and: "or `forever`"},
	{name: "EMAIL_HISTORY_RETENTION", kind: durationRange, lo: "168h", and: "or `forever`"},
	{name: "SOFT_BOUNCE_LIMIT", kind: integerRange, lo: "1", hi: "1000"},
	{name: "SOFT_BOUNCE_WINDOW", kind: durationRange, lo: "0s", loOpen: true, and: "at most `EVENTS_ORPHAN_RETENTION`"},
	{name: "EVENTS_ORPHAN_RETENTION", kind: durationRange, lo: "0s", loOpen: true, and: "at least `SOFT_BOUNCE_WINDOW`",
		with: []string{"SOFT_BOUNCE_WINDOW", "1ns"}},
	{name: "OTEL_EXPORTER_OTLP_TIMEOUT", kind: integerRange, lo: "1", hi: "3600000", and: "milliseconds; read when tracing is on",
		with: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}},
	{name: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", kind: integerRange, lo: "1", hi: "3600000", and: "milliseconds; read when tracing is on",
		with: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}},
	{name: "OTEL_TRACES_SAMPLER_ARG", kind: numberRange, lo: "0", hi: "1", and: "read when tracing is on, by the `traceidratio` samplers",
		with: []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}},
}

// interval is r as the page writes it: "(0, 1]", "[1, ∞)".
func (r settingRange) interval() string {
	open, closed, hi := "[", "]", r.hi
	if r.loOpen {
		open = "("
	}
	if r.hiOpen || hi == "" {
		closed = ")"
	}
	if hi == "" {
		hi = "∞"
	}
	return open + r.lo + ", " + hi + closed
}

// probes are the values at and beside each bound, each with whether boot
// must accept it; a number setting must refuse the non-finite ones too.
func (r settingRange) probes(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	bound := func(s string, open bool, outward float64) {
		switch r.kind {
		case integerRange:
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: bound %q: %v", r.name, s, err)
			}
			out[strconv.Itoa(n)] = !open
			out[strconv.Itoa(n+int(outward))] = false
			out[strconv.Itoa(n-int(outward))] = true
		case numberRange:
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("%s: bound %q: %v", r.name, s, err)
			}
			f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
			out[f(x)] = !open
			out[f(math.Nextafter(x, x+outward))] = false
			out[f(math.Nextafter(x, x-outward))] = true
		case durationRange:
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s: bound %q: %v", r.name, s, err)
			}
			out[d.String()] = !open
			out[(d + time.Duration(outward)).String()] = false
			out[(d - time.Duration(outward)).String()] = true
		}
	}
	bound(r.lo, r.loOpen, -1)
	if r.hi != "" {
		bound(r.hi, r.hiOpen, 1)
	}
	if r.kind == numberRange {
		for _, s := range []string{"NaN", "Inf", "+Inf", "-Inf"} {
			out[s] = false
		}
	}
	return out
}

// TestConfigRangesMatchBoot: the table of accepted values in
// docs/OPERATIONS.md is settingRanges, and LoadConfig accepts each
// setting at and inside its bounds and refuses it just outside them (and
// every NaN and infinity of a number), naming it.
func TestConfigRangesMatchBoot(t *testing.T) {
	t.Parallel()
	var want strings.Builder
	want.WriteString("| variable | accepted at boot | and |\n|---|---|---|\n")
	for _, r := range settingRanges {
		fmt.Fprintf(&want, "| `%s` | %s | %s |\n", r.name, r.interval(), r.and)
	}
	page, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n### Accepted values\n")
	table := regexp.MustCompile(`\n\n((?:\|.*\|\n)+)`).FindStringSubmatch(section)
	if !ok || table == nil || table[1] != want.String() {
		t.Errorf("docs/OPERATIONS.md, \"Accepted values\", must hold this table, made from settingRanges:\n%s", want.String())
	}

	for _, r := range settingRanges {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			for value, accepted := range r.probes(t) {
				env := map[string]string{r.name: value}
				for i := 0; i+1 < len(r.with); i += 2 {
					env[r.with[i]] = r.with[i+1]
				}
				_, err := LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
				switch {
				case accepted && err != nil:
					t.Errorf("%s=%s is in %s but refused: %v", r.name, value, r.interval(), err)
				case !accepted && err == nil:
					t.Errorf("%s=%s is outside %s but accepted", r.name, value, r.interval())
				case !accepted && !strings.Contains(err.Error(), r.name):
					t.Errorf("%s=%s: error %q does not name the variable", r.name, value, err)
				}
			}
		})
	}
}
