package mailevents

import (
	"strings"
	"testing"
	"time"

	"github.com/postbox/postbox/internal/tooling/testsupport/envtest"
	"github.com/postbox/postbox/outbox"
)

// TestSettingsFromEnv: defaults, the values each variable takes, and a
// refusal naming the variable for each that does not parse.
func TestSettingsFromEnv(t *testing.T) {
	t.Parallel()
	env := envtest.Lookup
	s, err := SettingsFromEnv(env())
	if err != nil || s.Policy.SoftBounceLimit != outbox.DefaultSoftBounceLimit || s.Policy.SoftBounceWindow != 7*24*time.Hour ||
		s.PostmarkUsername != "" || len(s.SNSTopicARNs) != 0 || s.GenericSecret != "" || s.Policy.SuppressOrphans ||
		s.OrphanRetention != 30*24*time.Hour {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	s, err = SettingsFromEnv(env(EnvPostmarkUsername, "pm", EnvPostmarkPassword, "pw",
		EnvSNSTopicARNs, " arn:aws:sns:eu-west-1:123456789012:a , arn:aws-cn:sns:cn-north-1:123456789012:b ",
		EnvGenericSecret, genericSecret, EnvSoftBounceLimit, "5", EnvSoftBounceWindow, "72h", EnvSuppressOrphans, "true"))
	if err != nil || s.PostmarkPassword != "pw" || len(s.SNSTopicARNs) != 2 || s.SNSTopicARNs[1] != "arn:aws-cn:sns:cn-north-1:123456789012:b" ||
		s.Policy.SoftBounceLimit != 5 || s.Policy.SoftBounceWindow != 72*time.Hour || !s.Policy.SuppressOrphans {
		t.Fatalf("set: %+v, %v", s, err)
	}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{EnvPostmarkUsername, "pm"}, EnvPostmarkPassword},
		{[]string{EnvPostmarkPassword, "pw"}, EnvPostmarkUsername},
		{[]string{EnvSNSTopicARNs, "my-topic"}, EnvSNSTopicARNs},
		{[]string{EnvGenericSecret, "not base64!"}, EnvGenericSecret},
		{[]string{EnvSoftBounceLimit, "0"}, EnvSoftBounceLimit},
		{[]string{EnvSoftBounceLimit, "three"}, EnvSoftBounceLimit},
		{[]string{EnvSoftBounceWindow, "-1h"}, EnvSoftBounceWindow},
		{[]string{EnvSoftBounceWindow, "a week"}, EnvSoftBounceWindow},
		{[]string{EnvSuppressOrphans, "sometimes"}, EnvSuppressOrphans},
		// The bounds themselves, just outside: SOFT_BOUNCE_LIMIT is 1..1000,
		// a zero window would silently mean the default, an ARN has six
		// colon-separated parts.
		{[]string{EnvSoftBounceLimit, "1001"}, EnvSoftBounceLimit},
		{[]string{EnvSoftBounceWindow, "0s"}, EnvSoftBounceWindow},
		{[]string{EnvSNSTopicARNs, "arn:aws:sns:eu-west-1:123456789012"}, EnvSNSTopicARNs},
		{[]string{EnvOrphanRetention, "0"}, EnvOrphanRetention},
		{[]string{EnvOrphanRetention, "0d"}, EnvOrphanRetention},
		{[]string{EnvOrphanRetention, "-1h"}, EnvOrphanRetention},
		{[]string{EnvOrphanRetention, "a month"}, EnvOrphanRetention},
		// Shorter than the soft-bounce window: orphan soft bounces would be
		// deleted while they still count.
		{[]string{EnvOrphanRetention, "6d"}, EnvSoftBounceWindow},
		{[]string{EnvOrphanRetention, "10d", EnvSoftBounceWindow, "240h1s"}, EnvOrphanRetention},
	} {
		if _, err := SettingsFromEnv(env(tc.kv...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want an error naming %s", tc.kv, err, tc.want)
		}
	}
	// And just inside.
	for _, tc := range []struct {
		kv    []string
		check func(Settings) bool
	}{
		{[]string{EnvSoftBounceLimit, "1"}, func(s Settings) bool { return s.Policy.SoftBounceLimit == 1 }},
		{[]string{EnvSoftBounceLimit, "1000"}, func(s Settings) bool { return s.Policy.SoftBounceLimit == 1000 }},
		{[]string{EnvOrphanRetention, "45d"}, func(s Settings) bool { return s.OrphanRetention == 45*24*time.Hour }},
		{[]string{EnvOrphanRetention, "7d"}, func(s Settings) bool { return s.OrphanRetention == 7*24*time.Hour }},
		{[]string{EnvOrphanRetention, "48h", EnvSoftBounceWindow, "48h"}, func(s Settings) bool {
			return s.OrphanRetention == 48*time.Hour && s.Policy.SoftBounceWindow == 48*time.Hour
		}},
	} {
		if s, err := SettingsFromEnv(env(tc.kv...)); err != nil || !tc.check(s) {
			t.Errorf("%v: %+v, %v; want accepted", tc.kv, s, err)
		}
	}
}
