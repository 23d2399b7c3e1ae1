package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/postbox/postbox/internal/engine/sealer"
)

// Forms of a sealed value: what the ciphertext holds.
const (
	formJSON  = ""      // the field's JSON value, as it would be stored
	formBytes = "bytes" // the bytes a base64 JSON string stands for (pdf)
)

// fieldAADPrefix versions the associated data along with the envelope.
const fieldAADPrefix = "postbox/email_outbox/v1\x00"

// fieldAAD is the associated data a secret field is sealed with: the row
// id, the payload key and the form. An envelope copied into another row, or
// into another key of the same row, does not open there, so whoever can
// write the table but not read the keys cannot make one email carry
// another's link; nor can its form be switched.
func fieldAAD(rowID, field, form string) []byte {
	return []byte(fieldAADPrefix + rowID + "\x00" + field + "\x00" + form)
}

// envelope is a stored sealed field: the sealer's envelope plus its form.
type envelope struct {
	sealer.Envelope
	Form string `json:"t,omitempty"`
}

// noSeal is the retry and failed marks' argument when there is nothing to
// seal: the payload is left as it is.
var noSeal = json.RawMessage(`{}`)

// appendSealed seals value for rowID's field under the active key and
// appends "field":<envelope>. Key ids and forms are restricted to
// characters that need no escaping, so this writes what json.Marshal
// would, without reflection and without another copy of a large PDF.
func (k *KeyRing) appendSealed(dst []byte, rowID, field, form string, value []byte) []byte {
	e := k.ring.Seal(value, fieldAAD(rowID, field, form))
	dst = append(dst, '"')
	dst = append(dst, field...)
	dst = append(dst, `":{"enc":"`...)
	dst = append(dst, e.Version...)
	dst = append(dst, `","kid":"`...)
	dst = append(dst, e.KeyID...)
	dst = append(dst, `","n":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, e.Nonce)
	dst = append(dst, `","ct":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, e.Ciphertext)
	if form != formJSON {
		dst = append(dst, `","t":"`...)
		dst = append(dst, form...)
	}
	return append(dst, `"}`...)
}

// appendSealedStored seals a field as a plaintext row stores it: a pdf
// that is a base64 string as its bytes, anything else as its JSON value
// (which then fails to decode after opening exactly as it would have).
func (k *KeyRing) appendSealedStored(dst []byte, rowID, field string, value json.RawMessage) []byte {
	if field == "pdf" {
		var b []byte
		if json.Unmarshal(value, &b) == nil {
			return k.appendSealed(dst, rowID, field, formBytes, b)
		}
	}
	return k.appendSealed(dst, rowID, field, formJSON, value)
}

// open returns what e seals for rowID's field.
func (k *KeyRing) open(rowID, field string, e envelope) ([]byte, error) {
	value, err := k.sealer().Open(e.Envelope, fieldAAD(rowID, field, e.Form))
	if err != nil {
		return nil, fmt.Errorf("payload.%s is sealed under key id %q: %w", field, e.KeyID, err)
	}
	return value, nil
}

// envelopeMarker is in every stored envelope, whatever the spacing of the
// JSON around it. A payload without it has no sealed field, so the
// dispatcher decodes it exactly as it did before encryption existed.
var envelopeMarker = []byte(`"enc"`)

// parseEnvelope tells a sealed field from a plaintext one. A value that is
// not an object with "enc" is plaintext (an object without "enc" is left
// for the decoder to refuse, as before encryption existed).
func parseEnvelope(value []byte) (e envelope, sealed bool, err error) {
	v := bytes.TrimLeft(value, " \t\r\n")
	if len(v) == 0 || v[0] != '{' {
		return e, false, nil
	}
	if e, ok := scanEnvelope(v); ok {
		return e, e.Version != "", nil
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return e, true, fmt.Errorf("malformed sealed value: %w", err)
	}
	return e, e.Version != "", nil
}

// scanEnvelope reads an envelope as this package and Postgres write it —
// an object of plain string members — in one pass, where encoding/json
// would scan a large ciphertext twice before decoding its base64. Anything
// else (an escape, another member, another type) returns false and takes
// the general path.
func scanEnvelope(v []byte) (e envelope, ok bool) {
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == '}' {
		return e, skipSpace(v, i+1) == len(v) // {}
	}
	for {
		key, next, ok := scanPlainString(v, i)
		if !ok {
			return e, false
		}
		if i = skipSpace(v, next); i >= len(v) || v[i] != ':' {
			return e, false
		}
		val, next, ok := scanPlainString(v, skipSpace(v, i+1))
		if !ok {
			return e, false
		}
		var err error
		switch string(key) {
		case "enc":
			e.Version = string(val)
		case "kid":
			e.KeyID = string(val)
		case "t":
			e.Form = string(val)
		case "n":
			e.Nonce, err = base64.StdEncoding.AppendDecode(nil, val)
		case "ct":
			e.Ciphertext, err = base64.StdEncoding.AppendDecode(nil, val)
		default:
			return e, false
		}
		if err != nil {
			return e, false
		}
		switch i = skipSpace(v, next); {
		case i < len(v) && v[i] == ',':
			i = skipSpace(v, i+1)
		case i < len(v) && v[i] == '}':
			return e, skipSpace(v, i+1) == len(v)
		default:
			return e, false
		}
	}
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// scanPlainString reads a JSON string at v[i] that has no escape or
// control character, returning its contents and the index after it.
func scanPlainString(v []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(v) || v[i] != '"' {
		return nil, i, false
	}
	end := bytes.IndexByte(v[i+1:], '"')
	if end < 0 {
		return nil, i, false
	}
	s = v[i+1 : i+1+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return nil, i, false
		}
	}
	return s, i + 1 + end + 1, true
}

func isNull(v []byte) bool { return string(bytes.TrimSpace(v)) == "null" }

// secretValue is one secret field Enqueue found set: a string's JSON
// value, or the PDF's bytes.
type secretValue struct {
	key  string
	json []byte
	bin  []byte
}

// storedLen is how long the field's value is in a plaintext payload.
func (s secretValue) storedLen() int {
	if s.bin != nil {
		return base64.StdEncoding.EncodedLen(len(s.bin)) + len(`""`)
	}
	return len(s.json)
}

// takeSecrets returns the secret fields that are set, in
// scrubbedPayloadKeys order and then the Data keys among extra, sorted,
// and clears them in p. Data is copied first: it is the caller's map.
func (p *Payload) takeSecrets(extra []string) ([]secretValue, error) {
	var out []secretValue
	for _, f := range []struct {
		key string
		s   *string
	}{
		{"setup_url", &p.SetupURL},
		{"update_url", &p.UpdateURL},
		{"password_reset_url", &p.PasswordResetURL},
		{"invite_url", &p.InviteURL},
		{"public_token", &p.PublicToken},
	} {
		if *f.s != "" {
			v, _ := json.Marshal(*f.s) // a string always encodes
			out = append(out, secretValue{key: f.key, json: v})
			*f.s = ""
		}
	}
	if len(p.PDF) > 0 {
		out = append(out, secretValue{key: "pdf", bin: p.PDF})
		p.PDF = nil
	}
	copied := false
	for _, key := range extra { // sorted (secretKeySet)
		v, ok := p.Data[key]
		if !ok {
			continue
		}
		if !copied {
			p.Data, copied = maps.Clone(p.Data), true
		}
		delete(p.Data, key)
		if v == nil {
			continue // as a null is stored: nothing secret to seal
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("payload.data: %s: %w", key, err)
		}
		out = append(out, secretValue{key: key, json: b})
	}
	return out, nil
}

// encodePayload is the payload as Enqueue stores it for row id: its JSON
// with, when keys is set, each secret field — the six, and the Data keys
// among extra — replaced by its envelope. The limit applies to the
// payload encoded without sealing, so turning encryption on does not
// change which emails fit.
func encodePayload(keys *KeyRing, extra []string, id string, p Payload, limit int) ([]byte, error) {
	secrets, err := p.takeSecrets(extra)
	if err != nil {
		return nil, err
	}
	base, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("outbox: encode payload: %w", err)
	}
	size := len(base)
	for _, s := range secrets {
		size += len(`,"":`) + len(s.key) + s.storedLen() // what the field adds to base
	}
	if size > limit {
		return nil, invalid("payload", fmt.Sprintf("is %d bytes encoded, over the limit of %d", size, limit))
	}
	if len(secrets) == 0 {
		return base, nil
	}
	// base always ends in "}" after at least "to" and "subject": append
	// each field before it.
	out := make([]byte, 0, size+len(secrets)*128)
	out = append(out, base[:len(base)-1]...)
	for _, s := range secrets {
		out = append(out, ',')
		switch {
		case keys.seals() && s.bin != nil:
			out = keys.appendSealed(out, id, s.key, formBytes, s.bin)
		case keys.seals():
			out = keys.appendSealed(out, id, s.key, formJSON, s.json)
		default:
			out = append(out, '"')
			out = append(out, s.key...)
			out = append(out, `":`...)
			if s.bin != nil {
				out = append(out, '"')
				out = base64.StdEncoding.AppendEncode(out, s.bin)
				out = append(out, '"')
			} else {
				out = append(out, s.json...)
			}
		}
	}
	return append(out, '}'), nil
}

