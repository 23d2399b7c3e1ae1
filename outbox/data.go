package outbox

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// payloadJSON is Payload without its methods, so MarshalJSON can encode
// the fields with encoding/json's own rules.
type payloadJSON Payload

// MarshalJSON writes p's fields as their tags say and then each Data key
// as a top-level key, so a payload enqueued from Go has the shape a
// plain-SQL INSERT of the same email has. Data keys are written sorted.
func (p Payload) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(payloadJSON(p))
	if err != nil || len(p.Data) == 0 {
		return base, err
	}
	if err := validateData(p.Data); err != nil {
		return nil, err
	}
	extra, err := json.Marshal(p.Data) // a map encodes sorted by key
	if err != nil {
		return nil, fmt.Errorf("payload.data: %w", err)
	}
	// base is "{…}" with at least "to" and "subject"; extra is "{…}" with
	// at least one key.
	out := make([]byte, 0, len(base)+len(extra))
	out = append(out, base[:len(base)-1]...)
	out = append(out, ',')
	return append(out, extra[1:]...), nil
}

// validateData refuses a Data key that would be read as a field of
// Payload: a name the decoder matches to a field (encoding/json folds
// case), or one that is no plain identifier (KindPattern's rule, so a
// template reads it as {{.key}}).
func validateData(data map[string]any) error {
	for _, key := range slices.Sorted(maps.Keys(data)) {
		if problem := kindProblem(key); problem != "" {
			return invalid("payload.data", fmt.Sprintf("key %q %s", shortKey(key), problem))
		}
		for _, name := range payloadFieldNames {
			if strings.EqualFold(key, name) {
				return invalid("payload.data", fmt.Sprintf("key %q is a field of Payload (%q): set the field instead", key, name))
			}
		}
	}
	return nil
}

// PayloadFromJSON reads a payload document as plain SQL would store it —
// Payload's fields by their JSON names, every other top-level key into
// Data — for a caller that has the document rather than the struct (the
// HTTP API). A value of the wrong type is a *ValidationError naming the
// key; what Enqueue checks is left to Enqueue.
func PayloadFromJSON(raw []byte) (Payload, error) {
	var p Payload
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil || doc == nil {
		return p, invalid("payload", "must be a JSON object")
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return p, invalid("payload."+typ.Field, "must be a JSON "+typ.Type.String())
		}
		return decodePayloadError(err)
	}
	for key, value := range doc {
		if slices.Contains(payloadFieldNames, key) {
			continue
		}
		var v any
		if err := json.Unmarshal(value, &v); err != nil {
			return p, invalid("payload."+key, "is not JSON")
		}
		if p.Data == nil {
			p.Data = map[string]any{}
		}
		p.Data[key] = v
	}
	return p, nil
}

// decodePayloadError is a failed decode of a payload as a
// *ValidationError: pdf is the one field encoding/json reports without
// naming it (bad base64).
func decodePayloadError(err error) (Payload, error) {
	var b64 base64.CorruptInputError
	if errors.As(err, &b64) {
		return Payload{}, invalid("payload.pdf", "is not base64: "+err.Error())
	}
	return Payload{}, invalid("payload", "is not a payload document: "+err.Error())
}
