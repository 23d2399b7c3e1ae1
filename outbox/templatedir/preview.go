package templatedir

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// Sample is the kind's sample.json, or nil for a kind the directory does
// not hold.
func (s *Set) Sample(k outbox.Kind) []byte {
	if kd, ok := s.kinds[k]; ok {
		return kd.sample
	}
	return nil
}

// Preview renders payload as a claimed row of kind k would be rendered:
// validated as Enqueue validates it, then through Render. name is what
// errors call the payload (its file).
func (s *Set) Preview(ctx context.Context, k outbox.Kind, name string, payload []byte) (smtp.Message, error) {
	if !s.Has(k) && !k.Builtin() {
		return smtp.Message{}, fmt.Errorf("kind %q is neither built in nor in the template directory %s", k, s.dir)
	}
	row, err := sampleRow(k, name, payload)
	if err != nil {
		return smtp.Message{}, err
	}
	row.ID = "preview"
	return s.Render(ctx, row)
}

// WriteList prints Kinds as a table: kind, source, files, secret keys.
func (s *Set) WriteList(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSOURCE\tFILES\tSECRET KEYS")
	for _, k := range s.Kinds() {
		files, secrets := strings.Join(k.Files, " "), strings.Join(k.SecretKeys, " ")
		if files == "" {
			files = "-"
		}
		if secrets == "" {
			secrets = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Kind, k.Source, files, secrets)
	}
	return tw.Flush()
}
