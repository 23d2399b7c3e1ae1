package outbox

import (
	"context"
	"strings"
	"testing"
)

func TestDefaultRenderer(t *testing.T) {
	t.Parallel()
	pdf := []byte("%PDF-1.7 invoice")
	for _, tc := range []struct {
		name        string
		kind        Kind
		payload     Payload
		wantText    []string
		wantHTML    []string
		wantPDFName string
	}{
		{
			name:     "raw sends the payload's own parts",
			kind:     KindRaw,
			payload:  Payload{To: "a@example.com", Subject: "S", Text: "plain body", HTML: "<b>rich</b>", PDF: pdf},
			wantText: []string{"plain body"}, wantHTML: []string{"<b>rich</b>"}, wantPDFName: "attachment.pdf",
		},
		{
			name: "invoice attaches the PDF",
			kind: KindInvoice,
			payload: Payload{To: "a@example.com", Subject: "Invoice INV/7", Name: "Ada", InvoiceNumber: "INV/7",
				AmountDue: "€120.00", DueDate: "1 Dec", UpdateURL: "https://pay.example.com/u/1", PDF: pdf},
			wantText:    []string{"Hello Ada,", "invoice INV/7 for €120.00 is ready, due 1 Dec", "attached", "https://pay.example.com/u/1"},
			wantHTML:    []string{"<strong>INV/7</strong>", `href="https://pay.example.com/u/1"`},
			wantPDFName: "invoice-INV_7.pdf",
		},
		{
			name:     "password reset carries its link",
			kind:     KindPasswordReset,
			payload:  Payload{To: "a@example.com", Subject: "Reset", PasswordResetURL: "https://app.example.com/reset?t=1&u=2", PDF: pdf},
			wantText: []string{"https://app.example.com/reset?t=1&u=2"},
			wantHTML: []string{`href="https://app.example.com/reset?t=1&amp;u=2"`},
		},
		{
			name:     "member invite escapes what it is given",
			kind:     KindMemberInvite,
			payload:  Payload{To: "a@example.com", Subject: "Join", Name: "<script>x</script>", OrgName: "Acme", InviteURL: "https://app.example.com/i/1"},
			wantText: []string{"join Acme", "https://app.example.com/i/1"},
			wantHTML: []string{"&lt;script&gt;x&lt;/script&gt;", `href="https://app.example.com/i/1"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.payload.validate(tc.kind); err != nil {
				t.Fatalf("test payload invalid: %v", err)
			}
			row := &Row{ID: "row-1", Kind: tc.kind, Payload: tc.payload}
			msg, err := DefaultRenderer().Render(context.Background(), row)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != tc.payload.Subject || msg.To != tc.payload.To || msg.RowID != "row-1" {
				t.Errorf("message header fields %q %q %q, want the payload's", msg.RowID, msg.To, msg.Subject)
			}
			for _, want := range tc.wantText {
				if !strings.Contains(msg.Text, want) {
					t.Errorf("text %q lacks %q", msg.Text, want)
				}
			}
			for _, want := range tc.wantHTML {
				if !strings.Contains(msg.HTML, want) {
					t.Errorf("html %q lacks %q", msg.HTML, want)
				}
			}
			if msg.PDFName != tc.wantPDFName || (tc.wantPDFName == "") != (msg.PDF == nil) {
				t.Errorf("attachment %q (%d bytes), want %q", msg.PDFName, len(msg.PDF), tc.wantPDFName)
			}
		})
	}
}
