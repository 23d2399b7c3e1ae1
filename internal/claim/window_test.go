package claim

import (
	"testing"
	"time"
)

func TestWindow_Advance(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name string
		low  time.Time // before the claim
		next time.Time // the first claimable row still due
		want time.Time
	}{
		{name: "nothing left: Margin behind the claim's now", want: ago(DefaultMargin)},
		{name: "a row left behind stops the edge", next: ago(time.Hour), want: ago(time.Hour)},
		{name: "a row left near now: Margin behind now", next: ago(time.Millisecond), want: ago(DefaultMargin)},
		{name: "the edge never moves back", low: ago(time.Millisecond), next: ago(time.Hour), want: ago(time.Millisecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := &Window{low: tt.low}
			w.Advance(now, tt.next)
			if got := w.Low(); !got.Equal(tt.want) {
				t.Errorf("edge %s, want %s", got, tt.want)
			}
		})
	}
}

func TestWindow_NilStartsAtTheBeginning(t *testing.T) {
	t.Parallel()
	var w *Window
	w.Advance(time.Now(), time.Time{})
	if !w.Low().IsZero() {
		t.Fatal("a nil window has an edge")
	}
}
