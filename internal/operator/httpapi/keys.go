package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// KeyPrefix starts every application key, so one in a log or a diff is
// recognisable (and secret scanners can be told of it).
const KeyPrefix = "pbk_"

// Key is one application key as configured: its name (for logs and
// metrics) and the SHA-256 of the key. The key itself is never stored: a
// leaked configuration lets no one in.
type Key struct {
	Name string
	Hash [sha256.Size]byte
}

var keyName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ParseKeys reads API_KEYS: comma-separated NAME:sha256:HEX entries, as
// `worker api-key new NAME` prints them. Several may be active at once, for
// a rotation. An entry that is not a hash — a key pasted in by mistake —
// is refused, naming the entry's name, never its value.
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	seen := map[string]bool{}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, found := strings.Cut(entry, ":")
		if !found || !keyName.MatchString(name) {
			return nil, fmt.Errorf("API_KEYS: entry %d: want NAME:sha256:HEX with a name of letters, digits, '_', '.', '-'", i+1)
		}
		algo, digest, _ := strings.Cut(rest, ":")
		b, err := hex.DecodeString(digest)
		if algo != "sha256" || err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("API_KEYS: entry %q: want %s:sha256:<64 hex digits>, the hash `worker api-key new` prints; a key itself is never configured", name, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("API_KEYS: the name %q is used twice", name)
		}
		seen[name] = true
		k := Key{Name: name}
		copy(k.Hash[:], b)
		keys = append(keys, k)
	}
	return keys, nil
}

// NewKey makes a fresh application key and its API_KEYS entry.
func NewKey(name string) (key, entry string, err error) {
	if !keyName.MatchString(name) {
		return "", "", fmt.Errorf("key name %q: want 1 to 64 letters, digits, '_', '.', '-'", name)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(key))
	return key, name + ":sha256:" + hex.EncodeToString(sum[:]), nil
}

// match is the configured key that presented is, or nil. Every key's hash
// is compared, in constant time, whichever matches.
func match(keys []Key, presented string) *Key {
	sum := sha256.Sum256([]byte(presented))
	var found *Key
	for i := range keys {
		if subtle.ConstantTimeCompare(sum[:], keys[i].Hash[:]) == 1 {
			found = &keys[i]
		}
	}
	return found
}
