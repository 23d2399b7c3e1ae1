package story

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/postbox/postbox/outbox"
)

// Kind is what an input names.
type Kind string

// The kinds Find knows. The id kinds take a UUID.
const (
	KindEmail         Kind = "email"          // an email_outbox row id
	KindInvoice       Kind = "invoice"        // email_outbox.invoice_id
	KindCustomer      Kind = "customer"       // email_outbox.customer_id
	KindRecipient     Kind = "recipient"      // an address emails were sent to
	KindEvent         Kind = "event"          // a webhook_events id
	KindDelivery      Kind = "delivery"       // a webhook_deliveries id
	KindEndpoint      Kind = "endpoint"       // a webhook_endpoints id
	KindWebhookOutbox Kind = "webhook_outbox" // a webhook_outbox row id
)

// Kinds lists every kind, in the order an id is looked up.
var Kinds = []Kind{KindEmail, KindEvent, KindDelivery, KindEndpoint, KindWebhookOutbox, KindInvoice, KindCustomer, KindRecipient}

// idKinds are the kinds whose input is a UUID, in lookup order.
var idKinds = []Kind{KindEmail, KindEvent, KindDelivery, KindEndpoint, KindWebhookOutbox}

// ParseKind reads --kind; "" means detect.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return "", nil
	}
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("%w: kind %q is not one of %s", ErrMalformed, s, strings.Join(names, ", "))
}

// takesID reports whether k's input is a UUID.
func (k Kind) takesID() bool {
	for _, id := range idKinds {
		if k == id {
			return true
		}
	}
	return false
}

// ErrMalformed is matched (errors.Is) when the input cannot name anything
// of the kind asked for or detected: a malformed UUID, an address that
// does not parse, an unknown kind. Nothing was looked up.
var ErrMalformed = errors.New("malformed input")

var (
	// uuidishRE is input that was meant to be a UUID: hex digits in
	// dash-separated groups, at least 20 characters. Invoice and customer
	// ids are application-chosen, but none of this shape is plausible.
	uuidishRE = regexp.MustCompile(`^[0-9a-fA-F]+(-[0-9a-fA-F]*)+$`)
)

// detect returns the kinds to try for q, in order: every id kind for a
// UUID; recipient for an address; invoice, then customer, for anything
// else. A malformed UUID is ErrMalformed.
func detect(q string) ([]Kind, error) {
	switch {
	case outbox.IsRowID(q):
		return idKinds, nil
	case len(q) >= 20 && uuidishRE.MatchString(q):
		return nil, fmt.Errorf("%w: %q looks like an id but is not a UUID (8-4-4-4-12 hex digits)", ErrMalformed, q)
	case strings.Contains(q, "@"):
		return []Kind{KindRecipient}, nil
	}
	return []Kind{KindInvoice, KindCustomer}, nil
}

// checkForced refuses input that cannot be of the forced kind.
func checkForced(q string, k Kind) error {
	if k.takesID() && !outbox.IsRowID(q) {
		return fmt.Errorf("%w: --kind %s takes a UUID (8-4-4-4-12 hex digits), not %q", ErrMalformed, k, q)
	}
	return nil
}

// NotFoundError says what was searched for and where.
type NotFoundError struct {
	Query    string
	Searched []Kind
	// Deleted, when retention has deleted rows of what was searched, says
	// which: what was not found may have been among them.
	Deleted string
}

func (e *NotFoundError) Error() string {
	where := make([]string, len(e.Searched))
	for i, k := range e.Searched {
		where[i] = searchedText[k]
	}
	msg := fmt.Sprintf("nothing matches %q: searched %s", e.Query, strings.Join(where, ", "))
	if e.Deleted != "" {
		msg += "; " + e.Deleted
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ErrNotFound is matched (errors.Is) by a *NotFoundError.
var ErrNotFound = errors.New("nothing matches")

var searchedText = map[Kind]string{
	KindEmail:         "email_outbox by id",
	KindEvent:         "webhook_events by id",
	KindDelivery:      "webhook_deliveries by id",
	KindEndpoint:      "webhook_endpoints by id",
	KindWebhookOutbox: "webhook_outbox by id",
	KindInvoice:       "email_outbox by invoice_id",
	KindCustomer:      "email_outbox by customer_id (last 30 days)",
	KindRecipient:     "email_outbox by recipient (last 30 days)",
}