// storedPayload is a payload as stored with sealed fields: each secret
// field is a plaintext value or an envelope. Its secret fields shadow the
// embedded Payload's (encoding/json gives a name to the shallower field),
// so one pass of the decoder fills everything else.
type storedPayload struct {
	Payload
	SetupURL         storedField `json:"setup_url"`
	UpdateURL        storedField `json:"update_url"`
	PasswordResetURL storedField `json:"password_reset_url"`
	InviteURL        storedField `json:"invite_url"`
	PublicToken      storedField `json:"public_token"`
	PDF              storedField `json:"pdf"`
}

// storedField is one secret field as stored.
type storedField struct {
	plain  []byte // the plaintext JSON value; nil when absent, null or sealed
	env    envelope
	sealed bool
	err    error // a malformed envelope
}

// UnmarshalJSON never fails the document: decodeSealed reports a bad
// field by name.
func (f *storedField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	if f.env, f.sealed, f.err = parseEnvelope(b); !f.sealed && f.err == nil {
		f.plain = bytes.Clone(b)
	}
	return nil
}

// decodeSealed is decodePayload for a stored payload that holds envelopes:
// it opens each sealed field with keys into the Payload and checks the
// result as Enqueue would have. A field that does not open is a permanent
// error naming the row, the field and the key id: the email is never sent
// with a link missing.
func (k *KeyRing) decodeSealed(rowID string, kind Kind, raw []byte) (Payload, error) {
	var sp storedPayload
	if err := json.Unmarshal(raw, &sp); err != nil {
		return Payload{}, fmt.Errorf("decode payload: %w", err)
	}
	p := sp.Payload
	for _, f := range []struct {
		key   string
		field *storedField
		str   *string
	}{
		{"setup_url", &sp.SetupURL, &p.SetupURL},
		{"update_url", &sp.UpdateURL, &p.UpdateURL},
		{"password_reset_url", &sp.PasswordResetURL, &p.PasswordResetURL},
		{"invite_url", &sp.InviteURL, &p.InviteURL},
		{"public_token", &sp.PublicToken, &p.PublicToken},
		{"pdf", &sp.PDF, nil},
	} {
		value, form := f.field.plain, formJSON
		switch {
		case f.field.err != nil:
			return p, fmt.Errorf("row %s: payload.%s: %w", rowID, f.key, f.field.err)
		case f.field.sealed:
			var err error
			if value, err = k.open(rowID, f.key, f.field.env); err != nil {
				return p, fmt.Errorf("row %s: %w", rowID, err)
			}
			form = f.field.env.Form
		case value == nil:
			continue
		}
		var err error
		switch {
		case f.str == nil && form == formBytes:
			p.PDF = value
		case f.str == nil:
			err = json.Unmarshal(value, &p.PDF)
		case form == formJSON:
			err = json.Unmarshal(value, f.str)
		default:
			err = fmt.Errorf("sealed in form %q", form)
		}
		if err != nil {
			return p, fmt.Errorf("decode payload: payload.%s: %w", f.key, err)
		}
	}
	if err := k.openData(rowID, raw, &p); err != nil {
		return p, err
	}
	if err := p.validate(kind); err != nil {
		return p, fmt.Errorf("decode payload: %w", err)
	}
	return p, nil
}

