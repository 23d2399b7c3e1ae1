package claim

import "fmt"

// Set is the SET list of every statement that claims a row: it counts the
// row's attempt and stamps its lease, giving each of the lease columns the
// SQL expression until, e.g.
//
//	Set("", "now() + $2::interval", "next_attempt_at")
//	  = "attempts = attempts + 1, next_attempt_at = now() + $2::interval"
//
// alias qualifies the attempts read (the row's alias in the statement, or
// "" for none). With no lease columns it only counts the attempt: the
// webhook fan-out, whose claimed rows are dispatched in the same statement
// and lease their deliveries instead.
//
// The claim is the only place attempts goes up (see
// docs/design/outbox-transport.md, Claim and lease), so that a row claimed
// by a worker that then crashed still spends an attempt; marks never
// count. Every claim — Table.ClaimSQL, Table.FairClaimSQL (limited or not), the webhook
// fan-out, retry admission, hand-on, turns and raced births — builds its
// SET list here, so that rule has one spelling in the code, and
// docs/claimbuilder_test.go fails on a second.
func Set(alias, until string, lease ...string) string {
	if alias != "" {
		alias += "."
	}
	s := fmt.Sprintf("attempts = %sattempts + 1", alias)
	for _, col := range lease {
		s += ", " + col + " = " + until
	}
	return s
}
