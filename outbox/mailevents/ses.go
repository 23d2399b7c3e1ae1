package mailevents

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// ProviderSES names Amazon SES's events.
const ProviderSES = "ses"

// sesNotification is the SES event that SNS carries as its Message:
// notificationType (identity notifications) or eventType (configuration
// set event publishing), with the mail it concerns (docs.aws.amazon.com/
// ses/latest/dg/notification-contents.html).
type sesNotification struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"`
	Mail             struct {
		MessageID     string `json:"messageId"` // SES's id for the message
		Headers       []struct{ Name, Value string }
		CommonHeaders struct {
			MessageID string `json:"messageId"` // the Message-ID header as sent
		} `json:"commonHeaders"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string `json:"bounceType"` // Permanent, Transient, Undetermined
		BounceSubType     string `json:"bounceSubType"`
		FeedbackID        string `json:"feedbackId"`
		Timestamp         string `json:"timestamp"`
		BouncedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
	} `json:"bounce"`
	Complaint *struct {
		FeedbackID            string `json:"feedbackId"`
		Timestamp             string `json:"timestamp"`
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
		ComplainedRecipients  []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
	} `json:"complaint"`
	Delivery *struct {
		Timestamp    string   `json:"timestamp"`
		Recipients   []string `json:"recipients"`
		SMTPResponse string   `json:"smtpResponse"`
	} `json:"delivery"`
	DeliveryDelay *struct {
		DelayType         string `json:"delayType"`
		Timestamp         string `json:"timestamp"`
		DelayedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"delayedRecipients"`
	} `json:"deliveryDelay"`
}

func (h *Handler) ses() endpoint {
	topics := h.cfg.Settings.SNSTopicARNs
	return endpoint{
		provider: ProviderSES,
		enabled:  len(topics) > 0,
		events: func(ctx context.Context, r *http.Request, body []byte) ([]outbox.Event, *reject) {
			var m snsMessage
			var probe snsSubjectProbe
			if err := json.Unmarshal(body, &m); err != nil || json.Unmarshal(body, &probe) != nil {
				return nil, rejectf(http.StatusBadRequest, "not an SNS message: %v", err)
			}
			if m.Type == "" || m.MessageID == "" || m.TopicArn == "" {
				return nil, rejectf(http.StatusBadRequest, "not an SNS message: Type, MessageId and TopicArn are required")
			}
			switch m.Type {
			case "Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation":
			default:
				return nil, rejectf(http.StatusBadRequest, "unknown SNS message type %q", m.Type)
			}
			if !slices.Contains(topics, m.TopicArn) {
				return nil, rejectf(http.StatusForbidden, "SNS topic %s is not in %s", m.TopicArn, EnvSNSTopicARNs)
			}
			if err := h.sns.verify(ctx, m, probe.Subject != nil); err != nil {
				code := http.StatusForbidden
				if !errors.Is(err, ErrSNSSignature) && !errors.Is(err, ErrSNSCertURL) {
					code = http.StatusServiceUnavailable // the certificate could not be fetched: SNS retries
				}
				return nil, rejectf(code, "%v", err)
			}
			switch m.Type {
			case "SubscriptionConfirmation":
				if err := h.sns.confirm(ctx, m.SubscribeURL); err != nil {
					code := http.StatusBadGateway
					if errors.Is(err, ErrSNSCertURL) {
						code = http.StatusForbidden
					}
					return nil, rejectf(code, "confirming the SNS subscription: %v", err)
				}
				h.log.Info("SNS subscription confirmed", "topic", m.TopicArn)
				return nil, nil
			case "UnsubscribeConfirmation":
				h.log.Warn("SNS subscription ended: SES events stop arriving", "topic", m.TopicArn)
				return nil, nil
			}
			return sesEvents(m)
		},
	}
}