// openData opens the sealed values among raw's keys that are not
// Payload's fields — the keys a kind declared secret, sealed by Enqueue, a
// mark or Rekey — into p.Data, where a template reads them. It opens any
// such key it finds sealed, declared on this worker or not: the envelope
// is bound to the row and the key, so only what was sealed there opens.
// A value that is not a well-formed envelope is the application's own
// data and is left for the template as it is.
func (k *KeyRing) openData(rowID string, raw []byte, p *Payload) error {
	return scanTopLevelKeys(raw, func(key string, value []byte) error {
		if !bytes.Contains(value, envelopeMarker) || slices.Contains(payloadFieldNames, key) {
			return nil
		}
		env, sealed, err := parseEnvelope(value)
		if err != nil || !sealed {
			return nil
		}
		opened, err := k.open(rowID, key, env)
		if err != nil {
			return fmt.Errorf("row %s: %w", rowID, err)
		}
		if env.Form != formJSON {
			return fmt.Errorf("decode payload: payload.%s: sealed in form %q", key, env.Form)
		}
		dec := json.NewDecoder(bytes.NewReader(opened))
		dec.UseNumber() // as the template reads the row's plaintext keys
		var v any
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("decode payload: payload.%s: %w", key, err)
		}
		if p.Data == nil {
			p.Data = map[string]any{}
		}
		p.Data[key] = v
		return nil
	})
}

