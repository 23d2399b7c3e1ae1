package story

import (
	"strings"
	"testing"

	"github.com/postbox/postbox/webhook"
)

// An endpoint's story gives the breaker's own count only when it says
// something the attempt log's "failures since the last success" does not:
// after an operator enabled the endpoint the breaker counts from 0 while
// the log still holds its failures, and "closed, 0 counted" beside "6
// failures" read as a contradiction.
func TestEndpointText_BreakerCountOnlyWhenItAddsSomething(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		breaker, logged int
		want, notWant   []string
	}{
		{"re-enabled: the breaker counts from 0", 0, 6, []string{"circuit breaker: closed\n", "failures since the last success: 6"}, []string{"counted"}},
		{"the same count: said once", 3, 3, []string{"circuit breaker: closed\n", "failures since the last success: 3"}, []string{"counted"}},
		{"counts differ", 2, 6, []string{"circuit breaker: closed (2 failures counted since the breaker was last reset)", "failures since the last success: 6"}, nil},
		{"healthy", 0, 0, []string{"circuit breaker: closed\n"}, []string{"failures since", "counted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := webhook.Health{
				Endpoint:            webhook.Endpoint{ID: "ep-1", URL: "https://example.com/hook", Enabled: true, Breaker: webhook.Breaker{State: "closed", ConsecutiveFailures: tc.breaker}},
				ConsecutiveFailures: tc.logged,
			}
			var out strings.Builder
			if err := WriteText(&out, Story{Kind: KindEndpoint, Endpoint: &h}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("says %q:\n%s", w, out.String())
				}
			}
		})
	}
}
