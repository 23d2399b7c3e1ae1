package main

// Readers beside the history pass (see docs/design/outbox-transport.md,
// History partitions): a week dropped while a reader lists the weeks is
// left out of the list, not a failure of the reader.
func init() {
	register(
		Mutation{
			Name:    "history: a week dropped while listed fails the list (a /metrics scrape beside a drop)",
			File:    "internal/engine/history/partitions.go",
			Find:    "WHERE week_end IS NOT NULL\n",
			Replace: "WHERE true\n",
			Pkg:     "./internal/engine/history/",
			Test:    "TestWeeks_AWeekDroppedWhileListedIsLeftOut",
		},
	)
}
