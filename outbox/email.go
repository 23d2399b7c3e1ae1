package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"strings"
	"time"
)

// Kind selects how a row is rendered. It is the email_outbox.kind column:
// one of the four built-in kinds below, or a kind a worker's template
// directory adds (docs/TEMPLATES.md). Any kind is a plain identifier
// (KindPattern), which migration 00015's CHECK email_outbox_kind_format
// holds plain SQL to; whether a worker can render it is decided at send
// time, where the directory is known.
type Kind string

// KindPattern is the format of every kind: a lower-case letter, then up to
// 63 lower-case letters, digits or underscores — a name that is a folder
// name, a metric label and a SQL literal without quoting anywhere.
const KindPattern = `^[a-z][a-z0-9_]{0,63}$`

// MaxKindBytes is the longest kind KindPattern admits.
const MaxKindBytes = 64

const (
	// KindRaw sends the payload's own subject, text and HTML.
	KindRaw Kind = "raw"
	// KindInvoice renders the built-in invoice template and attaches the
	// payload's PDF, if any. Needs invoice_number.
	KindInvoice Kind = "invoice"
	// KindPasswordReset renders the built-in password-reset template.
	// Needs password_reset_url.
	KindPasswordReset Kind = "password_reset"
	// KindMemberInvite renders the built-in member-invite template. Needs
	// invite_url.
	KindMemberInvite Kind = "member_invite"
)

// Builtin reports whether k is one of the four kinds every worker renders
// without a template directory.
func (k Kind) Builtin() bool {
	switch k {
	case KindRaw, KindInvoice, KindPasswordReset, KindMemberInvite:
		return true
	}
	return false
}

// Validate reports whether k has the format of a kind (KindPattern),
// naming the rule it breaks. It does not say whether any worker can render
// k: that depends on the worker's template directory.
func (k Kind) Validate() error {
	if problem := kindProblem(string(k)); problem != "" {
		return invalid("kind", problem)
	}
	return nil
}

// kindProblem checks KindPattern by hand: it is on every row's send path.
func kindProblem(k string) string {
	switch {
	case k == "":
		return "is empty"
	case len(k) > MaxKindBytes:
		return fmt.Sprintf("is over %d bytes", MaxKindBytes)
	case k[0] < 'a' || k[0] > 'z':
		return "must start with a lower-case letter (a-z)"
	}
	for i := 1; i < len(k); i++ {
		if c := k[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return "may hold only lower-case letters, digits and underscores (" + KindPattern + ")"
		}
	}
	return ""
}

// Email is one email to enqueue: the row's columns plus its payload.
type Email struct {
	Kind       Kind   // "" means KindRaw
	CustomerID string // the customer_id column; ListByCustomer reads by it
	InvoiceID  string // optional; the invoice_id column that ListByInvoice reads by
	Payload    Payload

	// IdempotencyKey, if set, makes the enqueue idempotent per customer:
	// Enqueue with a key this customer already used writes nothing and
	// returns the existing row's id (email_outbox_idempotency_idx). At most
	// MaxIdempotencyKeyBytes.
	IdempotencyKey string

	// SendAt, if set, holds the email until then: the row's due time
	// (next_attempt_at). Zero or a time already past sends it now; more
	// than MaxSendAhead ahead is refused. Cancel withdraws it meanwhile.
	SendAt time.Time

	// Priority, if set, is the row's own (1, most urgent, to 9); zero
	// takes its kind's (see Priority).
	Priority Priority
}

// MaxIdempotencyKeyBytes bounds Email.IdempotencyKey, as migration 00008's
// CHECK email_outbox_idempotency_key_format does for plain SQL.
const MaxIdempotencyKeyBytes = 255

// Payload is the email_outbox.payload document. Its JSON names are part of
// the SQL contract: an application in another language writes the same
// keys. Keys this struct does not know are kept in the row and ignored by
// the built-in renderers (a custom Renderer can read them from
// Row.RawPayload).
type Payload struct {
	To      string `json:"to"`                 // one address, "ada@example.com" or "Ada <ada@example.com>"
	Subject string `json:"subject"`            // required for every kind
	Text    string `json:"text,omitempty"`     // text/plain body (KindRaw)
	HTML    string `json:"html,omitempty"`     // text/html body (KindRaw)
	PDF     []byte `json:"pdf,omitempty"`      // attachment, base64 in JSON; scrubbed once sent
	PDFName string `json:"pdf_name,omitempty"` // attachment file name; defaults from the kind

	// Fields the built-in templates read. They are kept after sending, so
	// the invoice timeline and the sent-emails panel can show them.
	Name          string `json:"name,omitempty"`           // recipient's name, for the greeting
	OrgName       string `json:"org_name,omitempty"`       // the inviting organisation (member_invite)
	InvoiceNumber string `json:"invoice_number,omitempty"` // required for KindInvoice
	AmountDue     string `json:"amount_due,omitempty"`     // formatted by the application, e.g. "€120.00"
	DueDate       string `json:"due_date,omitempty"`       // formatted by the application
	AttemptNumber int    `json:"attempt_number,omitempty"` // the dunning attempt this email belongs to
	Trigger       string `json:"trigger,omitempty"`        // what caused the email, e.g. "invoice.finalized"

	// Secret-bearing fields: single-use links and tokens. They stay in the
	// row while it is pending or failed and are removed by the mark that
	// sets it dispatched or skipped (see scrubbedPayloadKeys).
	SetupURL         string `json:"setup_url,omitempty"`
	UpdateURL        string `json:"update_url,omitempty"`
	PasswordResetURL string `json:"password_reset_url,omitempty"` // required for KindPasswordReset
	InviteURL        string `json:"invite_url,omitempty"`         // required for KindMemberInvite
	PublicToken      string `json:"public_token,omitempty"`

	// Data holds the payload's other top-level keys: what a template
	// directory's kind reads beside the fields above (docs/TEMPLATES.md).
	// Enqueue writes each as a top-level key of the payload, as plain SQL
	// would; a key that spells one of the fields above, in any case, is
	// refused. See data.go.
	Data map[string]any `json:"-"`
}

