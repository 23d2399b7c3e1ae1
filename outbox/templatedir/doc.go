/*
Package templatedir loads a directory of email templates
(EMAIL_TEMPLATES_DIR) and renders its kinds: each folder is a kind of
email_outbox row a plain INSERT can name, with its subject, text and HTML
written as Go templates by whoever owns the wording, not compiled into the
worker.

	receipts/                      EMAIL_TEMPLATES_DIR
	├── _shared/                   not a kind: templates every kind may call
	│   └── layout.html.tmpl
	├── receipt/
	│   ├── subject.tmpl           text/template
	│   ├── text.tmpl              text/template   } at least one
	│   ├── html.tmpl              html/template   }
	│   ├── sample.json            a payload rendered at boot
	│   └── kind.json              optional: {"secret_keys": ["magic_link"]}
	└── invoice/                   a folder named like a built-in kind replaces it

[Load] parses every template and renders each kind against its
sample.json before it returns, so a broken template stops the boot with
the file and line rather than failing rows later. A [Set] is an
outbox.Renderer: a row of a directory kind is rendered from its templates,
a built-in kind the directory does not replace by outbox.DefaultRenderer,
and any other kind fails permanently, its last_error naming the kind.

What each template sees, the layouts, secret keys and the `worker
templates` commands are in docs/TEMPLATES.md.
*/
package templatedir
