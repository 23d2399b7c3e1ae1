package console

import (
	"fmt"
	"html/template"
	"strings"
	"sync"
	"time"

	"github.com/postbox/postbox/internal/operator/backlog"
)

// maxSamples is how many samples per outbox the chart keeps: an hour at
// DefaultSampleEvery. They live in memory only; a restart starts afresh.
const maxSamples = 360

// samples is the due figures over time, per outbox, newest last.
type samples struct {
	mu sync.Mutex
	by map[string][]backlog.Figures
}

func newSamples() *samples { return &samples{by: map[string][]backlog.Figures{}} }

func (s *samples) add(figs []backlog.Figures) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range figs {
		l := append(s.by[f.Outbox], f)
		if len(l) > maxSamples {
			l = l[len(l)-maxSamples:]
		}
		s.by[f.Outbox] = l
	}
}

func (s *samples) get(outbox string) []backlog.Figures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]backlog.Figures(nil), s.by[outbox]...)
}

// chart draws an outbox's due rows and oldest-due age over the sampled
// time as an inline SVG: two lines, each scaled to its own maximum, which
// the legend states.
func (s *samples) chart(outbox string) template.HTML {
	l := s.get(outbox)
	const w, h = 480, 90
	if len(l) < 2 {
		return template.HTML(fmt.Sprintf(`<svg width="%d" height="%d" role="img" aria-label="no samples yet"><text x="8" y="50" font-size="12" fill="#666">collecting samples (one every few seconds)…</text></svg>`, w, h))
	}
	first, last := l[0].At, l[len(l)-1].At
	span := last.Sub(first)
	if span <= 0 {
		span = time.Second
	}
	var maxDue int64 = 1
	maxAge := time.Second
	for _, f := range l {
		maxDue = max(maxDue, f.Due)
		maxAge = max(maxAge, f.OldestDue)
	}
	line := func(y func(backlog.Figures) float64) string {
		pts := make([]string, len(l))
		for i, f := range l {
			x := float64(w-10) * float64(f.At.Sub(first)) / float64(span)
			pts[i] = fmt.Sprintf("%.1f,%.1f", 5+x, float64(h-15)-y(f)*float64(h-25))
		}
		return strings.Join(pts, " ")
	}
	due := line(func(f backlog.Figures) float64 { return float64(f.Due) / float64(maxDue) })
	age := line(func(f backlog.Figures) float64 { return float64(f.OldestDue) / float64(maxAge) })
	// Every value interpolated is a number or a formatted duration: safe.
	return template.HTML(fmt.Sprintf(`<svg width="%d" height="%d" role="img" aria-label="due rows and oldest due age over time">`+
		`<rect x="0" y="0" width="%d" height="%d" fill="#fafafa" stroke="#ddd"/>`+
		`<polyline fill="none" stroke="#1f6feb" stroke-width="1.5" points="%s"/>`+
		`<polyline fill="none" stroke="#d1242f" stroke-width="1.5" stroke-dasharray="4 2" points="%s"/>`+
		`<text x="6" y="%d" font-size="11" fill="#1f6feb">due (max %d)</text>`+
		`<text x="130" y="%d" font-size="11" fill="#d1242f">oldest due (max %s)</text>`+
		`<text x="%d" y="%d" font-size="11" fill="#666" text-anchor="end">%s → %s</text></svg>`,
		w, h, w, h, due, age, h-3, maxDue, h-3, maxAge.Round(time.Second), w-6, 12,
		first.UTC().Format("15:04:05"), last.UTC().Format("15:04:05Z")))
}