// plaintextSecrets returns the secret fields that raw, a stored payload,
// holds in plaintext (nulls aside), under the keys they are stored under —
// the six and extra: a key that spells a secret one under case folding
// ("INVITE_URL") counts, so the row that decode refused for it does not
// wait with it in plaintext either.
func plaintextSecrets(raw json.RawMessage, extra []string) map[string]json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil
	}
	var plain map[string]json.RawMessage
	for key, v := range fields {
		if (foldsToSecretKey(key) == "" && !isExtraSecret(key, extra)) || isNull(v) {
			continue
		}
		if _, sealed, err := parseEnvelope(v); sealed || err != nil {
			continue
		}
		if plain == nil {
			plain = map[string]json.RawMessage{}
		}
		plain[key] = v
	}
	return plain
}

// sealWaiting returns what a retry or failed mark merges into the row's
// payload (payload || it): the row's plaintext secret fields, sealed. A row
// written by plain SQL is sent as it is; once its attempt has not sent it,
// it is going to wait — for its backoff slot, or for an operator's requeue
// — and must not wait in plaintext. extra are the Dispatcher's declared
// secret keys. Without keys, or with nothing in plaintext, it is noSeal.
func (k *KeyRing) sealWaiting(row *Row, extra []string) json.RawMessage {
	if !k.seals() {
		return noSeal
	}
	plain := plaintextSecrets(row.RawPayload, extra)
	if len(plain) == 0 {
		return noSeal
	}
	out := []byte{'{'}
	for _, key := range slices.Sorted(maps.Keys(plain)) {
		v := plain[key]
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = k.appendSealedStored(out, row.ID, key, v)
	}
	return append(out, '}')
}
