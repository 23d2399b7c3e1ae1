package outbox

import (
	"encoding/json"
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
