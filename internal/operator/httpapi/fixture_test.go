package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/logbuf"
	"github.com/postbox/postbox/internal/tooling/testsupport/twotenants"
)

// fixture is two tenants' rows (twotenants) and the API on them, with
// one application key and the portal's signing key.
type fixture struct {
	*twotenants.World
	api       *API
	server    *httptest.Server
	appKey    string
	keys      []Key // API_KEYS as the fixture configured them
	portalKey []byte
	logs      *logbuf.Buffer
}

func newFixture(t *testing.T, edit ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{World: twotenants.New(t), logs: &logbuf.Buffer{}, portalKey: []byte(strings.Repeat("p", 40))}
	key, entry, err := NewKey("billing")
	if err != nil {
		t.Fatal(err)
	}
	f.appKey = key
	f.keys, err = ParseKeys(entry)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DB: f.Pool, Settings: Settings{Keys: f.keys}, PortalKeys: [][]byte{f.portalKey}, Dispatcher: f.Dispatcher,
		Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
	for _, e := range edit {
		e(&cfg)
	}
	f.api, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.server = httptest.NewServer(f.api)
	t.Cleanup(f.server.Close)
	return f
}

// call makes a request with bearer (none when ""), a JSON body (none when
// nil; a string or []byte is sent as is) and extra headers, and returns
// the status and the body.
func (f *fixture) call(t *testing.T, method, path, bearer string, body any, headers ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, f.server.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := f.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// tenantToken mints a token of tenant with the application key.
func (f *fixture) tenantToken(t *testing.T, tenant string) string {
	t.Helper()
	code, body := f.call(t, http.MethodPost, Prefix+"/tenants/"+tenant+"/tokens", f.appKey, nil)
	var m minted
	if err := json.Unmarshal([]byte(body), &m); code != http.StatusCreated || err != nil || m.Token == "" {
		t.Fatalf("minting a token of %s: %d %s", tenant, code, body)
	}
	return m.Token
}

// decodeJSON reads body into v.
func decodeJSON(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}
