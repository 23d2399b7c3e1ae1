package outbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// SecretKeyer is a Renderer that reads secret payload keys of its own
// beyond SecretPayloadKeys — a template directory's kind declaring a
// magic-link URL (templatedir.Set). A Dispatcher whose Renderer is one
// seals and scrubs its keys without being told twice.
type SecretKeyer interface {
	SecretPayloadKeys() []string
}

// ValidateSecretKey checks a payload key declared secret beside the six
// built-in ones: a plain identifier (KindPattern's rule, as every Data key
// is), and not a field of Payload — those are either secret already or
// kept after sending on purpose. Migration 00017's CHECK
// email_secret_keys_key_format holds plain SQL to the same rule.
func ValidateSecretKey(key string) error {
	if problem := kindProblem(key); problem != "" {
		return fmt.Errorf("secret key %q is not a plain identifier (%s): it %s", shortKey(key), KindPattern, problem)
	}
	switch {
	case slices.Contains(scrubbedPayloadKeys, key):
		return fmt.Errorf("secret key %q is secret in every kind already: leave it out", key)
	case slices.Contains(payloadFieldNames, key):
		return fmt.Errorf("secret key %q is a field of outbox.Payload, kept after sending: name the secret otherwise", key)
	}
	return nil
}

// secretKeySet checks and sorts the extra secret keys of a Dispatcher or
// an Enqueuer, dropping repeats.
func secretKeySet(keys ...[]string) ([]string, error) {
	var out []string
	for _, list := range keys {
		for _, k := range list {
			if err := ValidateSecretKey(k); err != nil {
				return nil, err
			}
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// isExtraSecret reports whether key is one of extra, in any case: a
// plain-SQL row spelling a declared key "MAGIC_LINK" does not wait with it
// in plaintext either.
func isExtraSecret(key string, extra []string) bool {
	for _, k := range extra {
		if strings.EqualFold(key, k) {
			return true
		}
	}
	return false
}

// declareSecretKeysSQL adds keys to email_secret_keys, the list every
// scrub, reader and rekey statement takes beside the six (scrubbedKeysSQL).
const declareSecretKeysSQL = `INSERT INTO email_secret_keys (key) SELECT unnest($1::text[]) ON CONFLICT (key) DO NOTHING`

// DeclareSecretKeys records keys as secret payload keys in the database, so
// that every mark scrubs them once a row is sent, skipped or cancelled,
// and no reader — worker show, the console, a rekey — treats them as
// ordinary fields, on any replica. A Dispatcher declares its own before
// its first claim; this is for a program that writes such rows before
// any worker has booted with them. A key once declared stays declared.
func DeclareSecretKeys(ctx context.Context, db DB, keys []string) error {
	set, err := secretKeySet(keys)
	if err != nil {
		return fmt.Errorf("outbox: declare secret keys: %w", err)
	}
	if len(set) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, declareSecretKeysSQL, set); err != nil {
		return fmt.Errorf("outbox: declare secret keys %v: %w", set, err)
	}
	return nil
}
