// Package htmlpage renders the server-rendered pages of the operator
// console and the tenant portal: each page a template parsed with its
// site's layout and the style both sites share, written whole or not at
// all.
package htmlpage

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

//go:embed base.html
var baseFS embed.FS

// Set is one site's pages.
type Set struct {
	site   string
	logger *slog.Logger
	pages  map[string]*template.Template
}

// Parse parses each of pages from fsys (templates/<page>.html) with the
// site's layout (templates/layout.html), which is the template run and
// may include the shared style as {{template "basestyle"}}.
func Parse(site string, fsys fs.FS, funcs template.FuncMap, logger *slog.Logger, pages ...string) (*Set, error) {
	s := &Set{site: site, logger: logger, pages: map[string]*template.Template{}}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(baseFS, "base.html")
		if err == nil {
			t, err = t.ParseFS(fsys, "templates/layout.html", "templates/"+p+".html")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: template %s: %w", site, p, err)
		}
		s.pages[p] = t
	}
	return s, nil
}

// Render writes page with data and status. A template that fails writes
// nothing of itself: a 500 and a log line instead of half a page.
func (s *Set) Render(w http.ResponseWriter, status int, page string, data any) {
	var b strings.Builder
	if err := s.pages[page].Execute(&b, data); err != nil {
		s.logger.Error(s.site+": render failed", "page", page, "error", err.Error())
		http.Error(w, s.site+": render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// Timestamp is a time as pages show it, in UTC to the second; "—" for a
// nil *time.Time (never happened).
func Timestamp(t any) string {
	switch t := t.(type) {
	case time.Time:
		return t.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if t != nil {
			return t.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "—"
	}
	return ""
}
