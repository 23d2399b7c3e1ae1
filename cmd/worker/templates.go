package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/outbox/templatedir"
	"github.com/postbox/postbox/smtp"
)

// envTemplatesDir names the email template directory (docs/TEMPLATES.md).
const envTemplatesDir = "EMAIL_TEMPLATES_DIR"

// templatesDirFromEnv reads EMAIL_TEMPLATES_DIR: unset, or a directory.
// What is in it is proven by loadTemplates, at run's boot.
func templatesDirFromEnv(get func(string, string) string) (string, error) {
	dir := get(envTemplatesDir, "")
	if dir == "" {
		return "", nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", envTemplatesDir, dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s=%q: not a directory", envTemplatesDir, dir)
	}
	return dir, nil
}

// loadTemplates loads dir, every template parsed and every kind rendered
// against its sample; nil without a directory. Its error names the
// variable, the file and the line.
func loadTemplates(dir string) (*templatedir.Set, error) {
	if dir == "" {
		return nil, nil
	}
	set, err := templatedir.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envTemplatesDir, err)
	}
	return set, nil
}

// renderer is the dispatcher's Renderer for set: nil (the built-in
// kinds only) without a directory.
func renderer(set *templatedir.Set) outbox.Renderer {
	if set == nil {
		return nil
	}
	return set
}

func init() {
	registerGroup(group{
		Name:    "templates",
		Summary: "the email template directory: list, check, render",
		Help: "Works on the email template directory, " + envTemplatesDir + " (or --dir): one folder per kind with " +
			"subject.tmpl, text.tmpl and/or html.tmpl and sample.json (docs/TEMPLATES.md). `worker run` refuses to " +
			"start when `templates check` would fail.",
	})
	dirFlag := func(fs *flag.FlagSet) *string {
		return fs.String("dir", "", "the template `directory` (default $"+envTemplatesDir+")")
	}
	load := func(env *Env, dir string) (*templatedir.Set, error) {
		if dir == "" {
			dir = env.Config.TemplatesDir
		}
		if dir == "" {
			return nil, usagef("no template directory: set %s or pass --dir", envTemplatesDir)
		}
		return templatedir.Load(dir)
	}
	register(command{
		Name:    "templates list",
		Args:    "[--dir D]",
		Summary: "the kinds a worker renders: built-in or from the directory, their files and secret keys",
		Help: "Lists every kind a worker with this directory renders: the built-in ones (raw, invoice, " +
			"password_reset, member_invite) and the directory's, which of them the directory replaces, each " +
			"kind's files and the extra secret payload keys its kind.json declares.",
		Flags: func(fs *flag.FlagSet) runFunc {
			dir := dirFlag(fs)
			return func(_ context.Context, env *Env, _ []string) error {
				set, err := load(env, *dir)
				if err != nil {
					return err
				}
				return set.WriteList(env.Stdout)
			}
		},
	})
	register(command{
		Name:    "templates check",
		Args:    "[--dir D]",
		Summary: "parse every template and render every kind's sample.json; exit 2 naming file:line",
		Help: "Does what `worker run` does at boot: parses every template and renders each kind against its " +
			"sample.json. Exits 0 when all render, 2 with every problem as file:line when one does not.",
		Flags: func(fs *flag.FlagSet) runFunc {
			dir := dirFlag(fs)
			return func(_ context.Context, env *Env, _ []string) error {
				set, err := load(env, *dir)
				if err != nil {
					if _, usage := err.(usageError); usage {
						return err
					}
					return &exitError{code: 2, err: err}
				}
				fmt.Fprintf(env.Stdout, "%s: %d kinds, each renders its sample.json\n", set.Dir(), countDirectory(set))
				return nil
			}
		},
	})
	register(command{
		Name:       "templates render",
		Args:       "<kind> [--data payload.json] [--out file.eml] [--html file.html] [--dir D]",
		Positional: []string{"kind"},
		Summary:    "render a payload as the worker would and print the MIME message",
		Help: "Renders the payload in --data (default: the kind's sample.json) as a row of <kind> would be " +
			"rendered and prints the MIME message the relay would be handed, From from SMTP_FROM. --out writes " +
			"it to a .eml file instead; --html also writes the HTML part alone, to open in a browser.",
		Flags: func(fs *flag.FlagSet) runFunc {
			dir := dirFlag(fs)
			data := fs.String("data", "", "the payload `file` (JSON); default the kind's sample.json")
			out := fs.String("out", "", "write the message to this .eml `file` instead of stdout")
			html := fs.String("html", "", "also write the HTML part to this `file`")
			return func(ctx context.Context, env *Env, args []string) error {
				set, err := load(env, *dir)
				if err != nil {
					return err
				}
				kind := outbox.Kind(args[0])
				name, payload := "sample.json", set.Sample(kind)
				if *data != "" {
					name = *data
					if payload, err = os.ReadFile(*data); err != nil {
						return fmt.Errorf("--data: %w", err)
					}
				} else if payload == nil {
					return usagef("kind %q has no sample.json in %s: pass --data", kind, set.Dir())
				}
				msg, err := set.Preview(ctx, kind, name, payload)
				if err != nil {
					return err
				}
				mailer, err := smtp.New(env.Config.SMTP, nil)
				if err != nil {
					return err
				}
				eml, err := mailer.Compose(msg)
				if err != nil {
					return err
				}
				if *html != "" {
					if msg.HTML == "" {
						return fmt.Errorf("--html: kind %q rendered no HTML part", kind)
					}
					if err := os.WriteFile(*html, []byte(msg.HTML), 0o644); err != nil {
						return fmt.Errorf("--html: %w", err)
					}
				}
				if *out != "" {
					if err := os.WriteFile(*out, eml, 0o644); err != nil {
						return fmt.Errorf("--out: %w", err)
					}
					fmt.Fprintf(env.Stdout, "wrote %s (%d bytes)\n", *out, len(eml))
					return nil
				}
				_, err = env.Stdout.Write(eml)
				return err
			}
		},
	})
}

func countDirectory(set *templatedir.Set) int {
	n := 0
	for _, k := range set.Kinds() {
		if set.Has(k.Kind) {
			n++
		}
	}
	return n
}
