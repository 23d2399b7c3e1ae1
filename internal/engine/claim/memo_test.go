package claim

import "testing"

// A statement is built once per table: a second table of the same name
// with other columns gets its own.
func TestMemoized_OnePerTableAndStatement(t *testing.T) {
	t.Parallel()
	builds := 0
	a := Table{Name: "memo_t", DueColumn: "due", Returning: "id", Fair: &Share{Key: "memo_t.k"}}
	b := a
	b.Fair = &Share{Key: "memo_t.other"}
	for range 3 {
		for _, tb := range []Table{a, b} {
			tb.memoized("claim", func() string { builds++; return tb.Fair.Key })
		}
	}
	if got := b.memoized("claim", nil); builds != 2 || got != "memo_t.other" {
		t.Fatalf("%d builds, b's statement %q; want 2 builds, b's own", builds, got)
	}
}

// The statements of a fair claim cost a map read, not their building:
//
//	go test -run '^$' -bench FairClaimStatements ./internal/engine/claim/
func BenchmarkFairClaimStatements(b *testing.B) {
	t := Table{Name: "email_outbox", DueColumn: "next_attempt_at", Returning: "id, customer_id", Fair: &Share{Key: "email_outbox.customer_id", Priority: "email_outbox.priority"}}
	b.Run("built", func(b *testing.B) {
		for range b.N {
			_, _ = t.FairClaimSQL(), t.FairSettleSQL()
		}
	})
	b.Run("memoized", func(b *testing.B) {
		for range b.N {
			_, _ = t.memoized("fair claim", t.FairClaimSQL), t.memoized("fair settle", t.FairSettleSQL)
		}
	})
}
