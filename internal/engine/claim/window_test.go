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
			w.Advance(0, now, tt.next)
			if got := w.Low(); !got.Equal(tt.want) {
				t.Errorf("edge %s, want %s", got, tt.want)
			}
		})
	}
}

func TestWindow_NilStartsAtTheBeginning(t *testing.T) {
	t.Parallel()
	var w *Window
	w.Rewind(time.Now())
	w.Advance(0, time.Now(), time.Time{})
	if !w.Low().IsZero() {
		t.Fatal("a nil window has an edge")
	}
}

// A rewind moves the edge back to the rows a sweep moved, and a claim that
// began before it — which could not see them — cannot move the edge past
// them again; a claim that begins after it can.
func TestWindow_RewindOutlivesClaimsBegunBeforeIt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	w := &Window{}
	w.Advance(0, now, time.Time{})
	_, before := w.Start()
	swept := now.Add(-time.Minute)
	w.Rewind(swept)
	if got := w.Low(); !got.Equal(swept) {
		t.Fatalf("after the rewind the edge is %s, want the swept rows' %s", got, swept)
	}
	w.Advance(before, now.Add(time.Second), time.Time{})
	if got := w.Low(); !got.Equal(swept) {
		t.Fatalf("a claim begun before the rewind moved the edge to %s", got)
	}
	low, after := w.Start()
	if !low.Equal(swept) {
		t.Fatalf("Start = %s, want %s", low, swept)
	}
	w.Advance(after, now.Add(time.Second), time.Time{})
	if got, want := w.Low(), now.Add(time.Second-DefaultMargin); !got.Equal(want) {
		t.Fatalf("a claim begun after the rewind moved the edge to %s, want %s", got, want)
	}
	w.Rewind(now.Add(time.Hour)) // in front of the edge: stays
	if got, want := w.Low(), now.Add(time.Second-DefaultMargin); !got.Equal(want) {
		t.Fatalf("a rewind to a later time moved the edge to %s", got)
	}
}
