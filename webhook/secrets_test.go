package webhook

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

// While a rotated-out secret is active every request carries a signature
// per secret, and the reference library verifies the request with either;
// once it expires the old secret verifies nothing.
func TestRotateSecret_BothSignDuringRotationOldStopsAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := createEndpoint(t, pool, rc.URL)
	oldSecret := ep.Secret
	rot, err := RotateSecret(ctx, pool, ep.ID, "", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rot.Secret == oldSecret || ValidateSecret(rot.Secret) != nil || rot.OldExpiresAt.IsZero() {
		t.Fatalf("rotation %+v: want a fresh valid secret and the old one's expiry", rot)
	}
	oldWH, err := standardwebhooks.NewWebhook(oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	newWH, err := standardwebhooks.NewWebhook(rot.Secret)
	if err != nil {
		t.Fatal(err)
	}
	deliver := func() received {
		t.Helper()
		before := len(rc.requests())
		insertOutbox(t, pool, "invoice.paid", map[string]any{"n": before})
		if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Sent != 1 {
			t.Fatalf("Drain = %+v, %v; want one delivery", sum, err)
		}
		return rc.requests()[before]
	}

	during := deliver()
	if sigs := strings.Fields(during.Header.Get(HeaderSignature)); len(sigs) != 2 {
		t.Fatalf("signature header %q during rotation, want two space-separated signatures", during.Header.Get(HeaderSignature))
	}
	for name, wh := range map[string]*standardwebhooks.Webhook{"new": newWH, "old": oldWH} {
		if err := wh.Verify(during.Body, during.Header); err != nil {
			t.Errorf("during rotation, the %s secret does not verify: %v", name, err)
		}
	}

	waitPast(t, pool, rot.OldExpiresAt)
	after := deliver()
	if sigs := strings.Fields(after.Header.Get(HeaderSignature)); len(sigs) != 1 {
		t.Fatalf("signature header %q after expiry, want one signature", after.Header.Get(HeaderSignature))
	}
	if err := newWH.Verify(after.Body, after.Header); err != nil {
		t.Fatalf("after expiry, the new secret does not verify: %v", err)
	}
	if err := oldWH.Verify(after.Body, after.Header); err == nil {
		t.Fatal("after expiry, the old secret still verifies")
	}
}

// During a rotation the signatures go primary first, then the secrets
// rotated out, newest first (docs/OPERATIONS.md, webhook-signature): a
// receiver that reads only the first entry reads the secret it was given
// last. Two rotations, so three secrets sign.
func TestRotateSecret_SignaturesPrimaryFirstThenNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p := newDispatcher(t, pool, nil)
	rc := newReceiver(t, nil)
	ep := createEndpoint(t, pool, rc.URL)
	secrets := []string{ep.Secret}
	for range 2 {
		rot, err := RotateSecret(ctx, pool, ep.ID, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, rot.Secret)
	}
	slices.Reverse(secrets) // the primary, then newest first
	insertOutbox(t, pool, "invoice.paid", map[string]any{"n": 1})
	if sum, err := p.Drain(ctx, testWindow); err != nil || sum.Sent != 1 {
		t.Fatalf("Drain = %+v, %v; want one delivery", sum, err)
	}
	got := rc.requests()[0]
	unix, err := strconv.ParseInt(got.Header.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(secrets))
	for i, s := range secrets {
		if want[i], err = Sign(s, got.Header.Get(HeaderID), time.Unix(unix, 0), got.Body); err != nil {
			t.Fatal(err)
		}
	}
	if h := got.Header.Get(HeaderSignature); h != strings.Join(want, " ") {
		t.Fatalf("signature header %q, want the primary's signature, then the rotated-out secrets' newest first:\n%q", h, strings.Join(want, " "))
	}
}

func TestRotateSecret_Rules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	ep := createEndpoint(t, pool, "https://example.com/in")
	for _, tc := range []struct {
		name   string
		id     string
		secret string
		keep   time.Duration
		want   error
	}{
		{"unknown endpoint", "00000000-0000-0000-0000-000000000000", "", time.Hour, ErrNotFound},
		{"negative keep", ep.ID, "", -time.Second, ErrInvalidEndpoint},
		{"keep over the bound", ep.ID, "", MaxRotationKeep + time.Hour, ErrInvalidEndpoint},
		{"bad secret", ep.ID, "whsec_short", time.Hour, ErrInvalidEndpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RotateSecret(ctx, pool, tc.id, tc.secret, tc.keep); !errors.Is(err, tc.want) {
				t.Fatalf("RotateSecret: %v, want %v", err, tc.want)
			}
		})
	}
	// keep 0: the old secret stops at once.
	if _, err := RotateSecret(ctx, pool, ep.ID, "", 0); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoint_secrets WHERE endpoint_id = $1`, ep.ID); n != 0 {
		t.Fatalf("%d rotated-out secrets kept with keep 0, want 0", n)
	}
}
