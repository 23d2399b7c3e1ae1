package story

import (
	"context"
	"time"

	"github.com/postbox/postbox/internal/engine/claim"
	"github.com/postbox/postbox/internal/engine/history"
)

// droppedNotes says, a sentence per history, what retention has dropped
// of the history of the rows in s: an attempt log that starts late, or
// none at all, reads as retention's doing and not as attempts never made.
func droppedNotes(ctx context.Context, db claim.DB, s Story) ([]string, error) {
	var emailSince, webhookSince time.Time
	oldest := func(at *time.Time, t time.Time) {
		if at.IsZero() || t.Before(*at) {
			*at = t
		}
	}
	for _, e := range s.Emails {
		oldest(&emailSince, e.CreatedAt)
	}
	if s.Event != nil {
		oldest(&webhookSince, s.Event.CreatedAt)
	}
	if s.Delivery != nil {
		oldest(&webhookSince, s.Delivery.CreatedAt)
	}
	if emailSince.IsZero() && webhookSince.IsZero() {
		return nil, nil
	}
	cutoffs, err := history.Dropped(ctx, db)
	if err != nil {
		return nil, err
	}
	var notes []string
	for _, h := range []struct {
		table history.Table
		since time.Time
		what  string
	}{
		{history.EmailAttempts, emailSince, "attempts"},
		{history.EmailEvents, emailSince, "delivery events"},
		{history.WebhookDeliveryAttempts, webhookSince, "delivery attempts"},
	} {
		c, ok := cutoffs[h.table]
		if !ok || h.since.IsZero() || !h.since.Before(c.Before) {
			continue
		}
		notes = append(notes, h.what+" before "+ts(c.Before)+" were dropped by retention ("+
			history.RetentionVariable(h.table)+"="+history.FormatRetention(c.Retention)+"): the log shown starts after it")
	}
	return notes, nil
}

// deletedNote is the NotFoundError's word on webhook events deleted by
// retention, when a search of them found nothing: "" when none were.
func deletedNote(ctx context.Context, db claim.DB, searched []Kind) (string, error) {
	webhook := false
	for _, k := range searched {
		webhook = webhook || k == KindEvent || k == KindDelivery
	}
	if !webhook {
		return "", nil
	}
	cutoffs, err := history.Dropped(ctx, db)
	if err != nil {
		return "", err
	}
	c, ok := cutoffs[history.WebhookEvents]
	if !ok {
		return "", nil
	}
	return "webhook events created before " + ts(c.Before) + " and their deliveries were deleted by retention (" +
		history.RetentionVariable(history.WebhookEvents) + "=" + history.FormatRetention(c.Retention) + "): an older one is gone", nil
}
