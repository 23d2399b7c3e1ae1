package outbox

import (
	"encoding/json"
	"testing"
)

// A custom kind needs no subject and no body (its templates make them),
// and its Data keys are stored as top-level payload keys, the shape a
// plain-SQL INSERT writes.
func TestEnqueue_CustomKindStoresDataAsTopLevelKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		data map[string]any
		want map[string]any
	}{
		{"no data", nil, map[string]any{"to": "ada@example.com", "subject": ""}},
		{"data", map[string]any{"order_id": "ord_1", "items": []any{"tea"}},
			map[string]any{"to": "ada@example.com", "subject": "", "order_id": "ord_1", "items": []any{"tea"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			email := Email{Kind: "receipt", Payload: Payload{To: "ada@example.com", Data: tc.data}}
			if err := email.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			raw, err := encodePayload(nil, nil, newRowID(), email.Payload, DefaultMaxPayloadBytes)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, tc.want); g != w {
				t.Fatalf("stored %s; want %s", g, w)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