func sesEvents(m snsMessage) ([]outbox.Event, *reject) {
	var n sesNotification
	if err := json.Unmarshal([]byte(m.Message), &n); err != nil {
		return nil, rejectf(http.StatusBadRequest, "the SNS Message is not an SES notification: %v", err)
	}
	base := outbox.Event{
		Provider:          ProviderSES,
		ProviderMessageID: n.Mail.MessageID,
		RawExcerpt:        excerpt([]byte(m.Message)),
	}
	// The first X-Postbox-Row that holds a row id names the row, as in a
	// bounce dump (rowFromDump): a later header, or one that holds no row
	// id, does not override it.
	var fromHeader string
	for _, hd := range n.Mail.Headers {
		if fromHeader == "" && strings.EqualFold(hd.Name, smtp.RowHeader) {
			fromHeader = rowFromHeader(hd.Value)
		}
	}
	base.RowID = cmp.Or(fromHeader, rowFromMessageID(n.Mail.CommonHeaders.MessageID))
	// feedbackId identifies a bounce or complaint report; an event without
	// one is keyed by the SNS message, which SNS redelivers unchanged.
	key := func(kind, feedbackID, addr string) string {
		id := feedbackID
		if id == "" {
			id = m.MessageID
		}
		return kind + ":" + id + ":" + strings.ToLower(addr)
	}
	var out []outbox.Event
	kind := n.NotificationType
	if kind == "" {
		kind = n.EventType
	}
	switch kind {
	case "Bounce":
		if n.Bounce == nil || len(n.Bounce.BouncedRecipients) == 0 {
			return nil, rejectf(http.StatusBadRequest, "an SES Bounce needs bounce.bouncedRecipients")
		}
		class := outbox.BounceSoft
		if n.Bounce.BounceType == "Permanent" {
			class = outbox.BounceHard
		}
		for _, r := range n.Bounce.BouncedRecipients {
			e := base
			e.Type, e.BounceClass, e.Recipient = outbox.EventBounced, class, r.EmailAddress
			e.ProviderEventID = key("bounce", n.Bounce.FeedbackID, r.EmailAddress)
			e.Detail = strings.TrimSpace(n.Bounce.BounceType + "/" + n.Bounce.BounceSubType + " " + r.Status + " " + r.DiagnosticCode)
			e.OccurredAt = parseTime(n.Bounce.Timestamp)
			out = append(out, e)
		}
	case "Complaint":
		if n.Complaint == nil || len(n.Complaint.ComplainedRecipients) == 0 {
			return nil, rejectf(http.StatusBadRequest, "an SES Complaint needs complaint.complainedRecipients")
		}
		for _, r := range n.Complaint.ComplainedRecipients {
			e := base
			e.Type, e.Recipient = outbox.EventComplained, r.EmailAddress
			e.ProviderEventID = key("complaint", n.Complaint.FeedbackID, r.EmailAddress)
			e.Detail = n.Complaint.ComplaintFeedbackType
			e.OccurredAt = parseTime(n.Complaint.Timestamp)
			out = append(out, e)
		}
	case "Delivery":
		if n.Delivery == nil || len(n.Delivery.Recipients) == 0 {
			return nil, rejectf(http.StatusBadRequest, "an SES Delivery needs delivery.recipients")
		}
		for _, addr := range n.Delivery.Recipients {
			e := base
			e.Type, e.Recipient = outbox.EventDelivered, addr
			e.ProviderEventID = "delivery:" + n.Mail.MessageID + ":" + strings.ToLower(addr)
			e.Detail = n.Delivery.SMTPResponse
			e.OccurredAt = parseTime(n.Delivery.Timestamp)
			out = append(out, e)
		}
	case "DeliveryDelay":
		if n.DeliveryDelay == nil || len(n.DeliveryDelay.DelayedRecipients) == 0 {
			return nil, rejectf(http.StatusBadRequest, "an SES DeliveryDelay needs deliveryDelay.delayedRecipients")
		}
		for _, r := range n.DeliveryDelay.DelayedRecipients {
			e := base
			e.Type, e.Recipient = outbox.EventDeferred, r.EmailAddress
			e.ProviderEventID = key("delay", "", r.EmailAddress)
			e.Detail = strings.TrimSpace(n.DeliveryDelay.DelayType + " " + r.Status + " " + r.DiagnosticCode)
			e.OccurredAt = parseTime(n.DeliveryDelay.Timestamp)
			out = append(out, e)
		}
	case "":
		return nil, rejectf(http.StatusBadRequest, "the SNS Message has neither notificationType nor eventType")
	default:
		// Send, Reject, Open, Click, Rendering Failure…: not delivery events.
		return nil, nil
	}
	return out, nil
}