// ValidationError says which field of an Email is wrong and why. Problems
// never quote a field's value: values may be secret links.
type ValidationError struct {
	Field   string // "kind", "payload.to", "payload.subject", "payload" (size) …
	Problem string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid email: %s %s", e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, problem string) error { return &ValidationError{Field: field, Problem: problem} }

// Validate checks everything about e that can be checked without the
// database, except the payload size limit (an Enqueuer setting). The same
// rules, minus the size limit, decide at send time whether a row written
// by plain SQL can be sent at all. A kind other than the built-in four
// need only be well formed here: Enqueue cannot know the workers' template
// directories, so the worker refuses a kind it cannot render when the
// row's turn comes (docs/TEMPLATES.md).
func (e Email) Validate() error {
	kind := e.Kind
	if kind == "" {
		kind = KindRaw
	}
	if len(e.IdempotencyKey) > MaxIdempotencyKeyBytes {
		return invalid("idempotency_key", fmt.Sprintf("is over %d bytes", MaxIdempotencyKeyBytes))
	}
	if err := e.Priority.Validate(); err != nil {
		return err
	}
	return e.Payload.validate(kind)
}

func (p *Payload) validate(kind Kind) error {
	if err := kind.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(p.To) == "" {
		return invalid("payload.to", "is required")
	}
	if _, err := recipient(p.To); err != nil {
		return invalid("payload.to", "is not a single valid address: "+err.Error())
	}
	if strings.TrimSpace(p.Subject) == "" && kind.Builtin() {
		// A template directory's kind renders its subject from
		// subject.tmpl; the payload's, if any, is the template's to use.
		return invalid("payload.subject", "is required")
	}
	if hasLineBreak(p.Subject) {
		return invalid("payload.subject", "contains a line break (header injection)")
	}
	if err := validateData(p.Data); err != nil {
		return err
	}
	if hasControl(p.PDFName) {
		return invalid("payload.pdf_name", "contains a control character (header injection)")
	}
	if len(p.PDF) > 0 && !bytes.HasPrefix(p.PDF, []byte("%PDF-")) {
		return invalid("payload.pdf", "is not a PDF document")
	}
	for _, u := range []struct{ field, value string }{
		{"payload.setup_url", p.SetupURL},
		{"payload.update_url", p.UpdateURL},
		{"payload.password_reset_url", p.PasswordResetURL},
		{"payload.invite_url", p.InviteURL},
	} {
		if u.value != "" && !isWebURL(u.value) {
			return invalid(u.field, "is not an absolute http(s) URL")
		}
	}
	switch kind {
	case KindRaw:
		if strings.TrimSpace(p.Text) == "" && strings.TrimSpace(p.HTML) == "" {
			return invalid("payload.text", "or payload.html is required")
		}
	case KindInvoice:
		if strings.TrimSpace(p.InvoiceNumber) == "" {
			return invalid("payload.invoice_number", "is required for an invoice email")
		}
	case KindPasswordReset:
		if p.PasswordResetURL == "" {
			return invalid("payload.password_reset_url", "is required for a password_reset email")
		}
	case KindMemberInvite:
		if p.InviteURL == "" {
			return invalid("payload.invite_url", "is required for a member_invite email")
		}
	}
	return nil
}

// decodePayload turns a stored payload into a Payload and checks it as
// Enqueue would have. Either failure is permanent: the same bytes will
// never decode on a later attempt.
func decodePayload(kind Kind, raw []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		var b64 base64.CorruptInputError
		if errors.As(err, &b64) {
			// encoding/json reports a bad []byte without its field; pdf
			// is Payload's only one.
			return p, fmt.Errorf("decode payload: %w", invalid("payload.pdf", "is not base64: "+err.Error()))
		}
		return p, fmt.Errorf("decode payload: %w", err)
	}
	if err := p.validate(kind); err != nil {
		return p, fmt.Errorf("decode payload: %w", err)
	}
	return p, nil
}

// recipient parses one address and returns its bare, lower-cased form: the
// key of email_suppressions.
func recipient(to string) (string, error) {
	if hasLineBreak(to) {
		return "", errors.New("contains a line break")
	}
	addr, err := mail.ParseAddress(to)
	if err != nil {
		return "", err
	}
	return strings.ToLower(addr.Address), nil
}

func hasLineBreak(s string) bool { return strings.ContainsAny(s, "\r\n") }

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

func isWebURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}
