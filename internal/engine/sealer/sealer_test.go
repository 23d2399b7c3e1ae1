package sealer

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// testKey is a deterministic, non-zero key for id.
func testKey(id string) Key {
	secret := bytes.Repeat([]byte(id+"#"), KeySize)[:KeySize]
	return Key{ID: id, Secret: secret}
}

func b64(k Key) string { return base64.StdEncoding.EncodeToString(k.Secret) }

// The first key seals; every key opens; the envelope names its key.
func TestRing_SealsUnderFirstOpensWithAny(t *testing.T) {
	t.Parallel()
	old, err := New(testKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := Parse("k2:" + b64(testKey("k2")) + ", k1:" + b64(testKey("k1")))
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Active() != "k2" || !slicesEqual(rotated.IDs(), []string{"k2", "k1"}) || !rotated.Has("k1") || rotated.Has("k3") {
		t.Fatalf("ring: active %q, ids %v", rotated.Active(), rotated.IDs())
	}
	aad := []byte("row\x00field")
	e := old.Seal([]byte("https://example.com/reset/s3cr3t"), aad)
	if e.Version != Version || e.KeyID != "k1" || len(e.Nonce) != 12 || bytes.Contains(e.Ciphertext, []byte("s3cr3t")) {
		t.Fatalf("envelope %+v", e)
	}
	got, err := rotated.Open(e, aad)
	if err != nil || string(got) != "https://example.com/reset/s3cr3t" {
		t.Fatalf("open with the rotated ring: %q, %v", got, err)
	}
	if e2 := rotated.Seal([]byte("x"), aad); e2.KeyID != "k2" {
		t.Errorf("rotated ring sealed under %q, want k2", e2.KeyID)
	}
	if a, b := old.Seal([]byte("same"), aad), old.Seal([]byte("same"), aad); bytes.Equal(a.Nonce, b.Nonce) || bytes.Equal(a.Ciphertext, b.Ciphertext) {
		t.Error("two seals of the same plaintext share a nonce or ciphertext")
	}
}

// An envelope opens only with its own associated data, unaltered, under a
// key the ring holds; every failure is an error (never a panic) that
// matches its sentinel.
func TestRing_OpenRefuses(t *testing.T) {
	t.Parallel()
	ring, err := New(testKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	aad := []byte("row-1\x00setup_url")
	good := ring.Seal([]byte("secret"), aad)
	for _, tc := range []struct {
		name   string
		ring   *Ring
		modify func(*Envelope)
		aad    []byte
		want   error
	}{
		{"other associated data", ring, func(*Envelope) {}, []byte("row-2\x00setup_url"), ErrOpen},
		{"no associated data", ring, func(*Envelope) {}, nil, ErrOpen},
		{"flipped ciphertext bit", ring, func(e *Envelope) { e.Ciphertext[0] ^= 1 }, aad, ErrOpen},
		{"truncated tag", ring, func(e *Envelope) { e.Ciphertext = e.Ciphertext[:3] }, aad, ErrOpen},
		{"short nonce", ring, func(e *Envelope) { e.Nonce = e.Nonce[:4] }, aad, ErrOpen},
		{"unknown key id", ring, func(e *Envelope) { e.KeyID = "k9" }, aad, ErrUnknownKey},
		{"nil ring", nil, func(*Envelope) {}, aad, ErrUnknownKey},
		{"same id, other key", mustNew(t, Key{ID: "k1", Secret: testKey("other").Secret}), func(*Envelope) {}, aad, ErrOpen},
		{"future version", ring, func(e *Envelope) { e.Version = "v2" }, aad, ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := good
			e.Nonce, e.Ciphertext = bytes.Clone(good.Nonce), bytes.Clone(good.Ciphertext)
			tc.modify(&e)
			got, err := tc.ring.Open(e, tc.aad)
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("Open: %q, %v; want %v", got, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q quotes the plaintext", err)
			}
		})
	}
}

// A malformed ring names the bad entry by position (and key id when it has
// a valid one), and never contains the key or a piece of it.
func TestParse_BadEntryNamedKeyNeverQuoted(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey("k1"), testKey("k2")
	short := base64.StdEncoding.EncodeToString(k1.Secret[:16])
	for _, tc := range []struct {
		name string
		spec string
		want string
	}{
		{"empty entry", "k1:" + b64(k1) + ",,k2:" + b64(k2), `entry 2: empty`},
		{"trailing comma", "k1:" + b64(k1) + ",", `entry 2: empty`},
		{"key without id", b64(k1), `entry 1: no ':'`},
		{"key and id swapped", base64.RawURLEncoding.EncodeToString(k1.Secret) + ":k1", `entry 1: key id must be`},
		{"id with a space", "my key:" + b64(k1), `entry 1: key id must be`},
		{"not base64", "k1:" + b64(k1) + ",k2:***" + b64(k2)[3:], `entry 2 (key id "k2"): key is not base64`},
		{"16-byte key", "k1:" + short, `entry 1 (key id "k1"): key is 16 bytes, want 32`},
		{"hex key", "k1:" + hex.EncodeToString(k1.Secret), `entry 1 (key id "k1"): key is 48 bytes, want 32`},
		{"zero key", "k1:" + base64.StdEncoding.EncodeToString(make([]byte, KeySize)), `entry 1 (key id "k1"): key is all zero bytes`},
		{"repeated id", "k1:" + b64(k1) + ",k1:" + b64(k2), `entry 2 (key id "k1"): key id repeats entry 1`},
		{"repeated key", "k1:" + b64(k1) + ",k2:" + b64(k1), `entry 2 (key id "k2"): key is the same as entry 1's`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ring, err := Parse(tc.spec)
			var entry *EntryError
			if ring != nil || !errors.As(err, &entry) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Parse: ring %v, error %v; want an *EntryError starting %q", ring, err, tc.want)
			}
			for _, secret := range [][]byte{k1.Secret, k2.Secret} {
				for _, enc := range []string{base64.StdEncoding.EncodeToString(secret), base64.RawURLEncoding.EncodeToString(secret), hex.EncodeToString(secret)} {
					for i := 0; i+8 <= len(enc); i++ {
						if strings.Contains(err.Error(), enc[i:i+8]) {
							t.Fatalf("error %q contains a piece of a key", err)
						}
					}
				}
			}
		})
	}
}

