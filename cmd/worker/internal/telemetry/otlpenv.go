package telemetry

import (
	"cmp"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"

	"golang.org/x/net/http/httpguts"
)

// exportEndpoint is where the exporter sends spans, as the OTLP exporters
// derive it: OTLP/HTTP posts to the per-signal URL as it is, or to the
// base URL's /v1/traces; OTLP/gRPC dials the host. Userinfo, query and
// fragment are left out: it is for the log.
func exportEndpoint(protocol string, base, traces *url.URL) string {
	u, p := traces, ""
	if u != nil {
		p = cmp.Or(u.Path, "/")
	} else {
		u, p = base, path.Join(base.Path, "/v1/traces")
	}
	if protocol == ProtocolGRPC {
		p = ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}).String()
}

// headerNames checks an OTEL_EXPORTER_OTLP_HEADERS-style list
// (key=value,…, values percent-encoded) as the exporter parses it, and
// returns its header names. The exporter logs an entry it cannot parse
// whole, so one is refused here, by its position only.
func headerNames(name, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var names []string
	for i, entry := range strings.Split(s, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		k, val, ok := strings.Cut(entry, "=")
		k = strings.TrimSpace(k)
		if !ok || !validHeaderName(k) {
			return nil, fmt.Errorf("%s: entry %d is not name=value with a valid header name (values are not shown)", name, i+1)
		}
		v, err := url.PathUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %s (entry %d) is not validly percent-encoded (values are not shown)", name, k, i+1)
		}
		// The exporter would send a CR or LF as it is and fail every
		// export: refused at boot instead.
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("%s: the value of %s (entry %d) holds a control character (CR, LF, NUL…) once decoded (values are not shown)", name, k, i+1)
		}
		names = append(names, k)
	}
	return names, nil
}

// validHeaderName is an HTTP token, as the exporter requires.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// resourceAttributes checks OTEL_RESOURCE_ATTRIBUTES (key=value,…, values
// percent-encoded) as the SDK parses it and returns it decoded. The SDK
// reports an entry it cannot parse with its text, so one is refused here
// by its position.
func resourceAttributes(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for i, entry := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(entry, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s: entry %d is not key=value", EnvResourceAttrs, i+1)
		}
		d, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %s (entry %d) is not validly percent-encoded", EnvResourceAttrs, strings.TrimSpace(k), i+1)
		}
		out[strings.TrimSpace(k)] = d
	}
	return out, nil
}
