package mailevents

import (
	"bufio"
	"strings"

	"github.com/postbox/postbox/outbox"
	"github.com/postbox/postbox/smtp"
)

// rowFromMessageID is the row id in a Message-ID postbox wrote,
// <row-id@domain>, or "" when the id is not of that shape (a provider's
// own, or one another sender wrote).
func rowFromMessageID(id string) string {
	id = strings.TrimSpace(id)
	id = strings.TrimSuffix(strings.TrimPrefix(id, "<"), ">")
	at := strings.LastIndexByte(id, '@')
	if at < 0 {
		return ""
	}
	if row := id[:at]; outbox.IsRowID(row) {
		return row
	}
	return ""
}

// rowFromHeader is the row id in an X-Postbox-Row value, or "".
func rowFromHeader(v string) string {
	if v = strings.TrimSpace(v); outbox.IsRowID(v) {
		return v
	}
	return ""
}

// rowFromDump finds the row in a raw message dump — a bounce report with
// the original message's headers inside it: the X-Postbox-Row header
// first, else the last Message-ID of postbox's shape (a report's own
// Message-ID comes before the original message it quotes).
func rowFromDump(dump string) string {
	var fromMessageID string
	sc := bufio.NewScanner(strings.NewReader(dump))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch {
		case strings.EqualFold(strings.TrimSpace(name), smtp.RowHeader):
			if row := rowFromHeader(value); row != "" {
				return row
			}
		case strings.EqualFold(strings.TrimSpace(name), "Message-ID"):
			if row := rowFromMessageID(value); row != "" {
				fromMessageID = row
			}
		}
	}
	return fromMessageID
}
