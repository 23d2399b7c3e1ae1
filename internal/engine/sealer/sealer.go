// Package sealer seals small secrets — a single-use link, a token, a PDF —
// into self-describing envelopes under a ring of named AES-256-GCM keys.
//
// An envelope records the version of its format, the id of the key that
// sealed it, its random nonce and the ciphertext with its tag:
//
//	{"enc":"v1","kid":"k2026","n":"<base64 nonce>","ct":"<base64 ciphertext+tag>"}
//
// so a reader knows a sealed value from a plaintext one and which key opens
// it. The caller supplies associated data (what the value belongs to):
// an envelope opens only with the associated data it was sealed with, so a
// ciphertext copied somewhere else does not open there.
//
// A Ring seals under its first key, the active one, and opens with any of
// its keys, which is what a rotation needs: prepend a new key, re-seal, and
// drop the old key once nothing is sealed under it.
//
// The package holds no raw key after New: each key is expanded once into
// its cipher.AEAD, so sealing does no per-call key schedule, and nothing it
// prints or returns contains key material.
package sealer

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
)

const (
	// Version is the envelope format this package writes and reads.
	Version = "v1"

	// KeySize is the length of every key: AES-256.
	KeySize = 32

	// MaxKeyIDLen bounds a key id. It is shorter than any base64 or hex
	// encoding of a 32-byte key (43 characters or more), so a key pasted
	// where its id belongs is refused as an id, and never quoted back in
	// an error message.
	MaxKeyIDLen = 32
)

var (
	// ErrUnknownKey is matched (errors.Is) when an envelope names a key id
	// that is not in the ring.
	ErrUnknownKey = errors.New("key id not in the key ring")

	// ErrOpen is matched (errors.Is) when an envelope does not open: it
	// was altered, sealed with other associated data (moved to another
	// place), or sealed by another key under the same id.
	ErrOpen = errors.New("sealed value does not authenticate")

	// ErrVersion is matched (errors.Is) by an envelope of a format this
	// package does not read.
	ErrVersion = errors.New("unsupported envelope version")
)

// Envelope is one sealed value. Its JSON form is the stored form.
type Envelope struct {
	Version    string `json:"enc"`
	KeyID      string `json:"kid"`
	Nonce      []byte `json:"n"`  // base64 in JSON
	Ciphertext []byte `json:"ct"` // base64 in JSON; ends with the GCM tag
}

// Key is one named key of a Ring.
type Key struct {
	ID     string // 1 to MaxKeyIDLen of A–Z a–z 0–9 . _ -
	Secret []byte // KeySize bytes
}

// Ring is an ordered set of keys: the first seals, all of them open. It is
// immutable and safe for concurrent use. A nil *Ring opens nothing.
type Ring struct {
	ids   []string               // ids[0] is the active key
	aeads map[string]cipher.AEAD // by id
}

// New builds a ring from keys; keys[0] becomes the active key. Problems
// are reported as an *EntryError whose Position is the key's index + 1.
func New(keys ...Key) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	r := &Ring{aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		pos := i + 1
		if !validID(k.ID) {
			// The id is not quoted: it may be a key pasted in the wrong place.
			return nil, &EntryError{Position: pos, Problem: fmt.Sprintf("key id must be 1 to %d of A-Z a-z 0-9 . _ -", MaxKeyIDLen)}
		}
		if err := checkSecret(k.Secret); err != nil {
			return nil, &EntryError{Position: pos, KeyID: k.ID, Problem: err.Error()}
		}
		for j, prev := range keys[:i] {
			switch {
			case prev.ID == k.ID:
				return nil, &EntryError{Position: pos, KeyID: k.ID, Problem: fmt.Sprintf("key id repeats entry %d", j+1)}
			case bytes.Equal(prev.Secret, k.Secret):
				return nil, &EntryError{Position: pos, KeyID: k.ID,
					Problem: fmt.Sprintf("key is the same as entry %d's (key id %q): a rotation needs a new key", j+1, prev.ID)}
			}
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil { // unreachable: the length was checked
			return nil, &EntryError{Position: pos, KeyID: k.ID, Problem: "key rejected by AES"}
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, &EntryError{Position: pos, KeyID: k.ID, Problem: "key rejected by GCM"}
		}
		r.ids = append(r.ids, k.ID)
		r.aeads[k.ID] = aead
	}
	return r, nil
}

