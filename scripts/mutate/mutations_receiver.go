package main

// The receiver's side of webhooks: webhook.Verify refuses a replayed or
// forged request, and still finds the matching signature among several;
// the webhook-id a receiver sees is the id the enqueue returned.
func init() {
	register(
		Mutation{
			Name:    "receiver: Verify skips the timestamp tolerance check",
			File:    "webhook/receiver/verify.go",
			Find:    "if err := v.checkTime(time.Unix(secs, 0)); err != nil {",
			Replace: "if err := v.checkTime(time.Unix(secs, 0)); false && err != nil {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
		Mutation{
			Name:    "receiver: Verify checks only the first signature, so a rotation's second secret is refused",
			File:    "webhook/receiver/verify.go",
			Find:    "for s := range strings.SplitSeq(sigs, \" \") {",
			Replace: "for _, s := range strings.Split(sigs, \" \")[:1] {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
		Mutation{
			Name:    "receiver: Verify accepts any v1 entry without comparing it",
			File:    "webhook/receiver/verify.go",
			Find:    "if hmac.Equal([]byte(s), want) {",
			Replace: "if hmac.Equal([]byte(s), want) || strings.HasPrefix(s, \"v1,\") {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
		Mutation{
			Name:    "receiver: Verify accepts when a malformed entry stands beside no matching signature",
			File:    "webhook/receiver/verify.go",
			Find:    "if hmac.Equal([]byte(s), want) {",
			Replace: "if hmac.Equal([]byte(s), want) || !strings.HasPrefix(s, \"v1,\") {",
			Pkg:     "./webhook/",
			Test:    "TestVerify",
		},
		Mutation{
			Name:    "receiver: the fan-out gives the event an id of its own, not the one Enqueue returned",
			File:    "webhook/outbox.go",
			Find:    "INSERT INTO webhook_events (id, event_type, payload, outbox_id, traceparent, ordering_key, ordering_seq, endpoint_id, tenant_id)\n\tSELECT id, event_type,",
			Replace: "INSERT INTO webhook_events (event_type, payload, outbox_id, traceparent, ordering_key, ordering_seq, endpoint_id, tenant_id)\n\tSELECT event_type,",
			Pkg:     "./webhook/",
			Test:    "TestEventID_IsWhatEnqueueReturned",
		},
		Mutation{
			Name:    "receiver: worker show finds a fanned-out event by the id Enqueue returned only as its outbox row",
			File:    "webhook/outbox.go",
			Find:    "INSERT INTO webhook_events (id, event_type, payload, outbox_id, traceparent, ordering_key, ordering_seq, endpoint_id, tenant_id)\n\tSELECT id, event_type,",
			Replace: "INSERT INTO webhook_events (event_type, payload, outbox_id, traceparent, ordering_key, ordering_seq, endpoint_id, tenant_id)\n\tSELECT event_type,",
			Pkg:     "./internal/operator/story/",
			Test:    "TestFind_EventByTheIDEnqueueReturned",
		},
	)
}
