package mailevents

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/outbox"
)

// ProviderGeneric names the events of the generic endpoint.
const ProviderGeneric = "generic"

// GenericEvent is the generic endpoint's body: one event, in postbox's own
// words, for a provider postbox has no endpoint for (a relay's log
// shipper, an in-house MTA). It is signed with Standard Webhooks
// (webhook-id, webhook-timestamp, webhook-signature headers, the secret
// EVENTS_WEBHOOK_SECRET); the webhook-id is the event's id, so a replay is
// recorded once.
type GenericEvent struct {
	Type        outbox.EventType   `json:"type"`                   // delivered, bounced, complained, deferred
	BounceClass outbox.BounceClass `json:"bounce_class,omitempty"` // hard or soft, for bounced
	RowID       string             `json:"row_id,omitempty"`       // the X-Postbox-Row value
	MessageID   string             `json:"message_id,omitempty"`   // the Message-ID header, <row-id@domain>
	// ProviderMessageID is the sender's own id for the message, the
	// correlation fallback.
	ProviderMessageID string `json:"provider_message_id,omitempty"`
	Recipient         string `json:"recipient"`
	Detail            string `json:"detail,omitempty"`
	OccurredAt        string `json:"occurred_at,omitempty"` // RFC 3339
}

// genericVerifier checks Standard Webhooks signatures, and the timestamp
// within the library's five minutes, which bounds what a captured request
// can be replayed as.
type genericVerifier struct{ wh *standardwebhooks.Webhook }

func newGenericVerifier(secret string) (*genericVerifier, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	return &genericVerifier{wh: wh}, nil
}

func (h *Handler) genericEndpoint() endpoint {
	return endpoint{
		provider: ProviderGeneric,
		enabled:  h.generic != nil,
		events: func(_ context.Context, r *http.Request, body []byte) ([]outbox.Event, *reject) {
			if err := h.generic.wh.Verify(body, r.Header); err != nil {
				return nil, rejectf(http.StatusUnauthorized, "Standard Webhooks signature: %v", err)
			}
			return genericEvents(r.Header.Get("webhook-id"), body)
		},
	}
}

func genericEvents(id string, body []byte) ([]outbox.Event, *reject) {
	var g GenericEvent
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return nil, rejectf(http.StatusBadRequest, "not a generic delivery event: %v", err)
	}
	if err := endOfBody(dec); err != nil {
		return nil, rejectf(http.StatusBadRequest, "not a generic delivery event: %v", err)
	}
	if strings.TrimSpace(g.Recipient) == "" {
		return nil, rejectf(http.StatusBadRequest, "recipient is required")
	}
	return []outbox.Event{{
		RowID:             cmp.Or(rowFromHeader(g.RowID), rowFromMessageID(g.MessageID)),
		Ref:               cmp.Or(g.RowID, g.MessageID, g.ProviderMessageID),
		Type:              g.Type,
		BounceClass:       g.BounceClass,
		Provider:          ProviderGeneric,
		ProviderEventID:   id,
		ProviderMessageID: g.ProviderMessageID,
		Recipient:         g.Recipient,
		Detail:            g.Detail,
		OccurredAt:        parseTime(g.OccurredAt),
		RawExcerpt:        excerpt(body),
	}}, nil
}