// Parse reads a ring written as comma-separated kid:base64-key entries,
// the active key first, e.g. "k2026:…,k2025:…". Keys may be in standard or
// URL-safe base64, padded or not; blanks around entries are ignored. A bad
// entry is an *EntryError naming its position and, when it has a valid
// one, its key id — never the key.
func Parse(spec string) (*Ring, error) {
	entries := strings.Split(spec, ",")
	keys := make([]Key, 0, len(entries))
	for i, entry := range entries {
		pos := i + 1
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, &EntryError{Position: pos, Problem: "empty (want kid:base64-key)"}
		}
		id, encoded, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, &EntryError{Position: pos, Problem: "no ':' between the key id and the key (want kid:base64-key)"}
		}
		id, encoded = strings.TrimSpace(id), strings.TrimSpace(encoded)
		if !validID(id) {
			return nil, &EntryError{Position: pos, Problem: fmt.Sprintf("key id must be 1 to %d of A-Z a-z 0-9 . _ -", MaxKeyIDLen)}
		}
		secret, ok := decodeKey(encoded)
		if !ok {
			return nil, &EntryError{Position: pos, KeyID: id, Problem: "key is not base64"}
		}
		keys = append(keys, Key{ID: id, Secret: secret})
	}
	return New(keys...)
}

// EntryError is a bad key of a ring: which one, and what is wrong with it.
// It never contains key material.
type EntryError struct {
	Position int    // 1-based, in the order given
	KeyID    string // "" when the entry has no valid key id
	Problem  string
}

func (e *EntryError) Error() string {
	if e.KeyID == "" {
		return fmt.Sprintf("entry %d: %s", e.Position, e.Problem)
	}
	return fmt.Sprintf("entry %d (key id %q): %s", e.Position, e.KeyID, e.Problem)
}

// Active returns the id of the key that seals.
func (r *Ring) Active() string {
	if r == nil {
		return ""
	}
	return r.ids[0]
}

// IDs returns the key ids, the active one first.
func (r *Ring) IDs() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.ids)
}

// Has reports whether the ring holds a key with this id.
func (r *Ring) Has(id string) bool {
	if r == nil {
		return false
	}
	_, ok := r.aeads[id]
	return ok
}

// Seal encrypts plaintext under the active key with a fresh random nonce,
// binding it to aad. It panics on a nil ring: callers decide whether to
// seal.
func (r *Ring) Seal(plaintext, aad []byte) Envelope {
	id := r.ids[0]
	aead := r.aeads[id]
	// A 96-bit random nonce is safe for far more than the 2^32 seals per key
	// that NIST allows; rotating keys keeps every key well below that.
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails: crypto/rand crashes the program instead
	return Envelope{Version: Version, KeyID: id, Nonce: nonce, Ciphertext: aead.Seal(nil, nonce, plaintext, aad)}
}

// Open decrypts e with the key it names, checking it against aad. The error
// matches ErrVersion, ErrUnknownKey or ErrOpen; it never contains the
// plaintext.
func (r *Ring) Open(e Envelope, aad []byte) ([]byte, error) {
	if e.Version != Version {
		return nil, fmt.Errorf("%w %q", ErrVersion, e.Version)
	}
	var aead cipher.AEAD
	if r != nil {
		aead = r.aeads[e.KeyID]
	}
	if aead == nil {
		return nil, ErrUnknownKey
	}
	if len(e.Nonce) != aead.NonceSize() {
		// GCM panics on a nonce of the wrong length; a stored value must
		// never crash the reader.
		return nil, fmt.Errorf("%w: nonce is %d bytes, want %d", ErrOpen, len(e.Nonce), aead.NonceSize())
	}
	plaintext, err := aead.Open(nil, e.Nonce, e.Ciphertext, aad)
	if err != nil {
		return nil, ErrOpen
	}
	return plaintext, nil
}

func validID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLen {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func checkSecret(secret []byte) error {
	if len(secret) != KeySize {
		return fmt.Errorf("key is %d bytes, want %d (generate one with: openssl rand -base64 %d)", len(secret), KeySize, KeySize)
	}
	if bytes.Equal(secret, make([]byte, KeySize)) {
		return errors.New("key is all zero bytes")
	}
	return nil
}

// decodeKey accepts the base64 alphabets a key generator may print.
func decodeKey(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}
