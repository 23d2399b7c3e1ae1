package outbox

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/postbox/postbox/internal/engine/sealer"
)

// KeysEnv is the environment variable KeyRingFromEnv reads: comma-separated
// kid:base64-key entries, each key 32 random bytes, the active key first.
//
//	OUTBOX_ENCRYPTION_KEYS=k2026:2b7Q…=,k2025:9fLm…=
const KeysEnv = "OUTBOX_ENCRYPTION_KEYS"

// KeyRing holds the keys that seal an email's secret payload fields (see
// [Enqueuer.Keys] and [Config.Keys]): AES-256-GCM, the first key sealing,
// every key opening. Make one with ParseKeyRing or KeyRingFromEnv; a nil
// *KeyRing is valid and means no encryption.
//
// It never prints or logs key material: String and LogValue show key ids
// only.
type KeyRing struct{ ring *sealer.Ring }

// ParseKeyRing reads a ring written as KeysEnv holds it. A malformed entry
// is an error naming its position and key id, never the key.
func ParseKeyRing(spec string) (*KeyRing, error) {
	r, err := sealer.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("outbox: key ring: %w", err)
	}
	return &KeyRing{ring: r}, nil
}

// KeyRingFromEnv reads KeysEnv through lookup (os.LookupEnv in a program).
// Unset or blank gives a nil ring and no error: secret fields are then
// stored in plaintext, as before encryption existed. A malformed value is
// an error naming KeysEnv and the bad entry, never a key.
func KeyRingFromEnv(lookup func(string) (string, bool)) (*KeyRing, error) {
	spec, ok := lookup(KeysEnv)
	if !ok || strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	r, err := sealer.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeysEnv, err)
	}
	return &KeyRing{ring: r}, nil
}

// ActiveKeyID returns the id of the key that seals, or "" for a nil ring.
func (k *KeyRing) ActiveKeyID() string { return k.sealer().Active() }

// KeyIDs returns every key id, the active one first.
func (k *KeyRing) KeyIDs() []string { return k.sealer().IDs() }

// String describes the ring by its key ids.
func (k *KeyRing) String() string {
	if !k.seals() {
		return "KeyRing(none)"
	}
	return "KeyRing(" + strings.Join(k.KeyIDs(), ", ") + "; active " + k.ActiveKeyID() + ")"
}

// GoString is String, so %#v cannot print key material either.
func (k *KeyRing) GoString() string { return k.String() }

// LogValue logs the ring as its key ids.
func (k *KeyRing) LogValue() slog.Value {
	if !k.seals() {
		return slog.StringValue("none")
	}
	return slog.GroupValue(slog.String("active", k.ActiveKeyID()), slog.Any("keys", k.KeyIDs()))
}

// seals reports whether k has a key to seal with. A nil *KeyRing, or a
// KeyRing{} not made by ParseKeyRing or KeyRingFromEnv, has none.
func (k *KeyRing) seals() bool { return k != nil && k.ring != nil }

func (k *KeyRing) sealer() *sealer.Ring {
	if k == nil {
		return nil
	}
	return k.ring
}
