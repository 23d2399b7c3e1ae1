package smtp

// Message is one email, rendered and ready to send. Outbox rows become
// Messages after rendering; nothing here knows about rows beyond RowID.
type Message struct {
	// RowID is the outbox row id. It is carried in the Message-ID header
	// (<RowID@sender-domain>) and in the X-Postbox-Row header (RowHeader),
	// so a provider's bounce or delivery webhook can be correlated back to
	// the row even when the provider replaces the Message-ID.
	RowID   string
	To      string
	Subject string
	Text    string // text/plain part; Text and/or HTML must be set
	HTML    string // text/html part; both set → multipart/alternative

	// PDF, when set, is attached as application/pdf under PDFName.
	PDF     []byte
	PDFName string
}
