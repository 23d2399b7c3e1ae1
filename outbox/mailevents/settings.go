package mailevents

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/postbox/postbox/internal/engine/history"
	"github.com/postbox/postbox/outbox"
)

// The environment variables SettingsFromEnv reads.
const (
	EnvPostmarkUsername = "POSTMARK_WEBHOOK_USERNAME"
	EnvPostmarkPassword = "POSTMARK_WEBHOOK_PASSWORD"
	EnvSNSTopicARNs     = "SES_SNS_TOPIC_ARNS"
	EnvGenericSecret    = "EVENTS_WEBHOOK_SECRET"
	EnvSoftBounceLimit  = "SOFT_BOUNCE_LIMIT"
	EnvSoftBounceWindow = "SOFT_BOUNCE_WINDOW"
	EnvSuppressOrphans  = "EVENTS_SUPPRESS_ORPHANS"
	EnvOrphanRetention  = "EVENTS_ORPHAN_RETENTION" // e.g. 30d or 720h
)

// Settings are the endpoints' credentials and the suppression policy. An
// endpoint whose credentials are empty is not served (404).
type Settings struct {
	// PostmarkUsername and PostmarkPassword are the basic-auth
	// credentials set on the Postmark webhook.
	PostmarkUsername, PostmarkPassword string
	// SNSTopicARNs are the SNS topics whose messages are accepted: SES
	// publishes to them. Empty: the SES endpoint is off.
	SNSTopicARNs []string
	// GenericSecret is the Standard Webhooks secret ("whsec_…", base64)
	// of the generic endpoint.
	GenericSecret string
	// Policy is when soft bounces suppress (hard bounces and complaints
	// always do).
	Policy outbox.SuppressionPolicy
	// OrphanRetention is how long an orphan event is kept before the
	// prune pass deletes it (outbox.DefaultOrphanEventRetention, 30 days,
	// says why). Never shorter than Policy.SoftBounceWindow: an orphan
	// soft bounce counts toward its recipient's limit within the window.
	OrphanRetention time.Duration
}

// SettingsFromEnv reads Settings through lookup. A value that does not
// parse is an error naming its variable.
func SettingsFromEnv(lookup func(string) (string, bool)) (Settings, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	s := Settings{
		PostmarkUsername: get(EnvPostmarkUsername),
		PostmarkPassword: get(EnvPostmarkPassword),
		GenericSecret:    get(EnvGenericSecret),
		Policy: outbox.SuppressionPolicy{
			SoftBounceLimit:  outbox.DefaultSoftBounceLimit,
			SoftBounceWindow: outbox.DefaultSoftBounceWindow,
		},
		OrphanRetention: outbox.DefaultOrphanEventRetention,
	}
	if (s.PostmarkUsername == "") != (s.PostmarkPassword == "") {
		return s, fmt.Errorf("%s and %s must be set together", EnvPostmarkUsername, EnvPostmarkPassword)
	}
	for _, arn := range strings.Split(get(EnvSNSTopicARNs), ",") {
		arn = strings.TrimSpace(arn)
		if arn == "" {
			continue
		}
		if !strings.HasPrefix(arn, "arn:aws") || strings.Count(arn, ":") != 5 {
			return s, fmt.Errorf("%s: %q is not an SNS topic ARN (arn:aws:sns:<region>:<account>:<topic>)", EnvSNSTopicARNs, arn)
		}
		s.SNSTopicARNs = append(s.SNSTopicARNs, arn)
	}
	if s.GenericSecret != "" {
		if _, err := newGenericVerifier(s.GenericSecret); err != nil {
			return s, fmt.Errorf("%s: %w", EnvGenericSecret, err)
		}
	}
	if v := get(EnvSoftBounceLimit); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return s, fmt.Errorf("%s=%q: must be a whole number from 1 to 1000", EnvSoftBounceLimit, v)
		}
		s.Policy.SoftBounceLimit = n
	}
	if v := get(EnvSoftBounceWindow); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("%s=%q: must be a positive duration such as 168h", EnvSoftBounceWindow, v)
		}
		s.Policy.SoftBounceWindow = d
	}
	if v := get(EnvSuppressOrphans); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%s=%q: must be true or false", EnvSuppressOrphans, v)
		}
		s.Policy.SuppressOrphans = on
	}
	if v := get(EnvOrphanRetention); v != "" {
		d, err := history.ParseRetention(v)
		if err != nil {
			return s, fmt.Errorf("%s=%q: %w", EnvOrphanRetention, v, err)
		}
		s.OrphanRetention = d
	}
	if s.OrphanRetention < s.Policy.SoftBounceWindow {
		return s, fmt.Errorf("%s=%s is shorter than %s=%s: orphan soft bounces would be deleted while they still count toward their recipient's limit",
			EnvOrphanRetention, s.OrphanRetention, EnvSoftBounceWindow, s.Policy.SoftBounceWindow)
	}
	return s, nil
}
