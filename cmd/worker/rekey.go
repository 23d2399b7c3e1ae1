package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/postbox/postbox/outbox"
)

func init() {
	register(command{
		Name:    "rekey",
		Summary: "re-encrypt secret email fields under the active key (docs/ENCRYPTION.md)",
		Help: "Re-encrypts the secret fields (reset and invite links, tokens, PDFs) of pending and failed emails " +
			"under the first key of OUTBOX_ENCRYPTION_KEYS, sealing plaintext rows too, in batches that each " +
			"commit; then counts the rows left under each key, so you know when an old key can leave the ring. " +
			"Safe to interrupt and run again (docs/ENCRYPTION.md).",
		Flags: func(fs *flag.FlagSet) runFunc {
			batch := intAtLeast(fs, "batch", outbox.DefaultRekeyBatch, 1, "`N` rows per batch (one transaction each)")
			dryRun := fs.Bool("dry-run", false, "count what would be re-encrypted, write nothing")
			return func(ctx context.Context, env *Env, _ []string) error {
				return runRekey(ctx, env, *batch, *dryRun)
			}
		},
	})
}

// runRekey runs outbox.Rekey with a progress line per batch, then counts
// what is left under each key, so the operator knows when an old key can
// leave OUTBOX_ENCRYPTION_KEYS (docs/ENCRYPTION.md).
func runRekey(ctx context.Context, env *Env, batchSize int, dry bool) error {
	batch, dryRun := &batchSize, &dry
	keys := env.Config.Keys
	if keys == nil {
		return fmt.Errorf("%s is not set: there is no key to encrypt under (see docs/ENCRYPTION.md)", outbox.KeysEnv)
	}
	pool, err := env.MigratedPool(ctx)
	if err != nil {
		return err
	}
	out := env.Stdout
	verb := "re-encrypted"
	if *dryRun {
		verb = "to re-encrypt"
		fmt.Fprintln(out, "rekey: dry run, nothing is written")
	}
	fmt.Fprintf(out, "rekey: sealing under %s (ring: %s), %d rows per batch\n",
		keys.ActiveKeyID(), strings.Join(keys.KeyIDs(), ", "), *batch)

	res, err := outbox.Rekey(ctx, pool, keys, outbox.RekeyOptions{
		BatchSize: *batch,
		DryRun:    *dryRun,
		Progress: func(r outbox.RekeyResult) {
			fmt.Fprintf(out, "rekey: batch %d: %s\n", r.Batches, rekeyCounts(r, verb))
		},
	})
	for _, e := range res.UnreadableErrors {
		fmt.Fprintf(out, "rekey: unreadable, left as it is (it fails when sent): %v\n", e)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("interrupted after %s; every write so far is committed: run it again to finish", rekeyCounts(res, verb))
		}
		return err
	}
	fmt.Fprintf(out, "rekey: done: %s\n", rekeyCounts(res, verb))
	if res.Skipped > 0 {
		fmt.Fprintln(out, "rekey: skipped rows changed while being read (sent, marked or requeued); run it again to catch any still waiting")
	}

	use, err := outbox.CountKeyUse(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "rekey: pending and failed rows with secret fields: %s\n", keyUseText(use))
	var retirable []string
	for _, id := range keys.KeyIDs()[1:] {
		if use.Rows[id] == 0 {
			retirable = append(retirable, id)
		}
	}
	if len(retirable) > 0 && !*dryRun {
		fmt.Fprintf(out, "rekey: no row is sealed under %s: it can be removed from %s\n",
			strings.Join(retirable, ", "), outbox.KeysEnv)
	}
	return nil
}

func rekeyCounts(r outbox.RekeyResult, verb string) string {
	s := fmt.Sprintf("%d rows %s (%d from plaintext)", r.Resealed, verb, r.FromPlaintext)
	if verb == "re-encrypted" {
		s += fmt.Sprintf(", %d skipped (changed meanwhile)", r.Skipped)
	}
	if r.Unreadable > 0 {
		s += fmt.Sprintf(", %d unreadable (no key in the ring opens them)", r.Unreadable)
	}
	return s
}

func keyUseText(use outbox.KeyUse) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(use.Rows)) {
		parts = append(parts, fmt.Sprintf("%d under %s", use.Rows[id], id))
	}
	if use.Plaintext > 0 {
		parts = append(parts, fmt.Sprintf("%d in plaintext", use.Plaintext))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
