// Package mimetest reads back the messages postbox builds, for tests that
// check what a relay would receive.
package mimetest

import (
	"encoding/base64"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"strings"
	"testing"
)

// Collect walks a multipart body and stores each leaf part, decoded, under
// its media type; container types (multipart/…) are recorded with nil data
// so a test can assert the structure too.
func Collect(t testing.TB, contentType string, body io.Reader, into map[string][]byte) {
	t.Helper()
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		t.Fatalf("Content-Type %q: %v", contentType, err)
	}
	if !strings.HasPrefix(mt, "multipart/") {
		t.Fatalf("mimetest.Collect on %s, want a multipart body", mt)
	}
	into[mt] = nil
	mr := multipart.NewReader(body, params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		ct := p.Header.Get("Content-Type")
		pmt, _, _ := mime.ParseMediaType(ct)
		if strings.HasPrefix(pmt, "multipart/") {
			Collect(t, ct, p, into)
			continue
		}
		var r io.Reader = p
		switch strings.ToLower(p.Header.Get("Content-Transfer-Encoding")) {
		case "base64":
			r = base64.NewDecoder(base64.StdEncoding, p)
		case "quoted-printable":
			r = quotedprintable.NewReader(p)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s part: %v", pmt, err)
		}
		into[pmt] = data
	}
}
