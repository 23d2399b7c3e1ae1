package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/postbox/postbox/internal/tooling/testsupport/pgtest"
)

func TestEndpoints_CreateListDisableEnable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	ep, err := CreateEndpoint(ctx, pool, Settings{}, EndpointParams{
		URL:        "https://hooks.example.com/postbox",
		EventTypes: []string{" invoice.paid", "invoice.paid", "invoice.voided"},
	})
	if err != nil {
		t.Fatal(err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ep.Secret, "whsec_"))
	if !strings.HasPrefix(ep.Secret, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("generated secret %q…: want whsec_ + base64 of 32 bytes", ep.Secret[:10])
	}
	if !slices.Equal(ep.EventTypes, []string{"invoice.paid", "invoice.voided"}) || !ep.Enabled {
		t.Fatalf("endpoint = %+v, want trimmed, deduplicated filters and enabled", ep)
	}

	supplied := "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 24)))
	all, err := CreateEndpoint(ctx, pool, Settings{}, EndpointParams{URL: "http://127.0.0.1:8080/hook", Secret: supplied})
	if err != nil || all.Secret != supplied || len(all.EventTypes) != 0 {
		t.Fatalf("CreateEndpoint with a supplied secret = %+v, %v", all, err)
	}

	list, err := ListEndpoints(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != ep.ID || list[1].ID != all.ID {
		t.Fatalf("ListEndpoints = %+v, want both, oldest first", list)
	}
	for _, e := range list {
		if e.Secret != "" {
			t.Fatalf("ListEndpoints returned a secret for %s", e.ID)
		}
	}

	if err := DisableEndpoint(ctx, pool, ep.ID, ""); err != nil {
		t.Fatal(err)
	}
	list, _ = ListEndpoints(ctx, pool)
	if list[0].Enabled || list[0].DisabledReason != "disabled by operator" {
		t.Fatalf("after disable: %+v", list[0])
	}
	if err := EnableEndpoint(ctx, pool, ep.ID); err != nil {
		t.Fatal(err)
	}
	list, _ = ListEndpoints(ctx, pool)
	if !list[0].Enabled || list[0].DisabledReason != "" {
		t.Fatalf("after enable: %+v", list[0])
	}

	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
		if err := DisableEndpoint(ctx, pool, id, ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("DisableEndpoint(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestCreateEndpoint_Refuses(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for _, tc := range []struct {
		name string
		cfg  Settings
		p    EndpointParams
		want string
	}{
		{"relative url", Settings{}, EndpointParams{URL: "/hooks"}, "absolute http(s)"},
		{"ftp", Settings{}, EndpointParams{URL: "ftp://example.com/x"}, "absolute http(s)"},
		{"no host", Settings{}, EndpointParams{URL: "https:///x"}, "no host"},
		{"credentials", Settings{}, EndpointParams{URL: "https://u:p@example.com/"}, "credentials"},
		{"http in production", Settings{Production: true}, EndpointParams{URL: "http://example.com/"}, "must be https when APP_ENV=production"},
		{"secret without prefix", Settings{}, EndpointParams{URL: "https://example.com/", Secret: b64(32)}, `must start with "whsec_"`},
		{"secret not base64", Settings{}, EndpointParams{URL: "https://example.com/", Secret: "whsec_!!!"}, "not standard base64"},
		{"secret too short", Settings{}, EndpointParams{URL: "https://example.com/", Secret: "whsec_" + b64(23)}, "23 bytes, must be 24 to 64"},
		{"secret too long", Settings{}, EndpointParams{URL: "https://example.com/", Secret: "whsec_" + b64(65)}, "65 bytes, must be 24 to 64"},
		{"empty event type", Settings{}, EndpointParams{URL: "https://example.com/", EventTypes: []string{""}}, "event type"},
		{"event type with space", Settings{}, EndpointParams{URL: "https://example.com/", EventTypes: []string{"invoice paid"}}, "event type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := CreateEndpoint(context.Background(), pool, tc.cfg, tc.p)
			if !errors.Is(err, ErrInvalidEndpoint) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateEndpoint = %v, want ErrInvalidEndpoint mentioning %q", err, tc.want)
			}
		})
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints`); n != 0 {
		t.Fatalf("%d endpoints created by refused calls", n)
	}
	// The edges of the secret size are accepted; https in production too.
	for _, n := range []int{24, 64} {
		if _, err := CreateEndpoint(context.Background(), pool, Settings{Production: true},
			EndpointParams{URL: "https://example.com/", Secret: "whsec_" + b64(n)}); err != nil {
			t.Errorf("%d-byte secret refused: %v", n, err)
		}
	}
}

// UpdateEndpoint holds a new URL and new subscriptions to CreateEndpoint's
// rules and changes nothing when it refuses; an id no endpoint has is
// ErrNotFound. DeleteEndpoint takes the endpoint's deliveries with it.
func TestUpdateAndDeleteEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	ep := createEndpoint(t, pool, "https://example.com/in", "invoice.paid")
	for _, tc := range []struct {
		name string
		u    EndpointUpdate
		want string
	}{
		{"relative url", EndpointUpdate{URL: new("/hooks")}, "absolute http(s)"},
		{"credentials", EndpointUpdate{URL: new("https://u:p@example.com/")}, "credentials"},
		{"event type with space", EndpointUpdate{EventTypes: &[]string{"invoice paid"}}, "event type"},
	} {
		if _, err := UpdateEndpoint(ctx, pool, Settings{}, ep.ID, tc.u); !errors.Is(err, ErrInvalidEndpoint) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidEndpoint mentioning %q", tc.name, err, tc.want)
		}
	}
	if got, err := GetEndpoint(ctx, pool, ep.ID); err != nil || got.URL != ep.URL || !slices.Equal(got.EventTypes, ep.EventTypes) {
		t.Fatalf("after refused updates: %+v, %v; want it unchanged", got, err)
	}
	const missing = "01a24ba7-0000-7000-8000-0000000000ff"
	if _, err := UpdateEndpoint(ctx, pool, Settings{}, missing, EndpointUpdate{URL: new("https://example.com/x")}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateEndpoint of no endpoint: %v, want ErrNotFound", err)
	}
	got, err := UpdateEndpoint(ctx, pool, Settings{}, ep.ID, EndpointUpdate{URL: new("https://example.com/moved"), EventTypes: &[]string{}})
	if err != nil || got.URL != "https://example.com/moved" || len(got.EventTypes) != 0 {
		t.Fatalf("UpdateEndpoint = %+v, %v; want the new URL, every event type", got, err)
	}

	insertOutbox(t, pool, "invoice.paid", map[string]any{})
	if _, err := newDispatcher(t, pool, nil).Drain(ctx, testWindow); err != nil {
		t.Fatal(err)
	}
	if err := DeleteEndpoint(ctx, pool, ep.ID); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints`) + count(t, pool, `SELECT count(*) FROM webhook_deliveries`); n != 0 {
		t.Fatalf("after DeleteEndpoint: %d endpoints and deliveries left", n)
	}
	if err := DeleteEndpoint(ctx, pool, ep.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeleteEndpoint again: %v, want ErrNotFound", err)
	}
}
