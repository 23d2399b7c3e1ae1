package outbox

import (
	"errors"
	"testing"
)

// A payload document as plain SQL stores it: Payload's fields by name,
// every other key in Data, a value of the wrong type named by its key.
func TestPayloadFromJSON(t *testing.T) {
	t.Parallel()
	p, err := PayloadFromJSON([]byte(`{"to":"ada@example.com","subject":"Hi","plan":"pro","seats":3}`))
	if err != nil || p.To != "ada@example.com" || p.Subject != "Hi" || p.Data["plan"] != "pro" || p.Data["seats"] != float64(3) || len(p.Data) != 2 {
		t.Fatalf("%+v, %v", p, err)
	}
	for _, tc := range []struct{ doc, field string }{
		{`[]`, "payload"},
		{`"x"`, "payload"},
		{`{"to":7}`, "payload.to"},
		{`{"pdf":"not base64!"}`, "payload.pdf"},
	} {
		var v *ValidationError
		if _, err := PayloadFromJSON([]byte(tc.doc)); !errors.As(err, &v) || v.Field != tc.field {
			t.Errorf("%s: %v, want a ValidationError of %s", tc.doc, err, tc.field)
		}
	}
}
