package demo

import (
	"embed"
	"io/fs"
)

//go:embed templates
var templateFiles embed.FS

// Templates is the demo's email template directory (docs/TEMPLATES.md):
// one kind, receipt, which the demo enqueues by plain SQL.
var Templates = func() fs.FS {
	sub, err := fs.Sub(templateFiles, "templates")
	if err != nil {
		panic(err)
	}
	return sub
}()
