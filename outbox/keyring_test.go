package outbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
)

// testKeys are freshly generated keys by id, so several rings can share a
// key the way a rotation does.
type testKeys map[string]string // key id → base64 key

func newTestKeys(ids ...string) testKeys {
	k := testKeys{}
	for _, id := range ids {
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		k[id] = base64.StdEncoding.EncodeToString(secret)
	}
	return k
}

// ring returns the ring of these key ids, the first active.
func (k testKeys) ring(t testing.TB, ids ...string) *KeyRing {
	t.Helper()
	ring, err := ParseKeyRing(k.spec(ids...))
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func (k testKeys) spec(ids ...string) string {
	entries := make([]string, len(ids))
	for i, id := range ids {
		entries[i] = id + ":" + k[id]
	}
	return strings.Join(entries, ",")
}

// OUTBOX_ENCRYPTION_KEYS: unset or blank means no encryption; a valid
// value is a ring whose first key is active; a malformed one is an error
// naming the variable and the entry, never a key.
func TestKeyRingFromEnv(t *testing.T) {
	t.Parallel()
	keys := newTestKeys("k2026", "k2025")
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 16))
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantIDs []string // nil: no ring
		wantErr string
	}{
		{"unset", nil, nil, ""},
		{"blank", map[string]string{KeysEnv: "  "}, nil, ""},
		{"two keys", map[string]string{KeysEnv: keys.spec("k2026", "k2025")}, []string{"k2026", "k2025"}, ""},
		{"bad second entry", map[string]string{KeysEnv: keys.spec("k2026") + ",k2025:" + short},
			nil, `OUTBOX_ENCRYPTION_KEYS: entry 2 (key id "k2025"): key is 16 bytes, want 32`},
		{"key without id", map[string]string{KeysEnv: keys["k2026"]},
			nil, `OUTBOX_ENCRYPTION_KEYS: entry 1: no ':'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ring, err := KeyRingFromEnv(func(name string) (string, bool) { v, ok := tc.env[name]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, tc.wantErr)
				}
				for _, secret := range []string{keys["k2026"], keys["k2025"], short} {
					if strings.Contains(err.Error(), secret[:12]) {
						t.Fatalf("error %q contains key material", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ring.KeyIDs(); !slices.Equal(got, tc.wantIDs) {
				t.Fatalf("key ids %v, want %v", got, tc.wantIDs)
			}
			if tc.wantIDs != nil && ring.ActiveKeyID() != tc.wantIDs[0] {
				t.Errorf("active key %q, want the first, %q", ring.ActiveKeyID(), tc.wantIDs[0])
			}
		})
	}
}

// However a ring is printed or logged, only key ids come out.
func TestKeyRing_NeverPrintsKeys(t *testing.T) {
	t.Parallel()
	keys := newTestKeys("k1", "k2")
	ring := keys.ring(t, "k2", "k1")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("boot", "keys", ring, "config", struct{ Keys *KeyRing }{ring})
	outputs := []string{
		fmt.Sprint(ring), fmt.Sprintf("%v %+v %#v %s %q", ring, ring, ring, ring, ring),
		fmt.Sprintf("%+v %#v", struct{ Keys *KeyRing }{ring}, struct{ Keys *KeyRing }{ring}),
		logged.String(),
	}
	for _, out := range outputs {
		for _, id := range []string{"k1", "k2"} {
			secret, _ := base64.StdEncoding.DecodeString(keys[id])
			if strings.Contains(out, keys[id][:12]) || bytes.Contains([]byte(out), secret[:8]) ||
				strings.Contains(out, fmt.Sprintf("%x", secret[:8])) {
				t.Fatalf("printed ring %q contains key material", out)
			}
		}
		if !strings.Contains(out, "k2") {
			t.Errorf("printed ring %q does not name its keys", out)
		}
	}
	if s := (*KeyRing)(nil).String(); s != "KeyRing(none)" {
		t.Errorf("nil ring prints %q", s)
	}
}

// The six secret keys Enqueue seals are exactly the six the scrub removes,
// so the two lists cannot drift apart; declared keys follow, taken from a
// copy of Data, never from the caller's map.
func TestTakeSecrets_CoversExactlyTheScrubbedKeys(t *testing.T) {
	t.Parallel()
	data := map[string]any{"magic_link": "https://x/m", "plan": "pro", "z_token": "t"}
	p := Payload{SetupURL: "a", UpdateURL: "b", PasswordResetURL: "c", InviteURL: "d", PublicToken: "e", PDF: []byte("%PDF-"), Data: data}
	secrets, err := p.takeSecrets([]string{"magic_link", "not_here", "z_token"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range secrets {
		got = append(got, s.key)
	}
	if want := append(slices.Clone(scrubbedPayloadKeys), "magic_link", "z_token"); !slices.Equal(got, want) {
		t.Fatalf("takeSecrets keys %v, want %v", got, want)
	}
	if p.SetupURL != "" || p.UpdateURL != "" || p.PasswordResetURL != "" || p.InviteURL != "" || p.PublicToken != "" || p.PDF != nil {
		t.Errorf("takeSecrets left secrets in the payload: %+v", p)
	}
	if len(p.Data) != 1 || p.Data["plan"] != "pro" {
		t.Errorf("takeSecrets left Data %v; want only plan", p.Data)
	}
	if len(data) != 3 {
		t.Errorf("takeSecrets changed the caller's Data: %v", data)
	}
}

// MaxPayloadBytes limits the payload encoded without sealing, whether or
// not the Enqueuer has keys: a payload of exactly the limit fits, one byte
// more does not, and sealing does not change that.
func TestEncodePayload_LimitIgnoresSealing(t *testing.T) {
	t.Parallel()
	ring := newTestKeys("k1").ring(t, "k1")
	p := Payload{To: "ada@example.com", Subject: "Invoice <1> & co", Text: "t", InvoiceNumber: "INV-1",
		UpdateURL: "https://pay.example.com/u?a=1&b=<2>", PublicToken: "pt", PDF: bytes.Repeat([]byte{0xA5}, 5000)}
	plain, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range []*KeyRing{nil, ring} {
		if _, err := encodePayload(keys, nil, "00000000-0000-4000-8000-000000000000", p, len(plain)); err != nil {
			t.Errorf("keys %v: payload of exactly the limit refused: %v", keys, err)
		}
		if _, err := encodePayload(keys, nil, "00000000-0000-4000-8000-000000000000", p, len(plain)-1); err == nil {
			t.Errorf("keys %v: payload one byte over the limit accepted", keys)
		}
	}
	// Without keys the stored document is the payload itself.
	stored, err := encodePayload(nil, nil, "id", p, len(plain))
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal(stored, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(plain, &b); err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(a, b, func(x, y any) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) || len(stored) != len(plain) {
		t.Errorf("unsealed encoding %s, want %s", stored, plain)
	}
}

// parseEnvelope reads an envelope however it is spelled — as Enqueue writes
// it, as Postgres prints jsonb (spaces, reordered members), with escapes —
// and tells plaintext from sealed; its one-pass reader and encoding/json
// agree.
func TestParseEnvelope(t *testing.T) {
	t.Parallel()
	ring := newTestKeys("k1").ring(t, "k1")
	written := ring.appendSealed(nil, "row-1", "pdf", formBytes, []byte("%PDF-1.7"))
	written = written[bytes.IndexByte(written, ':')+1:] // the value after "pdf":
	var want envelope
	if err := json.Unmarshal(written, &want); err != nil {
		t.Fatal(err)
	}
	n, ct := base64.StdEncoding.EncodeToString(want.Nonce), base64.StdEncoding.EncodeToString(want.Ciphertext)
	for _, tc := range []struct {
		name   string
		value  string
		sealed bool
		err    bool
	}{
		{"as written", string(written), true, false},
		{"as jsonb prints it", `{"n": "` + n + `", "t": "bytes", "ct": "` + ct + `", "enc": "v1", "kid": "k1"}`, true, false},
		{"with an escape", `{"enc": "v1", "kid": "k\u0031", "n": "` + n + `", "ct": "` + ct + `", "t": "bytes"}`, true, false},
		{"plaintext string", `"https://example.com/x"`, false, false},
		{"object without enc", `{"href": "https://example.com/x"}`, false, false},
		{"empty object", `{}`, false, false},
		{"ciphertext not base64", `{"enc": "v1", "kid": "k1", "n": "` + n + `", "ct": "%%%", "t": "bytes"}`, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, sealed, err := parseEnvelope([]byte(tc.value))
			if sealed != tc.sealed || (err != nil) != tc.err {
				t.Fatalf("parseEnvelope: sealed %v, error %v; want sealed %v, error %v", sealed, err, tc.sealed, tc.err)
			}
			if !tc.sealed || tc.err {
				return
			}
			if got, err := ring.open("row-1", "pdf", e); err != nil || string(got) != "%PDF-1.7" {
				t.Fatalf("open: %q, %v", got, err)
			}
			e.Form = formJSON // a form switched by someone who cannot seal
			if _, err := ring.open("row-1", "pdf", e); err == nil {
				t.Error("the envelope opened with its form switched")
			}
		})
	}
}
