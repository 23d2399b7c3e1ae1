package mailevents

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// ProviderPostmark names Postmark's events.
const ProviderPostmark = "postmark"

// postmarkRecord is the union of the fields of Postmark's Bounce,
// Delivery and SpamComplaint webhooks that postbox reads
// (postmarkapp.com/developer/webhooks).
type postmarkRecord struct {
	RecordType  string            `json:"RecordType"` // Bounce, Delivery, SpamComplaint, Open, Click…
	ID          json.Number       `json:"ID"`         // bounce and complaint id
	Type        string            `json:"Type"`       // HardBounce, SoftBounce, Transient, SpamComplaint…
	MessageID   string            `json:"MessageID"`  // Postmark's id for the message
	Email       string            `json:"Email"`      // bounce and complaint recipient
	Recipient   string            `json:"Recipient"`  // delivery recipient
	Description string            `json:"Description"`
	Details     string            `json:"Details"`
	BouncedAt   string            `json:"BouncedAt"`
	DeliveredAt string            `json:"DeliveredAt"`
	Content     string            `json:"Content"` // the bounce or abuse report, when "include content" is on
	Metadata    map[string]string `json:"Metadata"`
}

// postmarkMetadataKeys are the metadata keys that may carry the row id
// (X-PM-Metadata-postbox-row on the message, or set by a Postmark API
// sender).
var postmarkMetadataKeys = []string{"postbox_row", "postbox-row", smtp.RowHeader}

// postmarkHard are the bounce types that mean the address is bad for good;
// postmarkIgnored are the "bounce" types that are no delivery failure at
// all (auto-replies, list mail, Postmark's own errors); Transient is a
// deferral. Every other bounce type is soft: counted toward the
// soft-bounce limit.
var (
	postmarkHard    = map[string]bool{"HardBounce": true, "BadEmailAddress": true}
	postmarkIgnored = map[string]bool{
		"AutoResponder": true, "Subscribe": true, "Unsubscribe": true, "AddressChange": true,
		"OpenRelayTest": true, "ChallengeVerification": true, "InboundError": true,
		"SMTPApiError": true, "TemplateRenderingFailed": true, "VirusNotification": true,
	}
	postmarkComplaint = map[string]bool{"SpamComplaint": true, "SpamNotification": true}
)

func (h *Handler) postmark() endpoint {
	s := h.cfg.Settings
	user, pass := []byte(s.PostmarkUsername), []byte(s.PostmarkPassword)
	return endpoint{
		provider: ProviderPostmark,
		enabled:  s.PostmarkUsername != "",
		auth: func(r *http.Request) *reject {
			u, p, ok := r.BasicAuth()
			// Both compared, so timing does not tell which was wrong.
			userOK := subtle.ConstantTimeCompare([]byte(u), user) == 1
			passOK := subtle.ConstantTimeCompare([]byte(p), pass) == 1
			if !ok || !userOK || !passOK {
				return rejectf(http.StatusUnauthorized, "basic auth required")
			}
			return nil
		},
		events: func(_ context.Context, _ *http.Request, body []byte) ([]outbox.Event, *reject) {
			return postmarkEvents(body)
		},
	}
}

func postmarkEvents(body []byte) ([]outbox.Event, *reject) {
	var rec postmarkRecord
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		return nil, rejectf(http.StatusBadRequest, "not a Postmark webhook JSON object: %v", err)
	}
	if err := endOfBody(dec); err != nil {
		return nil, rejectf(http.StatusBadRequest, "not a Postmark webhook JSON object: %v", err)
	}
	e := outbox.Event{
		Provider:          ProviderPostmark,
		ProviderMessageID: rec.MessageID,
		Detail:            strings.TrimSpace(rec.Description + " " + rec.Details),
		RawExcerpt:        postmarkExcerpt(body),
	}
	for _, k := range postmarkMetadataKeys {
		if row := rowFromHeader(rec.Metadata[k]); row != "" {
			e.RowID = row
			break
		}
	}
	if e.RowID == "" {
		e.RowID = rowFromDump(rec.Content)
	}
	switch rec.RecordType {
	case "Bounce", "SpamComplaint":
		if rec.ID == "" || rec.Email == "" {
			return nil, rejectf(http.StatusBadRequest, "a Postmark %s needs ID and Email", rec.RecordType)
		}
		e.ProviderEventID = "bounce:" + rec.ID.String() // bounces and complaints share Postmark's bounce ids
		e.Recipient = rec.Email
		e.OccurredAt = parseTime(rec.BouncedAt)
		switch {
		case rec.RecordType == "SpamComplaint" || postmarkComplaint[rec.Type]:
			e.Type = outbox.EventComplained
		case postmarkIgnored[rec.Type]:
			return nil, nil
		case rec.Type == "Transient":
			// "Message is delayed": Postmark keeps trying. A deferral, not
			// a bounce, so it counts toward no suppression.
			e.Type = outbox.EventDeferred
		case postmarkHard[rec.Type]:
			e.Type, e.BounceClass = outbox.EventBounced, outbox.BounceHard
		default:
			e.Type, e.BounceClass = outbox.EventBounced, outbox.BounceSoft
		}
	case "Delivery":
		if rec.MessageID == "" || rec.Recipient == "" {
			return nil, rejectf(http.StatusBadRequest, "a Postmark Delivery needs MessageID and Recipient")
		}
		// A delivery has no id of its own: one per message and recipient.
		e.ProviderEventID = "delivery:" + rec.MessageID + ":" + strings.ToLower(rec.Recipient)
		e.Type, e.Recipient = outbox.EventDelivered, rec.Recipient
		e.OccurredAt = parseTime(rec.DeliveredAt)
	case "":
		return nil, rejectf(http.StatusBadRequest, "no RecordType: not a Postmark webhook")
	default:
		// Opens, clicks, subscription changes: not delivery events. 200,
		// so Postmark does not retry them.
		return nil, nil
	}
	return []outbox.Event{e}, nil
}

// postmarkExcerpt is the payload without Content: a bounce's content can
// quote the original message, and with it a single-use link.
func postmarkExcerpt(body []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	delete(m, "Content")
	b, err := json.Marshal(m)
	if err != nil {
		return ""
	}
	return excerpt(b)
}
