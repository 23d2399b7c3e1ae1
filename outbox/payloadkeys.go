package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// payloadFieldNames are the JSON names of Payload's fields: the keys the
// decoder fills Payload from.
var payloadFieldNames = func() []string {
	var names []string
	t := reflect.TypeFor[Payload]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}()

// checkPayloadKeys refuses a stored payload whose top-level keys are not
// spelled exactly. encoding/json matches a key to a field case-insensitively
// and with Unicode simple folding ("INVITE_URL", "paſsword_reset_url" and
// "public_to\u212aen" all fill a Payload field), while the scrub, the seal
// and every SQL reader match exact names only: a secret under another
// spelling would be rendered and sent, then kept in plaintext. So a key
// that folds to a field's name without being that name, or a field named
// twice, is a permanent *ValidationError naming the key. Keys that match no
// field are kept, for custom renderers (Row.RawPayload).
//
// declared are the secret keys declared beside the six (a kind's
// kind.json, Config.SecretKeys): they are held to the same rule, since the
// template reads them by exact name too ("Download_URL" would be sent
// without its link, or rendered by a custom renderer that folds) and the
// scrub would keep them.
//
// It scans without decoding values, so a large PDF is not copied. A payload
// it cannot scan is left for the decoder to refuse.
func checkPayloadKeys(raw []byte, declared []string) error {
	known := payloadFieldNames
	if len(declared) > 0 {
		known = slices.Concat(payloadFieldNames, declared)
	}
	var seen map[string]bool
	return scanTopLevelKeys(raw, func(key string, _ []byte) error {
		for _, name := range known {
			switch {
			case key == name:
				if seen[name] {
					return invalid("payload", fmt.Sprintf("names the key %q twice", shortKey(key)))
				}
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[name] = true
				return nil
			case strings.EqualFold(key, name):
				return invalid("payload",
					fmt.Sprintf("key %q is not spelled exactly as %q: payload keys are case-sensitive; write %q",
						shortKey(key), name, name))
			}
		}
		return nil
	})
}

// shortKey caps a key quoted in an error: it is not a secret, but it is
// input of any length.
func shortKey(key string) string {
	const max = 64
	if len(key) <= max {
		return key
	}
	cut := max
	for cut > 0 && key[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return key[:cut] + "…"
}

// foldsToSecretKey returns the secret key (scrubbedPayloadKeys) that key
// spells under encoding/json's case folding, or "".
func foldsToSecretKey(key string) string {
	for _, k := range scrubbedPayloadKeys {
		if strings.EqualFold(key, k) {
			return k
		}
	}
	return ""
}

// scanTopLevelKeys calls fn with each key of the JSON object raw and its
// value's bytes, in document order, skipping values without decoding
// them. It returns fn's first error, or nil when raw is not an object it
// can scan (the decoder reports that).
func scanTopLevelKeys(raw []byte, fn func(key string, value []byte) error) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil
	}
	for {
		end, ok := skipString(raw, i)
		if !ok {
			return nil
		}
		keyRaw := raw[i:end]
		key := string(keyRaw[1 : len(keyRaw)-1])
		if strings.IndexByte(key, '\\') >= 0 {
			if json.Unmarshal(keyRaw, &key) != nil {
				return nil
			}
		}
		if i = skipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return nil
		}
		start := skipSpace(raw, i+1)
		if i, ok = skipValue(raw, start); !ok {
			return nil
		}
		if err := fn(key, raw[start:i]); err != nil {
			return err
		}
		switch i = skipSpace(raw, i); {
		case i < len(raw) && raw[i] == ',':
			i = skipSpace(raw, i+1)
		default:
			return nil // '}' or malformed: either way, done
		}
	}
}

// skipString returns the index after the JSON string starting at raw[i].
// It jumps from quote to quote (bytes.IndexByte), so a large base64 PDF
// costs a memchr, and counts the backslashes before each to tell an
// escaped quote from the closing one.
func skipString(raw []byte, i int) (int, bool) {
	if i >= len(raw) || raw[i] != '"' {
		return i, false
	}
	for j := i + 1; j < len(raw); {
		k := bytes.IndexByte(raw[j:], '"')
		if k < 0 {
			return j, false
		}
		j += k
		n := 0
		for b := j - 1; b > i && raw[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return j + 1, true
		}
		j++
	}
	return i, false
}

// skipValue returns the index after the JSON value starting at raw[i].
func skipValue(raw []byte, i int) (int, bool) {
	if i >= len(raw) {
		return i, false
	}
	switch raw[i] {
	case '"':
		return skipString(raw, i)
	case '{', '[':
		depth := 0
		for i < len(raw) {
			switch raw[i] {
			case '"':
				end, ok := skipString(raw, i)
				if !ok {
					return i, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	default: // number, true, false, null
		for i < len(raw) && raw[i] != ',' && raw[i] != '}' && raw[i] != ']' &&
			raw[i] != ' ' && raw[i] != '\t' && raw[i] != '\n' && raw[i] != '\r' {
			i++
		}
		return i, true
	}
}