// The alphabets key generators print are all accepted, blanks ignored.
func TestParse_AcceptsCommonEncodings(t *testing.T) {
	t.Parallel()
	k := testKey("k1")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		ring, err := Parse("  k1 : " + enc.EncodeToString(k.Secret) + "  ")
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		want := mustNew(t, k).Seal([]byte("v"), nil)
		if got, err := ring.Open(want, nil); err != nil || string(got) != "v" {
			t.Errorf("ring parsed from %v does not open what the key sealed: %v", enc, err)
		}
	}
}

func mustNew(t *testing.T, keys ...Key) *Ring {
	t.Helper()
	r, err := New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func BenchmarkSeal(b *testing.B) {
	ring := mustNewB(b, testKey("k1"))
	aad := []byte("postbox/email_outbox/v1\x000b5c2a9e-8d3f-4f7a-9c1e-2b6d8e4f1a3c\x00password_reset_url")
	for _, size := range []struct {
		name string
		n    int
	}{{"link-64B", 64}, {"pdf-100KiB", 100 << 10}} {
		plaintext := bytes.Repeat([]byte("x"), size.n)
		b.Run(size.name, func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				ring.Seal(plaintext, aad)
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	ring := mustNewB(b, testKey("k1"))
	aad := []byte("postbox/email_outbox/v1\x000b5c2a9e-8d3f-4f7a-9c1e-2b6d8e4f1a3c\x00password_reset_url")
	e := ring.Seal(bytes.Repeat([]byte("x"), 64), aad)
	for b.Loop() {
		if _, err := ring.Open(e, aad); err != nil {
			b.Fatal(err)
		}
	}
}

func mustNewB(b *testing.B, keys ...Key) *Ring {
	r, err := New(keys...)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
